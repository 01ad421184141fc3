"""The Delta Lake tables of a query, committed by the driver with delta-rs (SPEC §5).

Under one ``path``::

    revisions/    append-only history of every revision (SPEC §4 fields)
    latest/       one row per (query_id, key, window_start_ms, window_end_ms): its highest
                  revision; retracted (superseded) session bounds are removed
    late/         too-late records (SPEC §6 late fields + query_id), append-only
    dead_letter/  bad input (raw_value, reason, topic, partition, offset, batch_id + query_id)

Who writes: the history tables' data files are written by the job's stateful tasks, where the
rows are (:func:`sinks.delta_files.write_data_file`, from ``revise.spark.operator``); the
driver commits them (:meth:`DeltaTables.write_files`): metadata that grows with the files,
not with the rows. The MERGE into ``latest`` runs on the driver with delta-rs. Spark reads
the tables (views, ``revise query``, time travel) as any Delta table: they are plain Delta
(reader 1 / writer 2) tables.

Guarantee: **replaying a micro-batch changes nothing.** Every write of batch ``b`` of query
``q`` is a Delta transaction carrying the application transaction ``(appId = revise-<q>,
version = b)`` in the table's own log. Before writing, the table's recorded version for that
app id is read from a fresh snapshot; a write whose ``b`` is not higher is skipped (no commit,
no data change). If another writer commits the same app id between that read and the commit
(a zombie instance replaying the same batch), Delta's conflict check fails the commit
(``Concurrent transaction``); the write is then re-read and found done. The MERGE into
``latest`` is also idempotent by itself: it only replaces a row with a strictly higher
revision, so a replay of the same revisions changes nothing.

The job defers that MERGE (``write_batch(defer_latest=True)``): it runs on a background thread
(:class:`sinks.latest_merger.LatestMerger`) while Spark computes the next micro-batches, and
merges the batches that arrived meanwhile in one MERGE: the MERGE is the Delta step's
largest part, and a MERGE of several batches costs far less than one of each. ``latest``
then trails ``revisions`` by a few micro-batches at most (the merger's backlog is bounded). A
crash can lose the MERGE of batches Spark has already recorded (and will not replay);
:meth:`DeltaTables.catch_up_latest`, run at every start, redoes it from ``revisions``, whose
app transaction version is ahead of ``latest``'s exactly then.

Who owns what: :class:`DeltaTables` runs one micro-batch's writes together (3a–3d, below) and
creates the tables; :mod:`sinks.delta_txn` makes each write an idempotent app transaction;
:class:`sinks.delta_history.HistoryWriter` owns the appends to the history tables, staged or
not, and their recovery after a crash; :class:`sinks.latest_merge.LatestTable` owns the MERGE
into ``latest``, its background merger and its catch-up from ``revisions``.

Its place in the commit of a micro-batch is step 3 of ``revise.spark.committer.BatchCommitter``
(3a–3d below). Reading the tables with Spark (the views, time travel) is the query side's:
:mod:`revise.query.views`.

Trace (tumbling 10 s, window ``[0, 10000)`` of key ``a``): batch 3 writes rev 0 (EARLY) →
``latest`` holds rev 0; batch 5 writes rev 1 (LATE) → rev 1 replaces it; batch 5 replayed →
skipped (app version 5 ≤ 5); a stray rev 0 → ignored (0 < 1).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import pyarrow as pa

from revise.records import REVISION_SCHEMA
from revise.vocab import TABLE_NAMES
from sinks.delta_files import DataFile
from sinks.delta_history import HistoryWriter, history_rows, write_rows
from sinks.delta_layout import (
    LOG_RETENTION_KEY,
    log_retention_value,
    longest_log_retention_ms,
    retain_logs,
)
from sinks.delta_schema import TABLE_PROPERTIES, DeltaSchemaError, arrow_schema
from sinks.delta_txn import AfterWrite, DeltaRoot, DeltaWriteError, app_id
from sinks.file_stage import FileStage
from sinks.latest_merge import LatestTable, MergeRunner, enable_deletion_vectors
from sinks.latest_merger import REST_RATIO

__all__ = [
    "AfterWrite",
    "DeltaSchemaError",
    "DeltaTables",
    "DeltaWriteError",
    "WriteTimings",
]


log = logging.getLogger("revise.delta")


@dataclass(frozen=True, slots=True)
class WriteTimings:
    """Seconds spent per table in the last :meth:`DeltaTables.write_batch` (0 when skipped)."""

    revisions: float
    late: float
    dead_letter: float
    latest: float
    total: float


class DeltaTables:
    """The four Delta tables of revise under one path, written idempotently per micro-batch.

    Args:
        path: The Delta root (``--delta-path``): a local path, ``file://``, ``s3://``,
            ``gs://`` or ``abfss://`` URI — anything delta-rs opens; the driver writes it.
        storage_options: delta-rs storage options (credentials, endpoints); None reads them
            from the environment (``AWS_*``, ``GOOGLE_*``, ``AZURE_*``), as delta-rs does.
        revision_schema: The schema of ``revisions`` and ``latest`` (:func:`arrow_schema`):
            one set of aggregate columns per Delta root.
        latest_rest_ratio: How long the background ``latest`` merger rests after a MERGE, in
            multiples of that MERGE's duration (:class:`~sinks.latest_merger.LatestMerger`).
        stage: Where the data file records of micro-batches wait for a commit of several at
            once (:class:`~sinks.file_stage.FileStage`); None commits every batch at once.
        latest_min_rest_s: The least rest of the background ``latest`` merger after a MERGE
            (the job gives its ``--delta-commit-interval``, as ``stage``'s interval).
        log_retention_ms: How long each table keeps its log's commit files
            (``--delta-log-retention``, :func:`~sinks.delta_layout.retain_logs`), set by
            :meth:`ensure`; None leaves each table's own (Delta's default: 30 days).
        after_write: Called after each table's write with the table and the highest
            micro-batch the write holds: 3a–3d of :meth:`write_batch` (a deferred ``latest``
            MERGE on the merger's thread, once done), and every staged commit, whether
            :meth:`write_batch`, :meth:`commit_due_history`, :meth:`flush` or
            :meth:`recover_history` makes it. The job's crash tests kill the process there
            (``during_delta``), with the other writes in any state; its metrics learn there
            how far each table trails the changelog.
    """

    def __init__(self, path: str, *, storage_options: Mapping[str, str] | None = None,
                 revision_schema: pa.Schema = REVISION_SCHEMA,
                 latest_rest_ratio: float = REST_RATIO,
                 stage: FileStage | None = None, latest_min_rest_s: float = 0.0,
                 log_retention_ms: int | None = None,
                 after_write: AfterWrite | None = None) -> None:
        self.path = str(path).rstrip("/")
        self.log_retention_ms = log_retention_ms
        self.revision_schema = revision_schema
        self.storage_options = dict(storage_options) if storage_options else None
        self.last_timings: WriteTimings | None = None
        self._root = DeltaRoot(self.path, self.storage_options)
        self._history = HistoryWriter(self._root, self.schema, stage, after_write)
        self._latest = LatestTable(self._root, revision_schema, after_write=after_write,
                                   rest_ratio=latest_rest_ratio, min_rest_s=latest_min_rest_s)

    @property
    def latest_merges(self) -> int:
        """Deferred MERGEs into ``latest`` so far (each covers one or more micro-batches)."""
        return self._latest.deferred_merges

    @property
    def unbatched_seconds(self) -> dict[str, float]:
        """Seconds per history table of the staged commits made outside :meth:`write_batch`.

        Those of :meth:`commit_due_history` and :meth:`flush`: not in any batch's timings.
        """
        return self._history.unbatched_seconds

    def table_path(self, table: str) -> str:
        """``<path>/<table>``."""
        return self._root.table_path(table)

    def ensure(self) -> DeltaTables:
        """Create the tables that are missing, with explicit schemas and properties.

        ``latest`` is created last so every other table exists at any of its commit times
        (used by time travel in :func:`register_views`). An existing table is left as it is,
        except that a ``latest`` without deletion vectors (created by an earlier revise) gets
        them (:func:`~sinks.latest_merge.enable_deletion_vectors`), and that every table gets the
        log retention this writer was given, if any
        (:func:`~sinks.delta_layout.retain_logs`).

        Raises:
            DeltaSchemaError: ``revisions`` exists with other aggregate columns (a job with
                another ``--aggs`` wrote this root); the message asks for another path.
        """
        from deltalake import DeltaTable

        tables = ("revisions", "late", "dead_letter", "latest")
        retention = ({} if self.log_retention_ms is None
                     else {LOG_RETENTION_KEY: log_retention_value(self.log_retention_ms)})
        for table in tables:
            DeltaTable.create(
                self.table_path(table),
                schema=self.schema(table),
                mode="ignore",  # an existing table is left as it is
                name=table,
                configuration={**TABLE_PROPERTIES[table], **retention},
                storage_options=self.storage_options,
            )
        enable_deletion_vectors(self.table_path("latest"), self.storage_options)
        if self.log_retention_ms is not None:
            changed = retain_logs(map(self.table_path, tables), self.log_retention_ms,
                                  self.storage_options)
            if changed:
                log.info("Delta log retention set to %s on %s", retention[LOG_RETENTION_KEY],
                         ", ".join(changed))
        self._check_columns()
        return self

    def longest_log_retention_ms(self) -> int | None:
        """The longest log retention of the four tables (after :meth:`ensure`), in ms.

        None when a table's value cannot be read (:func:`~sinks.delta_layout.log_retention_ms`).
        """
        return longest_log_retention_ms(map(self.table_path, TABLE_NAMES), self.storage_options)

    def write_batch(self, query_id: str, batch_id: int, revisions: pa.Table, late: pa.Table,
                    dead_letters: pa.Table, *, defer_latest: bool = False,
                    before_latest: Callable[[], None] | None = None) -> None:
        """Write one micro-batch held as rows: its data files here, then :meth:`write_files`.

        For callers that hold the rows (tools, tests); the job's tasks write their files
        themselves. ``late`` and ``dead_letters`` get ``query_id``; every table's rows are
        conformed to its schema.
        """
        files = write_rows(self._root, self.schema,
                           history_rows(query_id, revisions, late, dead_letters),
                           prefix=f"b{batch_id}")
        self.write_files(query_id, batch_id, files, defer_latest=defer_latest,
                         before_latest=before_latest)

    # Longer than ~60 lines: the docstring carries steps 3a-3d of the commit sequence.
    def write_files(
        self,
        query_id: str,
        batch_id: int,
        files: Mapping[str, Sequence[DataFile]],
        *,
        defer_latest: bool = False,
        before_latest: Callable[[], None] | None = None,
    ) -> None:
        """Commit one micro-batch to the four tables; a replay of the batch is a no-op.

        Every commit is a Delta transaction tagged with the application transaction
        ``(appId="revise-<query_id>", version=batch_id)`` (or the highest of the staged batches
        it holds) and holds only what the table's log does not hold yet. The writes, sub-steps
        of step 3 of the commit sequence (``revise.spark.committer.BatchCommitter``), run
        concurrently (separate tables, separate logs):

        3a. add the batch's ``revisions`` data files to ``revisions``;
        3b. add its ``late`` data files to ``late``;
        3c. add its ``dead_letter`` data files to ``dead_letter``;
        3d. MERGE the batch's ``revisions`` data files into ``latest`` on ``LATEST_KEY``,
            after keeping only the highest revision per window: a higher retracted revision
            deletes the row, a higher one replaces it, a new window is inserted unless
            retracted; equal or lower revisions change nothing.

        With a ``stage``, 3a–3c stage the batch's file records, and the staged batches are
        committed in one transaction per table once the interval has passed
        (:class:`~sinks.delta_history.HistoryWriter`).

        Args:
            query_id: The job's stable id.
            batch_id: The Spark micro-batch id (the Delta app transaction version).
            files: The batch's data files per history table
                (:func:`sinks.delta_files.write_data_file`, in the table's schema); those
                of ``revisions`` are also the MERGE's source.
            defer_latest: Queue 3d for the background merger and return after 3a–3c: the
                MERGE then overlaps whatever the caller does next (the job: Spark computing
                the next micro-batches), and covers the batches queued meanwhile too
                (:class:`~sinks.latest_merger.LatestMerger`). The call waits only when the
                merger's backlog is full; :meth:`flush` merges it now. A MERGE lost to a
                crash is redone from ``revisions`` by :meth:`catch_up_latest`.
            before_latest: Called in the background thread just before the deferred MERGE
                that includes this batch (crash tests kill the process there).

        Raises:
            DeltaWriteError: a write failed (or a deferred MERGE of a batch before); the
                tables hold a prefix of the batch's writes and a replay completes the rest
                (:meth:`catch_up_latest` the MERGE of the batches before).
        """
        app = app_id(query_id)
        t0 = time.perf_counter()
        t: dict[str, float] = {}
        if defer_latest:  # the MERGEs of batches before: their errors, and their seconds
            t["latest"] = self._latest.take_seconds()
        sources = tuple(files.get("revisions", ()))
        beside: dict[str, Callable[[], float]] = {}
        if not defer_latest:  # 3d. MERGE into latest, same app transaction
            beside["latest"] = partial(self._latest.merge_files, sources, app, batch_id)
        failure = (f"Delta write of batch {batch_id} of query {query_id!r} under "
                   f"{self.path!r} failed ({{error}}); replaying the batch completes it")
        # 3a, 3b, 3c: idempotent commits (or staged), beside a foreground 3d
        t.update(self._history.write(app, batch_id, files, failure, beside))
        if defer_latest and sources:  # 3d, in the background
            self._latest.submit(app, batch_id, sources, before_latest)
        self.last_timings = WriteTimings(
            t["revisions"], t["late"], t["dead_letter"], t.get("latest", 0.0),
            time.perf_counter() - t0)

    def end_staging(self) -> None:
        """The run stops after its next micro-batches: append their history at once.

        A bounded run calls it when it asks for its close-all (:meth:`FileStage.end`):
        :meth:`flush` would commit a staged batch right after it anyway.
        """
        self._history.end()

    def commit_due_history(self) -> bool:
        """Commit the staged batches if their interval has passed; whether it did.

        A job whose input stops leaves its last batches staged with no next batch to commit
        them: the job's watch loop calls this every 0.2 s, so the tables trail the changelog
        by about the interval also when nothing comes. It does nothing while a
        :meth:`write_batch` holds the stage (that call commits what is due).

        Raises:
            DeltaWriteError: the appends failed; the batches stay staged.
        """
        return self._history.commit_due()

    def recover_history(self, query_id: str) -> int:
        """Write the batches a previous run staged and did not commit; how many there were.

        The job runs it at every start, before :meth:`catch_up_latest` and its first
        micro-batch: those batches are in Kafka and Spark has recorded them, so nothing else
        would bring them to the history tables (``sinks.file_stage``).

        Raises:
            DeltaWriteError: the appends failed (a restart retries; the batches stay staged).
            FileStageError: the stage holds batches of another query.
        """
        return self._history.recover(app_id(query_id))

    def flush(self, *, raise_error: bool = True) -> float:
        """Merge the deferred ``latest`` backlog now and wait for it.

        Returns the seconds of the MERGEs not yet reported by :meth:`write_batch` (0.0: none).

        Meanwhile it commits the staged history files (:class:`~sinks.file_stage.FileStage`)
        and waits for a running history compaction
        (:class:`~sinks.delta_layout.HistoryCompactor`), whose failure is never raised: the last
        MERGE starts first and runs beside them (nothing orders ``latest`` after the history;
        a restart commits staged files, then catches ``latest`` up).

        Raises:
            DeltaWriteError: the staged appends (they stay staged for the next start's
                :meth:`recover_history`) or a MERGE (:meth:`catch_up_latest` redoes it)
                failed, unless ``raise_error`` is false.
        """
        self._latest.hurry()
        history_error = self._history.flush()
        # the history's error, if any, is the one raised
        seconds = self._latest.flush(raise_error=raise_error and history_error is None)
        if history_error is not None and raise_error:
            raise history_error
        return seconds

    def run_latest_merges(self, runner: MergeRunner) -> None:
        """Run the MERGEs into ``latest`` with ``runner`` from now on (default: here).

        The job hands its Spark runner (``revise.spark.task_output.merge_on_executor``): each
        MERGE a one-task Spark job, so it runs on an executor and the driver queues files.
        """
        self._latest.runner = runner

    def catch_up_latest(self, query_id: str) -> int:
        """Bring ``latest`` up to ``revisions`` for ``query_id``; the revisions merged.

        A deferred MERGE (``write_batch(defer_latest=True)``) lost to a crash or an error
        leaves ``latest`` behind ``revisions`` (:meth:`~sinks.latest_merge.LatestTable.
        catch_up`). The job runs it at every start, before its first micro-batch.

        Raises:
            DeltaWriteError: reading ``revisions`` or the MERGE failed (a restart retries).
        """
        return self._latest.catch_up(query_id)

    def schema(self, table: str) -> pa.Schema:
        """The Arrow schema this writer gives ``table`` (:func:`arrow_schema`)."""
        return arrow_schema(table, self.revision_schema)

    def _check_columns(self) -> None:
        """Refuse a root whose ``revisions`` has other columns than this writer's."""
        have = {f.name for f in self._root.table("revisions").schema().fields}
        want = set(self.revision_schema.names)
        if have != want:
            msg = (f"{self.table_path('revisions')} has the columns of other aggregates "
                   f"(extra {sorted(have - want)}, missing {sorted(want - have)}); a Delta "
                   "root holds one --aggs list (and one revise version's columns): give this "
                   "job another --delta-path")
            raise DeltaSchemaError(msg)

    def version(self, table: str) -> int:
        """The current Delta version of one table."""
        return int(self._root.table(table).version())

