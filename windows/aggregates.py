"""Mergeable aggregates: state kept apart from result, built on a few shared state columns.

An aggregate's *state* is a handful of numeric columns (one value per group), each reduced by
one associative, commutative numpy ufunc (``add``, ``minimum``, ``maximum``); its *result* is
computed from the state only when emitted. ``mean`` therefore stores ``sum`` and ``count``, and
two partial states merge exactly (``merge``), which is what session merging and incremental
micro-batches need. Aggregates sharing a state column (``sum`` and ``mean`` both use ``sum``)
share it in an :class:`AggregateSet`, so a window holds each column once.

Every aggregate carries a ``version``; stored state records ``name:version`` pairs so a changed
meaning can never silently reuse old state.

Defining an aggregate is local to this module: its state columns and result, then
:func:`register`. The names registered when this module is imported are the aggregates revise
offers: ``--aggs`` accepts each as ``FN(FIELD)`` (``revise.aggspec.AggList.parse``, which also
takes another registry), and SPEC §4's revision columns of ``revise.records`` (a double each,
``count`` a long, plus ``prev_*``) derive from :data:`REGISTRY`, so a new one registered here
becomes a new revision column (a change of the SPEC §4 contract, to be made with it); in a
registry of its own it only becomes ``FN_FIELD`` columns. E.g. a population variance::

    SUMSQ = StateColumn("sumsq", np.float64, np.add, 0.0, lambda v: v * v)
    register(Aggregate("variance", 1, (COUNT, SUM, SUMSQ),
                       lambda s: s["sumsq"] / s["count"] - (s["sum"] / s["count"]) ** 2))

Trace (one group, values 3 then 5): ``update → count=2 sum=8 min=3 max=5``; result ``mean=4.0``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = [
    "COUNT",
    "MAX",
    "MIN",
    "REGISTRY",
    "SUM",
    "Aggregate",
    "AggregateSet",
    "State",
    "StateColumn",
    "get_aggregate",
    "register",
    "segment_starts",
]

State = dict[str, npt.NDArray[np.generic]]
"""State columns by name, each one value per group."""


def segment_starts(sorted_ids: npt.NDArray[np.generic]) -> npt.NDArray[np.intp]:
    """Indices where a run of equal values begins in a sorted array (``[0, ...]``; empty → empty).

    Trace: ``[4, 4, 7, 9, 9] → [0, 2, 3]``.
    """
    n = len(sorted_ids)
    if n == 0:
        return np.empty(0, dtype=np.intp)
    change = np.flatnonzero(sorted_ids[1:] != sorted_ids[:-1]) + 1
    return np.concatenate((np.zeros(1, dtype=np.intp), change.astype(np.intp)))


@dataclass(frozen=True, slots=True)
class StateColumn:
    """One column of aggregate state.

    Attributes:
        name: Column name, shared by every aggregate that uses it.
        dtype: Storage dtype (``np.int64`` or ``np.float64``).
        ufunc: Associative, commutative reduction (``np.add``, ``np.minimum``, ``np.maximum``).
        identity: Value of an empty group (``0``, ``+inf``, ``-inf``).
        contribution: Maps record values (float64) to what each record adds to the column.
    """

    name: str
    dtype: type[np.generic]
    ufunc: np.ufunc
    identity: float
    contribution: Callable[[npt.NDArray[np.float64]], npt.NDArray[np.generic]] = field(
        compare=False
    )

    def empty(self, n: int) -> npt.NDArray[np.generic]:
        """State of ``n`` empty groups."""
        return np.full(n, self.identity, dtype=self.dtype)

    def reduce_segments(
        self, contributions: npt.NDArray[np.generic], starts: npt.NDArray[np.intp]
    ) -> npt.NDArray[np.generic]:
        """Reduce contiguous segments (``starts`` from :func:`segment_starts`) of sorted rows."""
        if len(starts) == 0:
            return self.empty(0)
        return self.ufunc.reduceat(contributions.astype(self.dtype, copy=False), starts)

    def reduce_groups(
        self, contributions: npt.NDArray[np.generic], group_ids: npt.NDArray[np.intp], n: int
    ) -> npt.NDArray[np.generic]:
        """Reduce unsorted rows into ``n`` groups by ``group_ids`` (``0 <= id < n``)."""
        if self.ufunc is np.add:
            sums = np.bincount(group_ids, weights=contributions, minlength=n)
            return sums.astype(self.dtype)
        out = self.empty(n)
        self.ufunc.at(out, group_ids, contributions.astype(self.dtype, copy=False))
        return out


def _ones(v: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    return np.ones(len(v), dtype=np.int64)


def _identity(v: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return v


COUNT = StateColumn("count", np.int64, np.add, 0, _ones)
SUM = StateColumn("sum", np.float64, np.add, 0.0, _identity)
MIN = StateColumn("min", np.float64, np.minimum, np.inf, _identity)
MAX = StateColumn("max", np.float64, np.maximum, -np.inf, _identity)


@dataclass(frozen=True, slots=True)
class Aggregate:
    """A mergeable aggregate: state columns plus a result function over them.

    Attributes:
        name: Public name (``"mean"``), also the output column name.
        version: Bumped whenever the meaning of the stored state changes.
        columns: State columns it needs.
        finish: Computes the result (one value per group) from the state columns.
    """

    name: str
    version: int
    columns: tuple[StateColumn, ...]
    finish: Callable[[Mapping[str, npt.NDArray[np.generic]]], npt.NDArray[np.generic]] = field(
        compare=False
    )

    @property
    def tag(self) -> str:
        """``name:version``, stored with state."""
        return f"{self.name}:{self.version}"

    def initial(self, n: int) -> State:
        """State of ``n`` empty groups."""
        return {c.name: c.empty(n) for c in self.columns}

    def update(
        self, state: State, values: npt.NDArray[np.float64], group_ids: npt.NDArray[np.intp]
    ) -> State:
        """New state with ``values[i]`` added to group ``group_ids[i]`` (inputs unchanged)."""
        n = len(next(iter(state.values())))
        ids = np.asarray(group_ids, dtype=np.intp)
        part = {c.name: c.reduce_groups(c.contribution(values), ids, n) for c in self.columns}
        return self.merge(state, part)

    def merge(self, a: State, b: State) -> State:
        """Element-wise merge of two states of the same length (associative, commutative)."""
        return {c.name: c.ufunc(a[c.name], b[c.name]) for c in self.columns}

    def result(self, state: Mapping[str, npt.NDArray[np.generic]]) -> npt.NDArray[np.generic]:
        """Result per group; only meaningful for non-empty groups."""
        return self.finish(state)


def _mean(s: Mapping[str, npt.NDArray[np.generic]]) -> npt.NDArray[np.float64]:
    count = np.asarray(s["count"], dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(s["sum"], dtype=np.float64) / count


REGISTRY: dict[str, Aggregate] = {}
"""Known aggregates by name; extend with :func:`register`."""


def register(agg: Aggregate) -> Aggregate:
    """Add (or replace) an aggregate in :data:`REGISTRY`; returns it."""
    REGISTRY[agg.name] = agg
    return agg


register(Aggregate("count", 1, (COUNT,), lambda s: s["count"]))
register(Aggregate("sum", 1, (SUM,), lambda s: s["sum"]))
register(Aggregate("min", 1, (MIN,), lambda s: s["min"]))
register(Aggregate("max", 1, (MAX,), lambda s: s["max"]))
register(Aggregate("mean", 1, (SUM, COUNT), _mean))


def get_aggregate(name: str) -> Aggregate:
    """The registered aggregate ``name``.

    Raises:
        KeyError: With the known names, when ``name`` is not registered.
    """
    try:
        return REGISTRY[name]
    except KeyError:
        msg = f"unknown aggregate {name!r}; known: {', '.join(sorted(REGISTRY))}"
        raise KeyError(msg) from None


class AggregateSet:
    """Several aggregates over one de-duplicated set of state columns.

    Always keeps ``count`` (so a group's emptiness and a ``mean`` are always known).

    Trace (aggs ``sum, mean``): columns ``count, sum``; values ``[2, 4]`` in one segment
    → state ``count=2 sum=6`` → results ``sum=6.0 mean=3.0``.
    """

    __slots__ = ("aggregates", "columns")

    def __init__(self, names: Iterable[str]) -> None:
        self.aggregates: tuple[Aggregate, ...] = tuple(get_aggregate(n) for n in names)
        cols: dict[str, StateColumn] = {"count": COUNT}
        for agg in self.aggregates:
            for c in agg.columns:
                cols.setdefault(c.name, c)
        self.columns: tuple[StateColumn, ...] = tuple(cols.values())

    @property
    def tags(self) -> tuple[str, ...]:
        """``name:version`` of every aggregate, in order (stored with state)."""
        return tuple(a.tag for a in self.aggregates)

    def empty(self, n: int) -> State:
        """State of ``n`` empty groups."""
        return {c.name: c.empty(n) for c in self.columns}

    def reduce_values(
        self, values_sorted: npt.NDArray[np.float64], starts: npt.NDArray[np.intp]
    ) -> State:
        """State of each segment of group-sorted record values."""
        out: State = {}
        for c in self.columns:
            if c.name == "count":
                out[c.name] = np.diff(np.append(starts, len(values_sorted))).astype(np.int64)
            else:
                out[c.name] = c.reduce_segments(c.contribution(values_sorted), starts)
        return out

    def reduce_states(self, state_sorted: State, starts: npt.NDArray[np.intp]) -> State:
        """Merge segments of group-sorted partial states into one state per segment."""
        if len(starts) == 0:
            return self.empty(0)
        return {c.name: c.ufunc.reduceat(state_sorted[c.name], starts) for c in self.columns}

    def contributions(self, values: npt.NDArray[np.float64]) -> State:
        """Per-record partial states (one row per record), to merge with stored states."""
        return {c.name: c.contribution(values).astype(c.dtype, copy=False) for c in self.columns}

    def merge(self, a: State, b: State) -> State:
        """Element-wise merge of two states of the same length."""
        return {c.name: c.ufunc(a[c.name], b[c.name]) for c in self.columns}

    def results(self, state: Mapping[str, npt.NDArray[np.generic]]) -> State:
        """Result of every aggregate, by aggregate name."""
        return {a.name: np.asarray(a.result(state)) for a in self.aggregates}
