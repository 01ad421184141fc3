"""Session windows: per key, each record spans ``[ts, ts + gap)``; overlapping spans merge.

A session is ``[first ts, last ts + gap)`` (ms, half-open); spans that only touch do not
merge; a record that bridges two sessions merges them. A record is too late when
``W >= ts + gap + grace`` (judged on its own span) or ``ts`` is at or before the seal of a
close_all. When a batch changes the bounds of a session emitted before, the old bounds get a
last ``retracted`` revision and the lineage continues under the new bounds (the retraction
rule of :mod:`revise.engine`).

Trace (gap 10s, grace 0): ``t=0`` → ``[0,10000)`` rev 0; ``t=15000`` → ``[15000,25000)``
rev 0; ``t=8000`` bridges them → both retracted (rev 1), ``[0,25000)`` rev 2 count=3.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from revise.engine.aggplan import Sketches
from revise.engine.batch import InputBatch, IntArray, Step, late_records, value_ranks
from revise.engine.emitter import Emitter, emit_changed
from revise.engine.state import LastEmitted, WindowTable, unique_sorted
from revise.engine.throttle import allowed, record_emitted
from revise.record_batches import LateBatch
from windows import State, merge_spans, segment_starts
from windows.sketches import SlotTable

__all__ = ["process_sessions"]

_I64 = np.int64
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class _Merged:
    """Stored sessions of the touched keys and the batch's spans, merged into sessions.

    Attributes:
        old: The stored sessions of the touched keys (state rows, in table order).
        order: Positions (into ``old`` rows, then the batch's spans) in merge order.
        is_stored: Per merge-ordered span: True for a stored session, False for a record.
        group: Per merge-ordered span: the index of the session it merged into.
        sessions: The merged sessions (``rev`` = the revision number their next emission has).
        prev: Per session, the merged aggregate state of its stored parts (its previous values).
        prev_sketches: The same for the sketches.
        n_stored: Per session, how many stored sessions it absorbed.
        changed: Per session, True when it changes the bounds of a stored (emitted) session.
    """

    old: WindowTable
    order: npt.NDArray[np.intp]
    is_stored: BoolArray
    group: IntArray
    sessions: WindowTable
    prev: State
    prev_sketches: Sketches
    n_stored: IntArray
    changed: BoolArray


def process_sessions(gap_ms: int, batch: InputBatch, ranks: IntArray, table: WindowTable,
                     step: Step, out: Emitter
                     ) -> tuple[WindowTable, LateBatch, npt.NDArray[np.intp]]:
    """Apply ``batch`` to the open sessions ``table``; emit revisions and retractions.

    Args:
        gap_ms: The session gap (ms).
        batch: The micro-batch.
        ranks: Key rank of each record of ``batch``.
        table: Open sessions (not modified).
        step: Watermark, grace, seal, mode and batch id.
        out: Receives the revisions (revision mode only).

    Returns:
        The new table, the too-late records, and the positions in ``batch`` of the accepted
        records (sorted).
    """
    w = step.watermark_ms
    keys, ts, values = ranks, batch.ts_ms, batch.record_values(step.aggs)
    recs = np.arange(len(batch), dtype=np.intp)
    vrank = value_ranks(values)  # ties between records sort by value
    span_end = ts + gap_ms
    too_late = (span_end + step.grace_ms <= w) | (ts <= step.sealed_ms)
    late = LateBatch.empty()
    if too_late.any():
        late = late_records(batch, np.flatnonzero(too_late), keys[too_late], ts[too_late],
                            span_end[too_late], step)
        keep = ~too_late
        keys, ts, values = keys[keep], ts[keep], values[keep]
        span_end, vrank, recs = span_end[keep], vrank[keep], recs[keep]
    if len(keys) == 0:
        return table, late, recs
    touched = np.isin(table.key, unique_sorted(np.sort(keys)), assume_unique=False)
    per_record = step.aggs.build_sketches(batch.numeric, batch.distinct, recs,
                                          np.arange(len(recs), dtype=_I64), len(recs))
    m = _merge(table.take(np.flatnonzero(touched)), keys, ts, span_end, values, vrank,
               len(batch) + 1, step, per_record)
    if table.last is not None:
        m.sessions.last = _carried_last(m, w)
    if step.revision_mode:
        _emit(m, step, out)
    rest = WindowTable.concat(table.take(~touched), m.sessions)
    return rest.take(np.lexsort((rest.start, rest.key))), late, recs


def _merge(old: WindowTable, keys: IntArray, ts: IntArray, span_end: IntArray,
           values: npt.NDArray[np.float64], vrank: IntArray, tie_span: int,
           step: Step, per_record: Sketches) -> _Merged:
    """Merge the stored sessions ``old`` with the accepted records' spans.

    ``per_record`` holds one sketch group per accepted record; sketches regroup into sessions.
    """
    w = step.watermark_ms
    n_old, n_rec = len(old), len(keys)
    all_key = np.concatenate((old.key, keys))
    all_start = np.concatenate((old.start, ts))
    all_end = np.concatenate((old.end, span_end))
    # order by (key, start, stored sessions first, value rank): deterministic float sums
    tie = np.concatenate((np.zeros(n_old, dtype=_I64), vrank + 1))
    order = _sort_key_start_tie(all_key, all_start, tie, tie_span)
    s_key, s_start, s_end = all_key[order], all_start[order], all_end[order]
    is_stored = np.concatenate((np.ones(n_old, dtype=bool), np.zeros(n_rec, dtype=bool)))[order]
    group = merge_spans(s_key, s_start, s_end)
    seg = segment_starts(group)
    start = s_start[seg]
    end = np.maximum.reduceat(s_end, seg)
    contrib = step.aggs.contributions(values)
    cols: State = {}
    prev: State = {}
    for c in step.aggs.columns:
        rows = np.concatenate((old.cols[c.name], contrib[c.name]))[order]
        cols[c.name] = c.ufunc.reduceat(rows, seg)
        prev[c.name] = c.ufunc.reduceat(
            np.where(is_stored, rows, np.asarray(c.identity, dtype=c.dtype)), seg)
    is_late = span_end <= w
    n_late = np.add.reduceat(np.concatenate((old.n_late, is_late.astype(_I64)))[order], seg)
    max_late = np.maximum.reduceat(
        np.concatenate((old.max_late, np.where(is_late, w - ts, 0)))[order], seg)
    n_stored = np.add.reduceat(is_stored.astype(_I64), seg)
    max_rev = np.maximum.reduceat(
        np.concatenate((old.rev, np.full(n_rec, -1, dtype=_I64)))[order], seg)
    big = np.iinfo(_I64).max
    old_start = np.minimum.reduceat(np.where(is_stored, s_start, big), seg)
    old_end = np.maximum.reduceat(np.where(is_stored, s_end, -big), seg)
    same = (n_stored == 1) & (old_start == start) & (old_end == end)
    rev = np.where(n_stored == 0, 0, np.where(same, max_rev, max_rev + 1)).astype(_I64)
    sk, prev_sk = _regroup_sketches(old, per_record, order, group, len(seg), step)
    sessions = WindowTable(s_key[seg], start, end, cols, rev, n_late, max_late, sk)
    return _Merged(old, order, is_stored, group, sessions, prev, prev_sk, n_stored,
                   (n_stored >= 1) & ~same)


def _regroup_sketches(old: WindowTable, per_record: Sketches, order: npt.NDArray[np.intp],
                      group: IntArray, n_sessions: int, step: Step) -> tuple[Sketches, Sketches]:
    """Sketches of the merged sessions, and of their stored parts only (previous values)."""
    target = np.empty(len(order), dtype=_I64)
    target[order] = group  # unsorted position (stored rows, then records) -> its session
    sk: Sketches = {}
    prev_sk: Sketches = {}
    for n, t in per_record.items():
        kernels = step.aggs.sketch(n)
        sk[n] = kernels.regroup(SlotTable.concat((old.sketches[n], t)), target, n_sessions)
        prev_sk[n] = kernels.regroup(old.sketches[n], target[:len(old)], n_sessions)
    return sk, prev_sk


def _emit(m: _Merged, step: Step, out: Emitter) -> None:
    """Revision mode: one revision per session that got a record, one retraction per old bounds.

    Sessions of touched keys that got no record stay as they are: not emitted. Under an emit
    policy a session that kept its bounds emits only when the policy allows it (:func:`_gate`);
    a new session, new bounds and retractions always go out, a retraction with its current
    values and ``prev_*`` = its last emitted ones.
    """
    w = step.watermark_ms
    seg = segment_starts(m.group)
    hit = np.flatnonzero(np.add.reduceat((~m.is_stored).astype(_I64), seg) > 0)
    prev = {c: a[hit] for c, a in m.prev.items()}
    prev_sk = {n: t.take(hit) for n, t in m.prev_sketches.items()}
    if m.sessions.last is not None:
        hit, prev, prev_sk = _gate(m, hit, step)
    emit_changed(out, m.sessions.take(hit), prev=prev, prev_sketches=prev_sk,
                 has_prev=m.n_stored[hit] >= 1, w=w)
    m.sessions.rev[hit] += 1
    record_emitted(m.sessions, hit, w)
    retracted = np.flatnonzero(m.is_stored & m.changed[m.group])
    if len(retracted):
        r = m.old.take(m.order[retracted])
        before: WindowTable | LastEmitted = r if r.last is None else r.last
        # a retraction carries the timing of the revision that supersedes it
        emit_changed(out, r, prev=before.cols, prev_sketches=before.sketches,
                     has_prev=np.ones(len(r), dtype=bool), w=w,
                     retracted=True, timing_end=m.sessions.end[m.group[retracted]])


def _carried_last(m: _Merged, w: int) -> LastEmitted:
    """The merged sessions' last emitted revisions (under an emit policy).

    A session that kept the bounds of one stored session keeps that one's; any other (new, or
    new bounds) starts from its current state at ``w`` (it is emitted in this batch).
    """
    last = LastEmitted.of(m.sessions, w)
    same = (m.n_stored == 1) & ~m.changed
    if m.old.last is None or not same.any():
        return last
    stored = np.flatnonzero(m.is_stored)
    src = np.zeros(len(m.sessions), dtype=np.intp)
    src[m.group[stored]] = m.order[stored]  # the (only) stored row of each same-bounds session
    rows = np.flatnonzero(same)
    old = m.old.last.take(src[rows])
    for c, a in last.cols.items():
        a[rows] = old.cols[c]
    for n, t in last.sketches.items():
        last.sketches[n] = t.replace(rows, old.sketches[n])
    last.watermark_ms[rows] = old.watermark_ms
    return last


def _gate(m: _Merged, hit: IntArray, step: Step) -> tuple[IntArray, State, Sketches]:
    """The sessions of ``hit`` the emit policy lets out, and their ``prev_*`` state.

    A session that kept the bounds of one stored session is judged against its last emitted
    revision (which its ``prev_*`` then hold); new sessions and new bounds always go out.
    """
    last = m.sessions.last
    assert last is not None and step.policy is not None
    same = (m.n_stored[hit] == 1) & ~m.changed[hit]
    lt = last.take(hit)
    ok = ~same | allowed(step.policy, step.aggs, m.sessions.take(hit), lt, step.watermark_ms)
    prev = {c: np.where(same, lt.cols[c], a[hit])[ok] for c, a in m.prev.items()}
    at = np.flatnonzero(same)
    prev_sk = {n: t.take(hit).replace(at, lt.sketches[n].take(at)).take(ok)
               for n, t in m.prev_sketches.items()}
    return hit[ok], prev, prev_sk


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


