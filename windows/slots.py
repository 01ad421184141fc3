"""Slot tables: the variable-size state of sketches, many groups at once, in CSR form.

A *slot table* holds, for each of ``n`` groups (one group = one open window), a sorted run of
``(slot, value)`` pairs: ``offsets`` (int64, ``n + 1`` entries, ``offsets[0] == 0``) cuts the
flat ``slots`` (int64) and ``values`` arrays into groups, as an Arrow ``large_list`` does. Within a
group the slots are strictly increasing and no value is the identity of the reduction (0), so a
table is *canonical*: one multiset of contributions has exactly one table.

Values at equal ``(group, slot)`` combine by one associative, commutative integer ufunc
(``np.add`` for counts, ``np.maximum`` for ranks). Building a table is a sort by
``(group, slot)`` and a ``reduceat``; merging two tables is concatenation and the same build. On
integers these are exact, so any split of the contributions into parts, merged in any order,
gives identical arrays (the reproducibility the FINAL revision needs).

Trace (``np.add``): contributions ``g=[1, 0, 1] slot=[7, 3, 7] value=[1, 1, 1]`` for 2 groups
→ ``offsets=[0, 1, 2] slots=[3, 7] values=[1, 2]``.

State size: 8 bytes per slot plus the value's itemsize per entry, plus 8 bytes per group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

__all__ = ["EncodedSketch", "SlotTable", "build", "merge", "regroup"]

IntArray = npt.NDArray[np.int64]
_Kind = Literal["quicksort", "stable"]


@dataclass(frozen=True, slots=True)
class SlotTable:
    """Ragged ``(slot, value)`` pairs per group, CSR form (see the module docstring).

    Attributes:
        offsets: int64, ``len == n_groups + 1``; group ``g`` is ``[offsets[g], offsets[g+1])``.
        slots: int64 slot ids, strictly increasing within a group.
        values: Non-zero values (counts or ranks), same length as ``slots``.
    """

    offsets: IntArray
    slots: IntArray
    values: npt.NDArray[np.integer]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @staticmethod
    def empty(n: int, dtype: type[np.integer] = np.int64) -> SlotTable:
        """``n`` empty groups with values of ``dtype``."""
        return SlotTable(np.zeros(n + 1, dtype=np.int64), np.empty(0, dtype=np.int64),
                         np.empty(0, dtype=dtype))

    @property
    def lengths(self) -> IntArray:
        """Entries per group (int64, one per group)."""
        return np.diff(self.offsets)

    @property
    def nbytes(self) -> int:
        """Bytes held by the three arrays."""
        return int(self.offsets.nbytes + self.slots.nbytes + self.values.nbytes)

    def group_ids(self) -> IntArray:
        """The group of every entry (int64, non-decreasing)."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.lengths)

    def take(self, idx: npt.ArrayLike) -> SlotTable:
        """The groups ``idx`` (indices or a boolean mask), in that order; repeats allowed."""
        sel = np.arange(len(self), dtype=np.int64)[_index(idx)]
        lens = self.lengths[sel]
        offsets = np.zeros(len(sel) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        pos = np.repeat(self.offsets[:-1][sel] - offsets[:-1], lens)
        pos += np.arange(offsets[-1], dtype=np.int64)
        return SlotTable(offsets, self.slots[pos], self.values[pos])

    @staticmethod
    def concat(tables: Sequence[SlotTable]) -> SlotTable:
        """The groups of every table, one after another (at least one table)."""
        lens = np.concatenate([t.lengths for t in tables])
        offsets = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        return SlotTable(offsets, np.concatenate([t.slots for t in tables]),
                         np.concatenate([t.values for t in tables]))

    def insert(self, pos: npt.ArrayLike, new: SlotTable) -> SlotTable:
        """``new``'s groups inserted before positions ``pos``, like ``np.insert`` on a column."""
        n = len(self)
        order = np.insert(np.arange(n, dtype=np.int64), _index(pos),
                          np.arange(n, n + len(new), dtype=np.int64))
        return SlotTable.concat((self, new)).take(order)

    def replace(self, rows: npt.ArrayLike, new: SlotTable) -> SlotTable:
        """Groups ``rows`` (distinct indices) replaced by ``new``'s groups, in order."""
        n = len(self)
        order = np.arange(n, dtype=np.int64)
        order[_index(rows)] = np.arange(n, n + len(new), dtype=np.int64)
        return SlotTable.concat((self, new)).take(order)

    def check(self) -> None:
        """Check the canonical form (decoding stored state calls this).

        Raises:
            ValueError: Saying which invariant is broken.
        """
        o, s, v = self.offsets, self.slots, self.values
        problem = None
        if o.ndim != 1 or len(o) < 1 or o[0] != 0 or np.any(np.diff(o) < 0):
            problem = "offsets must start at 0 and never decrease"
        elif o[-1] != len(s) or len(s) != len(v):
            problem = f"offsets end at {o[-1]}, but there are {len(s)} slots and {len(v)} values"
        elif np.any(v == 0):
            problem = "a value is 0 (the identity), which a canonical table never stores"
        else:
            same_group = np.ones(len(s), dtype=bool)
            same_group[o[1:-1][o[1:-1] < len(s)]] = False
            if np.any((np.diff(s) <= 0) & same_group[1:]):
                problem = "slots are not strictly increasing within a group"
        if problem is not None:
            msg = f"slot table is not canonical: {problem}; the stored state is corrupt"
            raise ValueError(msg)


@dataclass(frozen=True, slots=True)
class EncodedSketch:
    """A sketch state as flat arrays plus a tag, for the engine's Arrow IPC snapshot.

    Attributes:
        tag: Sketch kind, version and parameters (``quantile:1:c35``); decoding checks it.
        offsets: int64, one more than the number of groups.
        slots: int64.
        values: int64 counts (quantile) or uint8 ranks (distinct).
    """

    tag: str
    offsets: npt.NDArray[np.int64]
    slots: npt.NDArray[np.int64]
    values: npt.NDArray[np.integer]

    @staticmethod
    def of(tag: str, state: SlotTable) -> EncodedSketch:
        """``state``'s own arrays (not copies) under ``tag``."""
        return EncodedSketch(tag, state.offsets, state.slots, state.values)

    def table(self, tag: str, what: str, value_dtype: type[np.integer]) -> SlotTable:
        """The checked state of these arrays, which must carry ``tag``.

        Raises:
            ValueError: If the tag differs (another sketch kind, version or parameters) or
                the arrays are not a well-formed slot table.
        """
        if self.tag != tag:
            msg = (f"stored {what} state has tag {self.tag!r}, this sketch is {tag!r}; "
                   "restart from a new checkpoint (or the version that wrote it)")
            raise ValueError(msg)
        t = SlotTable(np.asarray(self.offsets, dtype=np.int64),
                      np.asarray(self.slots, dtype=np.int64),
                      np.asarray(self.values, dtype=value_dtype))
        t.check()
        return t


def _index(idx: npt.ArrayLike) -> npt.NDArray[np.intp] | npt.NDArray[np.bool_]:
    """``idx`` as a boolean mask or intp indices (an empty list becomes empty indices)."""
    a = np.asarray(idx)
    return a if a.dtype == np.bool_ else a.astype(np.intp, copy=False)


def _sort_order(groups: IntArray, slots: IntArray, kind: _Kind) -> npt.NDArray[np.intp]:
    """Order by ``(group, slot)`` with one argsort of an int64 key.

    Small slot ranges (bucket ids) pack exactly into ``group * span + slot``. Wide ones (63-bit
    hashes) pack the group with the slot's top bits; equal keys then order arbitrarily, so when
    two different slots share a key (two hashes of one group agreeing in their top ~49 bits:
    rare) the order falls back to ``np.lexsort``.
    """
    lo, hi = int(slots.min()), int(slots.max())
    span = hi - lo + 1
    n_groups = int(groups.max()) + 1
    if span < 2**62 // max(n_groups, 1):
        return np.argsort(groups * span + (slots - lo), kind=kind)
    sbits = 63 - n_groups.bit_length()
    top = (slots.view(np.uint64) ^ np.uint64(2**63)) >> np.uint64(64 - sbits)  # order-preserving
    key = (groups << sbits) | top.astype(np.int64)
    o = np.argsort(key, kind=kind)
    k, s = key[o], slots[o]
    if np.any((k[1:] == k[:-1]) & (s[1:] != s[:-1])):
        return np.lexsort((slots, groups))
    return o


def build(groups: npt.ArrayLike, slots: npt.ArrayLike, values: npt.ArrayLike, n_groups: int,
          ufunc: np.ufunc, dtype: type[np.integer] = np.int64, *,
          runs: bool = False) -> SlotTable:
    """Canonical table of ``n_groups`` groups from unsorted contributions.

    Args:
        groups: Group of each contribution, ``0 <= g < n_groups``.
        slots: Slot of each contribution (int64).
        values: Non-zero value of each contribution.
        n_groups: Number of groups of the result (groups without contributions are empty).
        ufunc: Reduction of values at equal ``(group, slot)`` (``np.add`` or ``np.maximum``).
        dtype: Value dtype of the result.
        runs: The contributions are a few runs each sorted by ``(group, slot)`` (a merge of
            tables): a stable sort (timsort) then merges the runs in linear time.

    Returns:
        The table; its arrays are new (inputs are not modified).
    """
    g = np.asarray(groups, dtype=np.int64)
    s = np.asarray(slots, dtype=np.int64)
    v = np.asarray(values, dtype=dtype)
    if len(g) == 0:
        return SlotTable.empty(n_groups, dtype)
    o = _sort_order(g, s, "stable" if runs else "quicksort")
    g, s, v = g[o], s[o], v[o]
    change = np.empty(len(g), dtype=bool)
    change[0] = True
    np.not_equal(g[1:], g[:-1], out=change[1:])
    change[1:] |= s[1:] != s[:-1]
    starts = np.flatnonzero(change)
    if len(starts) < len(g):
        v = ufunc.reduceat(v, starts)
        g, s = g[starts], s[starts]
    offsets = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(g, minlength=n_groups), out=offsets[1:])
    return SlotTable(offsets, s, v.astype(dtype, copy=False))


def merge(a: SlotTable, b: SlotTable, ufunc: np.ufunc) -> SlotTable:
    """Group-wise merge of two tables with the same number of groups.

    Exact, associative and commutative: the result depends only on the multiset of
    contributions.

    Raises:
        ValueError: If the tables have different numbers of groups.
    """
    if len(a) != len(b):
        msg = f"cannot merge slot tables of {len(a)} and {len(b)} groups; expected equal counts"
        raise ValueError(msg)
    return build(np.concatenate((a.group_ids(), b.group_ids())),
                 np.concatenate((a.slots, b.slots)), np.concatenate((a.values, b.values)),
                 len(a), ufunc, a.values.dtype.type, runs=True)


def regroup(t: SlotTable, target: npt.ArrayLike, n_out: int, ufunc: np.ufunc) -> SlotTable:
    """Merge group ``i`` into output group ``target[i]`` of ``n_out`` (session merges).

    Output groups that no input group maps to are empty.
    """
    tgt = np.asarray(target, dtype=np.int64)
    return build(tgt[t.group_ids()], t.slots, t.values, n_out, ufunc, t.values.dtype.type)
