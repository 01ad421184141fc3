"""Collecting one micro-batch's revisions: typed parts in, one sorted RevisionBatch out.

The fixed-window and session steps and the closing step each add an :class:`EmittedPart`
(state-table rows about to be emitted, plus the values of their previous revisions); the
:class:`Emitter` concatenates them, sorts them by ``(key, window_start_ms, window_end_ms)``
and turns aggregate state into results. Within one window the parts arrive in revision order
(a retraction before the revision that supersedes it), and the sort is stable on that.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from revise.config import EngineConfig
from revise.engine.aggplan import AggPlan, Sketches
from revise.engine.batch import IntArray
from revise.engine.state import KeyTable, WindowTable
from revise.record_batches import RevisionBatch
from revise.records import AGG_FIELDS
from revise.vocab import TIMINGS
from windows import State
from windows.sketches import SlotTable

__all__ = ["EARLY", "FINAL", "LATE", "EmittedPart", "Emitter", "emit_changed", "emit_rows",
           "empty_revisions"]

EARLY, LATE, FINAL = (np.int8(TIMINGS.index(t)) for t in ("EARLY", "LATE", "FINAL"))
_TIMING_NAMES = np.array(TIMINGS, dtype=object)
_I64 = np.int64
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class EmittedPart:
    """Revisions of some windows, still as state: one row per window, all arrays equally long.

    Attributes:
        windows: The windows' state rows (key rank, bounds ``[start, end)`` ms, aggregate
            state, ``rev`` = the revision number to emit, ``n_late``, ``max_late``).
        prev: Aggregate state of each window's previous revision (read where ``has_prev``).
        has_prev: False at revision 0 and in watermark mode (``prev_*`` then null).
        timing: :data:`EARLY`, :data:`LATE` or :data:`FINAL` codes (int8).
        retracted: These bounds are superseded by a merged or extended session.
        is_final: These are FINAL revisions.
        prev_sketches: Sketch states of each window's previous revision (as ``prev``).
    """

    windows: WindowTable
    prev: State
    has_prev: BoolArray
    timing: npt.NDArray[np.int8]
    retracted: bool = False
    is_final: bool = False
    prev_sketches: Sketches | None = None


class Emitter:
    """Collects the parts of one batch, then sorts them into one RevisionBatch."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[EmittedPart] = []

    def add(self, part: EmittedPart) -> None:
        """Keep ``part`` (empty parts are dropped)."""
        if len(part.windows):
            self.parts.append(part)

    def build(self, config: EngineConfig, aggs: AggPlan, keys: KeyTable, *,
              watermark_ms: int, batch_id: int, now_ms: int) -> RevisionBatch:
        """All parts as one RevisionBatch sorted by ``(key, window_start_ms, window_end_ms)``."""
        if not self.parts:
            return empty_revisions(config, aggs)
        wins = [p.windows for p in self.parts]
        key = np.concatenate([t.key for t in wins])
        start = np.concatenate([t.start for t in wins])
        end = np.concatenate([t.end for t in wins])
        order: Any = np.lexsort((end, start, key))
        if bool((order[1:] > order[:-1]).all()):
            order = slice(None)

        def cat(arrays: list[npt.NDArray[Any]]) -> Any:
            return np.concatenate(arrays)[order]

        names = list(wins[0].cols)
        cols = {c: cat([t.cols[c] for t in wins]) for c in names}
        prev = {c: cat([p.prev[c] for p in self.parts]) for c in names}
        has_prev = cat([p.has_prev for p in self.parts])
        n = len(key)
        sk = {s: _cat_sketches([t.sketches[s] for t in wins], order) for s in aggs.sketches}
        psk = {s: _cat_sketches([p.windows.sketches[s] if p.prev_sketches is None
                                 else p.prev_sketches[s] for p in self.parts], order)
               for s in aggs.sketches}
        results = _column_results(aggs, cols, sk, prev, psk, has_prev)

        def flag(name: str) -> Any:
            return cat([np.full(len(p.windows), getattr(p, name)) for p in self.parts])

        return RevisionBatch(
            query_id=config.query_id,
            mode=config.mode,
            aggs=config.aggs.columns,
            key=keys.keys[key[order]],
            window_start_ms=start[order],
            window_end_ms=end[order],
            revision=cat([t.rev for t in wins]),
            timing=_TIMING_NAMES[cat([p.timing for p in self.parts])],
            is_final=flag("is_final"),
            retracted=flag("retracted"),
            has_prev=has_prev,
            n_late=cat([t.n_late for t in wins]),
            max_lateness_ms=cat([t.max_late for t in wins]),
            watermark_ms=np.full(n, watermark_ms, dtype=_I64),
            batch_id=np.full(n, batch_id, dtype=_I64),
            emitted_at_ms=np.full(n, now_ms, dtype=_I64),
            completeness=np.ones(n),  # the engine's CompletenessModel sets the open windows'
            **results,
        )


def empty_revisions(config: EngineConfig, aggs: AggPlan) -> RevisionBatch:
    """No revisions, with the (typed, empty) ``extra`` columns of an AggList."""
    empty = RevisionBatch.empty(config.query_id, config.mode, config.aggs.columns)
    extra = {s.column if prev == "" else s.prev_column:
             np.empty(0, dtype=_I64 if s.kind == "distinct" else np.float64)
             for s in aggs.agg_list.specs if s.column not in AGG_FIELDS
             for prev in ("", "prev_")}
    return replace(empty, extra=extra)


def _cat_sketches(tables: list[SlotTable], order: Any) -> SlotTable:
    return SlotTable.concat(tables).take(np.arange(sum(map(len, tables)))[order])


def _column_results(aggs: AggPlan, cols: State, sk: Sketches, prev: State, psk: Sketches,
                    has_prev: BoolArray) -> dict[str, Any]:
    """The AggList's columns and their ``prev_`` ones (placeholders where there is no prev).

    SPEC §4's ``count`` … ``mean`` go in their own fields (``count`` 0 and the others NaN
    where not requested), any other column (``FN_FIELD``) in ``extra``.
    """
    n = len(has_prev)
    res = aggs.column_results(cols, sk)
    pres = aggs.column_results(prev, psk)
    out: dict[str, Any] = {"count": np.zeros(n, dtype=_I64), "prev_count": np.zeros(n, dtype=_I64)}
    for a in AGG_FIELDS[1:]:
        out[a] = np.full(n, np.nan)
        out[f"prev_{a}"] = np.full(n, np.nan)
    extra: dict[str, Any] = {}
    for c, v in res.items():
        p = pres[c]
        where = out if c in AGG_FIELDS else extra
        where[c] = v
        where[f"prev_{c}"] = np.where(has_prev, p, 0 if p.dtype.kind == "i" else np.nan) \
            .astype(p.dtype)
    out["extra"] = extra
    return out


def _timing(w: int, end: IntArray) -> npt.NDArray[np.int8]:
    return np.where(w < end, EARLY, LATE).astype(np.int8)


def emit_rows(out: Emitter, table: WindowTable, rows: npt.NDArray[np.intp], *, prev: State,
              prev_sketches: Sketches, has_prev: BoolArray, w: int) -> None:
    """Emit EARLY/LATE revisions of ``table``'s rows ``rows`` and bump their revision counters."""
    chosen = table.take(rows)
    out.add(EmittedPart(chosen, prev, has_prev, _timing(w, chosen.end),
                        prev_sketches=prev_sketches))
    table.rev[rows] += 1


def emit_changed(out: Emitter, windows: WindowTable, *, prev: State, prev_sketches: Sketches,
                 has_prev: BoolArray, w: int, retracted: bool = False,
                 timing_end: IntArray | None = None) -> None:
    """Emit EARLY/LATE revisions of ``windows`` (timing judged on ``timing_end`` if given)."""
    end = windows.end if timing_end is None else timing_end
    out.add(EmittedPart(windows.take(np.arange(len(windows))), prev, has_prev,
                        _timing(w, end), retracted=retracted, prev_sketches=prev_sketches))


def emit_finals(out: Emitter, closing: WindowTable, *, revision_mode: bool) -> None:
    """Emit one FINAL per window of ``closing`` (revision 0 and no prev in watermark mode).

    ``prev_*`` are the values of the window's last emitted revision: its current ones, or
    under an emit policy the ones ``closing.last`` kept.
    """
    n = len(closing)
    last = closing.last
    if revision_mode:
        has_prev = closing.rev > 0
    else:
        closing = WindowTable(closing.key, closing.start, closing.end, closing.cols,
                              np.zeros(n, dtype=_I64), closing.n_late, closing.max_late,
                              closing.sketches)
        has_prev = np.zeros(n, dtype=bool)
    out.add(EmittedPart(closing, closing.cols if last is None else last.cols, has_prev,
                        np.full(n, FINAL, dtype=np.int8), is_final=True,
                        prev_sketches=None if last is None else last.sketches))
