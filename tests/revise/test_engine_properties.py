"""Properties of the engine against the oracle, over random inputs, orders and batch splits."""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import oracle
from helpers import by_window, configs, late_records, make_batch, streams
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from revise.config import EngineConfig
from revise.engine import Engine
from revise.local import run_batches
from revise.record_batches import RevisionBatch
from windows import WatermarkTracker

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def run(config: EngineConfig, batches: list[list[oracle.Rec]]):
    return run_batches(config, [make_batch(b) for b in batches], now_ms=7)


@SETTINGS
@given(configs(), streams())
def test_final_equals_oracle_and_nothing_lost(config, batches):
    truth = oracle.compute(config, batches)
    outs = run(config, batches)
    finals = {w: revs[-1][1] for w, revs in by_window(outs).items() if revs[-1][1].is_final}
    assert set(finals) == set(truth.windows)
    for w, t in truth.windows.items():
        r = finals[w]
        assert (r.n_late, r.max_lateness_ms) == (t.n_late, t.max_lateness), w
        if "count" in config.aggs.columns:
            assert r.count == t.count
        if "sum" in config.aggs.columns:
            assert r.sum == sum(t.values)  # quarter-integers: exact
        if "min" in config.aggs.columns:
            assert r.min == min(t.values)
        if "max" in config.aggs.columns:
            assert r.max == max(t.values)
        if "mean" in config.aggs.columns:
            assert math.isclose(r.mean, sum(t.values) / t.count, rel_tol=1e-12, abs_tol=1e-12)
        for a in ("count", "sum", "min", "max", "mean"):
            if a not in config.aggs.columns:
                assert getattr(r, a) is None
    # accepted + too late = input, per (record, window)
    late = late_records(outs)
    got_late = Counter((x.offset, x.window_start_ms, x.window_end_ms) for x in late)
    assert max(got_late.values(), default=1) == 1
    assert set(got_late) == truth.too_late
    n_pairs = sum(t.count for t in truth.windows.values()) + len(truth.too_late)
    if config.window.kind == "session":
        assert n_pairs == sum(len(b) for b in batches)
    else:
        assert n_pairs == len(truth.accepted) + len(truth.too_late)
        expect = sum(len(oracle.windows_of(r.ts, config.window.size_ms, config.window.advance_ms))
                     for b in batches for r in b)
        assert n_pairs == expect
    for x in late:
        assert x.lateness_ms == x.watermark_ms - x.ts_ms > 0
        assert x.watermark_ms >= x.window_end_ms + config.grace_ms
        assert x.reason == "window closed" and x.topic == "t"


@SETTINGS
@given(configs(mode="revision"), streams())
def test_revision_sequences(config, batches):
    truth = oracle.compute(config, batches)
    outs = run(config, batches)
    wms = [o.watermark_ms for o in outs]
    assert wms == [*truth.watermarks, truth.final_watermark]
    assert wms == sorted(wms)  # the watermark never goes back
    grace = config.grace_ms
    session = config.window.kind == "session"
    windows = by_window(outs)
    revs_in_batch: dict[tuple[str, int], list] = {}
    for i, r in [(i, r) for revs in windows.values() for i, r in revs]:
        revs_in_batch.setdefault((r.key, i), []).append(r)
    retracted_at: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
    for (key, s, e), revs in windows.items():
        for _, r in revs:
            if r.retracted:
                retracted_at.setdefault((key, r.batch_id), []).append((s, e, r.revision, 0))
    for w, revs in windows.items():
        nums = [r.revision for _, r in revs]
        assert nums == list(range(nums[0], nums[0] + len(nums)))  # dense, increasing
        batches_seen = [i for i, _ in revs]
        assert batches_seen == sorted(set(batches_seen))  # at most one per batch
        ends = [r for _, r in revs if r.is_final or r.retracted]
        assert len(ends) == 1 and (ends[0] is revs[-1][1])  # exactly one FINAL (or retraction)
        assert not (revs[-1][1].is_final and revs[-1][1].retracted)
        if not session or revs[-1][1].is_final:
            assert revs[-1][1].is_final == (w in truth.windows)
        if not session:
            assert nums[0] == 0
            assert revs[-1][1].is_final
            assert revs[-1][0] == truth.close_batch[w]
        elif nums[0] != 0:  # continues a retracted lineage of the same key in the same batch
            i, first = revs[0]
            cands = [rv for (s, e, rv, _) in retracted_at[(w[0], first.batch_id)]
                     if s >= w[1] and e <= w[2]]
            assert nums[0] == max(cands) + 1
        prev = None
        for i, r in revs:
            assert r.watermark_ms == wms[i] and r.batch_id == i and r.emitted_at_ms == 7
            assert r.query_id == "q" and r.mode == "revision"
            if r.is_final:
                assert r.timing == "FINAL"
                assert i == len(batches) or r.watermark_ms >= r.window_end_ms + grace
            elif r.retracted:  # timing of the superseding bounds' revision
                [sup] = [x for x in revs_in_batch[(w[0], i)] if not x.retracted
                         and x.window_start_ms <= w[1] and x.window_end_ms >= w[2]]
                assert r.timing == sup.timing and r.timing in ("EARLY", "LATE")
            elif r.watermark_ms < r.window_end_ms:
                assert r.timing == "EARLY"
            else:
                assert r.timing == "LATE" and r.watermark_ms < r.window_end_ms + grace
            if prev is None:
                if r.revision == 0:
                    assert r.prev_count is None and r.prev_sum is None and r.prev_max is None
            else:
                for a in config.aggs.columns:
                    assert getattr(r, f"prev_{a}") == getattr(prev, a)
                if r.retracted or r.is_final:
                    assert all(getattr(r, a) == getattr(prev, a) for a in config.aggs.columns)
            prev = r


@SETTINGS
@given(configs(mode="watermark"), streams())
def test_watermark_mode_one_final_per_window(config, batches):
    outs = run(config, batches)
    rev_cfg = EngineConfig(config.window, config.grace_ms, config.watermark_delay_ms,
                           config.aggs, "revision", config.query_id)
    rev_finals = {w: revs[-1][1] for w, revs in by_window(run(rev_cfg, batches)).items()
                  if revs[-1][1].is_final}
    windows = by_window(outs)
    assert set(windows) == set(rev_finals)
    for w, revs in windows.items():
        assert len(revs) == 1
        r = revs[0][1]
        assert (r.revision, r.timing, r.is_final, r.retracted, r.mode) == (0, "FINAL", True,
                                                                           False, "watermark")
        assert all(getattr(r, f"prev_{a}") is None for a in ("count", "sum", "min", "max", "mean"))
        f = rev_finals[w]
        cols = config.aggs.columns
        assert [getattr(r, a) for a in cols] == [getattr(f, a) for a in cols]
        assert (r.batch_id, r.n_late, r.max_lateness_ms) == (f.batch_id, f.n_late,
                                                             f.max_lateness_ms)


def _rows(outs):
    return [(o.revisions.to_arrow(), o.late.to_arrow(), o.watermark_ms, o.max_accepted_ts_ms)
            for o in outs]


@SETTINGS
@given(configs(), streams(exact=False), st.data())
def test_snapshot_restore_anywhere_gives_same_output(config, batches, data):
    full = run(config, batches)
    cut = data.draw(st.integers(0, len(batches)))
    ibs = [make_batch(b) for b in batches]
    tracker = WatermarkTracker(config.watermark_delay_ms)
    first = run_batches(config, ibs[:cut], close_at_end=False, now_ms=7, tracker=tracker)
    engine0 = Engine(config)
    # replay the first part on a fresh engine, snapshot it, restore into a new one
    run_batches(config, ibs[:cut], close_at_end=False, now_ms=7, engine=engine0,
                tracker=WatermarkTracker(config.watermark_delay_ms))
    blob = engine0.snapshot()
    restored = Engine.build(config, blob)
    assert restored.open_windows == engine0.open_windows
    assert restored.snapshot() == blob
    rest = run_batches(config, ibs[cut:], now_ms=7, engine=restored, tracker=tracker,
                       first_batch_id=cut)
    assert _rows(first + rest) == _rows(full)


@SETTINGS
@given(configs(), streams(exact=False), st.randoms(use_true_random=False))
def test_order_within_batch_does_not_matter(config, batches, rnd: random.Random):
    shuffled = [rnd.sample(b, len(b)) for b in batches]
    assert _rows(run(config, shuffled)) == _rows(run(config, batches))


@SETTINGS
@given(configs(), streams())
def test_output_sorted_and_columnar_views_agree(config, batches):
    for o in run(config, batches):
        rb = o.revisions
        keys = list(zip(rb.key.tolist(), rb.window_start_ms.tolist(), rb.window_end_ms.tolist(),
                        strict=True))
        assert keys == sorted(keys)
        assert len(set(keys)) == len(keys)
        rows = list(rb.rows())
        assert RevisionBatch.from_records(rows, query_id=rb.query_id, mode=rb.mode,
                                          aggs=rb.aggs).to_arrow().equals(rb.to_arrow())
        assert [r.to_row() for r in rows] == rb.to_arrow().to_pylist()
        lb = o.late
        lk = list(zip(lb.key.tolist(), lb.window_start_ms.tolist(), lb.ts_ms.tolist(),
                      strict=True))
        assert lk == sorted(lk)
        if o.max_accepted_ts_ms is not None:
            assert o.max_accepted_ts_ms >= 0
        assert np.all(rb.watermark_ms == o.watermark_ms)


@SETTINGS
@given(configs(), streams())
def test_completeness_is_a_share_and_estimates_are_final_on_the_final(config, batches):
    truth = oracle.compute(config, batches)
    for o in run(config, batches):
        rb = o.revisions
        c = rb.completeness
        assert np.all((c >= 0.0) & (c <= 1.0))
        assert np.all(c[rb.is_final] == 1.0)
        if config.mode == "watermark":
            assert np.all(c == 1.0)
        for a in ("count", "sum"):
            est, valid = rb.estimate(a)
            assert valid.tolist() == ((c > 0) & (a in config.aggs.columns)).tolist()
            value = getattr(rb, a)
            assert np.array_equal(est[valid & rb.is_final], value[valid & rb.is_final])
        if "count" in config.aggs.columns:
            est, valid = rb.estimate("count")
            assert np.all(est[valid] >= rb.count[valid])  # a share <= 1 only scales up
            for r in rb.take(np.flatnonzero(rb.is_final)).rows():
                assert r.est_count == truth.windows[(r.key, r.window_start_ms,
                                                     r.window_end_ms)].count
