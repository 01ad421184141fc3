"""The engine's input: one micro-batch of parsed, validated records, and what it produced.

Times are int64 epoch ms in ``[0, 2**53)`` (:data:`revise.vocab.MAX_TS_MS`). The job builds an
:class:`InputBatch` from the records the parser accepted (bad input never gets here; it is a
dead letter already), :meth:`InputBatch.from_arrays` checks every field once more so a caller's
mistake names the field, index and value instead of corrupting state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from revise.config import EmitPolicy
from revise.engine.aggplan import AggPlan
from revise.errors import ReviseError
from revise.record_batches import LateBatch, RevisionBatch
from revise.vocab import MAX_TS_MS
from windows.sketches import hash_strings

__all__ = [
    "LATE_REASON",
    "BatchOutput",
    "FloatArray",
    "InputBatch",
    "IntArray",
    "InvalidInput",
    "Step",
    "late_records",
    "value_ranks",
]

LATE_REASON = "window closed"
"""The ``reason`` of a too-late record."""

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
_I64 = np.int64


class InvalidInput(ReviseError, ValueError):
    """A record reached the core with a bad field (the job turns these into dead letters)."""



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
        numeric: ``FN(FIELD)`` form: one finite float64 array per numeric field path (the
            unit is the field's own); ``values`` then only feeds the late records' ``value``.
        distinct: ``FN(FIELD)`` form: one int64 array of 63-bit hashes per distinct field
            (``windows.sketches.hash_utf8`` / ``hash_strings`` of the canonical text).

    Use :meth:`from_arrays` to build one with validation.
    """

    keys: npt.NDArray[np.object_]
    ts_ms: IntArray
    values: FloatArray
    partitions: npt.NDArray[np.int32]
    offsets: IntArray
    topic: str | npt.NDArray[np.object_] = ""
    numeric: Mapping[str, FloatArray] = field(default_factory=dict)
    distinct: Mapping[str, IntArray] = field(default_factory=dict)

    def record_values(self, plan: AggPlan) -> FloatArray:
        """What ``plan``'s state columns reduce (:meth:`AggPlan.record_values`).

        Raises:
            InvalidInput: When the batch lacks a numeric or distinct field of the plan.
        """
        try:
            return plan.record_values(self.values, self.numeric, self.distinct)
        except KeyError as e:
            msg = (f"the batch has no column for field {e.args[0]!r} that --aggs "
                   f"{plan.agg_list} aggregates; pass numeric={{...}} / distinct={{...}} to "
                   "InputBatch.from_arrays")
            raise InvalidInput(msg) from None

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
        *,
        numeric: Mapping[str, Any] | None = None,
        distinct: Mapping[str, Any] | None = None,
    ) -> InputBatch:
        """Build a batch, checking every field.

        Args:
            keys: Sequence or array of str.
            ts_ms: Integer event times in ``[0, 2**53)`` ms (integral floats are accepted).
            values: Finite numbers.
            partitions: Int32 partitions; default all 0.
            offsets: Int64 offsets; default the arrival positions ``0..n-1``.
            topic: A str for the whole batch or one str per record.
            numeric: Finite numbers per numeric field path.
            distinct: Per distinct field path: canonical strings (hashed here with
                ``hash_strings``) or int64 hashes.

        Raises:
            InvalidInput: Naming the field, the first bad index and its value, e.g.
                ``values[3] is nan; values must be finite numbers``.
        """
        k = _as_object(keys, "keys")
        n = len(k)
        if n and _infer_dtype(k) != "string":
            bad = next(i for i, x in enumerate(k) if not isinstance(x, str))
            msg = f"keys[{bad}] is {k[bad]!r} ({type(k[bad]).__name__}); keys must be str"
            raise InvalidInput(msg)
        ts = _as_ts(ts_ms, n)
        v = _as_finite(values, n, "values")
        num = {f: _as_finite(a, n, f"numeric[{f!r}]") for f, a in (numeric or {}).items()}
        dst = {f: _as_hashes(a, n, f) for f, a in (distinct or {}).items()}
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
        return InputBatch(k, ts, v, part, off, top, num, dst)


def _as_finite(values: Any, n: int, name: str) -> FloatArray:
    v = np.asarray(values)
    _check_len(name, v, n)
    if v.dtype.kind not in "fiub":
        msg = f"{name} must be numbers, got dtype {v.dtype}; parse values before the engine"
        raise InvalidInput(msg)
    v = v.astype(np.float64, copy=False)
    finite = np.isfinite(v)
    if not finite.all():
        i = int(np.argmin(finite))
        msg = f"{name}[{i}] is {v[i]}; {name} must be finite numbers (no NaN or inf)"
        raise InvalidInput(msg)
    return v


def _infer_dtype(values: npt.NDArray[Any]) -> str:
    """The ``infer_dtype`` of ``values`` by pandas (``"string"`` when every item is a str).

    Imported here, at the first batch, not with the engine: Spark's driver-side
    ``transformWithStateInPandas`` pre-init process imports the engine to unpickle the
    operator and needs none of pandas (~0.35 s of the first micro-batch's planning).
    """
    from pandas.api.types import infer_dtype

    return str(infer_dtype(values, skipna=False))


def _as_hashes(values: Any, n: int, name: str) -> IntArray:
    a = np.asarray(values) if isinstance(values, np.ndarray) else None
    if a is not None and a.dtype == np.int64:
        _check_len(f"distinct[{name!r}]", a, n)
        return a
    strings = _as_object(values, f"distinct[{name!r}]")
    _check_len(f"distinct[{name!r}]", strings, n)
    kind = _infer_dtype(strings) if n else "string"
    if kind != "string":
        msg = (f"distinct[{name!r}] must hold canonical strings or int64 hashes, got "
               f"{kind}")
        raise InvalidInput(msg)
    return hash_strings(list(strings))


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



@dataclass(frozen=True, slots=True)
class Step:
    """What one micro-batch is judged against (the same for every window of the batch).

    Attributes:
        aggs: The aggregate plan (state columns, sketches, reductions, results).
        grace_ms: A window accepts records while ``watermark < end + grace_ms``.
        sealed_ms: Windows starting at or before this were closed by close_all (ms).
        revision_mode: Emit a revision per touched window (False: watermark mode).
        watermark_ms: The watermark ``W`` in force for the batch (ms).
        batch_id: The micro-batch id carried by every output row.
        policy: How often EARLY/LATE revisions are emitted (None: every change).
    """

    aggs: AggPlan
    grace_ms: int
    sealed_ms: int
    revision_mode: bool
    watermark_ms: int
    batch_id: int
    policy: EmitPolicy | None = None


def late_records(batch: InputBatch, src: npt.NDArray[np.intp], ranks: IntArray,
                 start: IntArray, end: IntArray, step: Step) -> LateBatch:
    """Too-late (record, window) pairs, sorted deterministically.

    Args:
        batch: The micro-batch.
        src: Positions in ``batch`` of the too-late records (one per rejected window).
        ranks: Key ranks of those records (sort order = key text order).
        start: Start of the window each was rejected from (ms, inclusive).
        end: End of that window (ms, exclusive).
        step: The batch's watermark ``W`` (``lateness_ms = W - ts``) and id.
    """
    w = step.watermark_ms
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
        reason=np.full(n, LATE_REASON, dtype=object),
        batch_id=np.full(n, step.batch_id, dtype=_I64),
        topic=topic, partition=part, offset=off,
    )


def value_ranks(values: FloatArray) -> IntArray:
    """Rank of each value in ascending order (ties by position).

    Reducing a window's records in value order makes aggregates, even float sums, independent
    of the order records arrive in within a batch. A 2-D ``values`` (one column per numeric
    field) ranks rows lexicographically; tied rows contribute identically.
    """
    ranks = np.empty(len(values), dtype=_I64)
    if values.ndim == 2:
        order = (np.lexsort(values.T[::-1]) if values.shape[1]
                 else np.arange(len(values), dtype=np.intp))
    else:
        order = np.argsort(values)
    ranks[order] = np.arange(len(values), dtype=_I64)
    return ranks
