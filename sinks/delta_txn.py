"""Idempotent writes to the Delta tables under one root: one app transaction per micro-batch.

Every write of batch ``b`` of query ``q`` is a Delta transaction carrying the application
transaction ``(appId = revise-<q>, version = b)`` in the table's own log.
:meth:`DeltaRoot.write_once` reads the table's recorded version for that app id from a fresh
snapshot and skips a write whose ``b`` is not higher (no commit, no data change). If another
writer commits the same app id between that read and the commit (a zombie instance replaying
the same batch), Delta's conflict check fails the commit (``Concurrent transaction``); the
write is then re-read and found done.

The writers of the tables use it: :class:`sinks.delta_history.HistoryWriter` (the appends to
``revisions``, ``late``, ``dead_letter``) and :class:`sinks.latest_merge.LatestTable` (the
MERGE into ``latest``); :class:`sinks.delta_tables.DeltaTables` runs them together.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Final

import pyarrow as pa

from revise.errors import ReviseError
from sinks.delta_commit import CommitConflict

if TYPE_CHECKING:
    from deltalake import DeltaTable as RustDeltaTable
    from deltalake.transaction import CommitProperties

__all__ = ["RELOAD_EVERY", "AfterWrite", "DeltaRoot", "DeltaWriteError", "Write", "app_id",
           "conform", "run_writes"]

RELOAD_EVERY: Final = 50
"""Re-open a table from its log after this many incremental updates of the cached one.

delta-rs's ``update_incremental`` keeps what it read of every new commit: the driver's memory
grew ~300 KiB per micro-batch and each write got slower (700 batches through the four tables:
+208 MiB and 69 s; re-opened every 50: +73 MiB and 38 s, most of it in the first 100 batches;
``python -m benchmarks.bench_delta_memory``). A fresh open reads the newest Delta checkpoint
(every 10–20 commits) and the few JSON commits after it.
"""

AfterWrite = Callable[[str, int], None]
"""``after_write(table, batch_id)``: told after each table's write, with the highest
micro-batch the write holds (the job's ``during_delta`` crash point and its metrics)."""

Write = Callable[["RustDeltaTable", "CommitProperties", "int | None"], bool]
"""``write(table, commit_properties, done)``: one commit; whether it committed anything.
``done`` is the table's version of the app id before it (None: none yet)."""


class DeltaWriteError(ReviseError, RuntimeError):
    """A Delta write of a micro-batch failed (the batch is safe to replay)."""


class DeltaRoot:
    """The tables under one Delta root, opened once and kept up to date, written idempotently.

    Args:
        path: The Delta root (``--delta-path``): a local path or a URI delta-rs opens.
        storage_options: delta-rs storage options; None reads them from the environment.
    """

    def __init__(self, path: str, storage_options: dict[str, str] | None) -> None:
        self.path = path
        self.storage_options = storage_options
        self._tables: dict[str, RustDeltaTable] = {}
        self._updates: dict[str, int] = {}

    def table_path(self, table: str) -> str:
        """``<path>/<table>``."""
        return f"{self.path}/{table}"

    def table(self, table: str) -> RustDeltaTable:
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

    def write_once(self, table: str, app_id: str, batch_id: int, write: Write) -> float:
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
            target = self.table(table)
            done = target.transaction_version(app_id)
            if done is not None and done >= batch_id:
                return time.perf_counter() - t0 if maybe_ours else 0.0
            props = CommitProperties(app_transactions=[Transaction(app_id, batch_id)])
            try:
                return time.perf_counter() - t0 if write(target, props, done) else 0.0
            except (CommitFailedError, CommitConflict, FileNotFoundError) as e:
                # CommitFailedError, CommitConflict (a commit of revise's own,
                # sinks.delta_log): a concurrent commit won (perhaps this very batch, by a
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


def run_writes(writes: dict[str, Callable[[], float]], batch_id: int, failure: str,
               after_write: AfterWrite | None) -> dict[str, float]:
    """Run independent table writes at once; each one's seconds.

    ``after_write`` is called with each table's name and ``batch_id`` (the highest batch the
    writes hold) once its write is done; ``failure`` is the error message, with ``{error}``.

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
                if after_write is not None:
                    after_write(name, batch_id)
    except Exception as e:
        raise DeltaWriteError(failure.replace("{error}", f"{type(e).__name__}: {e}")) from e
    return t


def app_id(query_id: str) -> str:
    """The Delta application transaction id of a query's writes."""
    return f"revise-{query_id}"


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The schema's columns, in order, cast to its types (extra columns dropped)."""
    return table.select(schema.names).cast(schema)
