"""The revision engine: micro-batches of records in, numbered revisions and too-late records out.

Pure numpy (+ pandas hashing, pyarrow for snapshots); no Spark, Kafka or Delta. Implements
SPEC §3–4. Times are int64 epoch ms; windows are half-open ``[window_start_ms, window_end_ms)``.
The caller supplies the watermark ``W`` in force for each micro-batch (Spark's global watermark,
or :class:`windows.WatermarkTracker` locally); the engine never reads a clock (``now_ms`` is
injected) and never computes the watermark itself.

Per ``process(batch, watermark_ms=W)``:

1. Every record is assigned to its window(s). A (record, window) with
   ``W >= window_end + grace`` is *too late*: it becomes a :class:`~revise.records.LateRecord`
   (``lateness_ms = W - ts``, reason ``"window closed"``) and changes nothing. Hopping records
   are judged per window. Otherwise it is accepted and updates the window; it counts as *late*
   (``n_late``, ``max_lateness_ms = max(W - ts)``) when ``W >= window_end``.
2. Revision mode: every window touched by the batch emits one revision, numbered densely per
   window from 0, ``timing`` EARLY if ``W < end`` else LATE, ``prev_*`` = the values of the
   window's previous revision (null at revision 0).
3. Every open window with ``W >= end + grace`` closes: exactly one FINAL revision
   (``is_final``, also when nothing changed), then its state is dropped. A window accepted in
   this batch cannot close in it (it was accepted because ``W < end + grace``); if it did, only
   its FINAL would be emitted. Watermark mode emits only these FINALs, with ``revision = 0``
   and ``prev_*`` null.

Output rows are sorted by ``(key, window_start_ms, window_end_ms)``; late rows by ``(key,
window_start_ms, window_end_ms, ts_ms, partition, offset, value)``. Within a window the
batch's records are reduced in value order, so aggregates (even float sums) do not depend on
the order of records within a batch: the same batches give bit-identical revisions.

Timeline (tumbling 10s, grace 5s; ``W`` = watermark of the batch)::

    batch 0 W=0      t=1200           → rev 0 of [0,10000) count=1 (EARLY)
    batch 1 W=1200   t=12000          → rev 0 of [10000,20000) count=1 (EARLY)
    batch 2 W=12000  t=9000 (late)    → rev 1 of [0,10000) count=2 n_late=1 (LATE)
    batch 3 W=12000  t=30000          → rev 0 of [30000,40000) count=1 (EARLY)
    batch 4 W=30000  t=2000           → too late (W >= 10000+5000): LateRecord lateness=28000
                                       → rev 2 of [0,10000) FINAL count=2
                                       → rev 1 of [10000,20000) FINAL count=1

Sessions (per key, gap ``G``): each record spans ``[ts, ts+G)``; overlapping spans merge
(touching ones do not); a session is ``[first ts, last ts + G)``. A record is too late when
``W >= ts + G + grace`` (judged on its own span; its LateRecord carries ``[ts, ts+G)``), and
late (``n_late``) when ``W >= ts + G``. Within a batch the accepted records are merged first
and windows close after, so a record can still extend a session whose end + grace the batch's
watermark has passed (as in Spark's session windows); a record that overlaps a session closed
in an *earlier* batch starts a new session (the closed one stays final).

**Retraction rule**: when a batch changes the bounds of a session that was emitted before
(extension, or a bridge merging several),

* each old bounds gets one last revision with ``retracted=True``, numbered with its lineage's
  next number ``r_i``, carrying its unchanged values (``prev_*`` = the same values) and the
  ``timing`` of the new bounds' revision (EARLY if ``W < new end`` else LATE: a record may
  extend a session in the very batch whose watermark would have closed it, so the old
  bounds' own end can already be ``<= W - grace``);
* the new bounds' revision is numbered ``max(r_i) + 1`` and its ``prev_*`` hold the merge of
  the old sessions' values (so ``count - prev_count`` is the number of records the batch
  added); later revisions of the new bounds continue densely from there.

Sessions created in this batch count as never emitted: merging them retracts nothing. Because
a lineage's bounds only grow, ``(query_id, key, start, end, revision)`` stays unique. In
watermark mode nothing is emitted before the FINAL, so nothing is retracted.

Session timeline (gap 10s, grace 0; ``rev`` numbers per bounds)::

    batch 0 W=0      t=0, t=30000     → [0,10000) rev 0, [30000,40000) rev 0
    batch 1 W=0      t=15000          → [15000,25000) rev 0
    batch 2 W=0      t=8000 (bridge)  → [0,10000) rev 1 retracted, [15000,25000) rev 1
                                        retracted, [0,25000) rev 2 count=3 prev_count=2
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

from revise.config import EngineConfig
from revise.errors import ReviseError, StateSchemaMismatch
from revise.records import AGG_FIELDS, LateBatch, RevisionBatch
from windows import (
    AggregateSet,
    HoppingAssigner,
    State,
    TumblingAssigner,
    WindowAssigner,
    merge_spans,
    segment_starts,
)

__all__ = [
    "SNAPSHOT_FORMAT",
    "BatchOutput",
    "Engine",
    "InputBatch",
    "InvalidInput",
    "WatermarkRegression",
]

SNAPSHOT_FORMAT = 1
"""Version of the snapshot layout; bumped on any incompatible change."""

_NO_SEAL = -(2**62)
"""``Engine._sealed_ms`` before any close_all (hopping windows may start below 0)."""

MAX_TS_MS = 2**53
"""Event times must lie in ``[0, 2**53)`` (SPEC §2)."""

_EARLY, _LATE, _FINAL = 0, 1, 2
_TIMING_NAMES = np.array(["EARLY", "LATE", "FINAL"], dtype=object)
_LATE_REASON = "window closed"
_I64 = np.int64


class InvalidInput(ReviseError, ValueError):
    """A record reached the core with a bad field (the job turns these into dead letters)."""


class WatermarkRegression(ReviseError, ValueError):
    """The caller passed a watermark smaller than one it passed before (or < 0)."""


IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


# --------------------------------------------------------------------------- input / output


@dataclass(frozen=True, slots=True)
class InputBatch:
    """One micro-batch of accepted-format records (already parsed and validated).

    Attributes:
        keys: Record keys, object array of str.
        ts_ms: Event times, int64 epoch ms in ``[0, 2**53)``.
        values: Record values, finite float64.
        partitions: Source partition of each record (int32), carried to late records.
        offsets: Source offset of each record (int64), carried to late records.
        topic: Source topic: one str for the batch, or an object array of str per record.

    Use :meth:`from_arrays` to build one with validation.
    """

    keys: npt.NDArray[np.object_]
    ts_ms: IntArray
    values: FloatArray
    partitions: npt.NDArray[np.int32]
    offsets: IntArray
    topic: str | npt.NDArray[np.object_] = ""

    def __len__(self) -> int:
        return len(self.keys)

    @staticmethod
    def empty(topic: str = "") -> InputBatch:
        """A batch with no records."""
        return InputBatch.from_arrays([], np.empty(0, dtype=_I64), np.empty(0), topic=topic)

    @staticmethod
    def from_arrays(
        keys: Any,
        ts_ms: Any,
        values: Any,
        partitions: Any = None,
        offsets: Any = None,
        topic: str | Any = "",
    ) -> InputBatch:
        """Build a batch, checking every field.

        Args:
            keys: Sequence or array of str.
            ts_ms: Integer event times in ``[0, 2**53)`` ms (integral floats are accepted).
            values: Finite numbers.
            partitions: Int32 partitions; default all 0.
            offsets: Int64 offsets; default the arrival positions ``0..n-1``.
            topic: A str for the whole batch or one str per record.

        Raises:
            InvalidInput: Naming the field, the first bad index and its value, e.g.
                ``values[3] is nan; values must be finite numbers``.
        """
        k = _as_object(keys, "keys")
        n = len(k)
        if n and pd.api.types.infer_dtype(k, skipna=False) != "string":
            bad = next(i for i, x in enumerate(k) if not isinstance(x, str))
            msg = f"keys[{bad}] is {k[bad]!r} ({type(k[bad]).__name__}); keys must be str"
            raise InvalidInput(msg)
        ts = _as_ts(ts_ms, n)
        v = np.asarray(values)
        _check_len("values", v, n)
        if v.dtype.kind not in "fiub":
            msg = f"values must be numbers, got dtype {v.dtype}; parse values before the engine"
            raise InvalidInput(msg)
        v = v.astype(np.float64, copy=False)
        finite = np.isfinite(v)
        if not finite.all():
            i = int(np.argmin(finite))
            msg = f"values[{i}] is {v[i]}; values must be finite numbers (no NaN or inf)"
            raise InvalidInput(msg)
        if partitions is None:
            part = np.zeros(n, dtype=np.int32)
        else:
            part = np.asarray(partitions)
            _check_len("partitions", part, n)
            part = part.astype(np.int32, copy=False)
        if offsets is None:
            off = np.arange(n, dtype=_I64)
        else:
            off = np.asarray(offsets)
            _check_len("offsets", off, n)
            off = off.astype(_I64, copy=False)
        top: str | npt.NDArray[np.object_]
        if isinstance(topic, str):
            top = topic
        else:
            top = _as_object(topic, "topic")
            _check_len("topic", top, n)
        return InputBatch(k, ts, v, part, off, top)


def _as_object(values: Any, name: str) -> npt.NDArray[np.object_]:
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            msg = f"{name} must be one-dimensional, got shape {values.shape}"
            raise InvalidInput(msg)
        if values.dtype == object:
            return values
        seq: list[Any] = values.tolist()
    else:
        seq = list(values)
    out = np.empty(len(seq), dtype=object)
    out[:] = seq
    return out


def _check_len(name: str, arr: npt.NDArray[Any], n: int) -> None:
    if arr.ndim != 1 or len(arr) != n:
        msg = f"{name} has shape {arr.shape}, expected ({n},) like keys"
        raise InvalidInput(msg)


def _as_ts(ts_ms: Any, n: int) -> IntArray:
    ts = np.asarray(ts_ms)
    _check_len("ts_ms", ts, n)
    if n == 0:
        return np.empty(0, dtype=_I64)
    if ts.dtype.kind == "f":
        ok = np.isfinite(ts) & (ts == np.floor(ts))
        if not ok.all():
            i = int(np.argmin(ok))
            msg = f"ts_ms[{i}] is {ts[i]}; event times must be integer epoch ms"
            raise InvalidInput(msg)
    elif ts.dtype.kind not in "iu":
        msg = f"ts_ms must be integer epoch ms, got dtype {ts.dtype}"
        raise InvalidInput(msg)
    in_range = (ts >= 0) & (ts < MAX_TS_MS)
    if not in_range.all():
        i = int(np.argmin(in_range))
        msg = f"ts_ms[{i}] is {ts[i]}; event times must lie in [0, 2**53) epoch ms"
        raise InvalidInput(msg)
    return ts.astype(_I64, copy=False)


@dataclass(frozen=True, slots=True)
class BatchOutput:
    """What one micro-batch produced.

    Attributes:
        revisions: Revisions sorted by ``(key, window_start_ms, window_end_ms)``.
        late: Too-late (record, window) pairs.
        watermark_ms: The watermark these were judged against (carried by every row).
        max_accepted_ts_ms: Max event time of the records accepted in this batch (in at least
            one window), None if none; feeds the next watermark.
    """

    revisions: RevisionBatch
    late: LateBatch
    watermark_ms: int
    max_accepted_ts_ms: int | None


# --------------------------------------------------------------------------- state


class _KeyTable:
    """Sorted unique keys; a key's rank is its code, so sorting by code sorts by key text."""

    __slots__ = ("index", "keys")

    def __init__(self, keys: npt.NDArray[np.object_] | None = None) -> None:
        self.keys: npt.NDArray[np.object_] = (
            np.empty(0, dtype=object) if keys is None else keys
        )
        self.index = pd.Index(self.keys)

    def __len__(self) -> int:
        return len(self.keys)

    def encode(self, keys: npt.NDArray[np.object_]) -> tuple[IntArray, IntArray | None]:
        """Ranks of ``keys``, adding new ones; also the old→new rank map when ranks moved.

        One hash pass over ``table keys + batch keys``: the table's (sorted, unique) keys take
        codes ``0..K-1`` = their ranks, so only a batch with new keys needs a re-sort.
        """
        n_old = len(self.keys)
        codes, uniques = pd.factorize(np.concatenate((self.keys, keys)))
        codes = codes[n_old:].astype(_I64)
        if len(uniques) == n_old:
            return codes, None
        old = self.keys
        self.keys = np.sort(np.asarray(uniques, dtype=object))
        self.index = pd.Index(self.keys)
        # uniques are in first-seen order: old keys first, then the new ones
        rank_of_code = self.index.get_indexer(uniques).astype(_I64)
        return rank_of_code[codes], rank_of_code[:n_old] if len(old) else None

    def compact(self, live: IntArray) -> IntArray:
        """Keep only ranks in sorted unique ``live``; returns the old→new rank map."""
        remap = np.full(len(self.keys), -1, dtype=_I64)
        remap[live] = np.arange(len(live), dtype=_I64)
        self.keys = self.keys[live]
        self.index = pd.Index(self.keys)
        return remap


@dataclass(slots=True)
class _Table:
    """Open windows, one row each, sorted by ``(key, start)``; arrays owned by the engine."""

    key: IntArray
    start: IntArray
    end: IntArray
    cols: State
    rev: IntArray  # revisions emitted so far = the next revision number
    n_late: IntArray
    max_late: IntArray

    def __len__(self) -> int:
        return len(self.key)

    @staticmethod
    def empty(aggs: AggregateSet) -> _Table:
        z = np.empty(0, dtype=_I64)
        return _Table(z, z.copy(), z.copy(), aggs.empty(0), z.copy(), z.copy(), z.copy())

    def take(self, idx: npt.NDArray[Any]) -> _Table:
        return _Table(self.key[idx], self.start[idx], self.end[idx],
                      {c: a[idx] for c, a in self.cols.items()}, self.rev[idx],
                      self.n_late[idx], self.max_late[idx])

    @staticmethod
    def concat(a: _Table, b: _Table) -> _Table:
        return _Table(np.concatenate((a.key, b.key)), np.concatenate((a.start, b.start)),
                      np.concatenate((a.end, b.end)),
                      {c: np.concatenate((a.cols[c], b.cols[c])) for c in a.cols},
                      np.concatenate((a.rev, b.rev)), np.concatenate((a.n_late, b.n_late)),
                      np.concatenate((a.max_late, b.max_late)))

    def insert(self, pos: npt.NDArray[np.intp], new: _Table) -> _Table:
        return _Table(np.insert(self.key, pos, new.key), np.insert(self.start, pos, new.start),
                      np.insert(self.end, pos, new.end),
                      {c: np.insert(a, pos, new.cols[c]) for c, a in self.cols.items()},
                      np.insert(self.rev, pos, new.rev), np.insert(self.n_late, pos, new.n_late),
                      np.insert(self.max_late, pos, new.max_late))


class _Emitter:
    """Collects revision parts of one batch, then sorts them into one RevisionBatch."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[dict[str, Any]] = []

    def add(self, *, key: IntArray, start: IntArray, end: IntArray, cols: State,
            rev: IntArray, has_prev: npt.NDArray[np.bool_], prev: State,
            timing: npt.NDArray[np.int8], retracted: bool, is_final: bool,
            n_late: IntArray, max_late: IntArray) -> None:
        n = len(key)
        if n == 0:
            return
        self.parts.append({
            "key": key, "start": start, "end": end, "cols": cols, "rev": rev,
            "has_prev": has_prev, "prev": prev, "timing": timing,
            "retracted": np.full(n, retracted), "is_final": np.full(n, is_final),
            "n_late": n_late, "max_late": max_late,
        })

    def build(self, engine: Engine, watermark_ms: int, batch_id: int,
              now_ms: int) -> RevisionBatch:
        cfg = engine.config
        if not self.parts:
            return RevisionBatch.empty(cfg.query_id, cfg.mode, cfg.aggs)

        def cat(name: str) -> Any:
            return np.concatenate([p[name] for p in self.parts])

        key, start, end = cat("key"), cat("start"), cat("end")
        order: Any = np.lexsort((end, start, key))
        if bool((order[1:] > order[:-1]).all()):
            order = slice(None)
        cols = {c: np.concatenate([p["cols"][c] for p in self.parts])[order]
                for c in self.parts[0]["cols"]}
        prev = {c: np.concatenate([p["prev"][c] for p in self.parts])[order]
                for c in self.parts[0]["cols"]}
        has_prev = cat("has_prev")[order]
        n = len(key)
        res = engine.aggs.results(cols)
        pres = engine.aggs.results(prev)
        out: dict[str, Any] = {}
        for a in AGG_FIELDS:
            if a in res:
                out[a] = res[a].astype(_I64 if a == "count" else np.float64, copy=False)
                p = pres[a]
                if a == "count":
                    out["prev_count"] = np.where(has_prev, p, 0).astype(_I64)
                else:
                    out[f"prev_{a}"] = np.where(has_prev, p, np.nan)
            elif a == "count":
                out[a] = np.zeros(n, dtype=_I64)
                out["prev_count"] = np.zeros(n, dtype=_I64)
            else:
                out[a] = np.full(n, np.nan)
                out[f"prev_{a}"] = np.full(n, np.nan)
        return RevisionBatch(
            query_id=cfg.query_id,
            mode=cfg.mode,
            aggs=cfg.aggs,
            key=engine.key_table.keys[key[order]],
            window_start_ms=start[order],
            window_end_ms=end[order],
            revision=cat("rev")[order],
            timing=_TIMING_NAMES[cat("timing")[order]],
            is_final=cat("is_final")[order],
            retracted=cat("retracted")[order],
            has_prev=has_prev,
            n_late=cat("n_late")[order],
            max_lateness_ms=cat("max_late")[order],
            watermark_ms=np.full(n, watermark_ms, dtype=_I64),
            batch_id=np.full(n, batch_id, dtype=_I64),
            emitted_at_ms=np.full(n, now_ms, dtype=_I64),
            **out,
        )


# --------------------------------------------------------------------------- engine


class Engine:
    """Incremental windowed aggregation that emits numbered revisions (see the module doc).

    Args:
        config: The engine config (window, grace, aggregates, mode, query id).

    Trace (tumbling 1s, grace 0): ``t=1200 → rev 0 of [1000,2000) count=1 (EARLY)``;
    next batch at ``W=1500``: ``t=1100 → rev 1 count=2 (EARLY)``; batch at ``W=2000``
    → ``rev 2 FINAL count=2``.
    """

    __slots__ = ("_assigner", "_aggs", "_config", "_keys", "_max_ts_ms", "_sealed_ms", "_state",
                 "_watermark_ms")

    def __init__(self, config: EngineConfig) -> None:
        if not isinstance(config, EngineConfig):
            msg = f"Engine needs an EngineConfig, got {type(config).__name__}"
            raise TypeError(msg)
        self._config = config
        self._aggs = AggregateSet(config.aggs)
        w = config.window
        self._assigner: WindowAssigner | None
        if w.kind == "tumbling":
            self._assigner = TumblingAssigner(w.size_ms)
        elif w.kind == "hopping":
            self._assigner = HoppingAssigner(w.size_ms, w.advance_ms)
        else:
            self._assigner = None
        self._keys = _KeyTable()
        self._state = _Table.empty(self._aggs)
        self._watermark_ms = 0
        self._max_ts_ms = -1  # max accepted event time so far (-1: none)
        self._sealed_ms = _NO_SEAL  # windows starting at or before this were closed (close_all)

    # -- public ------------------------------------------------------------------------

    @property
    def config(self) -> EngineConfig:
        """The config this engine was built with."""
        return self._config

    @property
    def aggs(self) -> AggregateSet:
        """The aggregate set (state columns and result functions)."""
        return self._aggs

    @property
    def key_table(self) -> _KeyTable:
        """Sorted unique keys of open windows (and recently seen ones)."""
        return self._keys

    @property
    def open_windows(self) -> int:
        """Number of open (key, window) states."""
        return len(self._state)

    @property
    def sealed(self) -> bool:
        """True after :meth:`close_all` closed windows: the (small) state must be kept."""
        return self._sealed_ms > _NO_SEAL

    @property
    def watermark_ms(self) -> int:
        """The largest watermark passed so far (0 initially)."""
        return self._watermark_ms

    @classmethod
    def build(cls, config: EngineConfig, snapshot: bytes | None) -> Engine:
        """An engine with ``config``, restored from ``snapshot`` (None: empty).

        Raises:
            StateSchemaMismatch: If the snapshot is not one of ours, has another format
                version, or was written under a config that changes the meaning of the state
                (window, grace, aggregates and their versions, mode).
        """
        engine = cls(config)
        if snapshot is not None:
            engine._restore(snapshot)
        return engine

    def process(self, batch: InputBatch, *, watermark_ms: int, batch_id: int,
                now_ms: int) -> BatchOutput:
        """Apply one micro-batch judged against ``watermark_ms``; see the module docstring.

        Args:
            batch: The records (any order; the output does not depend on it).
            watermark_ms: Watermark ``W`` in force for this batch (>= 0, never decreasing).
            batch_id: Micro-batch id carried by every output row.
            now_ms: Wall-clock time carried as ``emitted_at_ms``.

        Returns:
            Revisions (touched windows, then FINALs; sorted by key and bounds), too-late
            records, ``W`` and the max accepted event time.

        Raises:
            WatermarkRegression: If ``watermark_ms`` is below an earlier one or below 0.
        """
        w = self._check_watermark(watermark_ms)
        out = _Emitter()
        late = LateBatch.empty()
        max_ts: int | None = None
        if len(batch):
            ranks, remap = self._keys.encode(batch.keys)
            if remap is not None and len(self._state):
                self._state.key = remap[self._state.key]
            if self._assigner is None:
                late, max_ts = self._process_sessions(batch, ranks, w, batch_id, out)
            else:
                late, max_ts = self._process_fixed(self._assigner, batch, ranks, w, batch_id,
                                                   out)
        if max_ts is not None:
            self._max_ts_ms = max(self._max_ts_ms, max_ts)
        self._close(w, out, everything=False)
        revisions = out.build(self, w, batch_id, now_ms)
        self._maybe_compact()
        return BatchOutput(revisions, late, w, max_ts)

    def close_all(self, *, watermark_ms: int, batch_id: int, now_ms: int) -> BatchOutput:
        """Close every open window (end of bounded input): one FINAL each, state emptied.

        The FINALs carry ``watermark_ms`` (the last real watermark), as SPEC §3 asks.

        Closed stays closed: afterwards the engine is *sealed* at the max accepted event time
        ``M`` seen so far — a later record for a window starting at or before ``M`` (for
        sessions: a record with ``ts <= M``) is too late, so a window closed here never starts
        again at revision 0 (which would repeat an idempotency key). :attr:`sealed` tells
        whether the state must be kept for that.
        """
        w = self._check_watermark(watermark_ms)
        out = _Emitter()
        self._close(w, out, everything=True)
        if self._max_ts_ms >= 0:
            self._sealed_ms = max(self._sealed_ms, self._max_ts_ms)
        revisions = out.build(self, w, batch_id, now_ms)
        self._maybe_compact()
        return BatchOutput(revisions, LateBatch.empty(), w, None)

    def snapshot(self) -> bytes:
        """The whole state as bytes: one Arrow IPC stream, no pickled objects.

        Layout: one record batch, one row per open window, columns ``key`` (dictionary of the
        live keys, int32 indices), ``start``, ``end``, ``rev``, ``n_late``, ``max_late`` (int64)
        and one column per aggregate state column (``count`` int64, ``sum``/``min``/``max``
        float64, …); schema metadata ``revise.format`` (:data:`SNAPSHOT_FORMAT`),
        ``revise.fingerprint``, ``revise.config`` (JSON) and ``revise.watermark_ms``.
        """
        st = self._state
        live = _unique_sorted(st.key)
        idx = np.searchsorted(live, st.key).astype(np.int32)
        keys = pa.DictionaryArray.from_arrays(
            pa.array(idx, type=pa.int32()), pa.array(self._keys.keys[live], type=pa.string()))
        arrays: list[pa.Array] = [keys]
        names = ["key"]
        for name in ("start", "end", "rev", "n_late", "max_late"):
            arrays.append(pa.array(getattr(st, name)))
            names.append(name)
        for c in self._aggs.columns:
            arrays.append(pa.array(st.cols[c.name]))
            names.append(f"col_{c.name}")
        meta = {
            "revise.format": str(SNAPSHOT_FORMAT),
            "revise.fingerprint": self._fingerprint(),
            "revise.config": json.dumps(self._state_config(), sort_keys=True),
            "revise.watermark_ms": str(self._watermark_ms),
            "revise.max_ts_ms": str(self._max_ts_ms),
            "revise.sealed_ms": str(self._sealed_ms),
        }
        rb = pa.RecordBatch.from_arrays(arrays, names=names)
        rb = rb.replace_schema_metadata(meta)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, rb.schema) as writer:
            writer.write_batch(rb)
        return bytes(sink.getvalue().to_pybytes())

    # -- fixed windows (tumbling, hopping) --------------------------------------------------

    def _process_fixed(self, asg: WindowAssigner, batch: InputBatch, ranks: IntArray, w: int,
                       batch_id: int, out: _Emitter) -> tuple[LateBatch, int | None]:
        grace = self._config.grace_ms
        n = len(batch)
        ts, v = batch.ts_ms, batch.values
        pairs = asg.assign(ts)
        rec, ps, pe = pairs.record, pairs.start_ms, pairs.end_ms
        identity = len(rec) == n and bool((rec == np.arange(n)).all())  # pair i is record i
        too_late = (pe + grace <= w) | (ps <= self._sealed_ms)
        late = LateBatch.empty()
        if too_late.any():
            lr = rec[too_late]
            late = _late_batch(batch, lr, ranks[lr], ps[too_late], pe[too_late], w, batch_id)
            keep = ~too_late
            rec, ps, pe = rec[keep], ps[keep], pe[keep]
            identity = False
        if len(rec) == 0:
            return late, None
        if identity:
            pk, pts, pv = ranks, ts, v
        else:
            pk, pts, pv = ranks[rec], ts[rec], v[rec]
        max_ts = int(pts.max())
        st = self._state
        wi, swi = asg.window_index(ps), asg.window_index(st.start)
        ids, sids = _pack_ids(pk, wi, st.key, swi, len(self._keys))
        # Sort pairs by (window id, value): the float sums then do not depend on arrival order.
        vrank = np.empty(n, dtype=_I64)
        vrank[np.argsort(v)] = np.arange(n, dtype=_I64)
        prank = vrank if identity else vrank[rec]
        if int(ids.max()) < (2**62) // max(n, 1):
            o = np.argsort(ids * n + prank)
        else:
            o = np.lexsort((prank, ids))
        sid = ids[o]
        seg = segment_starts(sid)
        uids = sid[seg]
        first = o[seg]
        part = self._aggs.reduce_values(pv[o], seg)
        pe_o = pe[o]
        is_late = pe_o <= w
        if is_late.any():
            n_late = np.add.reduceat(is_late.astype(_I64), seg)
            max_late = np.maximum.reduceat(np.where(is_late, w - pts[o], 0), seg)
        else:
            n_late = np.zeros(len(seg), dtype=_I64)
            max_late = np.zeros(len(seg), dtype=_I64)
        pos = np.searchsorted(sids, uids)
        found = np.zeros(len(uids), dtype=bool)
        inside = pos < len(sids)
        found[inside] = sids[pos[inside]] == uids[inside]
        # 1. existing windows: merge the batch's partial state in place
        old_idx = pos[found]
        old_cols = {c: a[old_idx] for c, a in st.cols.items()}
        if len(old_idx):
            merged = self._aggs.merge(old_cols, {c: a[found] for c, a in part.items()})
            for c, a in merged.items():
                st.cols[c][old_idx] = a
            st.n_late[old_idx] += n_late[found]
            st.max_late[old_idx] = np.maximum(st.max_late[old_idx], max_late[found])
        # 2. new windows: insert in order
        new = ~found
        if new.any():
            nf = first[new]
            fresh = _Table(pk[nf], ps[nf], pe[nf], {c: a[new] for c, a in part.items()},
                           np.zeros(int(new.sum()), dtype=_I64), n_late[new], max_late[new])
            st = st.insert(pos[new], fresh)
            sids = np.insert(sids, pos[new], uids[new])
            self._state = st
        # 3. revision mode: one revision per touched window
        if self._config.mode == "revision":
            t_idx = np.searchsorted(sids, uids)
            prev = {c: np.zeros(len(uids), dtype=a.dtype) for c, a in st.cols.items()}
            for c in prev:
                prev[c][found] = old_cols[c]
            self._emit_rows(out, t_idx, prev=prev, has_prev=found, w=w)
        return late, max_ts

    # -- sessions -----------------------------------------------------------------------------

    def _process_sessions(self, batch: InputBatch, ranks: IntArray, w: int, batch_id: int,
                          out: _Emitter) -> tuple[LateBatch, int | None]:
        gap, grace = self._config.window.gap_ms, self._config.grace_ms
        k, ts, v = ranks, batch.ts_ms, batch.values
        n = len(v)
        vrank = np.empty(n, dtype=_I64)  # value rank: ties between records sort by value
        vrank[np.argsort(v)] = np.arange(n, dtype=_I64)
        span_end = ts + gap
        too_late = (span_end + grace <= w) | (ts <= self._sealed_ms)
        late = LateBatch.empty()
        if too_late.any():
            late = _late_batch(batch, np.flatnonzero(too_late), k[too_late], ts[too_late],
                               span_end[too_late], w, batch_id)
            keep = ~too_late
            k, ts, v, span_end, vrank = k[keep], ts[keep], v[keep], span_end[keep], vrank[keep]
        if len(k) == 0:
            return late, None
        max_ts = int(ts.max())
        is_late = span_end <= w
        st = self._state
        touched = _unique_sorted(np.sort(k))
        sel = np.isin(st.key, touched, assume_unique=False)
        old_idx = np.flatnonzero(sel)
        old = st.take(old_idx)
        n_o, n_r = len(old_idx), len(k)
        i_key = np.concatenate((old.key, k))
        i_start = np.concatenate((old.start, ts))
        i_end = np.concatenate((old.end, span_end))
        i_rec = np.concatenate((np.zeros(n_o, dtype=bool), np.ones(n_r, dtype=bool)))
        # order by (key, start, stored sessions first, value rank): deterministic float sums
        i_tie = np.concatenate((np.zeros(n_o, dtype=_I64), vrank + 1))
        order = _sort_key_start_tie(i_key, i_start, i_tie, n + 1)
        s_key, s_start, s_end, s_old = i_key[order], i_start[order], i_end[order], ~i_rec[order]
        gid = merge_spans(s_key, s_start, s_end)
        seg = segment_starts(gid)
        g_key, g_start = s_key[seg], s_start[seg]
        g_end = np.maximum.reduceat(s_end, seg)
        contrib = self._aggs.contributions(v)
        g_cols: State = {}
        prev_cols: State = {}
        for c in self._aggs.columns:
            rows = np.concatenate((old.cols[c.name], contrib[c.name]))[order]
            g_cols[c.name] = c.ufunc.reduceat(rows, seg)
            prev_cols[c.name] = c.ufunc.reduceat(
                np.where(s_old, rows, np.asarray(c.identity, dtype=c.dtype)), seg)
        g_nl = np.add.reduceat(np.concatenate((old.n_late, is_late.astype(_I64)))[order], seg)
        g_ml = np.maximum.reduceat(
            np.concatenate((old.max_late, np.where(is_late, w - ts, 0)))[order], seg)
        n_old = np.add.reduceat(s_old.astype(_I64), seg)
        s_rev = np.concatenate((old.rev, np.full(n_r, -1, dtype=_I64)))[order]
        max_rev = np.maximum.reduceat(s_rev, seg)
        big = np.iinfo(_I64).max
        o_start = np.minimum.reduceat(np.where(s_old, s_start, big), seg)
        o_end = np.maximum.reduceat(np.where(s_old, s_end, -big), seg)
        same = (n_old == 1) & (o_start == g_start) & (o_end == g_end)
        changed = (n_old >= 1) & ~same
        g_rev = np.where(n_old == 0, 0, np.where(same, max_rev, max_rev + 1))
        groups = _Table(g_key, g_start, g_end, g_cols, g_rev.astype(_I64), g_nl, g_ml)
        if self._config.mode == "revision":
            # sessions of touched keys that got no record stay as they are: not emitted
            hit = np.flatnonzero(np.add.reduceat((~s_old).astype(_I64), seg) > 0)
            self._emit_table(out, groups.take(hit), prev={c: a[hit] for c, a in prev_cols.items()},
                             has_prev=n_old[hit] >= 1, w=w)
            groups.rev[hit] += 1
            ret_rows = np.flatnonzero(s_old & changed[gid])
            if len(ret_rows):
                r = old.take(order[ret_rows])
                # a retraction carries the timing of the revision that supersedes it
                self._emit_table(out, r, prev=r.cols, has_prev=np.ones(len(r), dtype=bool),
                                 w=w, retracted=True, timing_end=g_end[gid[ret_rows]])
        rest = st.take(~sel)
        merged = _Table.concat(rest, groups)
        self._state = merged.take(np.lexsort((merged.start, merged.key)))
        return late, max_ts

    # -- shared -------------------------------------------------------------------------------

    def _emit_rows(self, out: _Emitter, rows: npt.NDArray[np.intp], *, prev: State,
                   has_prev: npt.NDArray[np.bool_], w: int) -> None:
        """Emit EARLY/LATE revisions of state rows ``rows`` and bump their revision counters."""
        st = self._state
        end = st.end[rows]
        out.add(key=st.key[rows], start=st.start[rows], end=end,
                cols={c: a[rows] for c, a in st.cols.items()}, rev=st.rev[rows].copy(),
                has_prev=has_prev, prev=prev,
                timing=np.where(w < end, _EARLY, _LATE).astype(np.int8),
                retracted=False, is_final=False, n_late=st.n_late[rows],
                max_late=st.max_late[rows])
        st.rev[rows] += 1

    def _emit_table(self, out: _Emitter, t: _Table, *, prev: State,
                    has_prev: npt.NDArray[np.bool_], w: int, retracted: bool = False,
                    timing_end: IntArray | None = None) -> None:
        end = t.end if timing_end is None else timing_end
        out.add(key=t.key, start=t.start, end=t.end, cols=t.cols, rev=t.rev.copy(),
                has_prev=has_prev, prev=prev,
                timing=np.where(w < end, _EARLY, _LATE).astype(np.int8),
                retracted=retracted, is_final=False, n_late=t.n_late, max_late=t.max_late)

    def _close(self, w: int, out: _Emitter, *, everything: bool) -> None:
        """Emit one FINAL per window with ``W >= end + grace`` (or every window) and drop it."""
        st = self._state
        if len(st) == 0:
            return
        if everything:
            closing = np.ones(len(st), dtype=bool)
        else:
            closing = st.end + self._config.grace_ms <= w
            if not closing.any():
                return
        c = st.take(closing)
        n = len(c)
        if self._config.mode == "revision":
            rev, has_prev = c.rev, c.rev > 0
        else:
            rev, has_prev = np.zeros(n, dtype=_I64), np.zeros(n, dtype=bool)
        out.add(key=c.key, start=c.start, end=c.end, cols=c.cols, rev=rev, has_prev=has_prev,
                prev=c.cols, timing=np.full(n, _FINAL, dtype=np.int8), retracted=False,
                is_final=True, n_late=c.n_late, max_late=c.max_late)
        self._state = st.take(~closing)

    def _check_watermark(self, watermark_ms: int) -> int:
        w = int(watermark_ms)
        if w < 0 or w < self._watermark_ms:
            msg = (
                f"watermark_ms={w} is below the watermark already in force "
                f"({self._watermark_ms}) or below 0; the watermark never goes back — pass the "
                "global watermark of the batch (e.g. from WatermarkTracker)"
            )
            raise WatermarkRegression(msg)
        self._watermark_ms = w
        return w

    def _maybe_compact(self) -> None:
        st = self._state
        live = _unique_sorted(st.key)
        if len(self._keys) > 2 * len(live) + 1024:
            remap = self._keys.compact(live)
            st.key = remap[st.key]

    def _state_config(self) -> dict[str, Any]:
        c = self._config
        return {"window": str(c.window), "grace_ms": c.grace_ms, "aggs": list(self._aggs.tags),
                "mode": c.mode}

    def _fingerprint(self) -> str:
        text = json.dumps(self._state_config(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def _restore(self, snapshot: bytes) -> None:
        try:
            reader = pa.ipc.open_stream(pa.py_buffer(snapshot))
            table = reader.read_all()
        except (pa.ArrowInvalid, OSError) as e:
            msg = f"engine snapshot is not a revise state snapshot ({e}); start from empty state"
            raise StateSchemaMismatch(msg) from e
        meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
        fmt = meta.get("revise.format")
        if fmt != str(SNAPSHOT_FORMAT):
            msg = (
                f"engine snapshot has format {fmt!r}, this engine reads {SNAPSHOT_FORMAT}; "
                "restart with a new checkpoint (or the revise version that wrote it)"
            )
            raise StateSchemaMismatch(msg)
        if meta.get("revise.fingerprint") != self._fingerprint():
            msg = (
                f"engine snapshot was written for {meta.get('revise.config')}, this engine "
                f"runs {json.dumps(self._state_config(), sort_keys=True)}; restart with the "
                "original --window/--grace/--aggs/--mode, or with a new checkpoint and query id"
            )
            raise StateSchemaMismatch(msg)
        self._watermark_ms = int(meta["revise.watermark_ms"])
        self._max_ts_ms = int(meta.get("revise.max_ts_ms", "-1"))
        self._sealed_ms = int(meta.get("revise.sealed_ms", str(_NO_SEAL)))
        if table.num_rows == 0:
            return
        table = table.combine_chunks()
        key_col = table.column("key").chunk(0)
        self._keys = _KeyTable(np.asarray(key_col.dictionary.to_numpy(zero_copy_only=False),
                                          dtype=object))
        cols = {c.name: np.array(table.column(f"col_{c.name}").to_numpy(), dtype=c.dtype)
                for c in self._aggs.columns}

        def i64(name: str) -> IntArray:
            return np.array(table.column(name).to_numpy(), dtype=_I64)

        self._state = _Table(np.asarray(key_col.indices.to_numpy(), dtype=_I64), i64("start"),
                             i64("end"), cols, i64("rev"), i64("n_late"), i64("max_late"))


# --------------------------------------------------------------------------- helpers


def _unique_sorted(a: IntArray) -> IntArray:
    """Unique values of an already sorted array."""
    if len(a) == 0:
        return a
    return a[segment_starts(a)]


def _sort_key_start_tie(key: IntArray, start: IntArray, tie: IntArray,
                        tie_span: int) -> npt.NDArray[np.intp]:
    """Argsort by ``(key, start, tie)`` (``0 <= tie < tie_span``), one packed sort if it fits."""
    if len(key) == 0:
        return np.empty(0, dtype=np.intp)
    lo = int(start.min())
    s_span = int(start.max()) - lo + 1
    k_span = int(key.max()) + 1
    if k_span * s_span * tie_span < 2**62:
        return np.argsort((key * s_span + (start - lo)) * tie_span + tie)
    return np.lexsort((tie, start, key))


def _pack_ids(k: IntArray, wi: IntArray, sk: IntArray, swi: IntArray,
              n_keys: int) -> tuple[IntArray, IntArray]:
    """Order-preserving int64 ids of (key, window index) pairs for the batch and the state.

    Packs ``key * R + (wi - lo)`` when it fits in 62 bits, else ranks the pairs (lexsort).
    """
    all_w = np.concatenate((wi, swi))
    lo, hi = int(all_w.min()), int(all_w.max())
    span = hi - lo + 1
    if max(n_keys, 1) * span < 2**62:
        return k * span + (wi - lo), sk * span + (swi - lo)
    all_k = np.concatenate((k, sk))
    order = np.lexsort((all_w, all_k))
    change = np.ones(len(order), dtype=bool)
    change[1:] = (all_k[order][1:] != all_k[order][:-1]) | (all_w[order][1:] != all_w[order][:-1])
    dense = np.empty(len(order), dtype=_I64)
    dense[order] = np.cumsum(change) - 1
    return dense[: len(k)], dense[len(k):]


def _late_batch(batch: InputBatch, src: npt.NDArray[np.intp], ranks: IntArray,
                start: IntArray, end: IntArray, w: int, batch_id: int) -> LateBatch:
    """Too-late pairs (``src`` = record positions in ``batch``), sorted deterministically."""
    ts, val = batch.ts_ms[src], batch.values[src]
    part, off = batch.partitions[src], batch.offsets[src]
    order = np.lexsort((val, off, part, ts, end, start, ranks))
    src, ts, val, part, off = src[order], ts[order], val[order], part[order], off[order]
    n = len(src)
    topic = (np.full(n, batch.topic, dtype=object) if isinstance(batch.topic, str)
             else batch.topic[src])
    return LateBatch(
        key=batch.keys[src], ts_ms=ts, value=val, window_start_ms=start[order],
        window_end_ms=end[order], watermark_ms=np.full(n, w, dtype=_I64), lateness_ms=w - ts,
        reason=np.full(n, _LATE_REASON, dtype=object), batch_id=np.full(n, batch_id, dtype=_I64),
        topic=topic, partition=part, offset=off,
    )

