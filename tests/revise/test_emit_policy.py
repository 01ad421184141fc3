"""Emit policies (``--emit-min-change``, ``--emit-every``) against the oracle and the plain engine.

Under any policy, arrival order and batch split: revisions stay dense, every window still ends
with exactly one FINAL equal to the oracle (and to the run without a policy), ``prev_*`` are
the previous *emitted* revision's values, every emitted EARLY/LATE revision after the first
of its bounds satisfies the policy against the previous emitted one, and no more revisions
go out than without a policy.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict

import oracle
import pytest
from helpers import configs, streams
from helpers import make_batch as plain_batch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_engine_aggs import AGGS, expected, with_aggs
from test_engine_aggs import make_batch as field_batch

from revise.aggspec import AggList
from revise.config import EngineConfig, WindowSpec
from revise.engine import Engine, InputBatch
from revise.errors import ConfigError, StateSchemaMismatch
from revise.local import run_batches
from windows import WatermarkTracker

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

policies = st.one_of(
    st.tuples(st.sampled_from([0.0, 0.01, 0.1, 0.5, 2.0]), st.none()),
    st.tuples(st.none(), st.sampled_from([250, 500, 1000, 3000])),
    st.tuples(st.sampled_from([0.05, 0.3, 1.0]), st.sampled_from([250, 1000, 3000])),
)


def with_policy(config: EngineConfig, policy: tuple[float | None, int | None]) -> EngineConfig:
    return dataclasses.replace(config, emit_min_change=policy[0], emit_every_ms=policy[1])


def rows(config: EngineConfig, batches: list[list[oracle.Rec]], *, fields: bool) -> list[dict]:
    make = field_batch if fields else plain_batch
    outs = run_batches(config, [make(b) for b in batches], now_ms=7)
    return [r for o in outs for r in o.revisions.to_arrow().to_pylist()]


def _null(x: object) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def moved(new: float | None, old: float | None, f: float) -> bool:
    """The policy's relative change, spelled out: null <-> value counts, from 0 any change."""
    if _null(new) or _null(old):
        return _null(new) != _null(old)
    d = abs(new - old)  # type: ignore[operator]
    return d > 0 and d >= f * abs(old)  # type: ignore[arg-type]


def by_window(rs: list[dict]) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = defaultdict(list)
    for r in rs:
        out[(r["key"], r["window_start_ms"], r["window_end_ms"])].append(r)
    return out


def check_policy_run(config: EngineConfig, batches: list[list[oracle.Rec]],
                     cols: tuple[str, ...], *, fields: bool) -> None:
    f, every = config.emit_min_change, config.emit_every_ms
    plain = dataclasses.replace(config, emit_min_change=None, emit_every_ms=None)
    got, base = rows(config, batches, fields=fields), rows(plain, batches, fields=fields)
    assert len(got) <= len(base)
    windows, base_windows = by_window(got), by_window(base)
    assert set(windows) == set(base_windows)  # only same-bounds revisions are held back
    truth = oracle.compute(config, batches)
    for w, revs in windows.items():
        nums = [r["revision"] for r in revs]
        assert nums == list(range(nums[0], nums[0] + len(nums)))  # dense
        ends = [r for r in revs if r["is_final"] or r["retracted"]]
        assert len(ends) == 1 and ends[0] is revs[-1]
        last, base_last = revs[-1], base_windows[w][-1]
        assert last["is_final"] == base_last["is_final"]
        assert last["retracted"] == base_last["retracted"]
        for c in (*cols, "n_late", "max_lateness_ms", "batch_id", "watermark_ms", "timing"):
            assert last[c] == base_last[c], (w, c)  # the true final (or retracted) values
        if last["is_final"]:
            want = expected(truth.windows[w]) if fields else {
                "count": truth.windows[w].count, "sum": sum(truth.windows[w].values),
                "min": min(truth.windows[w].values), "max": max(truth.windows[w].values)}
            for c, v in want.items():
                if c in cols and c not in ("mean_b_c",):
                    assert last[c] == v, (w, c, last[c], v)
        if nums[0] == 0:
            assert all(revs[0][f"prev_{c}"] is None for c in cols)
        for p, r in zip(revs, revs[1:], strict=False):
            for c in cols:
                assert r[f"prev_{c}"] == p[c], (w, r["revision"], c)
            if r["is_final"] or r["retracted"]:
                continue
            assert r["timing"] == ("EARLY" if r["watermark_ms"] < w[2] else "LATE")
            if every is not None:
                assert r["watermark_ms"] - p["watermark_ms"] >= every, (w, r["revision"])
            if f:
                assert any(moved(r[c], p[c], f) for c in cols), (w, r["revision"])


@SETTINGS
@given(configs(mode="revision"), streams(), policies)
def test_policy_keeps_finals_dense_numbers_and_prev_values(config, batches, policy):
    config = with_policy(config, policy)
    check_policy_run(config, batches, config.aggs.columns, fields=False)


@SETTINGS
@given(configs(mode="revision"), streams(), policies)
def test_policy_over_percentiles_and_distinct_counts(config, batches, policy):
    config = with_policy(with_aggs(config), policy)
    check_policy_run(config, batches, AGGS.columns, fields=True)


@SETTINGS
@given(configs(mode="revision"), streams(exact=False), policies, st.data())
def test_snapshot_restore_anywhere_keeps_the_last_emitted_state(config, batches, policy, data):
    config = with_policy(with_aggs(config), policy)
    ibs = [field_batch(b) for b in batches]
    full = run_batches(config, ibs, now_ms=7)
    cut = data.draw(st.integers(0, len(batches)))
    tracker = WatermarkTracker(config.watermark_delay_ms)
    engine0 = Engine(config)
    first = run_batches(config, ibs[:cut], close_at_end=False, now_ms=7, engine=engine0,
                        tracker=tracker)
    blob = engine0.snapshot()
    # the thresholds may change on a restart; the state (and so this output) does not
    restored = Engine.build(with_policy(config, (0.7, 9000)), blob)
    assert restored.snapshot() == blob
    restored = Engine.build(config, blob)
    rest = run_batches(config, ibs[cut:], now_ms=7, engine=restored, tracker=tracker,
                       first_batch_id=cut)
    assert [o.revisions.to_arrow() for o in first + rest] == \
        [o.revisions.to_arrow() for o in full]


def _run(config: EngineConfig, *batches: list[tuple[str, int]]) -> list[tuple]:
    ibs = [InputBatch.from_arrays([k for k, _ in b], [t for _, t in b], [1.0] * len(b))
           for b in batches]
    return [(r.window_start_ms, r.window_end_ms, r.revision, r.timing, r.retracted, r.count,
             r.prev_count, r.watermark_ms)
            for o in run_batches(config, ibs, now_ms=0) for r in o.revisions.rows()]


def test_min_change_trace():
    """Counts 2 (rev 0), 3 (+50 %, rev 1), 4 (+33 % of 3: held), 5 (+67 %, rev 2), FINAL."""
    config = EngineConfig(WindowSpec.parse("tumbling:10s"), 0, aggs=AggList.parse("count"),
                          emit_min_change=0.5)
    got = _run(config, [("a", 0), ("a", 1)], [("a", 2)], [("a", 3)], [("a", 4)])
    assert got == [(0, 10000, 0, "EARLY", False, 2, None, 0),
                   (0, 10000, 1, "EARLY", False, 3, 2, 1),
                   (0, 10000, 2, "EARLY", False, 5, 3, 3),
                   (0, 10000, 3, "FINAL", False, 5, 5, 4)]


def test_every_trace_and_final_after_a_held_change():
    """Batch watermarks 0, 0, 2000, 6000, 7000, 15000 (each: max ts of the batches before).

    [0,10000): rev 0 at W=0; held at W=0 and 2000 (< 5s since 0); rev 1 at W=6000 count=4;
    t=8000 at W=7000 held; FINAL at W=15000 carries it (count=5, prev_count=4).
    """
    config = EngineConfig(WindowSpec.parse("tumbling:10s"), 5000, aggs=AggList.parse("count"),
                          emit_every_ms=5000)
    got = _run(config, [("a", 0)], [("a", 2000)], [("a", 6000)], [("a", 7000)],
               [("a", 15000), ("a", 8000)], [("a", 16000)])
    assert got == [(0, 10000, 0, "EARLY", False, 1, None, 0),
                   (0, 10000, 1, "EARLY", False, 4, 1, 6000),
                   (10000, 20000, 0, "EARLY", False, 1, None, 7000),
                   (0, 10000, 2, "FINAL", False, 5, 4, 15000),
                   (10000, 20000, 1, "EARLY", False, 2, 1, 15000),
                   (10000, 20000, 2, "FINAL", False, 2, 2, 16000)]


def test_session_retraction_carries_the_held_change():
    """Gap 10s, every 1h: a change inside the bounds is held; the extension is not.

    t=0 and t=9000 in one batch → [0,19000) rev 0 count=2; t=1000 (inside) → held;
    t=15000 extends → [0,19000) retracted (rev 1, count=3, prev 2), [0,25000) rev 2
    count=4 prev 3 (always emitted); close_all → FINAL rev 3.
    """
    config = EngineConfig(WindowSpec.parse("session:10s"), 0, aggs=AggList.parse("count"),
                          emit_every_ms=3_600_000)
    got = _run(config, [("a", 0), ("a", 9000)], [("a", 1000)], [("a", 15000)])
    assert got == [(0, 19000, 0, "EARLY", False, 2, None, 0),
                   (0, 19000, 1, "EARLY", True, 3, 2, 9000),
                   (0, 25000, 2, "EARLY", False, 4, 3, 9000),
                   (0, 25000, 3, "FINAL", False, 4, 4, 15000)]


@pytest.mark.parametrize(("kw", "match"), [
    ({"emit_min_change": -0.1}, "--emit-min-change must be a number >= 0"),
    ({"emit_min_change": float("nan")}, "--emit-min-change must be a number >= 0"),
    ({"emit_every_ms": 0}, "--emit-every must be a duration > 0"),
    ({"emit_every_ms": 1000, "mode": "watermark"},
     "--emit-every applies to --mode revision only: watermark mode emits exactly one FINAL"),
    ({"emit_min_change": 0.1, "emit_every_ms": 1000, "mode": "watermark"},
     "--emit-min-change and --emit-every apply to --mode revision only"),
])
def test_bad_policies_are_refused(kw, match):
    with pytest.raises(ConfigError, match=match):
        EngineConfig(WindowSpec.parse("tumbling:1s"), 0, **kw)


def test_turning_a_policy_on_or_off_needs_a_new_checkpoint():
    plain = EngineConfig(WindowSpec.parse("tumbling:1s"), 0)
    throttled = dataclasses.replace(plain, emit_every_ms=1000)
    for a, b in ((plain, throttled), (throttled, plain)):
        eng = Engine(a)
        eng.process(InputBatch.from_arrays(["k"], [5], [1.0]), watermark_ms=0, batch_id=0,
                    now_ms=0)
        with pytest.raises(StateSchemaMismatch, match="--emit-min-change or --emit-every"):
            Engine.build(b, eng.snapshot())
    assert Engine(throttled).config.emit_policy is not None


def test_run_options_and_environment_reach_the_engine_and_the_checkpoint(monkeypatch):
    from test_job_options import config

    assert config().engine.emit_policy is None and "emit_policy" not in config().fingerprint()
    both = config("--emit-min-change", "0.1", "--emit-every", "10s")
    assert (both.engine.emit_min_change, both.engine.emit_every_ms) == (0.1, 10_000)
    # the thresholds may change on a restart; turning the policy on or off may not
    assert both.fingerprint() == config("--emit-every", "1m").fingerprint()
    assert both.fingerprint()["emit_policy"] == "on"
    monkeypatch.setenv("REVISE_EMIT_MIN_CHANGE", "0.25")
    monkeypatch.setenv("REVISE_EMIT_EVERY", "5s")
    env = config()
    assert (env.engine.emit_min_change, env.engine.emit_every_ms) == (0.25, 5000)
    assert config("--emit-every", "1s").engine.emit_every_ms == 1000  # the option wins


@pytest.mark.parametrize(("extra", "env", "message"), [
    (["--emit-min-change", "ten"], {}, "--emit-min-change must be a number, got 'ten'"),
    ([], {"REVISE_EMIT_MIN_CHANGE": "-1"}, "--emit-min-change must be a number >= 0"),
    ([], {"REVISE_EMIT_EVERY": "0s"}, "--emit-every must be a duration > 0"),
    (["--emit-every", "10s", "--mode", "watermark"], {},
     "--emit-every applies to --mode revision only"),
])
def test_bad_policy_options_exit_2_with_the_fix(extra, env, message):
    import subprocess
    import sys

    from test_job_options import BASE, ROOT, _env

    proc = subprocess.run([sys.executable, "-m", "revise", *BASE, *extra], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**_env(), **env})
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Kafka" not in proc.stderr


def test_help_names_the_options():
    from revise.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command" or a.choices)
    text = sub.choices["run"].format_help()  # type: ignore[index]
    assert "--emit-min-change" in text and "--emit-every" in text
    assert "REVISE_EMIT_EVERY" in text


def test_a_checkpoint_refuses_a_policy_turned_on_or_off_and_takes_new_thresholds(tmp_path):
    from test_job_options import config

    from revise.spark.driver import _check_checkpoint

    on = dataclasses.replace(config("--emit-every", "10s"), checkpoint=str(tmp_path / "on"))
    off = dataclasses.replace(config(), checkpoint=str(tmp_path / "off"))
    _check_checkpoint(on)
    _check_checkpoint(off)
    _check_checkpoint(dataclasses.replace(
        config("--emit-min-change", "0.5"), checkpoint=on.checkpoint))  # other thresholds
    with pytest.raises(ConfigError, match="emit_policy: checkpoint has None, asked 'on'"):
        _check_checkpoint(dataclasses.replace(on, checkpoint=off.checkpoint))
    with pytest.raises(ConfigError, match="emit_policy: checkpoint has 'on', asked None"):
        _check_checkpoint(dataclasses.replace(off, checkpoint=on.checkpoint))
