"""The engine's state: the key table, the table of open windows, and its snapshot.

State is one row per open (key, window), windows half-open ``[start, end)`` in epoch ms,
sorted by ``(key rank, start)``. It leaves the engine only as a snapshot: bytes of one Arrow
IPC stream (no pickled objects), stamped with a format version and a fingerprint of the config
that gives the state its meaning, so a changed window, grace, aggregate set or mode is refused
(:class:`~revise.errors.StateSchemaMismatch`) instead of silently reusing old state.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from revise.config import EngineConfig
from revise.engine.aggplan import (
    AggPlan,
    Sketches,
    concat_sketches,
    insert_sketches,
    take_sketches,
)
from revise.engine.batch import IntArray
from revise.errors import StateSchemaMismatch
from windows import AggregateSet, State, segment_starts
from windows.completeness import HISTOGRAM_TAG, DelayHistogram
from windows.sketches import EncodedSketch

__all__ = [
    "COMPRESS_ABOVE_BYTES",
    "INDEX_MAX_BYTES",
    "NO_SEAL",
    "LastEmitted",
    "SNAPSHOT_FORMAT",
    "KeyTable",
    "Snapshot",
    "WindowTable",
    "decode_snapshot",
    "encode_snapshot",
    "unique_sorted",
]

SNAPSHOT_FORMAT = 4
"""Version of the snapshot layout; bumped on any incompatible change.

2 added the sketch columns of ``FN(FIELD)`` aggregates; 4 the arrival-delay histogram the
revisions' ``completeness`` is learned from, and the last-emitted columns an emit policy keeps
(``last_*``, :class:`LastEmitted`). A format-1 or -2 snapshot (no policy, same columns
otherwise) is still read, under the same fingerprint check (which refuses it to an engine with
an emit policy), as having learned no delays yet."""

_READABLE_FORMATS = ("1", "2", str(SNAPSHOT_FORMAT))

_ZSTD_IPC = pa.ipc.IpcWriteOptions(compression="zstd")
_PLAIN_IPC = pa.ipc.IpcWriteOptions()
COMPRESS_ABOVE_BYTES = 64 * 1024
"""A snapshot whose columns hold more than this is zstd-compressed: ~3x fewer bytes through
Spark and into the state store (7.9 MB → 2.7 MB at 87k windows, +4 ms to write and read);
below it, zstd's fixed cost per buffer (~0.3 ms a snapshot) would outweigh the bytes saved.
Readers decompress on their own, so either form (and an earlier version's) reads."""

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
    table, and it searches the strings as before.
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


def state_config(config: EngineConfig, aggs: AggregateSet) -> dict[str, Any]:
    """What gives stored state its meaning: window, grace, aggregate tags, mode, emit policy.

    An emit policy adds ``"emit_policy": "on"`` (the state then holds each window's last
    emitted revision); its thresholds are not recorded: they may change on a restart.
    """
    out: dict[str, Any] = {"window": str(config.window), "grace_ms": config.grace_ms,
                           "aggs": list(aggs.tags), "mode": config.mode}
    if config.emit_policy is not None:
        out["emit_policy"] = "on"
    return out


def _fingerprint(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(slots=True)
class Snapshot:
    """An engine's whole state, as :func:`encode_snapshot` writes and :func:`decode_snapshot` reads.

    Attributes:
        keys: The key table (ranks of the keys of ``table``).
        table: The open windows.
        watermark_ms: The largest watermark the engine was given (ms).
        max_ts_ms: Max accepted event time so far (ms; -1: none).
        sealed_ms: Windows starting at or before this were closed by close_all (ms).
        delays: Arrival delays learned so far (``completeness``).
    """

    keys: KeyTable
    table: WindowTable
    watermark_ms: int
    max_ts_ms: int
    sealed_ms: int
    delays: DelayHistogram = field(default_factory=DelayHistogram)


def encode_snapshot(snap: Snapshot, config: dict[str, Any], aggs: AggregateSet) -> bytes:
    """The state as bytes: one Arrow IPC stream, no pickled objects.

    Layout: one record batch (zstd-compressed above :data:`COMPRESS_ABOVE_BYTES`), one row
    per open window, columns ``key`` (dictionary of the live keys, int32 indices), ``start``,
    ``end``, ``rev``, ``n_late``, ``max_late`` (int64) and one column per aggregate state column
    (``count`` int64, ``sum``/``min``/``max`` float64, …); schema metadata ``revise.format``
    (:data:`SNAPSHOT_FORMAT`), ``revise.fingerprint``, ``revise.config`` (JSON, ``config``),
    ``revise.watermark_ms``, ``revise.max_ts_ms``, ``revise.sealed_ms``, and the delay
    histogram: ``revise.delays`` (JSON ``[[bin, count], …]`` of its non-empty bins) under
    ``revise.delays.tag`` (:data:`~windows.completeness.HISTOGRAM_TAG`). Each sketch
    ``NAME`` (``q:FIELD``, ``d:FIELD``) adds ``sk_NAME_slots`` (large_list<int64>) and
    ``sk_NAME_values`` (large_list<int64>, uint8 for distinct), one list per window, and its
    version tag in ``revise.sketch.NAME``. Under an emit policy (:class:`LastEmitted`) the
    last emitted revision of each window follows: ``last_wm`` (int64 ms), ``last_col_C`` per
    state column and ``last_sk_NAME_slots`` / ``last_sk_NAME_values`` per sketch.
    """
    st = snap.table
    live = unique_sorted(st.key)
    idx = np.searchsorted(live, st.key).astype(np.int32)
    keys = pa.DictionaryArray.from_arrays(
        pa.array(idx, type=pa.int32()), pa.array(snap.keys.keys[live], type=pa.string()))
    arrays: list[pa.Array] = [keys]
    names = ["key"]
    for name in ("start", "end", "rev", "n_late", "max_late"):
        arrays.append(pa.array(getattr(st, name)))
        names.append(name)
    for c in aggs.columns:
        arrays.append(pa.array(st.cols[c.name]))
        names.append(f"col_{c.name}")
    meta: dict[str, str] = {}
    if isinstance(aggs, AggPlan):
        for name, t in st.sketches.items():
            enc = aggs.sketch(name).encode(t)
            offsets = pa.array(enc.offsets, type=pa.int64())
            arrays.append(pa.LargeListArray.from_arrays(offsets, pa.array(enc.slots)))
            arrays.append(pa.LargeListArray.from_arrays(offsets, pa.array(enc.values)))
            names += [f"sk_{name}_slots", f"sk_{name}_values"]
            meta[f"revise.sketch.{name}"] = enc.tag
    if st.last is not None:
        _encode_last(st.last, aggs, arrays, names)
    meta |= {
        "revise.format": str(SNAPSHOT_FORMAT),
        "revise.fingerprint": _fingerprint(config),
        "revise.config": json.dumps(config, sort_keys=True),
        "revise.watermark_ms": str(snap.watermark_ms),
        "revise.max_ts_ms": str(snap.max_ts_ms),
        "revise.sealed_ms": str(snap.sealed_ms),
        "revise.delays": json.dumps(snap.delays.sparse(), separators=(",", ":")),
        "revise.delays.tag": HISTOGRAM_TAG,
    }
    rb = pa.RecordBatch.from_arrays(arrays, names=names)
    rb = rb.replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    options = _ZSTD_IPC if rb.nbytes > COMPRESS_ABOVE_BYTES else _PLAIN_IPC
    with pa.ipc.new_stream(sink, rb.schema, options=options) as writer:
        writer.write_batch(rb)
    return bytes(sink.getvalue().to_pybytes())


def decode_snapshot(snapshot: bytes, config: dict[str, Any], aggs: AggregateSet) -> Snapshot:
    """Read what :func:`encode_snapshot` wrote, for an engine whose state config is ``config``.

    Raises:
        StateSchemaMismatch: The bytes are not a snapshot, have another format version, or
            were written under another state config.
    """
    try:
        table = pa.ipc.open_stream(pa.py_buffer(snapshot)).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        msg = f"engine snapshot is not a revise state snapshot ({e}); start from empty state"
        raise StateSchemaMismatch(msg) from e
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    fmt = meta.get("revise.format")
    if fmt not in _READABLE_FORMATS:
        msg = (
            f"engine snapshot has format {fmt!r}, this engine reads "
            f"{' and '.join(_READABLE_FORMATS)}; "
            "restart with a new checkpoint (or the revise version that wrote it)"
        )
        raise StateSchemaMismatch(msg)
    if meta.get("revise.fingerprint") != _fingerprint(config):
        msg = (
            f"engine snapshot was written for {meta.get('revise.config')}, this engine "
            f"runs {json.dumps(config, sort_keys=True)}; restart with the "
            "original --window/--grace/--aggs/--mode (and with an --emit-min-change or "
            "--emit-every exactly when the original had one), or with a new checkpoint and "
            "query id"
        )
        raise StateSchemaMismatch(msg)
    has_last = "last_wm" in table.column_names
    snap = Snapshot(KeyTable(), WindowTable.empty(aggs, last=has_last),
                    int(meta["revise.watermark_ms"]),
                    int(meta.get("revise.max_ts_ms", "-1")),
                    int(meta.get("revise.sealed_ms", str(NO_SEAL))), _decode_delays(meta))
    if table.num_rows == 0:
        return snap
    table = table.combine_chunks()
    key_col = table.column("key").chunk(0)
    snap.keys = KeyTable(np.asarray(key_col.dictionary.to_numpy(zero_copy_only=False),
                                    dtype=object))
    cols = {c.name: np.array(table.column(f"col_{c.name}").to_numpy(), dtype=c.dtype)
            for c in aggs.columns}

    def i64(name: str) -> IntArray:
        return np.array(table.column(name).to_numpy(), dtype=_I64)

    sketches = _decode_sketches(table, meta, aggs) if isinstance(aggs, AggPlan) else {}
    snap.table = WindowTable(np.asarray(key_col.indices.to_numpy(), dtype=_I64), i64("start"),
                             i64("end"), cols, i64("rev"), i64("n_late"), i64("max_late"),
                             sketches)
    if has_last:
        last_cols = {c.name: np.array(table.column(f"last_col_{c.name}").to_numpy(),
                                      dtype=c.dtype) for c in aggs.columns}
        last_sk = (_decode_sketches(table, meta, aggs, prefix="last_sk_")
                   if isinstance(aggs, AggPlan) else {})
        snap.table.last = LastEmitted(last_cols, last_sk, i64("last_wm"))
    return snap


def _encode_last(last: LastEmitted, aggs: AggregateSet, arrays: list[pa.Array],
                 names: list[str]) -> None:
    """Append the ``last_*`` columns of :func:`encode_snapshot` to ``arrays`` / ``names``."""
    arrays.append(pa.array(last.watermark_ms))
    names.append("last_wm")
    for c in aggs.columns:
        arrays.append(pa.array(last.cols[c.name]))
        names.append(f"last_col_{c.name}")
    if isinstance(aggs, AggPlan):
        for name, t in last.sketches.items():
            enc = aggs.sketch(name).encode(t)
            offsets = pa.array(enc.offsets, type=pa.int64())
            arrays.append(pa.LargeListArray.from_arrays(offsets, pa.array(enc.slots)))
            arrays.append(pa.LargeListArray.from_arrays(offsets, pa.array(enc.values)))
            names += [f"last_sk_{name}_slots", f"last_sk_{name}_values"]


def _decode_delays(meta: dict[str, str]) -> DelayHistogram:
    """The delay histogram of a snapshot (empty for formats 1 and 2, which had none).

    Raises:
        StateSchemaMismatch: It was written with another bin layout, or is corrupt.
    """
    if meta.get("revise.format") in ("1", "2"):
        return DelayHistogram()
    tag = meta.get("revise.delays.tag")
    if tag != HISTOGRAM_TAG:
        msg = (f"engine snapshot's delay histogram has tag {tag!r}, this engine reads "
               f"{HISTOGRAM_TAG!r}; restart with a new checkpoint (or the revise version that "
               "wrote it)")
        raise StateSchemaMismatch(msg)
    try:
        return DelayHistogram.from_sparse(json.loads(meta["revise.delays"]))
    except (KeyError, ValueError, TypeError) as e:
        msg = (f"engine snapshot's delay histogram cannot be read ({e}); restart with a new "
               "checkpoint (or the revise version that wrote it)")
        raise StateSchemaMismatch(msg) from e


def _decode_sketches(table: pa.Table, meta: dict[str, str], aggs: AggPlan,
                     prefix: str = "sk_") -> Sketches:
    """The sketch columns of a snapshot, checked by their kernels.

    Raises:
        StateSchemaMismatch: A sketch column is missing, has another tag, or is corrupt.
    """
    out: Sketches = {}
    for name in aggs.sketches:
        try:
            slots = table.column(f"{prefix}{name}_slots").chunk(0)
            values = table.column(f"{prefix}{name}_values").chunk(0)
            offsets = slots.offsets.to_numpy()
            lo, hi = int(offsets[0]), int(offsets[-1])
            enc = EncodedSketch(meta.get(f"revise.sketch.{name}", "?"), offsets - lo,
                                slots.values.to_numpy()[lo:hi], values.values.to_numpy()[lo:hi])
            out[name] = aggs.sketch(name).decode(enc)
        except (KeyError, ValueError) as e:
            msg = (f"engine snapshot's sketch {name!r} cannot be read ({e}); restart with a new "
                   "checkpoint (or the revise version that wrote it)")
            raise StateSchemaMismatch(msg) from e
    return out
