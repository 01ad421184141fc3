"""Tumbling and hopping windows: assign, judge lateness, merge into state, emit revisions.

Windows are epoch-aligned and half-open ``[start, start + size)`` in ms. A record belongs to
every window that contains it (one for tumbling, ``size / advance`` for hopping) and is judged
per window: too late for one of them (``W >= end + grace``, or the window was sealed by
close_all) it becomes a late record for that window only.

Trace (tumbling 10s, grace 5s): at ``W=12000`` a record ``t=9000`` is accepted into
``[0,10000)`` as late (``n_late += 1``); at ``W=30000`` a record ``t=2000`` is too late.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from revise.engine.aggplan import Sketches
from revise.engine.batch import FloatArray, InputBatch, IntArray, Step, late_records, value_ranks
from revise.engine.emitter import Emitter, emit_rows
from revise.engine.state import LastEmitted, WindowTable
from revise.engine.throttle import emit_throttled
from revise.record_batches import LateBatch
from windows import State, WindowAssigner, segment_starts

__all__ = ["process_fixed"]

_I64 = np.int64


@dataclass(frozen=True, slots=True)
class _Pairs:
    """Accepted (record, window) pairs: record, key rank, event time, value, bounds (ms)."""

    rec: npt.NDArray[np.intp]
    key: IntArray
    ts_ms: IntArray
    value: FloatArray
    start: IntArray
    end: IntArray
    value_rank: IntArray


@dataclass(frozen=True, slots=True)
class _Groups:
    """The pairs reduced per window: packed window id, first pair, partial state, lateness."""

    window_id: IntArray
    first: npt.NDArray[np.intp]
    part: State
    n_late: IntArray
    max_late: IntArray
    sketches: Sketches


def process_fixed(assigner: WindowAssigner, batch: InputBatch, ranks: IntArray,
                  table: WindowTable, n_keys: int, step: Step,
                  out: Emitter) -> tuple[WindowTable, LateBatch, npt.NDArray[np.intp]]:
    """Apply ``batch`` to the open windows ``table``; emit one revision per touched window.

    Under an emit policy (``step.policy``) only the touched windows it allows are emitted.

    Args:
        assigner: Tumbling or hopping assignment.
        batch: The micro-batch.
        ranks: Key rank of each record of ``batch`` (codes of the engine's key table).
        table: Open windows; updated in place where windows exist, replaced when new ones open.
        n_keys: Size of the key table (bounds the packed window ids).
        step: Watermark, grace, seal, mode and batch id.
        out: Receives the revisions (revision mode only).

    Returns:
        The new table, the too-late records, and the positions in ``batch`` of the records
        accepted in at least one window (sorted).
    """
    late, pairs = _accepted_pairs(assigner, batch, ranks, step)
    if pairs is None:
        return table, late, np.empty(0, dtype=np.intp)
    ids, table_ids = _pack_ids(pairs.key, assigner.window_index(pairs.start), table.key,
                               assigner.window_index(table.start), n_keys)
    g = _reduce(batch, pairs, ids, step)
    pos = np.searchsorted(table_ids, g.window_id)
    found = np.zeros(len(pos), dtype=bool)
    inside = pos < len(table_ids)
    found[inside] = table_ids[pos[inside]] == g.window_id[inside]
    # 1. existing windows: merge the batch's partial state in place
    old_idx = pos[found]
    old_cols = {c: a[old_idx] for c, a in table.cols.items()}
    old_sk = {n: t.take(old_idx) for n, t in table.sketches.items()}
    if len(old_idx):
        for n, t in table.sketches.items():
            table.sketches[n] = step.aggs.sketch(n).merge_into(
                t, old_idx, g.sketches[n].take(found))
        merged = step.aggs.merge(old_cols, {c: a[found] for c, a in g.part.items()})
        for c, a in merged.items():
            table.cols[c][old_idx] = a
        table.n_late[old_idx] += g.n_late[found]
        table.max_late[old_idx] = np.maximum(table.max_late[old_idx], g.max_late[found])
    # 2. new windows: insert in order
    new = ~found
    if new.any():
        nf = g.first[new]
        fresh = WindowTable(pairs.key[nf], pairs.start[nf], pairs.end[nf],
                            {c: a[new] for c, a in g.part.items()},
                            np.zeros(int(new.sum()), dtype=_I64), g.n_late[new], g.max_late[new],
                            {n: t.take(new) for n, t in g.sketches.items()})
        if table.last is not None:
            fresh.last = LastEmitted.of(fresh, step.watermark_ms)
        table = table.insert(pos[new], fresh)
        table_ids = np.insert(table_ids, pos[new], g.window_id[new])
    # 3. revision mode: one revision per touched window
    if step.revision_mode and step.policy is not None:
        emit_throttled(out, table, np.searchsorted(table_ids, g.window_id), has_prev=found,
                       step=step)
    elif step.revision_mode:
        rows = np.searchsorted(table_ids, g.window_id)
        prev = {c: np.zeros(len(rows), dtype=a.dtype) for c, a in table.cols.items()}
        for c in prev:
            prev[c][found] = old_cols[c]
        prev_sk = {n: step.aggs.sketch(n).empty(len(rows)).replace(np.flatnonzero(found), t)
                   for n, t in old_sk.items()}
        emit_rows(out, table, rows, prev=prev, prev_sketches=prev_sk, has_prev=found,
                  w=step.watermark_ms)
    accepted = np.zeros(len(batch), dtype=bool)
    accepted[pairs.rec] = True  # hopping: a record accepted in several windows counts once
    return table, late, np.flatnonzero(accepted)


def _accepted_pairs(assigner: WindowAssigner, batch: InputBatch, ranks: IntArray,
                    step: Step) -> tuple[LateBatch, _Pairs | None]:
    """Assign records to windows; split off the too-late pairs as late records."""
    n = len(batch)
    ts, v = batch.ts_ms, batch.record_values(step.aggs)
    assigned = assigner.assign(ts)
    rec, start, end = assigned.record, assigned.start_ms, assigned.end_ms
    one_per_record = len(rec) == n and bool((rec == np.arange(n)).all())  # pair i is record i
    too_late = (end + step.grace_ms <= step.watermark_ms) | (start <= step.sealed_ms)
    late = LateBatch.empty()
    if too_late.any():
        lr = rec[too_late]
        late = late_records(batch, lr, ranks[lr], start[too_late], end[too_late], step)
        keep = ~too_late
        rec, start, end = rec[keep], start[keep], end[keep]
        one_per_record = False
    if len(rec) == 0:
        return late, None
    vrank = value_ranks(v)
    if one_per_record:
        return late, _Pairs(rec, ranks, ts, v, start, end, vrank)
    return late, _Pairs(rec, ranks[rec], ts[rec], v[rec], start, end, vrank[rec])


def _reduce(batch: InputBatch, pairs: _Pairs, ids: IntArray, step: Step) -> _Groups:
    """Reduce the pairs per window id, in (window id, value) order: deterministic float sums.

    Sketches get the pairs' records too (their state does not depend on the order).
    """
    span = int(pairs.value_rank.max()) + 1
    if int(ids.max()) < (2**62) // span:
        order = np.argsort(ids * span + pairs.value_rank)
    else:
        order = np.lexsort((pairs.value_rank, ids))
    sorted_ids = ids[order]
    seg = segment_starts(sorted_ids)
    part = step.aggs.reduce_values(pairs.value[order], seg)
    sketches: Sketches = {}
    if step.aggs.sketches:
        group = np.repeat(np.arange(len(seg), dtype=_I64), np.diff(np.append(seg, len(order))))
        sketches = step.aggs.build_sketches(batch.numeric, batch.distinct, pairs.rec[order],
                                            group, len(seg))
    w = step.watermark_ms
    is_late = pairs.end[order] <= w
    if is_late.any():
        n_late = np.add.reduceat(is_late.astype(_I64), seg)
        max_late = np.maximum.reduceat(np.where(is_late, w - pairs.ts_ms[order], 0), seg)
    else:
        n_late = np.zeros(len(seg), dtype=_I64)
        max_late = np.zeros(len(seg), dtype=_I64)
    return _Groups(sorted_ids[seg], order[seg], part, n_late, max_late, sketches)


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


