"""The Delta Lake tables of a query, written from the driver with delta-rs (SPEC §5).

Under one ``path``::

    revisions/    append-only history of every revision (SPEC §4 fields)
    latest/       one row per (query_id, key, window_start_ms, window_end_ms): its highest
                  revision; retracted (superseded) session bounds are removed
    late/         too-late records (SPEC §6 late fields + query_id), append-only
    dead_letter/  bad input (raw_value, reason, topic, partition, offset, batch_id + query_id)

Who writes: the job's driver, from the micro-batch it already holds as Arrow tables (it
produced the same tables to Kafka), through delta-rs (the ``deltalake`` package). A Spark
Delta write costs several Spark jobs and about 3 s (append) or 12 s (MERGE) per 500k rows on
two cores; delta-rs does the same in 0.5 s and 1 s (docs/lab/benchmarks-diary.md). Spark reads the
tables (views, ``revise query``, time travel) as any Delta table: they are plain Delta
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
(:class:`sinks.latest_merge.LatestMerger`) while Spark computes the next micro-batches, and
merges the batches that arrived meanwhile in one MERGE. On the issue-12 workloads the MERGE is
the Delta step's largest and only growing part (copy-on-write over a table of every open
window), and a MERGE of several batches costs about as much as one. ``latest`` then trails
``revisions`` by a few micro-batches at most (the merger's backlog is bounded). A crash can lose
the MERGE of batches Spark has already recorded (and will not replay);
:meth:`DeltaTables.catch_up_latest`, run at every start, redoes it from ``revisions``, whose
app transaction version is ahead of ``latest``'s exactly then.

Its place in the commit of a micro-batch is step 3 of ``revise.spark.committer.BatchCommitter``
(3a–3d below). Reading the tables with Spark (the views, time travel) is the query side's:
:mod:`revise.query.views`.

Trace (tumbling 10 s, window ``[0, 10000)`` of key ``a``): batch 3 writes rev 0 (EARLY) →
``latest`` holds rev 0; batch 5 writes rev 1 (LATE) → rev 1 replaces it; batch 5 replayed →
skipped (app version 5 ≤ 5); a stray rev 0 → ignored (0 < 1).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.compute as pc

from revise.errors import ReviseError
from revise.records import REVISION_SCHEMA
from revise.vocab import LATEST_KEY, TABLE_NAMES
from sinks.delta_layout import (
    LOG_RETENTION_KEY,
    HistoryCompactor,
    bound_latest_files,
    log_retention_value,
    longest_log_retention_ms,
    retain_logs,
)
from sinks.delta_schema import TABLE_PROPERTIES, DeltaSchemaError, arrow_schema
from sinks.history_stage import HISTORY_TABLES, HistoryStage
from sinks.latest_merge import REST_RATIO, LatestMerger, MergeFailed, highest_per_window

if TYPE_CHECKING:
    from deltalake import DeltaTable as RustDeltaTable
    from deltalake.transaction import CommitProperties

__all__ = [
    "COMPACT_LATEST_EVERY",
    "DeltaSchemaError",
    "DeltaTables",
    "DeltaWriteError",
    "WriteTimings",
]


log = logging.getLogger("revise.delta")

COMPACT_LATEST_EVERY: Final = 50
"""Compact ``latest``'s small files after this many MERGEs (each MERGE adds a few files)."""
RELOAD_EVERY: Final = 50
"""Re-open a table from its log after this many incremental updates of the cached one.

delta-rs's ``update_incremental`` keeps what it read of every new commit: the driver's memory
grew ~300 KiB per micro-batch and each write got slower (700 batches through the four tables:
+208 MiB and 69 s; re-opened every 50: +73 MiB and 38 s, most of it in the first 100 batches;
``python -m benchmarks.bench_delta_memory``). A fresh open reads the newest Delta checkpoint
(every 10–20 commits) and the few JSON commits after it.
"""


class DeltaWriteError(ReviseError, RuntimeError):
    """A Delta write of a micro-batch failed (the batch is safe to replay)."""


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
            multiples of that MERGE's duration (:class:`~sinks.latest_merge.LatestMerger`).
        stage: Where the history rows of micro-batches wait for a commit of several at once
            (:class:`~sinks.history_stage.HistoryStage`); None appends every batch at once.
        latest_min_rest_s: The least rest of the background ``latest`` merger after a MERGE
            (the job gives its ``--delta-commit-interval``, as ``stage``'s interval).
        log_retention_ms: How long each table keeps its log's commit files
            (``--delta-log-retention``, :func:`~sinks.delta_layout.retain_logs`), set by
            :meth:`ensure`; None leaves each table's own (Delta's default: 30 days).
    """

    def __init__(self, path: str, *, storage_options: Mapping[str, str] | None = None,
                 revision_schema: pa.Schema = REVISION_SCHEMA,
                 latest_rest_ratio: float = REST_RATIO,
                 stage: HistoryStage | None = None, latest_min_rest_s: float = 0.0,
                 log_retention_ms: int | None = None) -> None:
        self.path = str(path).rstrip("/")
        self.log_retention_ms = log_retention_ms
        self.revision_schema = revision_schema
        self.storage_options = dict(storage_options) if storage_options else None
        self.last_timings: WriteTimings | None = None
        self._tables: dict[str, RustDeltaTable] = {}
        self._updates: dict[str, int] = {}
        self._merges = 0
        self._merger = LatestMerger(self._merge_deferred, rest_ratio=latest_rest_ratio,
                                    min_rest_s=latest_min_rest_s)
        self._history = HistoryCompactor(self.table_path, self.storage_options)
        self._stage = stage
        self._history_lock = threading.Lock()  # the stage and its commits
        self.after_write: Callable[[str, int], None] | None = None
        """Called after each table's write with the table and the highest micro-batch the
        write holds: 3a–3d of :meth:`write_batch` (a deferred ``latest`` MERGE on the
        merger's thread, once done), and every staged commit, whether :meth:`write_batch`,
        :meth:`commit_due_history`, :meth:`flush` or :meth:`recover_history` makes it. The
        job's crash tests kill the process there (``during_delta``), with the other writes in
        any state; its metrics learn there how far each table trails the changelog."""
        self.unbatched_seconds: dict[str, float] = {}
        """Seconds per history table of the staged commits made outside :meth:`write_batch`
        (:meth:`commit_due_history`, :meth:`flush`): not in any batch's timings."""

    @property
    def latest_merges(self) -> int:
        """Deferred MERGEs into ``latest`` so far (each covers one or more micro-batches)."""
        return self._merger.merges

    def table_path(self, table: str) -> str:
        """``<path>/<table>``."""
        return f"{self.path}/{table}"

    def ensure(self) -> DeltaTables:
        """Create the tables that are missing, with explicit schemas and properties.

        ``latest`` is created last so every other table exists at any of its commit times
        (used by time travel in :func:`register_views`). An existing table is left as it is,
        except that a ``latest`` without its file bound (created by an earlier revise) gets it
        (:func:`~sinks.delta_layout.bound_latest_files`), and that every table gets the
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
        bound_latest_files(self.table_path("latest"), self.storage_options)
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

    # Longer than ~60 lines: the docstring carries steps 3a-3d of the commit sequence.
    def write_batch(
        self,
        query_id: str,
        batch_id: int,
        revisions: pa.Table,
        late: pa.Table,
        dead_letters: pa.Table,
        *,
        defer_latest: bool = False,
        before_latest: Callable[[], None] | None = None,
    ) -> None:
        """Write one micro-batch to the four tables; a replay of the batch is a no-op.

        Every write is a Delta transaction tagged with the application transaction
        ``(appId="revise-<query_id>", version=batch_id)`` and skipped when the table's log
        already holds that app id at ``batch_id`` or higher. Empty inputs are not written (a
        replay of the same deterministic batch is empty too, so skipping keeps replays no-ops).
        The four writes, sub-steps of step 3 of the commit sequence
        (``revise.spark.committer.BatchCommitter``), run concurrently (separate tables,
        separate logs):

        3a. append ``revisions`` to ``revisions``;
        3b. append ``late`` (+ ``query_id``) to ``late``;
        3c. append ``dead_letters`` (+ ``query_id``) to ``dead_letter``;
        3d. MERGE ``revisions`` into ``latest`` on ``LATEST_KEY``, after keeping only the
            highest revision per window: a higher retracted revision deletes the row, a higher
            one replaces it, a new window is inserted unless retracted; equal or lower
            revisions change nothing.

        With a ``stage``, 3a–3c of a batch that comes less than the stage's interval after the
        last history commit are staged instead, and written with the other staged batches in
        one append per table once the interval has passed (:meth:`_commit_staged`).

        Args:
            query_id: The job's stable id.
            batch_id: The Spark micro-batch id (the Delta app transaction version).
            revisions: Revisions with the SPEC §4 columns (extra columns are dropped, types
                cast to the table's).
            late: Too-late records with the SPEC §6 late columns.
            dead_letters: Dead letters with the SPEC §6 columns.
            defer_latest: Queue 3d for the background merger and return after 3a–3c: the
                MERGE then overlaps whatever the caller does next (the job: Spark computing
                the next micro-batches), and covers the batches queued meanwhile too
                (:class:`~sinks.latest_merge.LatestMerger`). The call waits only when the
                merger's backlog is full; :meth:`flush` merges it now. A MERGE lost to a
                crash is redone from ``revisions`` by :meth:`catch_up_latest`.
            before_latest: Called in the background thread just before the deferred MERGE
                that includes this batch (crash tests kill the process there).

        Raises:
            DeltaWriteError: a write failed (or a deferred MERGE of a batch before); the
                tables hold a prefix of the batch's writes and a replay completes the rest
                (:meth:`catch_up_latest` the MERGE of the batches before).
        """
        app_id = _app_id(query_id)
        t0 = time.perf_counter()
        t: dict[str, float] = {}
        if defer_latest:  # the MERGEs of batches before: their errors, and their seconds
            with self._merge_errors():
                self._merger.check()
            t["latest"] = self._merger.take_seconds()

        history = {
            "revisions": revisions,
            "late": _add_query_id(late, query_id),
            "dead_letter": _add_query_id(dead_letters, query_id),
        }
        history = {name: _conform(rows, self.schema(name)) for name, rows in history.items()}
        writes: dict[str, Callable[[], float]] = {}
        waited: dict[str, float] = {}
        with self._history_lock:  # against commit_due_history on the job's watch thread
            if self._stage is not None and self._stage.ending:
                # The run stops next and commits the stage anyway: commit what waits now, then
                # append this batch at once instead of staging it (ids stay in order).
                waited = self._commit_staged()
            staged = self._stage is not None and self._stage.should_stage()
            if staged:  # 3a-3c wait in the stage: one commit for several batches
                self._stage_batch(app_id, batch_id, history)
                t.update(dict.fromkeys(HISTORY_TABLES, 0.0))
            else:  # 3a, 3b, 3c: idempotent appends
                for name, rows in history.items():
                    writes[name] = partial(self._append, name, rows, app_id, batch_id)
            if not defer_latest:  # 3d. MERGE into latest, same app transaction
                writes["latest"] = lambda: self._merge_latest(revisions, app_id, batch_id)
            failure = (f"Delta write of batch {batch_id} of query {query_id!r} under "
                       f"{self.path!r} failed ({{error}}); replaying the batch completes it")
            t.update(self._run_writes(writes, batch_id, failure))
            if self._stage is not None:
                if not staged:
                    self._stage.committed()  # restarts the interval
                elif self._stage.due():
                    t.update(self._commit_staged())
        if defer_latest and revisions.num_rows:  # 3d, in the background
            with self._merge_errors():
                self._merger.submit(app_id, batch_id, history["revisions"], before_latest)
        for name, seconds in waited.items():
            t[name] = t.get(name, 0.0) + seconds
        self.last_timings = WriteTimings(
            t["revisions"], t["late"], t["dead_letter"], t["latest"], time.perf_counter() - t0
        )

    def _run_writes(self, writes: dict[str, Callable[[], float]], batch_id: int,
                    failure: str) -> dict[str, float]:
        """Run independent table writes at once; each one's seconds.

        :attr:`after_write` is called with each table's name and ``batch_id`` (the highest
        batch the writes hold) once its write is done; ``failure`` is the error message,
        with ``{error}``.

        Raises:
            DeltaWriteError: a write failed.
        """
        t: dict[str, float] = {}
        if not writes:
            return t
        try:
            # The tables are independent Delta logs: write them at once (delta-rs works outside
            # the GIL); each is idempotent on its own, so any prefix is safe to replay.
            with ThreadPoolExecutor(len(writes), thread_name_prefix="revise-delta") as pool:
                running = {name: pool.submit(write) for name, write in writes.items()}
                for name, future in running.items():
                    t[name] = future.result()
                    if self.after_write is not None:
                        self.after_write(name, batch_id)
        except Exception as e:
            raise DeltaWriteError(failure.replace("{error}", f"{type(e).__name__}: {e}")) from e
        return t

    def _stage_batch(self, app_id: str, batch_id: int, history: dict[str, pa.Table]) -> None:
        assert self._stage is not None
        try:
            self._stage.stage(app_id, batch_id, history)
        except OSError as e:
            msg = (f"staging batch {batch_id} under {str(self._stage.directory)!r} failed "
                   f"({type(e).__name__}: {e}); replaying the batch completes it")
            raise DeltaWriteError(msg) from e

    def _commit_staged(self) -> dict[str, float]:
        """Append every staged batch to the history tables, one commit per table; seconds each.

        A table receives only the staged batches above its app transaction version (a replayed
        batch it already holds is skipped), read from the same snapshot the idempotence check
        reads; the commit is tagged with the highest batch id.
        The stage forgets the batches once all three tables hold them.

        Raises:
            DeltaWriteError: an append failed; the batches stay staged (the next commit, or
                the next start's :meth:`recover_history`, retries them).
        """
        assert self._stage is not None
        batches = self._stage.pending
        if not batches:
            return {}
        app_id, last = batches[-1].app_id, batches[-1].batch_id

        def rows_after(name: str, done: int | None) -> pa.Table:
            return pa.concat_tables(
                [b.tables[name] for b in batches if done is None or b.batch_id > done])

        failure = (f"Delta write of the staged batches {batches[0].batch_id}-{last} under "
                   f"{self.path!r} failed ({{error}}); they stay in "
                   f"{str(self._stage.directory)!r} and the next start writes them")
        writes: dict[str, Callable[[], float]] = {
            # A table no staged batch has rows for is not even read (late, dead_letter).
            name: (partial(self._append_after, name, partial(rows_after, name), app_id, last)
                   if any(b.tables[name].num_rows for b in batches) else _nothing)
            for name in HISTORY_TABLES
        }
        t = self._run_writes(writes, last, failure)
        self._stage.committed()
        return t

    def end_staging(self) -> None:
        """The run stops after its next micro-batches: append their history at once.

        A bounded run calls it when it asks for its close-all (:meth:`HistoryStage.end`):
        :meth:`flush` would commit a staged batch right after it anyway.
        """
        if self._stage is not None:
            self._stage.end()

    def commit_due_history(self) -> bool:
        """Commit the staged batches if their interval has passed; whether it did.

        A job whose input stops leaves its last batches staged with no next batch to commit
        them: the job's watch loop calls this every 0.2 s, so the tables trail the changelog
        by about the interval also when nothing comes. It does nothing while a
        :meth:`write_batch` holds the stage (that call commits what is due).

        Raises:
            DeltaWriteError: the appends failed; the batches stay staged.
        """
        if self._stage is None or not self._history_lock.acquire(blocking=False):
            return False
        try:
            if not self._stage.due():
                return False
            self._add_unbatched(self._commit_staged())
            return True
        finally:
            self._history_lock.release()

    def _add_unbatched(self, seconds: dict[str, float]) -> None:
        for name, took in seconds.items():
            self.unbatched_seconds[name] = self.unbatched_seconds.get(name, 0.0) + took

    def recover_history(self, query_id: str) -> int:
        """Write the batches a previous run staged and did not commit; how many there were.

        The job runs it at every start, before :meth:`catch_up_latest` and its first
        micro-batch: those batches are in Kafka and Spark has recorded them, so nothing else
        would bring them to the history tables (``sinks.history_stage``).

        Raises:
            DeltaWriteError: the appends failed (a restart retries; the batches stay staged).
            StageError: the stage holds batches of another query.
        """
        if self._stage is None:
            return 0
        batches = self._stage.recover(_app_id(query_id),
                                      {name: self.schema(name) for name in HISTORY_TABLES})
        if batches:
            self._commit_staged()
        return len(batches)

    def flush(self, *, raise_error: bool = True) -> float:
        """Merge the deferred ``latest`` backlog now and wait for it.

        Returns the seconds of the MERGEs not yet reported by :meth:`write_batch` (0.0: none).

        Meanwhile it appends the staged history rows (:class:`~sinks.history_stage.HistoryStage`)
        and waits for a running history compaction
        (:class:`~sinks.delta_layout.HistoryCompactor`), whose failure is never raised: the last
        MERGE starts first and runs beside them (nothing orders ``latest`` after the history;
        a restart commits staged rows, then catches ``latest`` up).

        Raises:
            DeltaWriteError: the staged appends (they stay staged for the next start's
                :meth:`recover_history`) or a MERGE (:meth:`catch_up_latest` redoes it)
                failed, unless ``raise_error`` is false.
        """
        self._merger.hurry()
        history_error: DeltaWriteError | None = None
        try:
            with self._history_lock:
                if self._stage is not None:
                    self._add_unbatched(self._commit_staged())
        except DeltaWriteError as exc:
            history_error = exc
        self._history.wait()
        with self._merge_errors():  # the history's error, if any, is the one raised
            self._merger.flush(raise_error=raise_error and history_error is None)
        if history_error is not None and raise_error:
            raise history_error
        return self._merger.take_seconds()

    def catch_up_latest(self, query_id: str) -> int:
        """Bring ``latest`` up to ``revisions`` for ``query_id``; the revisions merged.

        A deferred MERGE (``write_batch(defer_latest=True)``) lost to a crash or an error
        leaves ``latest``'s app transaction version behind that of ``revisions``, which holds
        every committed revision with its ``batch_id``. This MERGEs the revisions of the
        batches after ``latest``'s version, tagged with ``revisions``' version: the MERGE
        replaces only lower revisions, so merging a batch twice changes nothing. The job runs
        it at every start, before its first micro-batch.

        Raises:
            DeltaWriteError: reading ``revisions`` or the MERGE failed (a restart retries).
        """
        app_id = _app_id(query_id)
        self._merger.flush(raise_error=False)
        try:
            revisions = self._table("revisions")
            have = self._table("latest").transaction_version(app_id)
            want = revisions.transaction_version(app_id)
            merged = 0
            if want is not None and (have is None or have < want):
                rows = revisions.to_pyarrow_dataset().to_table(
                    filter=(pc.field("query_id") == query_id)
                    & (pc.field("batch_id") > (-1 if have is None else have)),
                )
                self._merge_latest(rows, app_id, want)
                merged = rows.num_rows
        except Exception as e:
            msg = (
                f"bringing Delta latest under {self.path!r} up to revisions of query "
                f"{query_id!r} failed ({type(e).__name__}: {e}); fix the cause and restart"
            )
            raise DeltaWriteError(msg) from e
        # latest holds every batch revisions holds: deferred MERGEs may go on from here.
        self._merger.clear_error()
        return merged

    @contextmanager
    def _merge_errors(self) -> Iterator[None]:
        """A failed deferred MERGE (:class:`MergeFailed`) raised as :class:`DeltaWriteError`."""
        try:
            yield
        except MergeFailed as e:
            batches = ", ".join(map(str, e.batch_ids))
            msg = (
                f"Delta MERGE into latest of batch {batches} under {self.path!r} failed "
                f"({type(e.cause).__name__}: {e.cause}); a restart redoes it from revisions"
            )
            raise DeltaWriteError(msg) from e.cause

    def schema(self, table: str) -> pa.Schema:
        """The Arrow schema this writer gives ``table`` (:func:`arrow_schema`)."""
        return arrow_schema(table, self.revision_schema)

    def _check_columns(self) -> None:
        """Refuse a root whose ``revisions`` has other columns than this writer's."""
        have = {f.name for f in self._table("revisions").schema().fields}
        want = set(self.revision_schema.names)
        if have != want:
            msg = (f"{self.table_path('revisions')} has the columns of other aggregates "
                   f"(extra {sorted(have - want)}, missing {sorted(want - have)}); a Delta "
                   "root holds one --aggs list (and one revise version's columns): give this "
                   "job another --delta-path")
            raise DeltaSchemaError(msg)

    # ---- helpers ---------------------------------------------------------------------------

    def _table(self, table: str) -> RustDeltaTable:
        """The table at its newest version (loaded once, then brought up to date)."""
        from deltalake import DeltaTable

        dt_ = self._tables.get(table)
        updates = self._updates.get(table, 0)
        if dt_ is None or updates >= RELOAD_EVERY:
            dt_ = DeltaTable(self.table_path(table), storage_options=self.storage_options)
            self._tables[table] = dt_
            self._updates[table] = 0
        else:
            dt_.update_incremental()
            self._updates[table] = updates + 1
        return dt_

    def _idempotent(
        self,
        table: str,
        app_id: str,
        batch_id: int,
        write: Callable[[RustDeltaTable, CommitProperties, int | None], bool],
    ) -> float:
        """Run ``write`` as app transaction ``(app_id, batch_id)`` unless already committed.

        ``write`` gets the table, the commit properties and the table's version of ``app_id``
        before it (None: none yet), and returns whether it committed anything. Returns the
        seconds spent, 0.0 when skipped or nothing was written.
        """
        from deltalake.exceptions import CommitFailedError
        from deltalake.transaction import CommitProperties, Transaction

        t0 = time.perf_counter()
        retries = 0
        maybe_ours = False  # a write that failed after its commit
        while True:
            target = self._table(table)
            done = target.transaction_version(app_id)
            if done is not None and done >= batch_id:
                return time.perf_counter() - t0 if maybe_ours else 0.0
            props = CommitProperties(app_transactions=[Transaction(app_id, batch_id)])
            try:
                return time.perf_counter() - t0 if write(target, props, done) else 0.0
            except (CommitFailedError, FileNotFoundError) as e:
                # CommitFailedError: a concurrent commit won (perhaps this very batch, by a
                # zombie). FileNotFoundError: a log file went away under this writer, which
                # happens after the commit when its expired-log cleanup races another writer's
                # (the history compaction's) deleting the same file; seen with a short
                # delta.logRetentionDuration (bench_delta_log). Either way: re-read; the app
                # transaction says whether the batch is in.
                self._tables.pop(table, None)
                maybe_ours = maybe_ours or isinstance(e, FileNotFoundError)
                retries += 1
                if retries == 3:
                    raise

    def _append(self, table: str, data: pa.Table, app_id: str, batch_id: int) -> float:
        if data.num_rows == 0:
            return 0.0
        return self._append_after(table, lambda _done: data, app_id, batch_id)

    def _append_after(self, table: str, rows_after: Callable[[int | None], pa.Table],
                      app_id: str, batch_id: int) -> float:
        """Append ``rows_after(the table's version of app_id)`` as ``(app_id, batch_id)``.

        Nothing is committed when those rows are empty (the staged batches above the table's
        version had none for it).
        """

        def write(target: RustDeltaTable, props: CommitProperties, done: int | None) -> bool:
            from deltalake import write_deltalake

            rows = rows_after(done)
            if rows.num_rows == 0:
                return False
            write_deltalake(target, _conform(rows, self.schema(table)), mode="append",
                            commit_properties=props)
            return True

        took = self._idempotent(table, app_id, batch_id, write)
        if took:
            self._history.appended(table)
        return took

    def _merge_deferred(self, revisions: pa.Table, app_id: str, batch_id: int) -> float:
        """A MERGE of :class:`~sinks.latest_merge.LatestMerger`'s, then :attr:`after_write`."""
        took = self._merge_latest(revisions, app_id, batch_id)
        if self.after_write is not None:
            self.after_write("latest", batch_id)
        return took

    def _merge_latest(self, revisions: pa.Table, app_id: str, batch_id: int) -> float:
        if revisions.num_rows == 0:
            return 0.0
        source = highest_per_window(_conform(revisions, self.revision_schema))
        starts = source.column("window_start_ms")
        lo, hi = pc.min(starts).as_py(), pc.max(starts).as_py()
        # The range bound lets delta-rs skip files of windows this batch cannot touch.
        on = " AND ".join(f"t.{c} = s.{c}" for c in LATEST_KEY) + (
            f" AND t.window_start_ms >= {int(lo)} AND t.window_start_ms <= {int(hi)}"
        )

        def write(target: RustDeltaTable, props: CommitProperties, _done: int | None) -> bool:
            (
                target.merge(
                    source, predicate=on, source_alias="s", target_alias="t",
                    commit_properties=props,
                )
                .when_matched_delete(predicate="s.revision > t.revision AND s.retracted")
                .when_matched_update_all(predicate="s.revision > t.revision")
                .when_not_matched_insert_all(predicate="NOT s.retracted")
                .execute()
            )
            return True

        took = self._idempotent("latest", app_id, batch_id, write)
        if took:
            self._merges += 1
            if self._merges % COMPACT_LATEST_EVERY == 0:
                self._table("latest").optimize.compact()
        return took

    def version(self, table: str) -> int:
        """The current Delta version of one table."""
        return int(self._table(table).version())


def _nothing() -> float:
    return 0.0


def _app_id(query_id: str) -> str:
    """The Delta application transaction id of a query's writes."""
    return f"revise-{query_id}"


def _add_query_id(table: pa.Table, query_id: str) -> pa.Table:
    if "query_id" in table.column_names:
        return table
    return table.add_column(0, "query_id",
                            pa.repeat(pa.scalar(query_id, pa.string()), table.num_rows))


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The schema's columns, in order, cast to its types (extra columns dropped)."""
    return table.select(schema.names).cast(schema)

