"""``revise compare --sweep``: the replay per setting, the frontier, the recommendation."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from revise.compare.sweep import (
    SweepGrid,
    SweepPoint,
    SweepSetting,
    frontier,
    recommend,
    run_sweep,
    sweep_settings,
)
from revise.compare.whatif import replay_batches
from revise.config import EngineConfig, WindowSpec
from revise.generate import GeneratorConfig, generate

BASE = EngineConfig(window=WindowSpec.parse("tumbling:10s"), grace_ms=4000)


def _records() -> pd.DataFrame:
    s = generate(GeneratorConfig(events=3000, keys=5, seed=7, disorder_ms=2000,
                                 late_fraction=0.05, late_by_ms=3000, step_ms=20))
    good = s.kind != 2
    return pd.DataFrame({"key": s.keys[good], "ts_ms": s.ts_ms[good],
                         "value": s.values[good]})


@pytest.fixture(scope="module")
def points() -> list[SweepPoint]:
    grid = SweepGrid(grace_factors=(0.5, 2.0), delays_ms=(0, 1000), min_changes=(0.3,),
                     every_ms=(5000,))
    return run_sweep(BASE, replay_batches(_records(), batch_size=100), sweep_settings(BASE, grid))


def test_settings_cover_the_grid() -> None:
    grid = SweepGrid(grace_factors=(1.0, 2.0), delays_ms=(0, 500), min_changes=(0.1, 0.2),
                     every_ms=(5000,))
    got = sweep_settings(BASE, grid)
    # per (grace, delay): watermark, every change, two min-change, one every
    assert len(got) == 2 * 2 * 5
    assert {s.grace_ms for s in got} == {4000, 8000}
    assert {s.watermark_delay_ms for s in got} == {0, 500}
    assert sum(s.mode == "watermark" for s in got) == 4
    assert {s.emit_min_change for s in got} == {None, 0.1, 0.2}
    assert SweepSetting("revision", 8000, 500, emit_every_ms=5000).label == \
        "revision grace=8s delay=500ms every=5s"


def test_each_setting_is_replayed_with_its_own_options(points: list[SweepPoint]) -> None:
    by = {p.setting: p for p in points}
    for p in points:
        assert p.windows > 0
        assert 0.0 <= p.accuracy <= 1.0
        if p.setting.mode == "watermark":
            assert p.revisions_per_window == 1.0
            # the only answer is the FINAL, at or after end + grace
            assert p.first_latency_p50_ms is not None
            assert p.first_latency_p50_ms >= p.setting.grace_ms
    for grace in (2000, 8000):
        for delay in (0, 1000):
            every = by[SweepSetting("revision", grace, delay)]
            wm = by[SweepSetting("watermark", grace, delay)]
            damped = by[SweepSetting("revision", grace, delay, emit_min_change=0.3)]
            paced = by[SweepSetting("revision", grace, delay, emit_every_ms=5000)]
            # revision mode answers before the window ends and is more accurate over time
            assert every.first_latency_p50_ms is not None and every.first_latency_p50_ms < 0
            assert every.accuracy > wm.accuracy
            assert every.revisions_per_window > 1.0
            # the emission policies emit fewer revisions, never more
            assert damped.revisions_per_window < every.revisions_per_window
            assert paced.revisions_per_window < every.revisions_per_window
            # acceptance does not depend on the mode or the policy
            assert every.too_late == wm.too_late == damped.too_late == paced.too_late
    # a larger grace keeps more records
    assert by[SweepSetting("watermark", 2000, 0)].too_late > \
        by[SweepSetting("watermark", 8000, 0)].too_late


def test_the_frontier_marks_exactly_the_unbeaten(points: list[SweepPoint]) -> None:
    marks = [p.on_frontier for p in points]
    assert any(marks) and not all(marks)
    for p in points:
        beaten_by = [q for q in points if q is not p
                     and (q.first_latency_p50_ms or math.inf) <= (p.first_latency_p50_ms
                                                                   or math.inf)
                     and q.revisions_per_window <= p.revisions_per_window
                     and q.accuracy >= p.accuracy
                     and (q.first_latency_p50_ms, q.revisions_per_window, q.accuracy)
                     != (p.first_latency_p50_ms, p.revisions_per_window, p.accuracy)]
        assert p.on_frontier == (not beaten_by), p.setting.label


def _point(lat: float, revs: float, acc: float) -> SweepPoint:
    return SweepPoint(SweepSetting("revision", 1000, 0), lat, revs, acc, 0, 1)


def test_frontier_by_hand() -> None:
    a, b, c = _point(-9000, 3.0, 0.8), _point(5000, 1.0, 0.5), _point(-9000, 3.5, 0.8)
    assert frontier([a, b, c]) == [True, True, False]


def test_recommendation_reaches_the_target(points: list[SweepPoint]) -> None:
    best, line = recommend(points, 0.5)
    assert best is not None and best.on_frontier and best.accuracy >= 0.5
    reach = [p for p in points if p.on_frontier and p.accuracy >= 0.5]
    assert best.first_latency_p50_ms == min(p.first_latency_p50_ms or math.inf for p in reach)
    assert best.setting.label in line and "0.5" in line
    none, line = recommend(points, 1.0)
    assert none is not None and none.accuracy == max(p.accuracy for p in points)
    if none.accuracy < 1.0:
        assert line.startswith("no setting reaches accuracy 1")
