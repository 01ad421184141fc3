"""Typed records that cross module boundaries (SPEC §4, §6), their Arrow schemas and batches.

One record type per output: :class:`Revision`, :class:`LateRecord`, :class:`DeadLetter`, each a
frozen slotted dataclass with one ``to_row`` / ``from_row`` pair (JSON-ready plain Python values,
field names exactly as the spec). The engine works on whole micro-batches, so it returns the
columnar ``RevisionBatch`` and ``LateBatch`` of :mod:`revise.record_batches` (numpy arrays,
``to_arrow()``, ``rows()``).

Null convention of :class:`RevisionBatch` (no NaN tricks, a NaN sum is a real value):
    * an aggregate column (``count`` … ``mean``) is null in every row when its name is not in
      ``batch.aggs`` (the requested aggregates);
    * a ``prev_*`` column is null where ``has_prev`` is False (revision 0, watermark mode) or
      when its aggregate is not requested;
    * an ``est_*`` column (derived, not stored: aggregate / ``completeness``) is null where its
      aggregate is null or ``completeness`` is 0.
    The arrays hold a placeholder there (0 for ``count``, NaN for doubles); use
    :meth:`RevisionBatch.valid` to get a column's mask.

Trace: ``t=1200 → rev 0 of [1000,2000) count=1 prev_count=null (EARLY)``;
``late t=1100 at watermark 2100 → rev 1 count=2 prev_count=1 n_late=1 (LATE)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import pyarrow as pa

from revise.aggspec import AggList
from revise.errors import ReviseError
from revise.vocab import TIMINGS, Mode, Timing, as_mode, as_timing
from windows.aggregates import REGISTRY

__all__ = [
    "AGG_FIELDS",
    "DEAD_LETTER_SCHEMA",
    "ESTIMATE_FIELDS",
    "LATE_SCHEMA",
    "PREV_FIELDS",
    "REVISION_SCHEMA",
    "estimated_columns",
    "revision_schema",
    "with_aggregate_fields",
    "TIMINGS",
    "DeadLetter",
    "RecordError",
    "LateRecord",
    "Revision",
]

AGG_FIELDS: tuple[str, ...] = tuple(REGISTRY)
"""The aggregate columns of a revision: the names in :data:`windows.aggregates.REGISTRY`."""
PREV_FIELDS: tuple[str, ...] = tuple(f"prev_{a}" for a in AGG_FIELDS)


def estimated_columns(columns: Sequence[str]) -> tuple[str, ...]:
    """The additive aggregate columns among ``columns``: ``count`` and the sums.

    Each gets an ``est_`` column (its estimated final value, SPEC §4); min, max, mean,
    percentiles and distinct counts do not scale with the share of records counted.
    Trace: ``("count", "p99_lat", "sum_amount")`` → ``("count", "sum_amount")``.
    """
    return tuple(c for c in columns if c in ("count", "sum") or c.startswith("sum_"))


ESTIMATE_FIELDS: tuple[str, ...] = tuple(f"est_{a}" for a in estimated_columns(AGG_FIELDS))
"""The ``est_*`` columns of the bare form: ``est_count``, ``est_sum``."""



class RecordError(ReviseError, ValueError):
    """Record batches that cannot be combined (e.g. of different queries)."""


# ``count`` is a long, every other aggregate a double (SPEC §4).
_AGG_TYPES = {a: pa.int64() if a == "count" else pa.float64() for a in AGG_FIELDS}

REVISION_SCHEMA = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("mode", pa.string(), nullable=False),
        pa.field("key", pa.string(), nullable=False),
        pa.field("window_start_ms", pa.int64(), nullable=False),
        pa.field("window_end_ms", pa.int64(), nullable=False),
        pa.field("revision", pa.int32(), nullable=False),
        pa.field("timing", pa.string(), nullable=False),
        pa.field("is_final", pa.bool_(), nullable=False),
        pa.field("retracted", pa.bool_(), nullable=False),
        *[pa.field(a, _AGG_TYPES[a], nullable=True) for a in AGG_FIELDS],
        *[pa.field(f"prev_{a}", _AGG_TYPES[a], nullable=True) for a in AGG_FIELDS],
        pa.field("n_late", pa.int64(), nullable=False),
        pa.field("max_lateness_ms", pa.int64(), nullable=False),
        pa.field("watermark_ms", pa.int64(), nullable=False),
        pa.field("batch_id", pa.int64(), nullable=False),
        pa.field("emitted_at_ms", pa.int64(), nullable=False),
        pa.field("completeness", pa.float64(), nullable=False),
        *[pa.field(e, pa.float64(), nullable=True) for e in ESTIMATE_FIELDS],
    ]
)
"""Arrow schema of a revision row (SPEC §4); aggregates, ``prev_*`` and ``est_*`` are nullable."""

_N_AGG = 2 * len(AGG_FIELDS)
_AGG_AT = REVISION_SCHEMA.get_field_index(AGG_FIELDS[0])
_EST_AT = REVISION_SCHEMA.get_field_index(ESTIMATE_FIELDS[0])


def revision_schema(aggs: AggList) -> pa.Schema:
    """Arrow schema of a revision row for ``aggs`` (SPEC §4, §7).

    The bare form (every column one of :data:`AGG_FIELDS`) gives :data:`REVISION_SCHEMA`
    itself: all five aggregate columns, null where not requested; otherwise the columns
    ``count`` … ``mean`` and their ``prev_*`` are replaced by ``aggs``' columns (``count``
    int64, ``FN_FIELD`` float64, ``distinct_FIELD`` int64), then their ``prev_`` columns, and
    ``est_count``, ``est_sum`` by an ``est_`` column (float64) per count and sum requested.

    Trace: ``count,p99(lat)`` → ``…, retracted, count, p99_lat, prev_count, prev_p99_lat,
    n_late, …, emitted_at_ms, completeness, est_count``.
    """
    if aggs.bare:
        return REVISION_SCHEMA
    return with_aggregate_fields(aggs.arrow_fields(), estimated_columns(aggs.columns))


def with_aggregate_fields(columns: Sequence[pa.Field], estimated: Sequence[str]) -> pa.Schema:
    """:data:`REVISION_SCHEMA` with ``count`` … ``prev_mean`` replaced by ``columns``.

    ``est_count``, ``est_sum`` are replaced by ``est_<c>`` (float64) for each column ``c`` of
    ``estimated``.
    """
    base = list(REVISION_SCHEMA)
    est = [pa.field(f"est_{c}", pa.float64(), nullable=True) for c in estimated]
    return pa.schema([*base[:_AGG_AT], *columns, *base[_AGG_AT + _N_AGG:_EST_AT], *est])

LATE_SCHEMA = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("ts_ms", pa.int64(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
        pa.field("window_start_ms", pa.int64(), nullable=False),
        pa.field("window_end_ms", pa.int64(), nullable=False),
        pa.field("watermark_ms", pa.int64(), nullable=False),
        pa.field("lateness_ms", pa.int64(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("batch_id", pa.int64(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
    ]
)
"""Arrow schema of a too-late record (SPEC §6)."""

DEAD_LETTER_SCHEMA = pa.schema(
    [
        pa.field("raw_value", pa.string(), nullable=True),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("batch_id", pa.int64(), nullable=False),
    ]
)
"""Arrow schema of a bad input record (SPEC §6); ``raw_value`` is null for a null Kafka value."""


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


@dataclass(frozen=True, slots=True)
class Revision:
    """One emitted revision of a (key, window ``[window_start_ms, window_end_ms)``) (SPEC §4).

    Aggregates not requested, and every ``prev_*`` at revision 0 or in watermark mode, are None.
    Times are int64 epoch ms. ``completeness`` is the estimated share (0–1) of the window's
    eventually accepted records counted (1.0 on the FINAL); ``est_count`` / ``est_sum`` are
    ``count`` / ``sum`` divided by it (None when the aggregate is not requested or
    ``completeness`` is 0).
    """

    query_id: str
    mode: Mode
    key: str
    window_start_ms: int
    window_end_ms: int
    revision: int
    timing: Timing
    is_final: bool
    retracted: bool
    count: int | None
    sum: float | None
    min: float | None
    max: float | None
    mean: float | None
    prev_count: int | None
    prev_sum: float | None
    prev_min: float | None
    prev_max: float | None
    prev_mean: float | None
    n_late: int
    max_lateness_ms: int
    watermark_ms: int
    batch_id: int
    emitted_at_ms: int
    completeness: float
    est_count: float | None
    est_sum: float | None

    def to_row(self) -> dict[str, Any]:
        """JSON-ready dict with the spec's field names (None for null)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @staticmethod
    def from_row(row: Mapping[str, Any]) -> Revision:
        """Inverse of :meth:`to_row`; also accepts Arrow / pandas rows (numpy scalars)."""
        return Revision(
            query_id=str(row["query_id"]),
            mode=as_mode(row["mode"]),
            key=str(row["key"]),
            window_start_ms=int(row["window_start_ms"]),
            window_end_ms=int(row["window_end_ms"]),
            revision=int(row["revision"]),
            timing=as_timing(row["timing"]),
            is_final=bool(row["is_final"]),
            retracted=bool(row["retracted"]),
            count=_opt_int(row["count"]),
            sum=_opt_float(row["sum"]),
            min=_opt_float(row["min"]),
            max=_opt_float(row["max"]),
            mean=_opt_float(row["mean"]),
            prev_count=_opt_int(row["prev_count"]),
            prev_sum=_opt_float(row["prev_sum"]),
            prev_min=_opt_float(row["prev_min"]),
            prev_max=_opt_float(row["prev_max"]),
            prev_mean=_opt_float(row["prev_mean"]),
            n_late=int(row["n_late"]),
            max_lateness_ms=int(row["max_lateness_ms"]),
            watermark_ms=int(row["watermark_ms"]),
            batch_id=int(row["batch_id"]),
            emitted_at_ms=int(row["emitted_at_ms"]),
            completeness=float(row["completeness"]),
            est_count=_opt_float(row["est_count"]),
            est_sum=_opt_float(row["est_sum"]),
        )


@dataclass(frozen=True, slots=True)
class LateRecord:
    """A too-late (record, window) pair (SPEC §6): ``lateness_ms = watermark_ms - ts_ms``.

    For sessions the window is the record's own span ``[ts_ms, ts_ms + gap)``.
    """

    key: str
    ts_ms: int
    value: float
    window_start_ms: int
    window_end_ms: int
    watermark_ms: int
    lateness_ms: int
    reason: str
    batch_id: int
    topic: str
    partition: int
    offset: int

    def to_row(self) -> dict[str, Any]:
        """JSON-ready dict with the spec's field names."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @staticmethod
    def from_row(row: Mapping[str, Any]) -> LateRecord:
        """Inverse of :meth:`to_row`."""
        return LateRecord(
            key=str(row["key"]),
            ts_ms=int(row["ts_ms"]),
            value=float(row["value"]),
            window_start_ms=int(row["window_start_ms"]),
            window_end_ms=int(row["window_end_ms"]),
            watermark_ms=int(row["watermark_ms"]),
            lateness_ms=int(row["lateness_ms"]),
            reason=str(row["reason"]),
            batch_id=int(row["batch_id"]),
            topic=str(row["topic"]),
            partition=int(row["partition"]),
            offset=int(row["offset"]),
        )


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Bad input (SPEC §6): the raw Kafka value as text (None if the value was null)."""

    raw_value: str | None
    reason: str
    topic: str
    partition: int
    offset: int
    batch_id: int

    def to_row(self) -> dict[str, Any]:
        """JSON-ready dict with the spec's field names."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @staticmethod
    def from_row(row: Mapping[str, Any]) -> DeadLetter:
        """Inverse of :meth:`to_row`."""
        raw = row["raw_value"]
        return DeadLetter(
            raw_value=None if raw is None else str(raw),
            reason=str(row["reason"]),
            topic=str(row["topic"]),
            partition=int(row["partition"]),
            offset=int(row["offset"]),
            batch_id=int(row["batch_id"]),
        )
