"""The history tables' commits: ``revisions``, ``late``, ``dead_letter`` (steps 3a–3c).

The data files of a micro-batch's history rows are written where the rows are (the job's
stateful tasks, :func:`sinks.delta_files.write_data_file`); :class:`HistoryWriter` commits
them. With a :class:`~sinks.file_stage.FileStage` every batch's file records are staged and
the staged batches committed in one transaction per table once the stage's interval has
passed: in the batch's own write, in the job's watch loop (:meth:`HistoryWriter.commit_due`),
at the stop (:meth:`HistoryWriter.flush`), or at the next start after a crash
(:meth:`HistoryWriter.recover`). Without one, each batch is committed at once. Each commit is
idempotent (:func:`sinks.delta_files.commit_batches`). It also starts the history compaction
(:class:`~sinks.delta_layout.HistoryCompactor`) after commits.

:func:`write_rows` writes a batch's rows' data files here, for callers that hold the rows (tools,
tests). Where these writes sit in a micro-batch's commit is
:meth:`sinks.delta_tables.DeltaTables.write_files`' (3a–3d).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from functools import partial

import pyarrow as pa

from sinks.delta_files import DataFile, commit_batches, write_data_file
from sinks.delta_layout import HistoryCompactor
from sinks.delta_txn import AfterWrite, DeltaRoot, DeltaWriteError, conform, run_writes
from sinks.file_stage import FileStage, commit_staged

__all__ = ["HISTORY_TABLES", "HistoryWriter", "history_rows", "write_rows"]

HISTORY_TABLES = ("revisions", "late", "dead_letter")
"""The append-only tables."""

BatchFiles = Mapping[str, Sequence[DataFile]]
"""One micro-batch's data files, by history table."""


def history_rows(query_id: str, revisions: pa.Table, late: pa.Table,
                 dead_letters: pa.Table) -> dict[str, pa.Table]:
    """A batch's rows by history table (``late`` and ``dead_letter`` get ``query_id``)."""
    return {"revisions": revisions, "late": _add_query_id(late, query_id),
            "dead_letter": _add_query_id(dead_letters, query_id)}


def write_rows(root: DeltaRoot, schema: Callable[[str], pa.Schema],
               history: Mapping[str, pa.Table], *, prefix: str) -> dict[str, list[DataFile]]:
    """Write each history table's rows (conformed to its schema) as one data file.

    Tables without rows get none; ``prefix`` starts the files' names (``b<batch>-p<partition>``).
    The files are invisible until a commit names them.

    Raises:
        DeltaWriteError: a file could not be written (the message names the table's path).
    """
    files: dict[str, list[DataFile]] = {}
    for name, rows in history.items():
        if not rows.num_rows:
            continue
        where = root.table_path(name)
        try:
            files[name] = [write_data_file(where, conform(rows, schema(name)), prefix=prefix,
                                           storage_options=root.storage_options)]
        except (OSError, ValueError) as e:
            msg = (f"writing the Delta data file {prefix} under {where!r} failed "
                   f"({type(e).__name__}: {e}); the micro-batch is replayed on restart")
            raise DeltaWriteError(msg) from e
    return files


def _add_query_id(table: pa.Table, query_id: str) -> pa.Table:
    if "query_id" in table.column_names:
        return table
    return table.add_column(0, "query_id",
                            pa.repeat(pa.scalar(query_id, pa.string()), table.num_rows))


class HistoryWriter:
    """The commits of the history tables of one Delta root, staged or at once.

    Args:
        root: The Delta root's tables.
        schema: Each table's Arrow schema.
        stage: Where the file records of micro-batches wait for a commit of several at once;
            None commits every batch at once.
        after_write: Told after each table's commit with the highest batch it holds.
    """

    def __init__(self, root: DeltaRoot, schema: Callable[[str], pa.Schema],
                 stage: FileStage | None, after_write: AfterWrite | None) -> None:
        self._root = root
        self._schema = schema
        self._stage = stage
        self._after_write = after_write
        self._compactor = HistoryCompactor(root.table_path, root.storage_options)
        self.lock = threading.Lock()
        """Held while the stage and its commits change (against :meth:`commit_due`)."""
        self.unbatched_seconds: dict[str, float] = {}
        """Seconds per history table of the staged commits made outside :meth:`write`
        (:meth:`commit_due`, :meth:`flush`): not in any batch's timings."""

    def write(self, app_id: str, batch_id: int, files: BatchFiles, failure: str,
              beside: dict[str, Callable[[], float]]) -> dict[str, float]:
        """Commit (or stage) one batch's data files, with ``beside`` run at the same time.

        ``files`` maps each history table to the batch's data files for it; ``beside`` holds
        other tables' writes to run concurrently (the foreground MERGE into ``latest``). With
        a stage the batch is staged, and the staged batches committed once the interval has
        passed. Returns the seconds per table, the staged commits' included.

        Raises:
            DeltaWriteError: a commit or the staging failed (``failure``, with ``{error}``).
        """
        t: dict[str, float] = dict.fromkeys(HISTORY_TABLES, 0.0)
        writes = dict(beside)
        with self.lock:  # against commit_due on the job's watch thread
            if self._stage is None:
                for name, table_files in files.items():
                    if table_files:
                        writes[name] = partial(self._commit_one, name, app_id, batch_id,
                                               table_files)
            else:
                self._stage_batch(app_id, batch_id, files)
            t.update(run_writes(writes, batch_id, failure, self._after_write))
            if self._stage is not None and self._stage.due():
                t.update(self.commit_staged())
        return t

    def _commit_one(self, table: str, app_id: str, batch_id: int,
                    files: Sequence[DataFile]) -> float:
        took = commit_batches(self._root, table, app_id, {batch_id: files},
                              self._schema(table))
        if took:
            self._compactor.appended(table)
        return took

    def _stage_batch(self, app_id: str, batch_id: int, files: BatchFiles) -> None:
        assert self._stage is not None
        try:
            self._stage.stage(app_id, batch_id, files)
        except OSError as e:
            msg = (f"staging batch {batch_id} under {str(self._stage.directory)!r} failed "
                   f"({type(e).__name__}: {e}); replaying the batch completes it")
            raise DeltaWriteError(msg) from e

    def commit_staged(self) -> dict[str, float]:
        """Commit every staged batch's files, one transaction per table; seconds each.

        The caller holds :attr:`lock`.

        Raises:
            DeltaWriteError: a commit failed; the batches stay staged (the next commit, or
                the next start's :meth:`recover`, retries them).
        """
        if self._stage is None or not self._stage.pending:
            return {}
        tables = {t for b in self._stage.pending for t, fs in b.files.items() if fs}
        t = commit_staged(self._root, self._stage, self._schema, after_write=self._after_write)
        for table in tables:
            self._compactor.appended(table)
        return t

    def end(self) -> None:
        """The run stops after its next micro-batches: commit their history at once."""
        if self._stage is not None:
            self._stage.end()

    def commit_due(self) -> bool:
        """Commit the staged batches if their interval has passed; whether it did.

        It does nothing while a :meth:`write` holds the stage (that call commits what is due).

        Raises:
            DeltaWriteError: the commits failed; the batches stay staged.
        """
        if self._stage is None or not self.lock.acquire(blocking=False):
            return False
        try:
            if not self._stage.due():
                return False
            self._add_unbatched(self.commit_staged())
            return True
        finally:
            self.lock.release()

    def flush(self) -> DeltaWriteError | None:
        """Commit the staged batches now and wait for a running compaction; the commit's error.

        The compaction's failure is never raised (its next run retries).
        """
        error: DeltaWriteError | None = None
        try:
            with self.lock:
                self._add_unbatched(self.commit_staged())
        except DeltaWriteError as exc:
            error = exc
        self._compactor.wait()
        return error

    def recover(self, app_id: str) -> int:
        """Commit the batches a previous run staged and did not commit; how many there were.

        Raises:
            DeltaWriteError: the commits failed (a restart retries; the batches stay staged).
            FileStageError: the stage holds batches of another query.
        """
        if self._stage is None:
            return 0
        batches = self._stage.recover(app_id)
        if batches:
            with self.lock:
                self.commit_staged()
        return len(batches)

    def _add_unbatched(self, seconds: dict[str, float]) -> None:
        for name, took in seconds.items():
            self.unbatched_seconds[name] = self.unbatched_seconds.get(name, 0.0) + took
