"""Worked examples with hand-drawn timelines: each window kind and the boundary cases.

Notation: ``W`` is the watermark in force for a batch (from earlier batches), ``|`` marks
window bounds; every window is half-open ``[start, end)``.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import batch_of, by_window, late_records, make_batch

from revise.aggspec import AggList
from revise.config import EngineConfig, WindowSpec
from revise.engine import Engine, InputBatch, InvalidInput, WatermarkRegression
from revise.errors import ReviseError, StateSchemaMismatch
from revise.local import run_batches


def cfg(window: str, grace_ms: int, **kw) -> EngineConfig:
    return EngineConfig(WindowSpec.parse(window), grace_ms=grace_ms, query_id="q", **kw)


def summary(outs):
    """(batch, key, start, end, rev, timing, retracted, count, prev_count) per revision."""
    return [(i, r.key, r.window_start_ms, r.window_end_ms, r.revision, r.timing, r.retracted,
             r.count, r.prev_count) for i, o in enumerate(outs) for r in o.revisions.rows()]


def run(config: EngineConfig, *batches: list[tuple[str, int, float]]):
    recs, rid = [], 0
    for b in batches:
        recs.append(batch_of(*b, start_rid=rid))
        rid += len(b)
    return run_batches(config, [make_batch(b) for b in recs], now_ms=1)


def test_tumbling_timeline_early_late_final_and_too_late():
    """Tumbling 10s, grace 5s.

    ::

        event time  0        10000     15000(=end+grace)   30000
                    |--[0,10000)--|--[10000,20000)--|  ...  |
        b0 W=0      t=1200                         → rev0 [0,10000) EARLY count=1
        b1 W=1200   t=12000                        → rev0 [10000,20000) EARLY
        b2 W=12000  t=9000 (late: W >= 10000)      → rev1 [0,10000) LATE count=2 n_late=1
        b3 W=12000  t=30000                        → rev0 [30000,40000) EARLY
        b4 W=30000  t=2000 (W >= 10000+5000)       → too late, lateness 28000;
                                                     FINAL rev2 [0,10000), FINAL rev1 [10000,..)
        close_all W=30000                          → FINAL rev1 [30000,40000)
    """
    outs = run(cfg("tumbling:10s", 5000), [("a", 1200, 1.0)], [("a", 12000, 2.0)],
               [("a", 9000, 3.0)], [("a", 30000, 4.0)], [("a", 2000, 5.0)])
    assert summary(outs) == [
        (0, "a", 0, 10000, 0, "EARLY", False, 1, None),
        (1, "a", 10000, 20000, 0, "EARLY", False, 1, None),
        (2, "a", 0, 10000, 1, "LATE", False, 2, 1),
        (3, "a", 30000, 40000, 0, "EARLY", False, 1, None),
        (4, "a", 0, 10000, 2, "FINAL", False, 2, 2),
        (4, "a", 10000, 20000, 1, "FINAL", False, 1, 1),
        (5, "a", 30000, 40000, 1, "FINAL", False, 1, 1),
    ]
    late_rev = next(r for r in outs[2].revisions.rows())
    assert (late_rev.n_late, late_rev.max_lateness_ms, late_rev.watermark_ms) == (1, 3000, 12000)
    [late] = late_records(outs)
    assert (late.ts_ms, late.window_start_ms, late.window_end_ms, late.watermark_ms,
            late.lateness_ms, late.batch_id) == (2000, 0, 10000, 30000, 28000, 4)
    assert [o.watermark_ms for o in outs] == [0, 1200, 12000, 12000, 30000, 30000]


def test_record_exactly_at_window_end_belongs_to_next_window():
    """``t = 10000`` is in ``[10000,20000)``, not ``[0,10000)`` (end exclusive)."""
    outs = run(cfg("tumbling:10s", 0), [("a", 9999, 1.0), ("a", 10000, 1.0)])
    assert [(s, e, c) for _, _, s, e, _, t, _, c, _ in summary(outs) if t == "FINAL"] == [
        (0, 10000, 1), (10000, 20000, 1)]


def test_watermark_exactly_at_end_is_late_and_at_end_plus_grace_is_too_late():
    """Tumbling 10s, grace 2s; window [0,10000).

    ::

        b0 W=0      t=10000                  (W becomes 10000 = end)
        b1 W=10000  t=5000  → accepted, LATE (W >= end), n_late=1, lateness 5000
        b2 W=10000  t=12000                  (W becomes 12000 = end + grace)
        b3 W=12000  t=5001  → too late (W >= end + grace); [0,10000) FINAL count=1
    """
    outs = run(cfg("tumbling:10s", 2000), [("a", 10000, 1.0)], [("a", 5000, 1.0)],
               [("a", 12000, 1.0)], [("a", 5001, 1.0)])
    w0 = by_window(outs)[("a", 0, 10000)]
    assert [(i, r.revision, r.timing, r.count, r.n_late, r.max_lateness_ms) for i, r in w0] == [
        (1, 0, "LATE", 1, 1, 5000), (3, 1, "FINAL", 1, 1, 5000)]
    [late] = late_records(outs)
    assert (late.ts_ms, late.watermark_ms, late.lateness_ms, late.batch_id) == (5001, 12000,
                                                                                6999, 3)


def test_grace_zero_closes_when_watermark_reaches_end():
    """Grace 0: ``W = end`` closes the window; a record for it in that batch is too late.

    ::

        b0 W=0     t=500, t=1000   → rev0 [0,1000), rev0 [1000,2000)
        b1 W=1000  t=999           → too late for [0,1000); [0,1000) FINAL
    """
    outs = run(cfg("tumbling:1s", 0), [("k", 500, 2.0), ("k", 1000, 3.0)], [("k", 999, 9.0)])
    assert summary(outs) == [
        (0, "k", 0, 1000, 0, "EARLY", False, 1, None),
        (0, "k", 1000, 2000, 0, "EARLY", False, 1, None),
        (1, "k", 0, 1000, 1, "FINAL", False, 1, 1),
        (2, "k", 1000, 2000, 1, "FINAL", False, 1, 1),
    ]
    assert [x.ts_ms for x in late_records(outs)] == [999]


def test_watermark_delay_keeps_windows_open_longer():
    """Delay 3s: after t=10000 the watermark is 7000, so t=1000 is still EARLY-accepted.

    ::

        b0 W=0     t=10000            → rev0 [10000,20000)
        b1 W=7000  t=1000             → rev0 [0,5000)? no: tumbling 5s → [0,5000) LATE (W>=5000)
        b2 W=7000  (empty)            → nothing closes (7000 < 5000 + 5000)
        b3 W=7000  t=13000 → W=10000  → b4 W=10000 (empty): [0,5000) FINAL
    """
    config = cfg("tumbling:5s", 5000, watermark_delay_ms=3000)
    outs = run(config, [("a", 10000, 1.0)], [("a", 1000, 1.0)], [], [("a", 13000, 1.0)], [])
    assert [o.watermark_ms for o in outs] == [0, 7000, 7000, 7000, 10000, 10000]
    assert summary(outs) == [
        (0, "a", 10000, 15000, 0, "EARLY", False, 1, None),
        (1, "a", 0, 5000, 0, "LATE", False, 1, None),
        (3, "a", 10000, 15000, 1, "EARLY", False, 2, 1),
        (4, "a", 0, 5000, 1, "FINAL", False, 1, 1),
        (5, "a", 10000, 15000, 2, "FINAL", False, 2, 2),
    ]


def test_empty_batches_emit_nothing_but_can_close():
    engine = Engine(cfg("tumbling:1s", 0))
    empty = InputBatch.empty()
    out = engine.process(empty, watermark_ms=0, batch_id=0, now_ms=0)
    assert len(out.revisions) == 0 and len(out.late) == 0 and out.max_accepted_ts_ms is None
    engine.process(make_batch(batch_of(("a", 10, 1.0))), watermark_ms=0, batch_id=1, now_ms=0)
    out = engine.process(empty, watermark_ms=999, batch_id=2, now_ms=0)
    assert len(out.revisions) == 0 and engine.open_windows == 1
    out = engine.process(empty, watermark_ms=1000, batch_id=3, now_ms=0)
    assert [(r.timing, r.revision, r.watermark_ms) for r in out.revisions.rows()] == [
        ("FINAL", 1, 1000)]
    assert engine.open_windows == 0
    assert len(engine.close_all(watermark_ms=1000, batch_id=4, now_ms=0).revisions) == 0


def test_hopping_record_judged_per_window():
    """Hopping 4s every 2s, grace 0. t=5000 lies in [2000,6000) and [4000,8000).

    ::

        b0 W=0     t=7000               → [4000,8000) rev0, [6000,10000) rev0
        b1 W=7000  t=5000               → [2000,6000): too late (7000 >= 6000);
                                          [4000,8000): accepted, EARLY (7000 < 8000), rev1
    """
    outs = run(cfg("hopping:4s:2s", 0), [("a", 7000, 1.0)], [("a", 5000, 1.0)])
    assert summary(outs)[:3] == [
        (0, "a", 4000, 8000, 0, "EARLY", False, 1, None),
        (0, "a", 6000, 10000, 0, "EARLY", False, 1, None),
        (1, "a", 4000, 8000, 1, "EARLY", False, 2, 1),
    ]
    assert [(x.window_start_ms, x.window_end_ms) for x in late_records(outs)] == [(2000, 6000)]


def test_hopping_size_not_multiple_of_advance():
    """Hopping 2500ms every 1000ms: t=2400 is in [0,2500), [1000,3500), [2000,4500).

    t=500 is in [-1000,1500) and [0,2500): starts align to epoch 0, before it too.
    """
    outs = run(cfg("hopping:2500ms:1s", 0), [("a", 2400, 1.0), ("a", 500, 1.0)])
    finals = sorted((s, e, c) for _, _, s, e, _, t, _, c, _ in summary(outs) if t == "FINAL")
    assert finals == [(-1000, 1500, 1), (0, 2500, 2), (1000, 3500, 1), (2000, 4500, 1)]


def test_session_bridged_by_late_record_retracts_both():
    """Session gap 10s, grace 0.

    ::

        b0 W=0  t=0, t=30000   → [0,10000) rev0, [30000,40000) rev0
        b1 W=0  t=15000        → [15000,25000) rev0   (the others are untouched: no revision)
        b2 W=0  t=8000         → bridges [0,10000) and [15000,25000):
                                 [0,10000) rev1 retracted, [15000,25000) rev1 retracted,
                                 [0,25000) rev2 count=3 prev_count=2 (sum of both)
        close_all              → [0,25000) rev3 FINAL, [30000,40000) rev1 FINAL
    """
    engine = Engine(cfg("session:10s", 0))  # explicit W=0 throughout
    got = []
    for i, recs in enumerate([[("a", 0, 1.0), ("a", 30000, 1.0)], [("a", 15000, 1.0)],
                              [("a", 8000, 1.0)]]):
        got.append(engine.process(make_batch(batch_of(*recs)), watermark_ms=0, batch_id=i,
                                  now_ms=0))
    got.append(engine.close_all(watermark_ms=0, batch_id=3, now_ms=0))
    assert summary(got) == [
        (0, "a", 0, 10000, 0, "EARLY", False, 1, None),
        (0, "a", 30000, 40000, 0, "EARLY", False, 1, None),
        (1, "a", 15000, 25000, 0, "EARLY", False, 1, None),
        (2, "a", 0, 10000, 1, "EARLY", True, 1, 1),
        (2, "a", 0, 25000, 2, "EARLY", False, 3, 2),
        (2, "a", 15000, 25000, 1, "EARLY", True, 1, 1),
        (3, "a", 0, 25000, 3, "FINAL", False, 3, 3),
        (3, "a", 30000, 40000, 1, "FINAL", False, 1, 1),
    ]


def test_session_extension_retracts_old_bounds_and_touching_spans_stay_apart():
    """Gap 10: [0,10) then t=10 only touches → new session; t=5 extends [0,10) → [0,15).

    ::

        b0 W=0  t=0     → [0,10) rev0
        b1 W=0  t=10    → [10,20) rev0 (touching, not merged)
        b2 W=0  t=5     → [5,15) overlaps both → bridge: [0,10) rev1 ret, [10,20) rev1 ret,
                          [0,20) rev2 count=3
        b3 W=0  t=15    → extends: [0,20) rev3 retracted, [0,25) rev4 count=4 prev_count=3
    """
    engine = Engine(cfg("session:10ms", 0))
    outs = [engine.process(make_batch(batch_of(r)), watermark_ms=0, batch_id=i, now_ms=0)
            for i, r in enumerate([("a", 0, 1.0), ("a", 10, 1.0), ("a", 5, 1.0)])]
    assert summary(outs) == [
        (0, "a", 0, 10, 0, "EARLY", False, 1, None),
        (1, "a", 10, 20, 0, "EARLY", False, 1, None),
        (2, "a", 0, 10, 1, "EARLY", True, 1, 1),
        (2, "a", 0, 20, 2, "EARLY", False, 3, 2),
        (2, "a", 10, 20, 1, "EARLY", True, 1, 1),
    ]
    out = engine.process(make_batch(batch_of(("a", 15, 1.0), ("b", 1, 1.0))), watermark_ms=0,
                         batch_id=3, now_ms=0)
    assert summary([out]) == [  # extension: [0,20) → [0,25)
        (0, "a", 0, 20, 3, "EARLY", True, 3, 3),
        (0, "a", 0, 25, 4, "EARLY", False, 4, 3),
        (0, "b", 1, 11, 0, "EARLY", False, 1, None),
    ]


def test_session_lateness_judged_on_own_span():
    """Gap 1000, grace 500; W=10000.

    ::

        t=8400: span [8400,9400), 9400+500 <= 10000 → too late, LateRecord window [8400,9400)
        t=8600: span [8600,9600), 9600+500 >  10000 → accepted, late (W >= 9600), lateness 1400
    """
    engine = Engine(cfg("session:1s", 500))
    out = engine.process(make_batch(batch_of(("a", 8400, 1.0), ("a", 8600, 2.0))),
                         watermark_ms=10000, batch_id=0, now_ms=0)
    [late] = out.late.rows()
    assert (late.window_start_ms, late.window_end_ms, late.lateness_ms) == (8400, 9400, 1600)
    [rev] = out.revisions.rows()
    assert (rev.window_start_ms, rev.window_end_ms, rev.timing, rev.n_late,
            rev.max_lateness_ms) == (8600, 9600, "LATE", 1, 1400)


def test_watermark_mode_emits_only_finals():
    """Tumbling 10s, grace 0, watermark mode.

    ::

        b0 W=0      t=1, t=2      → nothing
        b1 W=2      t=20000       → nothing
        b2 W=20000  (empty)       → [0,10000) FINAL rev0 count=2
        close_all W=20000         → [20000,30000) FINAL rev0 count=1
    """
    outs = run(cfg("tumbling:10s", 0, mode="watermark"), [("a", 1, 1.0), ("a", 2, 1.0)],
               [("a", 20000, 2.0)], [])
    assert [(i, s, r, t, c, p) for i, _, s, _, r, t, _, c, p in summary(outs)] == [
        (2, 0, 0, "FINAL", 2, None), (3, 20000, 0, "FINAL", 1, None)]


def test_unrequested_aggregates_are_null():
    outs = run(cfg("tumbling:10s", 0, aggs=AggList.parse("max")), [("a", 1, 1.0), ("a", 2, 5.0)])
    r = next(outs[0].revisions.rows())
    assert (r.max, r.count, r.sum, r.min, r.mean) == (5.0, None, None, None, None)
    t = outs[0].revisions.to_arrow()
    assert t.column("count").null_count == 1 and t.column("max").null_count == 0


@pytest.mark.parametrize(
    ("field", "kw", "pattern"),
    [
        ("values", {"values": [1.0, float("nan")]}, r"values\[1\] is nan"),
        ("values", {"values": [float("inf"), 1.0]}, r"values\[0\] is inf"),
        ("ts_ms", {"ts_ms": [0, -1]}, r"ts_ms\[1\] is -1"),
        ("ts_ms", {"ts_ms": [2**53, 0]}, r"ts_ms\[0\] is 9007199254740992"),
        ("ts_ms", {"ts_ms": [0.5, 1]}, r"ts_ms\[0\] is 0.5"),
        ("keys", {"keys": ["a", 3]}, r"keys\[1\] is 3"),
        ("values", {"values": [1.0]}, r"values has shape"),
    ],
)
def test_bad_values_raise_naming_the_field(field, kw, pattern):
    args = {"keys": ["a", "b"], "ts_ms": [0, 1], "values": [1.0, 2.0]} | kw
    with pytest.raises(InvalidInput, match=pattern) as info:
        InputBatch.from_arrays(args["keys"], np.asarray(args["ts_ms"]), args["values"])
    assert isinstance(info.value, ReviseError) and field in str(info.value)


def test_largest_valid_timestamp_is_accepted():
    b = InputBatch.from_arrays(["a"], np.array([2**53 - 1]), [1.0])
    out = Engine(cfg("tumbling:1s", 0)).process(b, watermark_ms=0, batch_id=0, now_ms=0)
    assert next(out.revisions.rows()).window_end_ms == 2**53 - 1 - (2**53 - 1) % 1000 + 1000


def test_watermark_regression_is_refused():
    engine = Engine(cfg("tumbling:1s", 0))
    engine.process(InputBatch.empty(), watermark_ms=5, batch_id=0, now_ms=0)
    with pytest.raises(WatermarkRegression, match="never goes back"):
        engine.process(InputBatch.empty(), watermark_ms=4, batch_id=1, now_ms=0)


def test_snapshot_refuses_other_config_and_garbage():
    engine = Engine(cfg("tumbling:10s", 0))
    engine.process(make_batch(batch_of(("a", 1, 1.0))), watermark_ms=0, batch_id=0, now_ms=0)
    blob = engine.snapshot()
    assert Engine.build(cfg("tumbling:10s", 0), blob).open_windows == 1
    with pytest.raises(StateSchemaMismatch, match="tumbling:10s"):
        Engine.build(cfg("tumbling:5s", 0), blob)
    with pytest.raises(StateSchemaMismatch):
        Engine.build(cfg("tumbling:10s", 0, aggs=AggList.parse("count")), blob)
    with pytest.raises(StateSchemaMismatch, match="not a revise state snapshot"):
        Engine.build(cfg("tumbling:10s", 0), b"garbage")
    restored = Engine.build(cfg("tumbling:10s", 0), blob)
    with pytest.raises(WatermarkRegression):  # the watermark travels with the snapshot
        restored.process(InputBatch.empty(), watermark_ms=-1, batch_id=1, now_ms=0)


def test_many_keys_sorted_by_text_and_key_table_compacts():
    engine = Engine(cfg("tumbling:1s", 0))
    for i in range(5):
        keys = [f"k{i}-{j:04d}" for j in range(1000)][::-1]
        b = InputBatch.from_arrays(keys, np.full(1000, i * 1000), np.ones(1000))
        out = engine.process(b, watermark_ms=i * 1000, batch_id=i, now_ms=0)
        got = out.revisions.key[out.revisions.timing != "FINAL"].tolist()
        assert got == sorted(keys)
    assert len(engine.key_table) <= 2 * engine.open_windows + 1024


@pytest.mark.parametrize("window", ["tumbling:10s", "hopping:10s:5s", "session:3s"])
def test_next_close_ms_is_the_first_watermark_that_changes_anything(window):
    # The Spark operator skips a shard without rows until the watermark reaches
    # next_close_ms (its event-time timeout): below it an empty batch must be a no-op.
    engine = Engine(cfg(window, 2_000))
    assert engine.next_close_ms is None
    engine.process(make_batch(batch_of(("a", 1_000, 1.0), ("b", 12_500, 2.0))),
                   watermark_ms=0, batch_id=0, now_ms=0)
    due = engine.next_close_ms
    assert due is not None and due > 0
    blob = engine.snapshot()
    quiet = Engine.build(cfg(window, 2_000), blob)
    out = quiet.process(InputBatch.empty(), watermark_ms=due - 1, batch_id=1, now_ms=0)
    assert len(out.revisions) == 0 and quiet.open_windows == engine.open_windows
    assert quiet.next_close_ms == due
    closing = Engine.build(cfg(window, 2_000), blob)
    out = closing.process(InputBatch.empty(), watermark_ms=due, batch_id=1, now_ms=0)
    assert [r.timing for r in out.revisions.rows()][:1] == ["FINAL"]
    assert closing.next_close_ms is None or closing.next_close_ms > due
