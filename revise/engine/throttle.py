"""Emit policies (``--emit-min-change``, ``--emit-every``): which EARLY/LATE revisions go out.

Under an :class:`~revise.config.EmitPolicy` every window table keeps, per window, its last
*emitted* revision (:class:`~revise.engine.state.LastEmitted`: aggregate state, sketches and
the watermark it was emitted at). A revision the policy does not allow is not emitted and
takes no revision number; the window's state still holds the change, so the next emitted
revision (at the latest the FINAL) carries it, with ``prev_*`` = the last emitted values.

Always emitted, whatever the policy: revision 0, FINALs, session retractions and a session's
first revision under new (merged or extended) bounds. Every other revision is emitted only
when each rule set allows it (:func:`allowed`), judged against the last emitted revision:

- ``min_change F``: some requested aggregate column (``count``, sums, means, min/max, pNN,
  distinct) moved by ``|new - old| >= F * |old|`` with ``new != old`` (from 0 any change
  counts; null ↔ value counts; F = 0: every change);
- ``every_ms D``: ``W - (watermark of the last emitted revision) >= D``.

Trace (tumbling 10s, grace 5s, ``every_ms=5000``): ``W=0`` count=1 → rev 0 (EARLY);
``W=2000`` count=2 → suppressed (2000 < 5000); ``W=6000`` count=3 → rev 1, ``prev_count=1``;
``W=15000`` → rev 2 FINAL count=3, ``prev_count=3``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from revise.config import EmitPolicy
from revise.engine.aggplan import AggPlan, Sketches, take_sketches
from revise.engine.batch import Step
from revise.engine.emitter import Emitter, emit_rows
from revise.engine.state import LastEmitted, WindowTable
from windows import State

__all__ = ["allowed", "emit_throttled", "record_emitted"]

BoolArray = npt.NDArray[np.bool_]


def _columns(aggs: AggPlan, cols: State, sketches: Sketches) -> list[npt.NDArray[np.float64]]:
    """The requested output columns' values per row, as float64 (NaN: null)."""
    return [np.asarray(v, dtype=np.float64)
            for v in aggs.column_results(cols, sketches).values()]


def changed_by(aggs: AggPlan, min_change: float, cols: State, sketches: Sketches,
               last_cols: State, last_sketches: Sketches) -> BoolArray:
    """Per row: some requested column moved by at least ``min_change`` relative to the last."""
    n = len(next(iter(cols.values())))
    hit = np.zeros(n, dtype=bool)
    for new, old in zip(_columns(aggs, cols, sketches), _columns(aggs, last_cols, last_sketches),
                        strict=True):
        new_null, old_null = np.isnan(new), np.isnan(old)
        with np.errstate(invalid="ignore"):
            d = np.abs(new - old)
            moved = ~new_null & ~old_null & (d > 0) & (d >= min_change * np.abs(old))
        hit |= (new_null != old_null) | moved
    return hit


def allowed(policy: EmitPolicy, aggs: AggPlan, windows: WindowTable, last: LastEmitted,
            watermark_ms: int) -> BoolArray:
    """Per row of ``windows``: True where ``policy`` allows a revision against ``last``."""
    ok = np.ones(len(windows), dtype=bool)
    if policy.every_ms is not None:
        ok &= watermark_ms - last.watermark_ms >= policy.every_ms
    if policy.min_change:
        ok &= changed_by(aggs, policy.min_change, windows.cols, windows.sketches, last.cols,
                         last.sketches)
    return ok


def record_emitted(table: WindowTable, rows: npt.NDArray[np.intp], watermark_ms: int) -> None:
    """Rows ``rows`` of ``table`` were just emitted at ``watermark_ms``: they are the last now."""
    last = table.last
    if last is None or len(rows) == 0:
        return
    for c, a in last.cols.items():
        a[rows] = table.cols[c][rows]
    for n, t in last.sketches.items():
        last.sketches[n] = t.replace(rows, table.sketches[n].take(rows))
    last.watermark_ms[rows] = watermark_ms


def emit_throttled(out: Emitter, table: WindowTable, rows: npt.NDArray[np.intp], *,
                   has_prev: BoolArray, step: Step) -> None:
    """Emit the touched windows ``rows`` of ``table`` that ``step.policy`` allows.

    Rows without a previous revision (revision 0) always go out. Each emitted row gets
    ``prev_*`` from its last emitted revision, then becomes the last emitted one itself.
    """
    assert step.policy is not None and table.last is not None
    w = step.watermark_ms
    last = table.last.take(rows)
    ok = ~has_prev | allowed(step.policy, step.aggs, table.take(rows), last, w)
    emit_rows(out, table, rows[ok], prev={c: a[ok] for c, a in last.cols.items()},
              prev_sketches=take_sketches(last.sketches, ok), has_prev=has_prev[ok], w=w)
    record_emitted(table, rows[ok], w)
