"""Outputs of revise: the transactional Kafka changelog and the Delta Lake tables.

Both are written by the job's driver from one micro-batch held as Arrow tables, Kafka first
(steps 2 and 3 of the commit sequence, numbered in ``revise.spark.committer.BatchCommitter``):

- :mod:`sinks.kafka` — one Kafka transaction per micro-batch (revisions, too-late records,
  dead letters and a progress marker), ``transactional.id`` = ``revise-<query_id>``; a batch
  whose marker is committed is skipped on replay. Guarantee: a ``read_committed`` consumer sees
  every revision exactly once, a window's revisions in order.
- :mod:`sinks.delta_tables` — the tables ``revisions``, ``latest``, ``late``, ``dead_letter``
  written by delta-rs, each write tagged with the app transaction (query, batch) so a replay
  changes nothing. (Reading them with Spark is the query side's: :mod:`revise.query.views`.)
- :mod:`sinks.delta_txn` — each write one Delta app transaction ``(revise-<query>, batch)``,
  skipped when the table's log already holds it.
- :mod:`sinks.delta_history` — the appends to ``revisions``, ``late``, ``dead_letter``, at
  once or staged, and the commit of what a crash left staged.
- :mod:`sinks.delta_schema` — what each table is: its Arrow schema and its Delta properties.
- :mod:`sinks.delta_layout` — what keeps those tables' files from growing with an unbounded
  run: the history tables' background compaction, the logs' retention.
- :mod:`sinks.latest_merge` — ``latest``'s writes: the MERGE (idempotent, self-contained, run on
  an executor in the job), the catch-up at every start.
- :mod:`sinks.merge_on_read` — that MERGE in a folder: deletion vectors mark the rows it
  replaces, and it rewrites the files half deleted.
- :mod:`sinks.deletion_vectors` — Delta deletion vectors, written and read (delta-rs writes
  none).
- :mod:`sinks.delta_log` — a table's log replayed into its active files with their deletion
  vectors.
- :mod:`sinks.delta_commit` — revise's own put-if-absent commit of raw actions (``latest``'s
  MERGE).
- :mod:`sinks.latest_merger` — the MERGEs in the background: one for the micro-batches that
  arrived while the last one ran (their highest revision per window), a bounded backlog, and
  a failed MERGE stopping every later one (the job's next start redoes them from
  ``revisions``).
- :mod:`sinks.delta_files` — a history table's data files, written where the rows are (the
  job's stateful tasks), committed by the driver from their records, idempotently.
- :mod:`sinks.file_stage` — the history tables' commits decoupled from the micro-batch: the
  file records of the last few seconds' batches wait durably in the checkpoint folder and go
  in one commit per table (the job's next start commits what a crash left there).
- :mod:`sinks.kafka.partitions` — the progress of the changelog the stateful tasks write, one
  transaction per (micro-batch, state partition): taking the partitions over at a job's start
  (fencing older writers), reading their progress.

Each module's docstring states its guarantee and how it holds. ``sinks`` writes revise's
outputs (the changelog, the late and dead-letter topics, the Delta tables) and creates their
topics; the only other Kafka writer is the test-input generator (:mod:`revise.generate`). It
knows revise's record types, errors and vocabulary (:mod:`revise.records`,
:mod:`revise.errors`, :mod:`revise.vocab`) and nothing else of it. Import the submodules
directly (``from sinks.kafka import …``); this package root imports nothing, so a reader of
Kafka does not load delta-rs and the reverse.
"""

__all__: list[str] = []
