"""windows/: assignment, session merging, aggregates and the watermark against brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from windows import (
    COUNT,
    SUM,
    Aggregate,
    AggregateSet,
    HoppingAssigner,
    StateColumn,
    TumblingAssigner,
    WatermarkTracker,
    WindowAssigner,
    get_aggregate,
    merge_spans,
    register,
    segment_starts,
)
from windows.aggregates import REGISTRY

times = st.lists(st.one_of(st.integers(0, 50_000), st.integers(0, 2**53 - 1)), max_size=40)


@settings(max_examples=200, deadline=None)
@given(times, st.integers(1, 5000), st.integers(1, 5000))
def test_hopping_assigns_every_containing_window(ts, size, advance):
    if advance > size:
        size, advance = advance, size
    asg = HoppingAssigner(size, advance)
    assert isinstance(asg, WindowAssigner)
    got = asg.assign(np.array(ts, dtype=np.int64))
    pairs = sorted(zip(got.record.tolist(), got.start_ms.tolist(), got.end_ms.tolist(),
                       strict=True))
    want = []
    for i, t in enumerate(ts):
        k = t // advance
        while k * advance > t - size:
            want.append((i, k * advance, k * advance + size))
            k -= 1
    assert pairs == sorted(want)
    assert np.all(got.start_ms % advance == 0)
    assert np.all((got.start_ms <= np.array(ts)[got.record]) &
                  (np.array(ts)[got.record] < got.end_ms))


def test_tumbling_boundaries_and_bad_sizes():
    got = TumblingAssigner(1000).assign(np.array([0, 999, 1000, 2**53 - 1]))
    assert got.start_ms.tolist() == [0, 0, 1000, (2**53 - 1) // 1000 * 1000]
    assert (got.end_ms - got.start_ms).tolist() == [1000] * 4
    with pytest.raises(ValueError, match="> 0"):
        TumblingAssigner(0)
    with pytest.raises(ValueError, match="advance <= size"):
        HoppingAssigner(1000, 2000)


def brute_sessions(key, start, end):
    out = {}
    groups: dict = {}
    for i, (k, s, e) in enumerate(zip(key, start, end, strict=True)):
        groups.setdefault(k, []).append([s, e, [i]])
    for k, spans in groups.items():
        merged = True
        while merged:
            merged = False
            for a in range(len(spans)):
                for b in range(a + 1, len(spans)):
                    if spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]:
                        spans[a] = [min(spans[a][0], spans[b][0]), max(spans[a][1], spans[b][1]),
                                    spans[a][2] + spans[b][2]]
                        del spans[b]
                        merged = True
                        break
                if merged:
                    break
        for s in spans:
            out[(k, s[0], s[1])] = sorted(s[2])
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.one_of(st.integers(0, 100),
                                                         st.integers(0, 2**53)),
                          st.integers(1, 30)), max_size=30))
def test_merge_spans_matches_pairwise_merging(spans):
    spans = sorted((k, s, s + d) for k, s, d in spans)
    key = np.array([k for k, _, _ in spans], dtype=np.int64)
    start = np.array([s for _, s, _ in spans], dtype=np.int64)
    end = np.array([e for _, _, e in spans], dtype=np.int64)
    gid = merge_spans(key, start, end)
    got: dict = {}
    for i, g in enumerate(gid.tolist()):
        got.setdefault(g, []).append(i)
    got_set = {(int(key[ix[0]]), int(start[ix].min()), int(end[ix].max())): ix
               for ix in got.values()}
    assert got_set == brute_sessions(key.tolist(), start.tolist(), end.tolist())


def test_touching_spans_do_not_merge_and_overlap_bridges():
    key = np.zeros(3, dtype=np.int64)
    assert merge_spans(key, np.array([0, 10, 20]), np.array([10, 20, 30])).tolist() == [0, 1, 2]
    assert merge_spans(key, np.array([0, 9, 20]), np.array([10, 21, 30])).tolist() == [0, 0, 0]
    # a long stored session followed by short spans inside it
    assert merge_spans(key, np.array([0, 10, 50]), np.array([100, 15, 55])).tolist() == [0, 0, 0]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=50), st.integers(1, 5))
def test_aggregates_update_merge_result(values, n_groups):
    v = np.array(values)
    gid = np.arange(len(v)) % n_groups
    for name in ("count", "sum", "min", "max", "mean"):
        agg = get_aggregate(name)
        state = agg.update(agg.initial(n_groups), v, gid)
        half = len(v) // 2
        a = agg.update(agg.initial(n_groups), v[:half], gid[:half])
        b = agg.update(agg.initial(n_groups), v[half:], gid[half:])
        merged = agg.merge(a, b)
        for g in range(min(n_groups, len(v))):
            sel = v[gid == g]
            want = {"count": len(sel), "sum": sel.sum(), "min": sel.min(), "max": sel.max(),
                    "mean": sel.mean()}[name]
            assert agg.result(state)[g] == pytest.approx(want, rel=1e-9, abs=1e-6)
            assert agg.result(merged)[g] == pytest.approx(want, rel=1e-9, abs=1e-6)


def test_mean_keeps_sum_and_count_and_set_shares_columns():
    mean = get_aggregate("mean")
    assert {c.name for c in mean.columns} == {"sum", "count"}
    s = AggregateSet(["sum", "mean", "max"])
    assert [c.name for c in s.columns] == ["count", "sum", "max"]
    assert s.tags == ("sum:1", "mean:1", "max:1")
    vals = np.array([1.0, 3.0, 10.0])
    state = s.reduce_values(vals, segment_starts(np.array([0, 0, 1])))
    assert state["count"].tolist() == [2, 1]
    res = s.results(state)
    assert res["mean"].tolist() == [2.0, 10.0] and res["sum"].tolist() == [4.0, 10.0]
    merged = s.reduce_states(state, np.array([0]))
    assert s.results(merged)["mean"].tolist() == [14.0 / 3]
    with pytest.raises(KeyError, match="unknown aggregate 'median'"):
        get_aggregate("median")


def test_adding_variance_is_a_local_change():
    sumsq = StateColumn("sumsq", np.float64, np.add, 0.0, lambda v: v * v)
    var = Aggregate("variance", 1, (COUNT, SUM, sumsq),
                    lambda s: s["sumsq"] / s["count"] - (s["sum"] / s["count"]) ** 2)
    try:
        register(var)
        s = AggregateSet(["variance", "mean"])
        v = np.array([1.0, 2.0, 3.0, 4.0])
        res = s.results(s.reduce_values(v, np.array([0])))
        assert res["variance"][0] == pytest.approx(np.var(v))
    finally:
        REGISTRY.pop("variance", None)


def test_segment_starts():
    assert segment_starts(np.array([4, 4, 7, 9, 9])).tolist() == [0, 2, 3]
    assert segment_starts(np.array([], dtype=np.int64)).tolist() == []


@given(st.lists(st.one_of(st.none(), st.integers(0, 10**6)), max_size=20),
       st.integers(0, 5000))
def test_watermark_never_goes_back(maxima, delay):
    wm = WatermarkTracker(delay)
    assert wm.current_ms == 0
    seen: list[int] = []
    prev = 0
    for m in maxima:
        wm.observe(m)
        now = wm.advance()
        assert now >= prev and now >= 0
        if m is not None:
            seen.append(m)
        assert now == max(0, max(seen) - delay) if seen else now == 0
        prev = now


def test_watermark_array_and_validation():
    wm = WatermarkTracker(1000)
    wm.observe_array(np.array([5000, 12000, 3000]))
    assert wm.current_ms == 0  # moves only at the batch boundary
    assert wm.advance() == 11000 and wm.max_event_time_ms == 12000
    wm.observe_array(np.array([], dtype=np.int64))
    assert wm.advance() == 11000
    with pytest.raises(ValueError):
        WatermarkTracker(-1)
