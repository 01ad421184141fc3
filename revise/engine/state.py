"""The engine's state: the key table and the table of open windows.

State is one row per open (key, window), windows half-open ``[start, end)`` in epoch ms,
sorted by ``(key rank, start)``. It leaves the engine only as a snapshot
(:mod:`revise.engine.snapshot`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from revise.engine.aggplan import (
    AggPlan,
    Sketches,
    concat_sketches,
    insert_sketches,
    take_sketches,
)
from revise.engine.batch import IntArray
from windows import AggregateSet, State, segment_starts

__all__ = [
    "INDEX_MAX_BYTES",
    "NO_SEAL",
    "KeyTable",
    "LastEmitted",
    "WindowTable",
    "unique_sorted",
]

INDEX_MAX_BYTES = 64
"""Keys up to this long in UTF-8 are also held as fixed-width bytes (:class:`KeyTable`); a
longer one would make every key that wide."""

NO_SEAL = -(2**62)
"""The seal before any close_all (hopping windows may start below 0)."""

_I64 = np.int64


class KeyTable:
    """Sorted unique keys; a key's rank is its code, so sorting by code sorts by key text.

    Beside the keys (Python strings) the table keeps them as fixed-width UTF-8 bytes when it
    can: numpy searches and sorts those with ``memcmp``, ~30x faster than comparing Python
    strings one call at a time, in the same order (UTF-8 byte order is code point order,
    which is Python's). Keys it cannot hold that way (longer than :data:`INDEX_MAX_BYTES`
    in UTF-8, or ending in NUL, which fixed-width bytes drop) turn the bytes off for the
    table, and it searches the strings themselves.
    """

    __slots__ = ("_index", "_indexable", "keys")

    def __init__(self, keys: npt.NDArray[np.object_] | None = None) -> None:
        self.keys: npt.NDArray[np.object_] = (
            np.empty(0, dtype=object) if keys is None else keys
        )
        self._index: npt.NDArray[np.bytes_] | None = None  # keys as UTF-8, built on first use
        self._indexable = True

    def __len__(self) -> int:
        return len(self.keys)

    def encode(self, keys: npt.NDArray[np.object_]) -> tuple[IntArray, IntArray | None]:
        """Ranks of ``keys``, adding new ones; also the old→new rank map when ranks moved.

        Work follows the batch, not the table: the batch's distinct keys (hashed, then sorted)
        are found in the sorted table by binary search (``O(b log K)`` comparisons), and new
        ones are merged in at their sorted positions; the table is neither hashed nor
        re-sorted. Trace: table ``[a, c]``, batch ``[c, b, c]`` → table ``[a, b, c]``, ranks
        ``[2, 1, 2]``, old→new ``[0, 2]``.
        """
        # Hashing, cheap when keys repeat. Arrow's, not pandas': pandas' hash table reads a
        # string up to its first NUL, so "a" and "a\0b" were one key.
        encoded = pc.dictionary_encode(pa.array(keys, pa.string()))
        codes = encoded.indices.to_numpy()
        distinct = encoded.dictionary
        first_bytes = self._utf8(distinct) if self._indexable else None
        index = self._index_for(first_bytes)
        old = self.keys
        uniq_bytes: npt.NDArray[np.bytes_] | None = None  # set when the bytes are searched
        if index is not None and first_bytes is not None:
            order = np.argsort(first_bytes, kind="stable")
            uniq_bytes = first_bytes[order]
            pos = np.searchsorted(index, uniq_bytes).astype(_I64)
            found = pos < len(old)
            found[found] = index[pos[found]] == uniq_bytes[found]
        else:
            first_seen = distinct.to_numpy(zero_copy_only=False)
            order = np.argsort(first_seen, kind="stable")
            uniq = first_seen[order]
            pos = np.searchsorted(old, uniq).astype(_I64)
            found = pos < len(old)
            found[found] = old[pos[found]] == uniq[found]
        sorted_code = np.empty(len(order), dtype=_I64)
        sorted_code[order] = np.arange(len(order), dtype=_I64)
        inverse = sorted_code[codes]
        if found.all():
            return pos[inverse], None
        # Python strings only for the keys the table did not have.
        new = distinct.take(pa.array(order[~found])).to_numpy(zero_copy_only=False)
        at = pos[~found]  # insertion points into the old table, sorted
        self.keys = np.insert(old, at, new)
        if index is not None and uniq_bytes is not None:
            self._index = np.insert(index, at, uniq_bytes[~found])
        # old rank i moves up by the number of new keys inserted at or before it
        old_ranks = np.arange(len(old), dtype=_I64)
        old_to_new = old_ranks + np.searchsorted(at, old_ranks, side="right")
        ranks = np.empty(len(order), dtype=_I64)
        ranks[found] = old_to_new[pos[found]]
        ranks[~found] = at + np.arange(len(new), dtype=_I64)
        return ranks[inverse], old_to_new if len(old) else None

    def compact(self, live: IntArray) -> IntArray:
        """Keep only ranks in sorted unique ``live``; returns the old→new rank map."""
        remap = np.full(len(self.keys), -1, dtype=_I64)
        remap[live] = np.arange(len(live), dtype=_I64)
        self.keys = self.keys[live]
        if self._index is not None:
            self._index = self._index[live]
        return remap

    def _index_for(
        self, batch: npt.NDArray[np.bytes_] | None
    ) -> npt.NDArray[np.bytes_] | None:
        """The table's keys as bytes at least as wide as ``batch``'s (None: search strings).

        Built from the keys the first time (after a restore: once), widened when a longer key
        comes; ``batch`` None (keys the bytes cannot hold) turns the bytes off for good.
        """
        if batch is None:
            self._indexable, self._index = False, None
            return None
        if self._index is None:
            self._index = self._utf8(pa.array(self.keys, pa.string()))
            if self._index is None:
                self._indexable = False
                return None
        if batch.dtype.itemsize > self._index.dtype.itemsize:
            self._index = self._index.astype(batch.dtype)
        return self._index

    @staticmethod
    def _utf8(text: pa.StringArray) -> npt.NDArray[np.bytes_] | None:
        """``text`` as fixed-width UTF-8 bytes, or None if one is too long or ends in NUL."""
        if len(text) and pc.any(pc.ends_with(text, "\x00")).as_py():
            return None
        return _fixed_width(text, INDEX_MAX_BYTES)


def _fixed_width(text: pa.StringArray, max_width: int) -> npt.NDArray[np.bytes_] | None:
    """``text``'s UTF-8 bytes as one NUL-padded ``S<width>`` array, without Python objects.

    Each string's bytes are scattered from Arrow's data buffer into its row of a zeroed
    ``(n, width)`` byte matrix, which numpy then reads as ``n`` fixed-width strings. None when
    a string is longer than ``max_width`` bytes.
    """
    n = len(text)
    offsets = np.frombuffer(text.buffers()[1], dtype=np.int32)[text.offset:text.offset + n + 1]
    lengths = np.diff(offsets)
    width = max(int(lengths.max()) if n else 1, 1)
    if width > max_width:
        return None
    out = np.zeros((n, width), dtype=np.uint8)
    total = int(offsets[-1] - offsets[0]) if n else 0
    if total:
        data = np.frombuffer(text.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
        rows = np.repeat(np.arange(n), lengths)
        cols = np.arange(total) - np.repeat(offsets[:-1] - offsets[0], lengths)
        out[rows, cols] = data
    return out.view(f"S{width}").reshape(n)


@dataclass(slots=True)
class LastEmitted:
    """Per open window, its last *emitted* revision: kept only under an emit policy.

    Attributes:
        cols: Aggregate state columns of that revision (the ``prev_*`` of the next one).
        sketches: Sketch states of that revision.
        watermark_ms: The watermark of the micro-batch that emitted it (ms).
    """

    cols: State
    sketches: Sketches
    watermark_ms: IntArray

    @staticmethod
    def of(table: WindowTable, watermark_ms: int) -> LastEmitted:
        """``table``'s current state (copied) as emitted at ``watermark_ms``."""
        return LastEmitted({c: a.copy() for c, a in table.cols.items()},
                           take_sketches(table.sketches, np.arange(len(table))),
                           np.full(len(table), watermark_ms, dtype=_I64))

    def take(self, idx: npt.NDArray[Any]) -> LastEmitted:
        """The rows ``idx`` (positions or a mask), as a copy."""
        return LastEmitted({c: a[idx] for c, a in self.cols.items()},
                           take_sketches(self.sketches, idx), self.watermark_ms[idx])

    def concat(self, b: LastEmitted) -> LastEmitted:
        """The rows of ``self`` then those of ``b``."""
        return LastEmitted({c: np.concatenate((a, b.cols[c])) for c, a in self.cols.items()},
                           concat_sketches(self.sketches, b.sketches),
                           np.concatenate((self.watermark_ms, b.watermark_ms)))

    def insert(self, pos: npt.NDArray[np.intp], new: LastEmitted) -> LastEmitted:
        """A copy with ``new``'s rows inserted before positions ``pos`` (as ``np.insert``)."""
        return LastEmitted({c: np.insert(a, pos, new.cols[c]) for c, a in self.cols.items()},
                           insert_sketches(self.sketches, pos, new.sketches),
                           np.insert(self.watermark_ms, pos, new.watermark_ms))


def _joined(a: LastEmitted | None, b: LastEmitted | None,
            join: Callable[[LastEmitted, LastEmitted], LastEmitted]) -> LastEmitted | None:
    """``join(a, b)``; None when neither table keeps a :class:`LastEmitted` (no emit policy)."""
    if a is None and b is None:
        return None
    if a is None or b is None:
        msg = "under an emit policy every window table keeps its windows' last emitted revision"
        raise ValueError(msg)
    return join(a, b)


@dataclass(slots=True)
class WindowTable:
    """Open windows, one row each, sorted by ``(key, start)``; arrays owned by the engine.

    Attributes:
        key: Key rank (a code into the engine's :class:`KeyTable`).
        start: Window start, epoch ms (inclusive).
        end: Window end, epoch ms (exclusive).
        cols: Aggregate state columns by name (e.g. ``count``, ``sum``).
        rev: Revisions emitted so far, which is the next revision number.
        n_late: Accepted records that arrived when the watermark was already >= end.
        max_late: Largest ``watermark - ts`` (ms) among those late records (0 if none).
        sketches: Sketch states by name (one group per row; empty without pNN and distinct).
        last: Each window's last emitted revision (only under an emit policy, else None).
    """

    key: IntArray
    start: IntArray
    end: IntArray
    cols: State
    rev: IntArray  # revisions emitted so far = the next revision number
    n_late: IntArray
    max_late: IntArray
    sketches: Sketches = field(default_factory=dict)
    last: LastEmitted | None = None

    def __len__(self) -> int:
        return len(self.key)

    @staticmethod
    def empty(aggs: AggregateSet, *, last: bool = False) -> WindowTable:
        """A table with no windows and ``aggs``' state columns (and sketches of an AggPlan).

        ``last``: keep each window's last emitted revision (:class:`LastEmitted`).
        """
        z = np.empty(0, dtype=_I64)
        sk = aggs.empty_sketches(0) if isinstance(aggs, AggPlan) else {}
        table = WindowTable(z, z.copy(), z.copy(), aggs.empty(0), z.copy(), z.copy(), z.copy(),
                            sk)
        if last:
            table.last = LastEmitted.of(table, 0)
        return table

    def take(self, idx: npt.NDArray[Any]) -> WindowTable:
        """The rows ``idx`` (positions or a mask), as a copy."""
        return WindowTable(self.key[idx], self.start[idx], self.end[idx],
                      {c: a[idx] for c, a in self.cols.items()}, self.rev[idx],
                      self.n_late[idx], self.max_late[idx], take_sketches(self.sketches, idx),
                      None if self.last is None else self.last.take(idx))

    @staticmethod
    def concat(a: WindowTable, b: WindowTable) -> WindowTable:
        """The rows of ``a`` then those of ``b``."""
        return WindowTable(np.concatenate((a.key, b.key)), np.concatenate((a.start, b.start)),
                      np.concatenate((a.end, b.end)),
                      {c: np.concatenate((a.cols[c], b.cols[c])) for c in a.cols},
                      np.concatenate((a.rev, b.rev)), np.concatenate((a.n_late, b.n_late)),
                      np.concatenate((a.max_late, b.max_late)),
                      concat_sketches(a.sketches, b.sketches),
                      _joined(a.last, b.last, LastEmitted.concat))

    def insert(self, pos: npt.NDArray[np.intp], new: WindowTable) -> WindowTable:
        """A copy with ``new``'s rows inserted before positions ``pos`` (as ``np.insert``)."""
        return WindowTable(np.insert(self.key, pos, new.key), np.insert(self.start, pos, new.start),
                      np.insert(self.end, pos, new.end),
                      {c: np.insert(a, pos, new.cols[c]) for c, a in self.cols.items()},
                      np.insert(self.rev, pos, new.rev), np.insert(self.n_late, pos, new.n_late),
                      np.insert(self.max_late, pos, new.max_late),
                      insert_sketches(self.sketches, pos, new.sketches),
                      _joined(self.last, new.last, lambda x, y: x.insert(pos, y)))



def unique_sorted(a: IntArray) -> IntArray:
    """Unique values of an already sorted array."""
    if len(a) == 0:
        return a
    return a[segment_starts(a)]
