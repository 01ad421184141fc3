"""The ``--aggs`` option: which aggregates of which fields a revision carries (SPEC §7).

Two forms, never mixed in one list:

- ``FN(FIELD)`` items and ``count``: FN is ``sum``, ``min``, ``max``, ``mean``, ``pNN``
  (percentile, NN a whole number 1–99 without a leading zero: ``p5``, ``p50``, ``p99``) or
  ``distinct``; FIELD is a dotted path into nested JSON objects (``payload.user.id``) whose
  segments hold letters, digits and ``_``. Output columns are ``count`` and ``FN_FIELD`` with
  the dots of FIELD turned into ``_`` (``distinct(ev.user)`` → ``distinct_ev_user``).
- The bare form ``count,sum,min,max,mean`` (any non-empty subset) is sugar for the same
  aggregates of ``--value-field``, parsed into the same :class:`AggSpec` s; its output columns
  are the function names ``count``, ``sum``, ``min``, ``max``, ``mean`` (SPEC §4).

Every output column has a ``prev_`` column beside it. Function names ignore case and spaces;
field paths are case-sensitive.

Trace: ``AggList.parse("count,p99(http.latency_ms),distinct(user)")`` → columns ``count``,
``p99_http_latency_ms``, ``distinct_user``; numeric fields ``("http.latency_ms",)``, distinct
fields ``("user",)``, a value is required.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Literal

import pyarrow as pa

from revise.errors import ConfigError
from windows.aggregates import REGISTRY, Aggregate

__all__ = ["BARE_NAMES", "AggKind", "AggList", "AggSpec", "field_column"]

AggKind = Literal["count", "numeric", "distinct"]

BARE_NAMES: tuple[str, ...] = ("count", "sum", "min", "max", "mean")
"""The bare form's names, in SPEC §4 output column order."""

_ITEM = re.compile(r"^([A-Za-z][A-Za-z0-9.]*)\s*(?:\((.*)\))?$", re.DOTALL)
_PERCENTILE = re.compile(r"^p([1-9][0-9]?)$")
_SEGMENT = re.compile(r"^\w+$")
_HELP = "write e.g. count,sum(amount),p99(latency_ms),distinct(user)"


def field_column(field: str) -> str:
    """The column-name form of a dotted field path: ``ev.user`` → ``ev_user``."""
    return field.replace(".", "_")


@dataclass(frozen=True, slots=True)
class AggSpec:
    """One requested aggregate and the output column that carries it.

    Attributes:
        fn: ``count``, ``sum``, ``min``, ``max``, ``mean``, ``pNN`` or ``distinct``.
        field: The dotted JSON path aggregated; ``None`` for ``count``.
        column: The output column: ``count``; the function name (``sum``) in the bare form;
            else ``FN_FIELD``.
        kind: ``count`` (needs no field), ``numeric`` (a finite float64 per record) or
            ``distinct`` (a canonical text per record).
        aggregate: The registered :class:`~windows.Aggregate` computing ``count`` or a
            ``numeric`` aggregate other than ``pNN`` (its state columns and result); ``None``
            for ``pNN`` and ``distinct``, which the engine computes from sketches.
    """

    fn: str
    field: str | None
    column: str
    kind: AggKind
    aggregate: Aggregate | None = dc_field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        """The aggregate as ``--aggs`` names it: ``count``, ``sum`` (bare form), ``sum(a)``.

        It names the aggregate in stored state's version tags and in :class:`AggList`'s text.
        """
        return self.fn if self.column == self.fn else f"{self.fn}({self.field})"

    @property
    def percentile(self) -> int | None:
        """NN of a ``pNN`` aggregate (1–99, percent), else ``None``."""
        m = _PERCENTILE.match(self.fn)
        return int(m.group(1)) if m else None

    @property
    def arrow_type(self) -> pa.DataType:
        """The column's Arrow type: ``int64`` for count and distinct, else ``float64``.

        Counts are numbers of records / distinct values; sum, min, max, mean and percentiles
        are in the aggregated field's own unit.
        """
        return pa.int64() if self.kind in ("count", "distinct") else pa.float64()

    @property
    def prev_column(self) -> str:
        """The column holding this aggregate's value at the previous revision."""
        return f"prev_{self.column}"


@dataclass(frozen=True, slots=True)
class AggList:
    """The parsed ``--aggs`` option, in the order written.

    Attributes:
        specs: The aggregates; their columns are unique, and no two distinct field paths share
            a column form (``a.b`` and ``a_b`` would both become ``..._a_b``).
        value_field: The record's ``--value-field`` (dotted path): what the bare form
            aggregates, and the field an :class:`~revise.engine.InputBatch`'s ``values`` holds.
    """

    specs: tuple[AggSpec, ...]
    value_field: str = "value"

    @staticmethod
    def parse(text: str, *, value_field: str = "value",
              registry: Mapping[str, Aggregate] = REGISTRY) -> AggList:
        """Parse ``--aggs`` text; ``value_field`` is the field the bare form aggregates.

        ``registry`` holds the aggregates ``FN(FIELD)`` may name besides ``pNN`` and
        ``distinct`` (:data:`windows.aggregates.REGISTRY`: ``sum``, ``min``, ``max``,
        ``mean``); the bare form names only :data:`BARE_NAMES`.

        Raises:
            ConfigError: On an empty list, an unknown function, a malformed item or field, a
                mix of the two forms, a repeated column or two fields with one column form;
                the message names the item and shows how to write it.
        """
        where = f'--aggs "{text}"'
        if not isinstance(text, str):
            msg = f"--aggs must be text such as count,sum(amount), got {text!r}"
            raise ConfigError(msg)
        items = [p.strip() for p in text.split(",")]
        if not any(items):
            msg = f"{where} names no aggregate; {_HELP}"
            raise ConfigError(msg)
        if "" in items:
            msg = f"{where} has an empty item between commas; {_HELP}"
            raise ConfigError(msg)
        parsed = [_parse_item(item, where, value_field, registry) for item in items]
        bare = [item for item, (fn, field) in zip(items, parsed, strict=True)
                if field is None and fn != "count"]
        called = [item for item, (_, field) in zip(items, parsed, strict=True) if field]
        if bare and called:
            fixed = ",".join(f"{fn}({field or value_field})" if fn != "count" else fn
                             for fn, field in parsed)
            msg = (f"{where} mixes the bare form ({bare[0]}, which aggregates --value-field) "
                   f"with FN(FIELD) ({called[0]}); use one form, e.g. {fixed}")
            raise ConfigError(msg)
        specs = tuple(_spec(fn, field, value_field, registry) for fn, field in parsed)
        result = AggList(specs, value_field)
        result.check(where)
        return result

    def check(self, where: str = "aggs") -> None:
        """Validate columns: unique, and one column form per field path.

        Raises:
            ConfigError: Naming the repeated column or the two clashing fields.
        """
        seen: set[str] = set()
        for s in self.specs:
            if s.column in seen:
                msg = f"{where} asks twice for column {s.column!r}; list each aggregate once"
                raise ConfigError(msg)
            seen.add(s.column)
        forms: dict[str, str] = {}
        for f in (*self.numeric_fields, *self.distinct_fields):
            other = forms.setdefault(field_column(f), f)
            if other != f:
                msg = (f"{where}: fields {other!r} and {f!r} would both be named "
                       f"{field_column(f)!r} in the output columns; rename one of them in "
                       "the input")
                raise ConfigError(msg)

    @property
    def columns(self) -> tuple[str, ...]:
        """Output columns in the order written (``prev_`` columns not included)."""
        return tuple(s.column for s in self.specs)

    @property
    def bare(self) -> bool:
        """Whether every column is named by its function alone (the bare form).

        Those are SPEC §4's ``count``, ``sum``, ``min``, ``max``, ``mean``: a revision then
        carries all five, null where not requested.
        """
        return all(s.column == s.fn for s in self.specs)

    @property
    def numeric_fields(self) -> tuple[str, ...]:
        """Distinct field paths read as finite float64 (sum/min/max/mean/pNN), first-seen order."""
        return tuple(dict.fromkeys(s.field for s in self.specs
                                   if s.kind == "numeric" and s.field is not None))

    @property
    def distinct_fields(self) -> tuple[str, ...]:
        """Field paths read as canonical text for ``distinct``, first-seen order."""
        return tuple(dict.fromkeys(s.field for s in self.specs
                                   if s.kind == "distinct" and s.field is not None))

    @property
    def value_required(self) -> bool:
        """Whether a record needs any aggregated field (anything but ``count``)."""
        return any(s.kind != "count" for s in self.specs)

    def arrow_fields(self) -> list[pa.Field]:
        """Nullable Arrow fields of every column followed by every ``prev_`` column."""
        return [*(pa.field(s.column, s.arrow_type, nullable=True) for s in self.specs),
                *(pa.field(s.prev_column, s.arrow_type, nullable=True) for s in self.specs)]

    def __str__(self) -> str:
        return ",".join(s.name for s in self.specs)


def _parse_item(item: str, where: str, value_field: str,
                registry: Mapping[str, Aggregate]) -> tuple[str, str | None]:
    """``"p99(a.b)"`` → ``("p99", "a.b")``; ``"sum"`` → ``("sum", None)``."""
    m = _ITEM.match(item)
    if not m:
        msg = f"{where}: cannot read {item!r}; write count or FN(FIELD), {_HELP}"
        raise ConfigError(msg)
    fn, arg = m.group(1).lower(), m.group(2)
    looks_percentile = re.match(r"^p[0-9.]", fn) is not None
    if fn not in ("distinct", *registry) and not looks_percentile:
        known = ", ".join((*registry, "pNN (NN 1-99, e.g. p99)"))
        msg = f"{where}: unknown aggregate {m.group(1)!r}; choose from {known} and distinct"
        raise ConfigError(msg)
    if looks_percentile and not _PERCENTILE.match(fn):
        msg = (f"{where}: percentile {m.group(1)!r} must be p1 ... p99, a whole percent "
               "without a leading zero, e.g. p50, p95, p99")
        raise ConfigError(msg)
    if fn == "count":
        if arg is not None:
            msg = f"{where}: count takes no field (it counts records); write count"
            raise ConfigError(msg)
        return fn, None
    if arg is None:
        if fn in BARE_NAMES:
            return fn, None
        msg = f"{where}: {fn} needs a field; write {fn}(FIELD), e.g. {fn}({value_field})"
        raise ConfigError(msg)
    field = arg.strip()
    if not field or not all(_SEGMENT.match(seg) for seg in field.split(".")):
        msg = (f"{where}: field {arg!r} of {item!r} must be a dotted path of names made of "
               f"letters, digits and _, e.g. {fn}(amount) or {fn}(payload.user.id)")
        raise ConfigError(msg)
    return fn, field


def _spec(fn: str, path: str | None, value_field: str,
          registry: Mapping[str, Aggregate]) -> AggSpec:
    """The spec of one parsed item: a bare ``sum`` is ``sum`` of ``value_field``, column ``sum``."""
    if fn == "count":
        return AggSpec("count", None, "count", "count", registry["count"])
    if path is None:
        return AggSpec(fn, value_field, fn, "numeric", registry[fn])
    if fn == "distinct":
        return AggSpec(fn, path, f"distinct_{field_column(path)}", "distinct")
    return AggSpec(fn, path, f"{fn}_{field_column(path)}", "numeric", registry.get(fn))
