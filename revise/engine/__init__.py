"""The revision engine: micro-batches of records in, numbered revisions and too-late records out.

Pure numpy (+ pandas hashing, pyarrow for snapshots); no Spark, Kafka or Delta. Implements
SPEC §3–4. Times are int64 epoch ms; windows are half-open ``[window_start_ms, window_end_ms)``.
The caller supplies the watermark ``W`` in force for each micro-batch (Spark's global watermark,
or :class:`windows.WatermarkTracker` locally); the engine never reads a clock (``now_ms`` is
injected) and never computes the watermark itself.

Per ``process(batch, watermark_ms=W)``:

1. Every record is assigned to its window(s). A (record, window) with
   ``W >= window_end + grace`` is *too late*: it becomes a :class:`~revise.records.LateRecord`
   (``lateness_ms = W - ts``, reason ``"window closed"``) and changes nothing. Hopping records
   are judged per window. Otherwise it is accepted and updates the window; it counts as *late*
   (``n_late``, ``max_lateness_ms = max(W - ts)``) when ``W >= window_end``.
2. Revision mode: every window touched by the batch emits one revision, numbered densely per
   window from 0, ``timing`` EARLY if ``W < end`` else LATE, ``prev_*`` = the values of the
   window's previous revision (null at revision 0). Under an emit policy
   (``--emit-min-change``, ``--emit-every``; :mod:`~revise.engine.throttle`) a revision that
   keeps a window's bounds goes out only when the policy allows it against the window's last
   emitted revision; numbers stay dense over the emitted ones and ``prev_*`` are the last
   emitted values.
3. Every open window with ``W >= end + grace`` closes: exactly one FINAL revision
   (``is_final``, also when nothing changed), then its state is dropped. A window accepted in
   this batch cannot close in it (it was accepted because ``W < end + grace``); if it did, only
   its FINAL would be emitted. Watermark mode emits only these FINALs, with ``revision = 0``
   and ``prev_*`` null.

Output rows are sorted by ``(key, window_start_ms, window_end_ms)``; late rows by ``(key,
window_start_ms, window_end_ms, ts_ms, partition, offset, value)``. Within a window the
batch's records are reduced in value order, so aggregates (even float sums) do not depend on
the order of records within a batch: the same batches give bit-identical revisions.

Timeline (tumbling 10s, grace 5s; ``W`` = watermark of the batch)::

    batch 0 W=0      t=1200           → rev 0 of [0,10000) count=1 (EARLY)
    batch 1 W=1200   t=12000          → rev 0 of [10000,20000) count=1 (EARLY)
    batch 2 W=12000  t=9000 (late)    → rev 1 of [0,10000) count=2 n_late=1 (LATE)
    batch 3 W=12000  t=30000          → rev 0 of [30000,40000) count=1 (EARLY)
    batch 4 W=30000  t=2000           → too late (W >= 10000+5000): LateRecord lateness=28000
                                       → rev 2 of [0,10000) FINAL count=2
                                       → rev 1 of [10000,20000) FINAL count=1

Sessions (per key, gap ``G``): each record spans ``[ts, ts+G)``; overlapping spans merge
(touching ones do not); a session is ``[first ts, last ts + G)``. A record is too late when
``W >= ts + G + grace`` (judged on its own span; its LateRecord carries ``[ts, ts+G)``), and
late (``n_late``) when ``W >= ts + G``. Within a batch the accepted records are merged first
and windows close after, so a record can still extend a session whose end + grace the batch's
watermark has passed (as in Spark's session windows); a record that overlaps a session closed
in an *earlier* batch starts a new session (the closed one stays final).

**Retraction rule**: when a batch changes the bounds of a session that was emitted before
(extension, or a bridge merging several),

* each old bounds gets one last revision with ``retracted=True``, numbered with its lineage's
  next number ``r_i``, carrying its unchanged values (``prev_*`` = the same values) and the
  ``timing`` of the new bounds' revision (EARLY if ``W < new end`` else LATE: a record may
  extend a session in the very batch whose watermark would have closed it, so the old
  bounds' own end can already be ``<= W - grace``);
* the new bounds' revision is numbered ``max(r_i) + 1`` and its ``prev_*`` hold the merge of
  the old sessions' values (so ``count - prev_count`` is the number of records the batch
  added); later revisions of the new bounds continue densely from there.

Sessions created in this batch count as never emitted: merging them retracts nothing. Because
a lineage's bounds only grow, ``(query_id, key, start, end, revision)`` stays unique. In
watermark mode nothing is emitted before the FINAL, so nothing is retracted.

Session timeline (gap 10s, grace 0; ``rev`` numbers per bounds)::

    batch 0 W=0      t=0, t=30000     → [0,10000) rev 0, [30000,40000) rev 0
    batch 1 W=0      t=15000          → [15000,25000) rev 0
    batch 2 W=0      t=8000 (bridge)  → [0,10000) rev 1 retracted, [15000,25000) rev 1
                                        retracted, [0,25000) rev 2 count=3 prev_count=2

The package, by concern: :mod:`~revise.engine.batch` (the input batch, its checks, the
step context and too-late records), :mod:`~revise.engine.state` (key table, open-window table),
:mod:`~revise.engine.snapshot` (state as bytes, fingerprint),
:mod:`~revise.engine.fixed` (tumbling/hopping), :mod:`~revise.engine.sessions`,
:mod:`~revise.engine.emitter` (typed parts → one sorted RevisionBatch),
:mod:`~revise.engine.throttle` (emit policies),
:mod:`~revise.engine.completeness` (each revision's ``completeness``, learned from arrival
delays) and :mod:`~revise.engine.core` (the :class:`Engine` that ties them together).
"""

from __future__ import annotations

from revise.engine.batch import BatchOutput, InputBatch, InvalidInput
from revise.engine.core import Engine, WatermarkRegression
from revise.engine.snapshot import SNAPSHOT_FORMAT

__all__ = [
    "SNAPSHOT_FORMAT",
    "BatchOutput",
    "Engine",
    "InputBatch",
    "InvalidInput",
    "WatermarkRegression",
]
