"""The history tables' writes: ``revisions``, ``late``, ``dead_letter`` (steps 3a–3c).

:class:`HistoryWriter` appends a micro-batch's history rows, each table's append idempotent
(:meth:`sinks.delta_txn.DeltaRoot.write_once`), or stages them
(:class:`~sinks.history_stage.HistoryStage`) and appends the staged batches in one commit per
table once the stage's interval has passed: in the next batch's write, in the job's watch loop
(:meth:`HistoryWriter.commit_due`), at the stop (:meth:`HistoryWriter.flush`), or at the next
start after a crash (:meth:`HistoryWriter.recover`). It also starts the history compaction
(:class:`~sinks.delta_layout.HistoryCompactor`) after appends.

Where these writes sit in a micro-batch's commit is :meth:`sinks.delta_tables.DeltaTables.
write_batch`'s (3a–3d).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import pyarrow as pa

from sinks.delta_layout import HistoryCompactor
from sinks.delta_txn import AfterWrite, DeltaRoot, DeltaWriteError, conform, run_writes
from sinks.history_stage import HISTORY_TABLES, HistoryStage

if TYPE_CHECKING:
    from deltalake import DeltaTable as RustDeltaTable
    from deltalake.transaction import CommitProperties

__all__ = ["HistoryWriter"]


class HistoryWriter:
    """The appends to the history tables of one Delta root, staged or at once.

    Args:
        root: The Delta root's tables.
        schema: Each table's Arrow schema (the rows are conformed to it).
        stage: Where the history rows of micro-batches wait for a commit of several at once;
            None appends every batch at once.
        after_write: Told after each table's append with the highest batch it holds.
    """

    def __init__(self, root: DeltaRoot, schema: Callable[[str], pa.Schema],
                 stage: HistoryStage | None, after_write: AfterWrite | None) -> None:
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

    def write(self, app_id: str, batch_id: int, history: dict[str, pa.Table], failure: str,
              beside: dict[str, Callable[[], float]]) -> dict[str, float]:
        """Append (or stage) one batch's history rows, with ``beside`` run at the same time.

        ``history`` maps each history table to the batch's rows for it; ``beside`` holds other
        tables' writes to run concurrently (the foreground MERGE into ``latest``). A batch that
        comes less than the stage's interval after the last history commit is staged instead,
        and written with the other staged batches once the interval has passed. Returns the
        seconds per table, the staged commits' included.

        Raises:
            DeltaWriteError: a write or the staging failed (``failure``, with ``{error}``).
        """
        waited: dict[str, float] = {}
        t: dict[str, float] = {}
        writes = dict(beside)
        with self.lock:  # against commit_due on the job's watch thread
            if self._stage is not None and self._stage.ending:
                # The run stops next and commits the stage anyway: commit what waits now, then
                # append this batch at once instead of staging it (ids stay in order).
                waited = self.commit_staged()
            staged = self._stage is not None and self._stage.should_stage()
            if staged:  # one commit for several batches
                self._stage_batch(app_id, batch_id, history)
                t.update(dict.fromkeys(HISTORY_TABLES, 0.0))
            else:  # idempotent appends
                for name, rows in history.items():
                    writes[name] = partial(self.append, name, rows, app_id, batch_id)
            t.update(run_writes(writes, batch_id, failure, self._after_write))
            if self._stage is not None:
                if not staged:
                    self._stage.committed()  # restarts the interval
                elif self._stage.due():
                    t.update(self.commit_staged())
        for name, seconds in waited.items():
            t[name] = t.get(name, 0.0) + seconds
        return t

    def append(self, table: str, data: pa.Table, app_id: str, batch_id: int) -> float:
        """Append ``data`` to ``table`` as ``(app_id, batch_id)``; its seconds (0.0: none)."""
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
            write_deltalake(target, conform(rows, self._schema(table)), mode="append",
                            commit_properties=props)
            return True

        took = self._root.write_once(table, app_id, batch_id, write)
        if took:
            self._compactor.appended(table)
        return took

    def _stage_batch(self, app_id: str, batch_id: int, history: dict[str, pa.Table]) -> None:
        assert self._stage is not None
        try:
            self._stage.stage(app_id, batch_id, history)
        except OSError as e:
            msg = (f"staging batch {batch_id} under {str(self._stage.directory)!r} failed "
                   f"({type(e).__name__}: {e}); replaying the batch completes it")
            raise DeltaWriteError(msg) from e

    def commit_staged(self) -> dict[str, float]:
        """Append every staged batch to the history tables, one commit per table; seconds each.

        A table receives only the staged batches above its app transaction version (a replayed
        batch it already holds is skipped), read from the same snapshot the idempotence check
        reads; the commit is tagged with the highest batch id.
        The stage forgets the batches once all three tables hold them. The caller holds
        :attr:`lock`.

        Raises:
            DeltaWriteError: an append failed; the batches stay staged (the next commit, or
                the next start's :meth:`recover`, retries them).
        """
        if self._stage is None:
            return {}
        batches = self._stage.pending
        if not batches:
            return {}
        app_id, last = batches[-1].app_id, batches[-1].batch_id

        def rows_after(name: str, done: int | None) -> pa.Table:
            return pa.concat_tables(
                [b.tables[name] for b in batches if done is None or b.batch_id > done])

        failure = (f"Delta write of the staged batches {batches[0].batch_id}-{last} under "
                   f"{self._root.path!r} failed ({{error}}); they stay in "
                   f"{str(self._stage.directory)!r} and the next start writes them")
        writes: dict[str, Callable[[], float]] = {
            # A table no staged batch has rows for is not even read (late, dead_letter).
            name: (partial(self._append_after, name, partial(rows_after, name), app_id, last)
                   if any(b.tables[name].num_rows for b in batches) else _nothing)
            for name in HISTORY_TABLES
        }
        t = run_writes(writes, last, failure, self._after_write)
        self._stage.committed()
        return t

    def end(self) -> None:
        """The run stops after its next micro-batches: append their history at once."""
        if self._stage is not None:
            self._stage.end()

    def commit_due(self) -> bool:
        """Commit the staged batches if their interval has passed; whether it did.

        It does nothing while a :meth:`write` holds the stage (that call commits what is due).

        Raises:
            DeltaWriteError: the appends failed; the batches stay staged.
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
        """Append the staged batches now and wait for a running compaction; the append's error.

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
        """Write the batches a previous run staged and did not commit; how many there were.

        Raises:
            DeltaWriteError: the appends failed (a restart retries; the batches stay staged).
            StageError: the stage holds batches of another query.
        """
        if self._stage is None:
            return 0
        batches = self._stage.recover(app_id, {name: self._schema(name)
                                               for name in HISTORY_TABLES})
        if batches:
            self.commit_staged()
        return len(batches)

    def _add_unbatched(self, seconds: dict[str, float]) -> None:
        for name, took in seconds.items():
            self.unbatched_seconds[name] = self.unbatched_seconds.get(name, 0.0) + took


def _nothing() -> float:
    return 0.0
