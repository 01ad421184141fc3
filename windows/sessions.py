"""Session merging: per key, half-open spans ``[start_ms, end_ms)`` that overlap become one.

A record at ``ts`` spans ``[ts, ts + gap_ms)``; a session is ``[first ts, last ts + gap_ms)``.
Spans that only touch do not merge: ``[0,10)`` and ``[10,20)`` stay two sessions. A span that
overlaps two sessions bridges them into one.

Trace (gap=10): spans ``[0,10) [5,15) [15,25)`` → sessions ``[0,15)`` and ``[15,25)``;
adding ``[12,22)`` bridges them → ``[0,25)``.

Everything is vectorized: a segmented running maximum of span ends (times taken relative to
each key's first start and lifted per key, so many keys fit in one int64 scan) decides where a
new session begins.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["merge_spans"]


def merge_spans(
    key: npt.NDArray[np.int64], start_ms: npt.NDArray[np.int64], end_ms: npt.NDArray[np.int64]
) -> npt.NDArray[np.intp]:
    """Session id (0, 1, 2, ... in input order) of each span.

    Args:
        key: Integer key of each span; input must be sorted by ``(key, start_ms)``.
        start_ms: Span starts, int64 epoch ms (inclusive).
        end_ms: Span ends, int64 epoch ms (exclusive), ``end_ms > start_ms``.

    Returns:
        For each span the index of its merged session; a new session starts at a key change or
        where ``start_ms >= max(end_ms of the earlier spans of the same key)``.
    """
    n = len(key)
    if n == 0:
        return np.empty(0, dtype=np.intp)
    key_change = np.empty(n, dtype=bool)
    key_change[0] = True
    key_change[1:] = key[1:] != key[:-1]
    key_seq = np.cumsum(key_change) - 1
    # Times relative to the first start of their key, lifted by key_seq * width so one running
    # maximum over all keys never carries an end across a key change.
    base = start_ms[np.flatnonzero(key_change)][key_seq]
    r_start = start_ms - base
    r_end = end_ms - base
    width = int(r_end.max()) + 1
    if width * (int(key_seq[-1]) + 1) >= 2**62:
        # Rare (very long spans per key): rank all times so the packing always fits.
        times = np.unique(np.concatenate((r_start, r_end)))
        r_start = np.searchsorted(times, r_start).astype(np.int64)
        r_end = np.searchsorted(times, r_end).astype(np.int64)
        width = len(times) + 1
    lift = key_seq * np.int64(width)
    packed_end = np.maximum.accumulate(lift + r_end)
    new = key_change.copy()
    new[1:] |= lift[1:] + r_start[1:] >= packed_end[:-1]
    return (np.cumsum(new) - 1).astype(np.intp)
