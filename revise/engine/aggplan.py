"""The aggregates of an :class:`~revise.aggspec.AggList` as engine state: columns and sketches.

:class:`AggPlan` is an :class:`~windows.AggregateSet` (the engine reduces, merges and stores
its state columns) plus one sketch state per sketch:

- The record values are the numeric fields (:attr:`AggPlan.numeric_fields`): a float64
  vector for one field, a matrix with one column per field for several. A field missing from
  the batch's ``numeric`` is read from its ``values`` when it is the AggList's value field.
- The state columns of a ``FN(FIELD)`` aggregate of field ``f`` are named ``f:sum``,
  ``f:min``, ``f:max``; those of a bare-form aggregate (column ``sum``, ``min``, … of the
  value field) ``sum``, ``min``, ``max``; ``count`` is shared (every accepted record has every
  field). Each ``pNN(f)`` reads one quantile sketch ``q:f`` shared by all percentiles of
  ``f``; each ``distinct(f)`` one distinct sketch ``d:f`` over 63-bit hashes of the field's
  canonical text.

Sketch states are :class:`~windows.SlotTable` s, one group per window row, merged exactly
(integer counts / register maxima), so a FINAL is the one-pass sketch of the window's records.

Trace (``count,sum(a),p50(a),distinct(u)``): state columns ``count, a:sum``; sketches
``q:a`` and ``d:u``; records ``a=[1, 3] u=["x", "x"]`` in one window → ``count=2 sum_a=4.0
p50_a≈1.0 distinct_u=1``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from revise.aggspec import AggList, AggSpec
from windows import COUNT, Aggregate, AggregateSet, StateColumn, get_aggregate
from windows.sketches import DistinctSketch, QuantileSketch, SlotTable

__all__ = ["AggPlan", "Sketch", "Sketches", "concat_sketches", "insert_sketches", "take_sketches"]

Sketch = QuantileSketch | DistinctSketch
Sketches = dict[str, SlotTable]
"""Sketch states by sketch name (``q:FIELD`` / ``d:FIELD``), one group per window row."""

_QUANTILE = QuantileSketch()
_DISTINCT = DistinctSketch()


@dataclass(frozen=True, slots=True)
class _SketchUse:
    """One sketch of the plan: its kernels and the input column it reads (numeric or hash)."""

    sketch: Sketch
    column: int


def _picker(j: int | None, base: Callable[[npt.NDArray[np.float64]], npt.NDArray[np.generic]]
            ) -> Callable[[npt.NDArray[np.float64]], npt.NDArray[np.generic]]:
    """Contribution of column ``j`` of the record-value matrix through ``base`` (None: a vector)."""
    if j is None:
        return base
    return lambda v: base(v[:, j])


class AggPlan(AggregateSet):
    """State columns (an AggregateSet) and sketches of one AggList; see the module docstring."""

    __slots__ = ("agg_list", "distinct_fields", "numeric_fields", "sketches")

    def __init__(self, agg_list: AggList) -> None:
        self.agg_list = agg_list
        self.numeric_fields: tuple[str, ...] = agg_list.numeric_fields
        self.distinct_fields: tuple[str, ...] = agg_list.distinct_fields
        self.sketches: dict[str, _SketchUse] = {}
        self.aggregates = (get_aggregate("count"),)
        one = len(self.numeric_fields) == 1
        cols: dict[str, StateColumn] = {"count": COUNT}
        for s in agg_list.specs:
            if s.kind == "distinct":
                self.sketches[f"d:{s.field}"] = _SketchUse(
                    _DISTINCT, self.distinct_fields.index(str(s.field)))
            elif s.percentile is not None:
                self.sketches[f"q:{s.field}"] = _SketchUse(
                    _QUANTILE, self.numeric_fields.index(str(s.field)))
            elif s.kind == "numeric":
                j = None if one else self.numeric_fields.index(str(s.field))
                for c in _kernel(s).columns:
                    name = _state_name(s, c.name)
                    cols.setdefault(name, StateColumn(name, c.dtype, c.ufunc, c.identity,
                                                      _picker(j, c.contribution)))
        self.columns = tuple(cols.values())

    @property
    def tags(self) -> tuple[str, ...]:
        """Version tags stored with state: ``count:1``, ``sum:1``, ``sum(a):1``, ``p99(a)``.

        One per aggregate in order (a sketch aggregate's own version is its sketch's tag),
        then ``q:a=…`` / ``d:u=…`` per sketch.
        """
        out = [s.name if s.aggregate is None else f"{s.name}:{s.aggregate.version}"
               for s in self.agg_list.specs]
        return (*out, *(f"{n}={u.sketch.tag}" for n, u in self.sketches.items()))

    def record_values(self, values: npt.NDArray[np.float64],
                      numeric: Mapping[str, npt.NDArray[np.float64]],
                      distinct: Mapping[str, npt.NDArray[np.int64]]) -> npt.NDArray[np.float64]:
        """What the state columns reduce: one numeric field's vector, else the field matrix.

        ``values`` is the record value (the AggList's ``value_field``); ``numeric`` /
        ``distinct`` the record's fields by path (float64 / 63-bit hashes), each as long as
        ``values``.

        Raises:
            KeyError: Naming the first numeric or distinct field of the plan that is missing.
        """
        def field(f: str) -> npt.NDArray[np.float64]:
            if f in numeric:
                return numeric[f]
            if f == self.agg_list.value_field:
                return values
            raise KeyError(f)

        cols = [field(f) for f in self.numeric_fields]
        missing = [f for f in self.distinct_fields if f not in distinct]
        if missing:
            raise KeyError(missing[0])
        if len(cols) == 1:
            return cols[0]
        # records are ranked by this matrix (value_ranks): sketches do not depend on order
        return np.column_stack(cols) if cols else np.empty((len(values), 0))

    def empty_sketches(self, n: int) -> Sketches:
        """Sketch states of ``n`` empty windows."""
        return {name: u.sketch.empty(n) for name, u in self.sketches.items()}

    def build_sketches(self, numeric: Mapping[str, npt.NDArray[np.float64]],
                       distinct: Mapping[str, npt.NDArray[np.int64]], rec: npt.NDArray[np.intp],
                       groups: npt.NDArray[np.int64], n: int) -> Sketches:
        """Sketches of ``n`` groups holding record ``rec[i]`` in ``groups[i]``.

        ``numeric`` / ``distinct``: the records' fields by path (float64 / 63-bit hashes).
        """
        out: Sketches = {}
        for name, u in self.sketches.items():
            if isinstance(u.sketch, QuantileSketch):
                vals = numeric[self.numeric_fields[u.column]][rec]
                out[name] = u.sketch.from_values(vals, groups, n)
            else:
                hashes = distinct[self.distinct_fields[u.column]][rec]
                out[name] = u.sketch.from_hashes(hashes, groups, n)
        return out

    def sketch(self, name: str) -> Sketch:
        """The kernels of sketch ``name``."""
        return self.sketches[name].sketch

    def column_results(self, state: Mapping[str, npt.NDArray[np.generic]],
                       sketches: Sketches) -> dict[str, npt.NDArray[Any]]:
        """Output column values per window: ``count`` int64, ``FN_FIELD`` float64/int64."""
        out: dict[str, npt.NDArray[Any]] = {}
        for s in self.agg_list.specs:
            out[s.column] = self._result(s, state, sketches)
        return out

    def _result(self, s: AggSpec, state: Mapping[str, npt.NDArray[np.generic]],
                sketches: Sketches) -> npt.NDArray[Any]:
        if s.kind == "count":
            return np.asarray(state["count"], dtype=np.int64)
        if s.kind == "distinct":
            return _DISTINCT.result(sketches[f"d:{s.field}"])
        if s.percentile is not None:
            return _QUANTILE.quantile(sketches[f"q:{s.field}"], s.percentile)
        agg = _kernel(s)
        view = {c.name: state[_state_name(s, c.name)] for c in agg.columns}
        return np.asarray(agg.result(view), dtype=np.float64)


def _state_name(s: AggSpec, column: str) -> str:
    """The state column holding ``column`` of spec ``s``: ``count``, ``sum`` or ``a:sum``."""
    return column if column == "count" or s.column == s.fn else f"{s.field}:{column}"


def _kernel(s: AggSpec) -> Aggregate:
    """The registered aggregate computing numeric spec ``s`` (the one parse resolved)."""
    assert s.aggregate is not None, f"{s.fn}({s.field}) has no aggregate kernel"
    return s.aggregate


def take_sketches(sk: Sketches, idx: npt.NDArray[Any]) -> Sketches:
    """The groups ``idx`` (positions or a mask) of every sketch."""
    return {n: t.take(idx) for n, t in sk.items()}


def concat_sketches(a: Sketches, b: Sketches) -> Sketches:
    """The groups of ``a`` then those of ``b``, per sketch."""
    return {n: SlotTable.concat((t, b[n])) for n, t in a.items()}


def insert_sketches(sk: Sketches, pos: npt.NDArray[np.intp], new: Sketches) -> Sketches:
    """``new``'s groups inserted before positions ``pos`` (as ``np.insert``), per sketch."""
    return {n: t.insert(pos, new[n]) for n, t in sk.items()}

