"""Percentiles with a relative-error guarantee: a DDSketch-style log-bucket sketch per group.

Each value ``x`` falls in a bucket whose bounds ``(lo, hi]`` satisfy ``hi / lo <= gamma`` with
``gamma = (1 + a) / (1 - a)`` (``a`` = relative accuracy, 0.01 by default); a bucket's
representative ``2 lo hi / (lo + hi)`` is then within ``a`` of every value in it. The state of a
group is a count per bucket, held for many groups at once in a :class:`~windows.slots.SlotTable`
reduced by ``np.add``: integer counts, so merging micro-batches or sessions is exact, and a FINAL
equals the sketch built in one pass over the same values whatever the order and split.

Bucket index: ``x = (1 + s) 2^E`` with ``s`` in ``[0, 1)`` (from ``np.frexp``, exact), and the
index is ``ceil(c * (E + P(s)))`` where ``P(s) = (6/35) s^3 - (3/5) s^2 + (10/7) s`` approximates
``log2(1 + s)`` (the cubic interpolation of DDSketch). Only IEEE ``+ * /`` and ``ceil`` are
used, so the index of a value is bit-identical on every platform (``np.log`` may differ by an
ulp between libms). ``d log2(x) / dL <= 7 / (10 ln 2)`` (at ``s = 0``), so ``c = ceil(7 / (10 ln
gamma))`` buckets per unit of ``L`` keep ``hi / lo <= gamma``: 35 for ``a = 0.01``, 1 % more
buckets than an exact log mapping.

Slots: 0 is the zero bucket (``x == 0``, also ``-0.0``); ``k + OFFSET`` (``OFFSET = 2**17``)
for ``x > 0``; ``-(k + OFFSET)`` for ``x < 0``. Ascending slots are ascending values, so a
percentile is a cumulative-count walk over each group's sorted slots.

Rank definition: the ``p``-th percentile of ``n`` values is the ``r``-th smallest value with
``r = max(1, ceil(p * n / 100))`` computed in integers -- numpy's ``method="inverted_cdf"``
(which computes ``p / 100 * n`` in floating point, so it can pick ``r + 1`` when ``p * n / 100``
is an integer). The result is within ``a`` relative error of that value (same sign; 0 is exact)
for normal floats; subnormals (``|x| < 2.2e-308``) are bucketed but a float64 cannot represent
every representative, so they may miss the bound.

State size per window: 16 bytes per non-empty bucket (int64 slot + int64 count) and 8 bytes of
offset. Values spanning a ratio ``R`` (max / min magnitude) need at most about
``35 * log2(R) + 1`` buckets per sign: latencies from 1 ms to 60 s (``R = 6e4``) -> at most
~560 buckets = 9 KiB; a window's buckets never exceed its record count.

Trace (p50 of ``[1, 2, 3]``): slots of 1, 2, 3 -> counts 1 each; rank ``ceil(50 * 3 / 100) = 2``
-> bucket of 2 -> ``2.00...`` (within 1 %).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from windows.slots import EncodedSketch, SlotTable, build, merge, regroup

__all__ = ["OFFSET", "EncodedSketch", "QuantileSketch", "percentile_rank"]

OFFSET = 2**17
"""Added to a bucket index to make positive slots > 0 (indices lie in about ±54,000)."""

_A, _B, _C = 6.0 / 35.0, -3.0 / 5.0, 10.0 / 7.0
_MAX = np.finfo(np.float64).max


def percentile_rank(percent: int, n: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """1-based rank of the ``percent``-th percentile (0-100) among ``n`` values.

    ``max(1, ceil(percent * n / 100))`` in exact integer arithmetic.
    """
    r = (np.int64(percent) * n + 99) // 100
    ranks: npt.NDArray[np.int64] = np.maximum(r, 1)
    return ranks


def _poly(s: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return ((_A * s + _B) * s + _C) * s


def _inverse(level: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """The magnitude ``x`` with ``E + P(s) == level`` (Newton on the monotone cubic)."""
    e = np.floor(level)
    t = level - e
    s = t.copy()
    for _ in range(8):  # quadratic convergence from s = t; 8 steps reach machine precision
        s -= (_poly(s) - t) / ((3.0 * _A * s + 2.0 * _B) * s + _C)
        np.clip(s, 0.0, 1.0, out=s)
    with np.errstate(over="ignore"):
        x = np.ldexp(1.0 + s, e.astype(np.int32))
    return np.minimum(x, _MAX)


@dataclass(frozen=True, slots=True)
class QuantileSketch:
    """Percentile sketch kernels over slot tables (one group per window).

    Attributes:
        relative_accuracy: ``a``: every percentile is within ``a`` relative error (0 < a < 1).
        version: Bumped whenever the meaning of the stored state changes.
    """

    relative_accuracy: float = 0.01
    version: int = 1

    def __post_init__(self) -> None:
        if not 0.0 < self.relative_accuracy < 1.0:
            msg = (f"relative_accuracy must be in (0, 1), got {self.relative_accuracy}; "
                   "use e.g. 0.01 for 1 %")
            raise ValueError(msg)

    @property
    def multiplier(self) -> int:
        """Buckets per unit of the interpolated log2 (35 for ``a = 0.01``)."""
        gamma = (1.0 + self.relative_accuracy) / (1.0 - self.relative_accuracy)
        return math.ceil(7.0 / (10.0 * math.log(gamma)))

    @property
    def tag(self) -> str:
        """``quantile:<version>:c<multiplier>``, stored with the state."""
        return f"quantile:{self.version}:c{self.multiplier}"

    def empty(self, n: int) -> SlotTable:
        """State of ``n`` empty groups."""
        return SlotTable.empty(n, np.int64)

    def slots_of(self, values: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Slot of each value (int64; see the module docstring).

        Raises:
            ValueError: If a value is NaN or infinite.
        """
        v = np.asarray(values, dtype=np.float64)
        if not np.isfinite(v).all():
            bad = v[~np.isfinite(v)][0]
            msg = (f"percentile values must be finite, got {bad}; drop or dead-letter "
                   "non-finite values before the sketch")
            raise ValueError(msg)
        frac, exp = np.frexp(np.abs(v))
        level = _poly(2.0 * frac - 1.0) + (exp - 1).astype(np.float64)
        k = np.ceil(level * float(self.multiplier)).astype(np.int64) + OFFSET
        return np.where(v > 0, k, np.where(v < 0, -k, 0))

    def from_values(self, values: npt.ArrayLike, groups: npt.ArrayLike, n: int) -> SlotTable:
        """State of ``n`` groups holding ``values[i]`` in group ``groups[i]``."""
        s = self.slots_of(values)
        return build(groups, s, np.ones(len(s), dtype=np.int64), n, np.add, np.int64)

    def update(self, state: SlotTable, values: npt.ArrayLike, groups: npt.ArrayLike) -> SlotTable:
        """``state`` with ``values[i]`` added to group ``groups[i]`` (inputs unchanged)."""
        return self.merge(state, self.from_values(values, groups, len(state)))

    def merge(self, a: SlotTable, b: SlotTable) -> SlotTable:
        """Group-wise merge (exact, associative, commutative)."""
        return merge(a, b, np.add)

    def merge_into(self, state: SlotTable, rows: npt.ArrayLike, part: SlotTable) -> SlotTable:
        """``state`` with ``part``'s groups merged into groups ``rows`` (distinct indices).

        Only those groups are re-sorted; the rest are copied (the engine's micro-batch step).
        """
        return state.replace(rows, self.merge(state.take(rows), part))

    def regroup(self, state: SlotTable, target: npt.ArrayLike, n_out: int) -> SlotTable:
        """Merge group ``i`` into group ``target[i]`` of ``n_out`` (session merges)."""
        return regroup(state, target, n_out, np.add)

    def counts(self, state: SlotTable) -> npt.NDArray[np.int64]:
        """Number of values per group."""
        cs = np.concatenate(([0], np.cumsum(state.values, dtype=np.int64)))
        return cs[state.offsets[1:]] - cs[state.offsets[:-1]]

    def representative(self, slots: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Value reported for each slot: within ``a`` of every value that maps to it."""
        s = np.asarray(slots, dtype=np.int64)
        k = (np.abs(s) - OFFSET).astype(np.float64)
        c = float(self.multiplier)
        lo, hi = _inverse((k - 1.0) / c), _inverse(k / c)
        with np.errstate(invalid="ignore", divide="ignore"):  # slot 0 (zero) is masked below
            rep = lo * (2.0 / (1.0 + lo / hi))
        return np.where(s > 0, rep, np.where(s < 0, -rep, 0.0))

    def quantile(self, state: SlotTable, percent: int) -> npt.NDArray[np.float64]:
        """The ``percent``-th percentile of every group (float64; NaN for an empty group).

        Vectorised over groups: one cumulative sum of counts, one ``searchsorted``.

        Raises:
            ValueError: If ``percent`` is not an integer in 0-100.
        """
        if isinstance(percent, bool) or not isinstance(percent, int | np.integer) \
                or not 0 <= percent <= 100:
            msg = f"percent must be an integer in 0-100 (p99 -> 99), got {percent!r}"
            raise ValueError(msg)
        n = self.counts(state)
        out = np.full(len(n), np.nan)
        live = np.flatnonzero(n > 0)
        if len(live) == 0:
            return out
        cs = np.cumsum(state.values, dtype=np.int64)
        before = np.concatenate(([0], cs))[state.offsets[live]]
        at = np.searchsorted(cs, before + percentile_rank(percent, n[live]), side="left")
        out[live] = self.representative(state.slots[at])
        return out

    def encode(self, state: SlotTable) -> EncodedSketch:
        """Flat arrays plus tag (the arrays are the state's own, not copies)."""
        return EncodedSketch.of(self.tag, state)

    def decode(self, enc: EncodedSketch) -> SlotTable:
        """The state of :meth:`encode`'s output, checked.

        Raises:
            ValueError: If the tag is not this sketch's or the arrays are not a canonical state.
        """
        t = enc.table(self.tag, "percentile", np.int64)
        if np.any(t.values < 0):
            msg = "stored percentile state has a negative count; the stored state is corrupt"
            raise ValueError(msg)
        return t
