"""The completeness kernels: arrival delays, the delay histogram, the window estimates."""

from __future__ import annotations

import numpy as np
import pytest

from windows.completeness import (
    HISTORY_RECORDS,
    DelayHistogram,
    arrival_delays,
    fixed_completeness,
    session_completeness,
)

I64 = np.int64


def _fixed(hist, start, end, now, *, grace=0, delay=0, advance=None):
    s, e = np.array(start, dtype=I64), np.array(end, dtype=I64)
    adv = int((e - s).max()) if advance is None else advance
    return fixed_completeness(hist, s, e, now, grace_ms=grace, delay_ms=delay, advance_ms=adv)


def test_arrival_delays_follow_each_partition_in_offset_order():
    ts = np.array([1500, 900, 1700, 800], dtype=I64)
    part = np.array([0, 0, 0, 1], dtype=np.int32)
    off = np.array([0, 1, 2, 0], dtype=I64)
    delays, now = arrival_delays(ts, part, off, 1000)
    assert delays.tolist() == [0, 600, 0, 200] and now == 1700
    # the order of the arrays does not matter, only (partition, offset)
    perm = np.array([3, 2, 0, 1])
    d2, now2 = arrival_delays(ts[perm], part[perm], off[perm], 1000)
    assert d2.tolist() == delays[perm].tolist() and now2 == now
    # nothing seen before: the partition's own running max is the frontier
    d3, now3 = arrival_delays(ts, part, off, None)
    assert d3.tolist() == [0, 600, 0, 0] and now3 == 1700
    assert arrival_delays(ts[:0], part[:0], off[:0], 5)[1] == 5


def test_histogram_counts_round_trip_and_forget_by_halving():
    h = DelayHistogram()
    h.add(np.array([0, 0, 1, 1000, 10**15], dtype=I64))
    assert h.total == 5
    assert DelayHistogram.from_sparse(h.sparse()).counts.tolist() == h.counts.tolist()
    assert h.merge(h).total == 10
    with pytest.raises(ValueError, match="outside"):
        DelayHistogram.from_sparse([[10**6, 1]])
    big = DelayHistogram()
    big.add(np.zeros(HISTORY_RECORDS, dtype=I64))
    assert big.total == HISTORY_RECORDS
    big.add(np.full(2, 5000, dtype=I64))
    assert big.total == HISTORY_RECORDS // 2 + 1  # halved: old and new delays alike


def test_without_learned_delays_completeness_is_the_span_passed():
    h = DelayHistogram()
    got = _fixed(h, [0, 0, 0, 10_000], [10_000] * 3 + [20_000], 2500)
    assert got == pytest.approx([0.25, 0.25, 0.25, 0.0], abs=1e-3)
    assert _fixed(h, [0], [10_000], 10_000).tolist() == [1.0]
    assert _fixed(h, [0], [10_000], 99_000).tolist() == [1.0]


def test_constant_delay_shifts_the_frontier():
    h = DelayHistogram()
    h.add(np.full(1000, 2000, dtype=I64))
    # records of [0,10000) with t <= now - 2000 have arrived
    got = _fixed(h, [0, 0, 0], [10_000] * 3, 7000, grace=5000)
    assert got[0] == pytest.approx(0.5, abs=0.01)
    assert _fixed(h, [0], [10_000], 1500, grace=5000).tolist() == [0.0]
    now = np.arange(0, 20_001, 500)
    series = [float(_fixed(h, [0], [10_000], int(m), grace=5000)[0]) for m in now]
    assert series == sorted(series) and series[-1] == 1.0  # monotone in the frontier
    assert all(0.0 <= x <= 1.0 for x in series)


def test_selection_correction_matches_a_simulated_stream():
    # delays uniform in [0, 20s]; tumbling 10s, grace 0: a record is accepted only if its delay
    # is below end - t, so long delays are seen only for records early in their window
    rng = np.random.default_rng(3)
    n = 400_000
    t = rng.integers(0, 10_000, n)
    d = rng.integers(0, 20_000, n)
    ok = d < 10_000 - t
    h = DelayHistogram()
    h.add(d[ok].astype(I64))
    for now in (2000, 5000, 8000, 9500):
        truth = float(((t + d <= now) & ok).sum() / ok.sum())
        got = float(_fixed(h, [0], [10_000], now)[0])
        assert got == pytest.approx(truth, abs=0.02), now
    # without the correction (a histogram that does not know the selection) it is far off
    seen_as_if_complete = DelayHistogram()
    seen_as_if_complete.add(d[ok].astype(I64))
    raw = fixed_completeness(seen_as_if_complete, np.array([0]), np.array([10_000]), 5000,
                             grace_ms=0, delay_ms=0, advance_ms=10**12)
    truth = float(((t + d <= 5000) & ok).sum() / ok.sum())
    assert abs(float(raw[0]) - truth) > 0.03


def test_sessions_judge_the_span_they_hold():
    h = DelayHistogram()
    s = np.array([0, 0, 4000], dtype=I64)
    e = np.array([5000 + 3000, 3000, 7000], dtype=I64)  # spans [0,5000], [0,0], [4000,4000]
    got = session_completeness(h, s, e, 2500, gap_ms=3000, grace_ms=0, delay_ms=0)
    assert got == pytest.approx([0.5, 1.0, 0.0], abs=1e-3)
    h.add(np.full(100, 1000, dtype=I64))
    got = session_completeness(h, s, e, 2500, gap_ms=3000, grace_ms=0, delay_ms=0)
    assert got == pytest.approx([0.3, 1.0, 0.0], abs=0.01)
    assert np.all((got >= 0) & (got <= 1))
