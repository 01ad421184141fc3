"""``revise compare``: revision mode against watermark mode on the same input.

The package, by concern: :mod:`~revise.compare.config` (what to run), :mod:`~revise.compare.run`
(the two runs and the figures), :mod:`~revise.compare.metrics` (pure pandas/numpy metrics),
:mod:`~revise.compare.whatif` (the input replayed offline through the engine),
:mod:`~revise.compare.sweep` (``--sweep``: settings replayed offline),
:mod:`~revise.compare.results` (the figures of a comparison), :mod:`~revise.compare.report`
(the table, JSON/CSV/Delta output),
:mod:`~revise.compare.plots` (matplotlib). The command line is :mod:`revise.cli.compare`.

What it does, in order:

1. Input: an existing ``--input-topic``, or a seeded stream it generates (``--events``,
   ``--keys``, ``--seed``, ``--disorder``, ``--late-fraction``, ``--late-by``,
   ``--bad-fraction``) into a fresh topic.
2. Runs the streaming job twice in one Spark session, one mode after the other, with the same
   window, grace, watermark delay, aggregates and ``--max-records-per-batch``; each run has its
   own query id (``compare-<run>-<mode>``), checkpoint, changelog topic and Delta root
   (``<delta-path>/<mode>``, so ``revise query --delta-path <delta-path>/revision`` works).
   Without ``--rate`` each run is bounded (``--once``): it reads the whole topic, then closes
   every window.
   With ``--rate R`` the input is replayed into a fresh topic per mode at R records/s *while*
   that mode's job runs unbounded (starting after its first micro-batch, so the job's start-up
   is not counted); once the job has read everything, it is stopped and restarted
   bounded on the same checkpoint to close the remaining windows.
3. Reads both runs' Delta ``revisions``/``late``/``dead_letter`` tables (in-process with
   delta-rs; Spark only runs the two jobs), the committed changelog
   (for the bytes written) and the input topic (for the records' Kafka timestamps), and
   computes the figures of :mod:`revise.compare.metrics` per window and in total.
4. Prints a side-by-side table; writes ``comparison.json``, ``windows.csv`` and three PNG plots
   (``latency_cdf.png``, ``accuracy_over_time.png``, ``revisions_per_window.png``) into
   ``--output``, and appends the totals to the Delta table ``<delta-path>/comparisons``
   (one row per ``run_id, mode, section, metric, value``; written with delta-rs in the schema
   Spark reads as ``run_id STRING, created_at_ms BIGINT, mode STRING, section STRING,
   metric STRING, value DOUBLE``).

How latency is measured:

- *Event time*: ``watermark_ms - window_end_ms`` of the revision (see
  :mod:`revise.compare.metrics`); deterministic for a given split into micro-batches. The
  first micro-batch runs before any watermark exists (watermark 0); its revisions are placed at
  the run's first real watermark (conservative: they came no later than that). Placing them at
  the earliest event time instead would let one very late record make them look minutes early.
- *Wall clock* (only with ``--rate``, else reported as not measured): from a record's Kafka
  timestamp (its arrival, stamped by the producer) to the revision's ``emitted_at_ms`` (stamped
  just before the micro-batch's Kafka transaction commits). First result: from the window's
  first accepted record; final value: from its last accepted record. It includes the
  micro-batch trigger interval (``--trigger``, 500 ms by default for an unbounded run). The FINALs
  of windows still open when the replay ends are emitted by the bounded restart, so the tail
  of the final-value distribution includes that restart. With ``--rate`` the split into
  micro-batches depends on timing, so the two modes see the same records but not necessarily
  the same batches (their too-late counts can differ); without it both runs get the same split.

Trace (tumbling 10 s, grace 5 s): a window ``[0,10000)`` gets revision 0 at watermark 4000
(first result at −6 s in revision mode), its last late record at watermark 11000 (final value
at +1 s), and its FINAL at watermark 15000 (+5 s); watermark mode emits only that FINAL (+5 s).
"""

from __future__ import annotations

from revise.compare.config import MODES, CompareConfig
from revise.compare.report import format_table
from revise.compare.results import Comparison, ModeReport
from revise.compare.run import run_compare

__all__ = ["MODES", "CompareConfig", "Comparison", "ModeReport", "format_table", "run_compare"]
