"""How complete a window is, learned from the stream's own arrival delays (pure numpy).

**Arrival delay.** A record's delay ``D`` (ms, >= 0) is how far its event time trails the event
time frontier when it arrives: ``D = frontier - ts``. The frontier is the max event time seen
so far: at the start of the record's micro-batch that is ``watermark + watermark_delay``; within
the batch it moves on with the records of the same input partition that came before it (in
offset order, Kafka's arrival order), so a batch spanning much event time does not make its
in-order records look late. :func:`arrival_delays` computes it.

**Histogram.** :class:`DelayHistogram` keeps the delays of accepted records in fixed
log-spaced bins (bin 0 holds ``D = 0``; then :data:`BINS_PER_OCTAVE` bins per doubling from
1 ms up to ``2**MAX_OCTAVE`` ms, the last bin taking everything beyond), as int64 counts:
deterministic, mergeable by addition, and halved (integer division) whenever they hold more
than :data:`HISTORY_RECORDS`, so the estimate follows a change of delays within about that many
records.

**Completeness.** A record with event time ``t`` has arrived by the time the frontier is
``M`` iff ``D <= M - t``, and is accepted at all iff ``D < cap(t)`` (the largest delay its
window still takes: ``end + grace + watermark_delay - t``; for a session record, its own span's
``gap + grace + watermark_delay``). Assuming a steady event rate over the window and delays
independent of event time, the expected share of a window's eventually accepted records that
have arrived is ``∫ G(min(M - t, cap(t))) dt / ∫ G(cap(t)) dt`` over the window's event times,
with ``G`` the delay CDF (uniform within a bin; ``G(x) = 0`` for ``x < 0``). Both integrals are
differences of ``H(x) = ∫_0^x G``, piecewise quadratic, evaluated for all windows at once.

**Selection.** Only accepted records are observed, and a record of a fixed window with a large
delay is accepted only when its event time lies early enough in its window: the share of
records with delay ``D`` that some window accepts is ``a(D) = clip((size + grace + delay - D) /
advance, 0, 1)``. :meth:`DelayHistogram.cdf_weights` divides each bin by it (not below
:data:`MIN_ACCEPT_SHARE`), undoing that bias. Sessions judge a record on its own span, so
there ``a(D)`` is 1 below the cap and nothing beyond it is seen.

An empty histogram behaves as one record of delay 0 (records arrive in event-time order):
completeness is then the share of the window's span the frontier has passed.

Trace (tumbling 10s, grace 0, every delay 0): frontier ``M=4000`` → ``[0,10000)`` is 0.4
complete; ``M=10000`` → 1.0.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "BINS_PER_OCTAVE",
    "DELAY_EDGES_MS",
    "HISTOGRAM_TAG",
    "HISTORY_RECORDS",
    "MAX_OCTAVE",
    "MIN_ACCEPT_SHARE",
    "DelayHistogram",
    "arrival_delays",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

BINS_PER_OCTAVE: Final = 8
"""Bins per doubling of the delay (each bin ~9 % wide)."""
MAX_OCTAVE: Final = 44
"""The bins reach ``2**44`` ms (~557 years); larger delays fall into the last bin."""
DELAY_EDGES_MS: Final = np.concatenate(
    ([0.0], 2.0 ** (np.arange(MAX_OCTAVE * BINS_PER_OCTAVE + 1) / BINS_PER_OCTAVE)))
"""Bin edges in ms: bin 0 is ``[0, 1)``, bin ``k`` is ``[EDGES[k], EDGES[k+1])``."""
N_BINS: Final = len(DELAY_EDGES_MS) - 1
HISTORY_RECORDS: Final = 1 << 20
"""Counts are halved when they hold more records than this (forgetting old delays)."""
MIN_ACCEPT_SHARE: Final = 0.05
"""The selection weight ``1 / a(D)`` is at most ``1 / MIN_ACCEPT_SHARE``."""
HISTOGRAM_TAG: Final = f"delays:log2x{BINS_PER_OCTAVE}:{MAX_OCTAVE}:v1"
"""Version tag of the histogram's meaning (bins, delay definition), stored with its counts."""

_SHIFT_LIMIT: Final = 2**62


def arrival_delays(ts_ms: IntArray, partitions: npt.NDArray[np.int32], offsets: IntArray,
                   frontier_ms: int | None) -> tuple[IntArray, int]:
    """Each record's arrival delay (ms) and the frontier after the batch (ms).

    Args:
        ts_ms: Event times (epoch ms) of one micro-batch's records, any order.
        partitions: Input partition of each record.
        offsets: Input offset of each record (arrival order within its partition).
        frontier_ms: The max event time in force when the batch started (``watermark +
            watermark_delay``); None when no record has been seen yet.

    Returns:
        ``(delays, now_ms)``: ``delays[i] = max(frontier, max ts of the records of i's
        partition up to and including i in offset order) - ts[i]`` (>= 0), and ``now_ms``
        = the largest of those frontiers (the frontier after the batch). Does not depend on
        the order of the arrays.

    Trace: frontier 1000, partition 0 offsets 0,1,2 with ts 1500, 900, 1700 → delays 0, 600, 0;
    now 1700.
    """
    n = len(ts_ms)
    base = -1 if frontier_ms is None else int(frontier_ms)
    if n == 0:
        return np.empty(0, dtype=np.int64), base
    order = np.argsort(partitions, kind="stable")
    p, off = partitions[order], offsets[order]
    same = p[1:] == p[:-1]
    if not bool((off[1:][same] > off[:-1][same]).all()):
        order = np.lexsort((ts_ms, offsets, partitions))
        p = partitions[order]
    t = ts_ms[order].astype(np.int64)
    group = np.cumsum(np.concatenate(([0], (p[1:] != p[:-1]).astype(np.int64))))
    lo = int(t.min())
    span = int(t.max()) - lo + 1
    if int(group[-1] + 1) * span < _SHIFT_LIMIT:
        # one running max over the whole array: each partition is lifted above the last
        lifted = group * span + (t - lo)
        run = np.maximum.accumulate(lifted) - group * span + lo
    else:  # pragma: no cover - needs event times spread over ~2**62 / partitions ms
        run = np.empty_like(t)
        starts = np.flatnonzero(np.concatenate(([True], group[1:] != group[:-1])))
        for a, b in zip(starts, [*starts[1:], len(t)], strict=True):
            run[a:b] = np.maximum.accumulate(t[a:b])
    frontier = np.maximum(run, base)
    delays = np.empty(n, dtype=np.int64)
    delays[order] = frontier - t
    return delays, max(base, int(frontier.max()))


def _bins(delays_ms: IntArray) -> npt.NDArray[np.intp]:
    """The bin of each delay (ms, >= 0)."""
    idx = np.searchsorted(DELAY_EDGES_MS, delays_ms.astype(np.float64), side="right") - 1
    return np.minimum(idx, N_BINS - 1)


class DelayHistogram:
    """Counts of accepted records' arrival delays in fixed log-spaced bins (module docstring).

    Args:
        counts: int64 counts per bin (:data:`N_BINS` of them); None: empty.
    """

    __slots__ = ("counts",)

    def __init__(self, counts: IntArray | None = None) -> None:
        if counts is None:
            counts = np.zeros(N_BINS, dtype=np.int64)
        if counts.shape != (N_BINS,):
            msg = f"a delay histogram has {N_BINS} bins, got shape {counts.shape}"
            raise ValueError(msg)
        self.counts: IntArray = counts.astype(np.int64, copy=True)

    @property
    def total(self) -> int:
        """Records counted (after halvings)."""
        return int(self.counts.sum())

    def add(self, delays_ms: IntArray) -> None:
        """Count ``delays_ms`` (ms, >= 0); halve every count while the total exceeds the limit."""
        if len(delays_ms) == 0:
            return
        self.counts += np.bincount(_bins(delays_ms), minlength=N_BINS).astype(np.int64)
        while self.total > HISTORY_RECORDS:
            self.counts //= 2

    def merge(self, other: DelayHistogram) -> DelayHistogram:
        """The histogram of both streams of delays (counts added)."""
        return DelayHistogram(self.counts + other.counts)

    def sparse(self) -> list[list[int]]:
        """``[[bin, count], …]`` of the non-empty bins (how a snapshot stores it)."""
        nz = np.flatnonzero(self.counts)
        return [[int(i), int(self.counts[i])] for i in nz]

    @staticmethod
    def from_sparse(pairs: list[list[int]]) -> DelayHistogram:
        """Inverse of :meth:`sparse`.

        Raises:
            ValueError: A bin outside the layout or a negative count.
        """
        counts = np.zeros(N_BINS, dtype=np.int64)
        for b, c in pairs:
            if not 0 <= int(b) < N_BINS or int(c) < 0:
                msg = f"delay histogram entry [{b}, {c}] is outside {N_BINS} bins or negative"
                raise ValueError(msg)
            counts[int(b)] = int(c)
        return DelayHistogram(counts)

    def cdf_weights(self, full_ms: int, spread_ms: int) -> FloatArray:
        """Per-bin weights of the delay distribution, selection-corrected (module docstring).

        Args:
            full_ms: Delays at or beyond this are never accepted (``size + grace + delay``,
                or ``gap + grace + delay`` for sessions).
            spread_ms: Over how many ms below ``full_ms`` acceptance falls from 1 to 0 (the
                hopping advance, the tumbling size; 0 for sessions).
        """
        counts = self.counts.astype(np.float64)
        if not counts.any():
            counts = np.zeros(N_BINS)
            counts[0] = 1.0
        mid = (DELAY_EDGES_MS[:-1] + DELAY_EDGES_MS[1:]) / 2
        if spread_ms > 0:
            share = np.clip((full_ms - mid) / spread_ms, 0.0, 1.0)
        else:
            share = (mid < full_ms).astype(np.float64)
        return counts / np.maximum(share, MIN_ACCEPT_SHARE)


class _Cdf:
    """``G`` (the delay CDF) and ``H(x) = ∫_0^x G`` of per-bin weights, uniform within bins."""

    __slots__ = ("g", "h")

    def __init__(self, weights: FloatArray) -> None:
        g = np.concatenate(([0.0], np.cumsum(weights)))
        self.g: FloatArray = g / g[-1]
        width = np.diff(DELAY_EDGES_MS)
        self.h: FloatArray = np.concatenate(([0.0], np.cumsum(width * (self.g[:-1] + self.g[1:])
                                                              / 2)))

    def cdf(self, x: FloatArray) -> FloatArray:
        """``G(x)``: 0 below 0, 1 beyond the last edge."""
        return np.interp(x, DELAY_EDGES_MS, self.g, left=0.0, right=1.0)

    def integral(self, x: FloatArray) -> FloatArray:
        """``H(x) = ∫_0^x G(u) du`` (0 for ``x <= 0``)."""
        xc = np.clip(x, 0.0, DELAY_EDGES_MS[-1])
        k = np.minimum(np.searchsorted(DELAY_EDGES_MS, xc, side="right") - 1, N_BINS - 1)
        lo = DELAY_EDGES_MS[k]
        dx = xc - lo
        slope = (self.g[k + 1] - self.g[k]) / (DELAY_EDGES_MS[k + 1] - lo)
        inside = self.h[k] + dx * self.g[k] + 0.5 * dx * dx * slope
        out: npt.NDArray[np.float64] = inside + np.maximum(x - DELAY_EDGES_MS[-1], 0.0)
        return out


def fixed_completeness(hist: DelayHistogram, start_ms: IntArray, end_ms: IntArray, now_ms: int,
                       *, grace_ms: int, delay_ms: int, advance_ms: int) -> FloatArray:
    """Completeness of tumbling/hopping windows ``[start_ms, end_ms)`` at frontier ``now_ms``.

    ``advance_ms`` is the hopping advance (the size for tumbling). Returns values in [0, 1].
    Trace (every delay 0, grace 0): ``[0,10000)`` at ``now=2500`` → 0.25.
    """
    size = end_ms - start_ms
    reach = grace_ms + delay_ms
    full = int(size.max()) + reach if len(size) else reach
    cdf = _Cdf(hist.cdf_weights(full, advance_ms))
    m = np.minimum(float(now_ms), (end_ms + reach).astype(np.float64))
    num = cdf.integral(m - start_ms) - cdf.integral(m - end_ms)
    sizes, at = np.unique(size, return_inverse=True)  # one size for tumbling and hopping
    den = cdf.integral((sizes + reach).astype(np.float64)) - cdf.integral(
        np.full(len(sizes), reach, dtype=np.float64))
    return _ratio(num, den[at.reshape(-1)])


def session_completeness(hist: DelayHistogram, start_ms: IntArray, end_ms: IntArray,
                         now_ms: int, *, gap_ms: int, grace_ms: int,
                         delay_ms: int) -> FloatArray:
    """Completeness of sessions ``[start_ms, end_ms)`` (records in ``[start, end - gap]``).

    Each record is judged on its own span, so its cap is ``gap + grace + delay`` whatever its
    event time. A one-record session (``end - gap == start``) is ``G(min(now - start, cap)) /
    G(cap)``. Returns values in [0, 1].
    """
    cap = float(gap_ms + grace_ms + delay_ms)
    cdf = _Cdf(hist.cdf_weights(gap_ms + grace_ms + delay_ms, 0))
    s = start_ms.astype(np.float64)
    span = (end_ms - gap_ms - start_ms).astype(np.float64)
    m = float(now_ms)
    g_cap = float(cdf.cdf(np.array([cap]))[0])
    pivot = np.clip(m - cap, s, s + span)  # before it: every accepted record is in
    num = (pivot - s) * g_cap + cdf.integral(m - pivot) - cdf.integral(m - s - span)
    wide = span > 0
    point = cdf.cdf(np.minimum(m - s, cap))
    out = _ratio(np.where(wide, num, point), np.where(wide, span * g_cap, g_cap))
    return out


def _ratio(num: FloatArray, den: FloatArray) -> FloatArray:
    """``num / den`` clipped to [0, 1]; 1 where ``den <= 0`` (nothing left to wait for)."""
    safe = den > 0
    out = np.ones(len(num))
    out[safe] = num[safe] / den[safe]
    return np.clip(out, 0.0, 1.0)
