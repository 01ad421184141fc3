"""The engine's columnar batches of revise's records: :class:`RevisionBatch`, :class:`LateBatch`.

The engine works on whole micro-batches, so it returns these (numpy arrays, ``to_arrow()``,
``rows()``) rather than one :class:`~revise.records.Revision` or
:class:`~revise.records.LateRecord` per row; the row types, the Arrow schemas and the null
convention are in :mod:`revise.records`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from dataclasses import field as dc_field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from revise.records import (
    AGG_FIELDS,
    ESTIMATE_FIELDS,
    LATE_SCHEMA,
    PREV_FIELDS,
    REVISION_SCHEMA,
    LateRecord,
    RecordError,
    Revision,
    estimated_columns,
    with_aggregate_fields,
)
from revise.vocab import Mode

__all__ = ["LateBatch", "RevisionBatch"]


def _obj(values: Sequence[Any] | npt.NDArray[Any]) -> npt.NDArray[np.object_]:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values) if not isinstance(values, np.ndarray) else values
    return out


_INT = np.int64
_FLOAT = np.float64


@dataclass(frozen=True, slots=True)
class RevisionBatch:
    """Revisions of one or more micro-batches as columns (one row per :class:`Revision`).

    Rows are sorted by ``(key, window_start_ms, window_end_ms)`` within each micro-batch.
    ``query_id``, ``mode`` and ``aggs`` are per batch; every other field is an array of the same
    length: ``key`` object (str); ``timing`` object (``EARLY``/``LATE``/``FINAL``);
    ``is_final``, ``retracted``, ``has_prev`` bool; ``count``, ``prev_count`` and every ``*_ms``,
    ``revision``, ``n_late``, ``batch_id`` int64; ``sum``/``min``/``max``/``mean`` and their
    ``prev_*`` float64; ``completeness`` float64 in [0, 1]. Nulls follow the module's
    convention (``aggs`` and ``has_prev``). The ``est_*`` columns are not stored: they are the
    additive aggregates divided by ``completeness`` (:meth:`estimate`), null where it is 0.
    """

    query_id: str
    mode: Mode
    aggs: tuple[str, ...]
    key: npt.NDArray[np.object_]
    window_start_ms: npt.NDArray[np.int64]
    window_end_ms: npt.NDArray[np.int64]
    revision: npt.NDArray[np.int64]
    timing: npt.NDArray[np.object_]
    is_final: npt.NDArray[np.bool_]
    retracted: npt.NDArray[np.bool_]
    count: npt.NDArray[np.int64]
    sum: npt.NDArray[np.float64]
    min: npt.NDArray[np.float64]
    max: npt.NDArray[np.float64]
    mean: npt.NDArray[np.float64]
    has_prev: npt.NDArray[np.bool_]
    prev_count: npt.NDArray[np.int64]
    prev_sum: npt.NDArray[np.float64]
    prev_min: npt.NDArray[np.float64]
    prev_max: npt.NDArray[np.float64]
    prev_mean: npt.NDArray[np.float64]
    n_late: npt.NDArray[np.int64]
    max_lateness_ms: npt.NDArray[np.int64]
    watermark_ms: npt.NDArray[np.int64]
    batch_id: npt.NDArray[np.int64]
    emitted_at_ms: npt.NDArray[np.int64]
    completeness: npt.NDArray[np.float64]
    extra: Mapping[str, npt.NDArray[Any]] = dc_field(default_factory=dict)
    """Columns of an :class:`AggList` other than SPEC §4's ``count`` … ``mean`` (``FN_FIELD``
    and ``prev_FN_FIELD``). ``prev_`` ones hold a placeholder where ``has_prev`` is False."""

    ARRAY_FIELDS: ClassVar[tuple[str, ...]] = (
        "key", "window_start_ms", "window_end_ms", "revision", "timing", "is_final", "retracted",
        *AGG_FIELDS, "has_prev", *PREV_FIELDS, "n_late", "max_lateness_ms", "watermark_ms",
        "batch_id", "emitted_at_ms", "completeness",
    )

    def __len__(self) -> int:
        return len(self.key)

    def valid(self, name: str) -> npt.NDArray[np.bool_]:
        """Mask of rows where column ``name`` is not null."""
        n = len(self)
        if name in AGG_FIELDS:
            return np.full(n, name in self.aggs)
        if name in PREV_FIELDS or name in self.extra and name.startswith("prev_"):
            if name[5:] not in self.aggs:
                return np.zeros(n, dtype=bool)
            return self.has_prev.copy()
        if name.startswith("est_"):
            return self.estimate(name[4:])[1]
        return np.ones(n, dtype=bool)

    def estimate(self, column: str) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
        """``est_<column>``: the additive aggregate ``column`` / ``completeness``, and its mask.

        Null (mask False) where ``column`` is null or ``completeness`` is 0. On a FINAL
        (``completeness`` exactly 1.0) it equals the aggregate.
        """
        src = self.extra[column] if column in self.extra else getattr(self, column)
        valid = self.valid(column) & (self.completeness > 0)
        out = np.full(len(self), np.nan)
        with np.errstate(over="ignore"):  # a huge sum over a small share: inf (JSON null)
            out[valid] = src[valid] / self.completeness[valid]
        return out, valid

    def take(self, index: npt.NDArray[np.intp]) -> RevisionBatch:
        """Rows ``index`` (any integer or bool index) as a new batch."""
        cols = {f: getattr(self, f)[index] for f in self.ARRAY_FIELDS}
        extra = {c: a[index] for c, a in self.extra.items()}
        return RevisionBatch(self.query_id, self.mode, self.aggs, **cols, extra=extra)

    @staticmethod
    def empty(query_id: str = "revise", mode: Mode = "revision",
              aggs: tuple[str, ...] = AGG_FIELDS) -> RevisionBatch:
        """A batch with no rows."""
        cols: dict[str, Any] = {}
        for f in RevisionBatch.ARRAY_FIELDS:
            if f in ("key", "timing"):
                cols[f] = np.empty(0, dtype=object)
            elif f in ("is_final", "retracted", "has_prev"):
                cols[f] = np.empty(0, dtype=bool)
            elif f in ("sum", "min", "max", "mean", "prev_sum", "prev_min", "prev_max",
                       "prev_mean", "completeness"):
                cols[f] = np.empty(0, dtype=_FLOAT)
            else:
                cols[f] = np.empty(0, dtype=_INT)
        return RevisionBatch(query_id, mode, tuple(aggs), **cols)

    @staticmethod
    def concat(batches: Sequence[RevisionBatch]) -> RevisionBatch:
        """Rows of all ``batches`` in order; they must share query_id, mode and aggs."""
        if not batches:
            return RevisionBatch.empty()
        first = batches[0]
        for b in batches[1:]:
            if (b.query_id, b.mode, b.aggs) != (first.query_id, first.mode, first.aggs):
                msg = (
                    "cannot concat revision batches of different query_id/mode/aggs: "
                    f"{(first.query_id, first.mode, first.aggs)} vs {(b.query_id, b.mode, b.aggs)}"
                )
                raise RecordError(msg)
        if len(batches) == 1:
            return first
        cols = {f: np.concatenate([getattr(b, f) for b in batches]) for f in first.ARRAY_FIELDS}
        extra = {c: np.concatenate([b.extra[c] for b in batches]) for c in first.extra}
        return RevisionBatch(first.query_id, first.mode, first.aggs, **cols, extra=extra)

    def schema(self) -> pa.Schema:
        """:data:`REVISION_SCHEMA`, or :func:`revision_schema` of the batch's AggList columns."""
        if not self.extra and set(self.aggs) <= set(AGG_FIELDS):
            return REVISION_SCHEMA
        types = [(c, pa.int64() if c == "count" or self.extra[c].dtype.kind == "i"
                  else pa.float64()) for c in self.aggs]
        aggs = [pa.field(c, t, nullable=True) for c, t in types]
        prevs = [pa.field(f"prev_{c}", t, nullable=True) for c, t in types]
        return with_aggregate_fields([*aggs, *prevs], estimated_columns(self.aggs))

    def to_arrow(self) -> pa.Table:
        """An Arrow table with :meth:`schema` (nulls per the module's convention)."""
        n = len(self)
        arrays: list[pa.Array] = []
        schema = self.schema()
        for field in schema:
            name = field.name
            if name in ("query_id", "mode"):
                # One value repeated: no Python object per row (a third of the call's time).
                arrays.append(pa.repeat(pa.scalar(getattr(self, name), field.type), n))
                continue
            if name.startswith("est_"):
                est, valid = self.estimate(name[4:])
                arrays.append(pa.array(est, type=field.type, mask=~valid))
                continue
            col = self.extra[name] if name in self.extra else getattr(self, name)
            if name in AGG_FIELDS or name in PREV_FIELDS or name in self.extra:
                mask = ~self.valid(name)
                arrays.append(pa.array(col, type=field.type, mask=mask if mask.any() else None))
            else:
                arrays.append(pa.array(col, type=field.type))
        return pa.Table.from_arrays(arrays, schema=schema)

    def rows(self) -> Iterator[Revision]:
        """The rows as :class:`Revision` objects (nulls as None)."""
        n = len(self)
        cols: dict[str, list[Any]] = {}
        for f in self.ARRAY_FIELDS:
            if f == "has_prev":
                continue
            vals = getattr(self, f).tolist()
            if f in AGG_FIELDS or f in PREV_FIELDS:
                valid = self.valid(f).tolist()
                vals = [v if ok else None for v, ok in zip(vals, valid, strict=True)]
            cols[f] = vals
        for e in ESTIMATE_FIELDS:
            est, valid = self.estimate(e[4:])
            cols[e] = [v if ok else None for v, ok in zip(est.tolist(), valid.tolist(),
                                                          strict=True)]
        names = [f.name for f in fields(Revision)]
        for i in range(n):
            args: list[Any] = [self.query_id if nm == "query_id" else self.mode if nm == "mode"
                               else cols[nm][i] for nm in names]
            yield Revision(*args)

    @staticmethod
    def from_records(records: Sequence[Revision], *, query_id: str = "revise",
                     mode: Mode = "revision",
                     aggs: tuple[str, ...] | None = None) -> RevisionBatch:
        """Columns from :class:`Revision` rows (all of one query_id and mode).

        ``aggs`` defaults to the aggregates that are non-null in the first row.
        """
        if not records:
            return RevisionBatch.empty(query_id, mode, aggs or AGG_FIELDS)
        first = records[0]
        if aggs is None:
            aggs = tuple(a for a in AGG_FIELDS if getattr(first, a) is not None)
        cols: dict[str, Any] = {}
        for f in RevisionBatch.ARRAY_FIELDS:
            if f == "has_prev":
                cols[f] = np.array(
                    [any(getattr(r, p) is not None for p in PREV_FIELDS) for r in records],
                    dtype=bool)
            elif f in ("key", "timing"):
                cols[f] = _obj([getattr(r, f) for r in records])
            elif f in ("is_final", "retracted"):
                cols[f] = np.array([getattr(r, f) for r in records], dtype=bool)
            elif f in ("count", "prev_count"):
                cols[f] = np.array([getattr(r, f) or 0 for r in records], dtype=_INT)
            elif f in AGG_FIELDS or f in PREV_FIELDS:
                cols[f] = np.array([np.nan if getattr(r, f) is None else getattr(r, f)
                                    for r in records], dtype=_FLOAT)
            elif f == "completeness":
                cols[f] = np.array([r.completeness for r in records], dtype=_FLOAT)
            else:
                cols[f] = np.array([getattr(r, f) for r in records], dtype=_INT)
        return RevisionBatch(first.query_id, first.mode, tuple(aggs), **cols)


@dataclass(frozen=True, slots=True)
class LateBatch:
    """Too-late (record, window) pairs as columns, one row per :class:`LateRecord`.

    ``key``, ``reason``, ``topic`` object (str); ``value`` float64; ``partition`` int32; every
    other field int64. No nulls. Sorted by ``(key, window_start_ms, window_end_ms, ts_ms,
    partition, offset)`` within each micro-batch.
    """

    key: npt.NDArray[np.object_]
    ts_ms: npt.NDArray[np.int64]
    value: npt.NDArray[np.float64]
    window_start_ms: npt.NDArray[np.int64]
    window_end_ms: npt.NDArray[np.int64]
    watermark_ms: npt.NDArray[np.int64]
    lateness_ms: npt.NDArray[np.int64]
    reason: npt.NDArray[np.object_]
    batch_id: npt.NDArray[np.int64]
    topic: npt.NDArray[np.object_]
    partition: npt.NDArray[np.int32]
    offset: npt.NDArray[np.int64]

    ARRAY_FIELDS: ClassVar[tuple[str, ...]] = (
        "key", "ts_ms", "value", "window_start_ms", "window_end_ms", "watermark_ms",
        "lateness_ms", "reason", "batch_id", "topic", "partition", "offset",
    )
    _DTYPES: ClassVar[dict[str, Any]] = {
        "key": object, "reason": object, "topic": object, "value": _FLOAT,
        "partition": np.int32,
    }

    def __len__(self) -> int:
        return len(self.key)

    @staticmethod
    def empty() -> LateBatch:
        """A batch with no rows."""
        return LateBatch(**{f: np.empty(0, dtype=LateBatch._DTYPES.get(f, _INT))
                            for f in LateBatch.ARRAY_FIELDS})

    @staticmethod
    def concat(batches: Sequence[LateBatch]) -> LateBatch:
        """Rows of all ``batches`` in order."""
        if not batches:
            return LateBatch.empty()
        if len(batches) == 1:
            return batches[0]
        return LateBatch(**{f: np.concatenate([getattr(b, f) for b in batches])
                            for f in LateBatch.ARRAY_FIELDS})

    def take(self, index: npt.NDArray[np.intp]) -> LateBatch:
        """Rows ``index`` as a new batch."""
        return LateBatch(**{f: getattr(self, f)[index] for f in self.ARRAY_FIELDS})

    def to_arrow(self) -> pa.Table:
        """An Arrow table with :data:`LATE_SCHEMA`."""
        return pa.Table.from_arrays(
            [pa.array(getattr(self, f.name), type=f.type) for f in LATE_SCHEMA],
            schema=LATE_SCHEMA,
        )

    def rows(self) -> Iterator[LateRecord]:
        """The rows as :class:`LateRecord` objects."""
        cols = [getattr(self, f).tolist() for f in self.ARRAY_FIELDS]
        for vals in zip(*cols, strict=True):
            yield LateRecord(*vals)

    @staticmethod
    def from_records(records: Sequence[LateRecord]) -> LateBatch:
        """Columns from :class:`LateRecord` rows."""
        cols: dict[str, Any] = {
            f: (_obj([getattr(r, f) for r in records]) if LateBatch._DTYPES.get(f) is object
                else np.array([getattr(r, f) for r in records],
                              dtype=LateBatch._DTYPES.get(f, _INT)))
            for f in LateBatch.ARRAY_FIELDS
        }
        return LateBatch(**cols)
