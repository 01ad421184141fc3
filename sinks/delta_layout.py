"""The files of the Delta tables over an unbounded run: compacted history, bounded logs.

:class:`sinks.delta_tables.DeltaTables` writes a micro-batch; this module keeps what those
writes leave behind from growing with the run (``latest``'s MERGEs keep its own files
bounded: :mod:`sinks.latest_merge`):

- The history tables (``revisions``, ``late``, ``dead_letter``) gain a file or two per
  micro-batch; :class:`HistoryCompactor` compacts each of them every
  :data:`COMPACT_HISTORY_EVERY` appends, in a background thread.
- Every table's ``_delta_log`` gains a commit file per commit and keeps it for
  :data:`LOG_RETENTION_KEY` (Delta's default: 30 days); each file costs every later write.
  :func:`retain_logs` sets a shorter retention when the job is given one
  (``revise run --delta-log-retention``).

None changes a row: the app transaction versions that make replays no-ops are kept, and so is
time travel, within the log's retention.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Final

from sinks.delta_log import local_folder

__all__ = [
    "COMPACT_HISTORY_EVERY",
    "DELTA_LOG_RETENTION_MS",
    "HISTORY_FILE_BYTES",
    "LOG_RETENTION_KEY",
    "MIN_LOG_RETENTION_MS",
    "HistoryCompactor",
    "local_path",
    "log_retention_ms",
    "log_retention_value",
    "longest_log_retention_ms",
    "retain_logs",
]

log = logging.getLogger("revise.delta")

COMPACT_HISTORY_EVERY: Final = 100
"""Compact a history table (``revisions``, ``late``, ``dead_letter``) after this many appends.

Each micro-batch appends a file or two: an unbounded run on the 500 ms trigger adds ~170,000
small files a day to ``revisions``, and every query of ``revision_history`` opens them all. A
compaction (delta-rs ``optimize.compact``, ``dataChange=false``: no row changes, time travel
and app transaction versions kept) bins them into files of up to :data:`HISTORY_FILE_BYTES`.
"""
HISTORY_FILE_BYTES: Final = 8 * 2**20
"""Target size of a compacted history file: a file below it is compacted again (with the
small files after it) at the next turn, so this bounds what a compaction rewrites."""


LOG_RETENTION_KEY: Final = "delta.logRetentionDuration"
"""How long a table keeps a commit file of its log (Delta's default: ``interval 30 days``).

Each time delta-rs writes a Delta checkpoint (every ``delta.checkpointInterval`` commits), it
deletes the commit files older than this that come before a checkpoint itself older than this
(so time travel reaches every version of the retention). Each file left costs every later
write of the table: an append took ~6 ms plus ~8 ms per 1,000 files in ``_delta_log`` on a
local disk (``python -m benchmarks.bench_delta_log``), so at one commit per table every 5 s an
append costs ~150 ms after a day and ~4 s after 30 days at the default. A time travel
(``revise query --as-of-version``) reaches back as far as the files kept.
"""
MIN_LOG_RETENTION_MS: Final = 60_000
"""The shortest ``--delta-log-retention``: a reader (``revise query``, the job's own history
compaction) lists a table's log and then reads the files it listed; a retention of seconds
lets delta-rs delete them in between."""

DELTA_LOG_RETENTION_MS: Final = 30 * 86_400_000
"""Delta's own default for :data:`LOG_RETENTION_KEY` (30 days)."""

_UNIT_MS: Final = {"week": 7 * 86_400_000, "day": 86_400_000, "hour": 3_600_000,
                   "minute": 60_000, "second": 1_000, "millisecond": 1}
"""The units of a Delta interval revise reads; it writes days down to seconds (else ms)."""
_WRITTEN_UNITS: Final = ("day", "hour", "minute", "second")
_INTERVAL: Final = re.compile(r"^\s*interval\s+(\d+)\s+([a-z]+?)s?\s*$", re.IGNORECASE)


def local_path(path: str) -> str | None:
    """The local folder a Delta path names (a plain path or ``file://``), else None.

    None: a URI of another scheme, an object store (``s3://``, ``gs://``, ``abfss://`` …).
    """
    folder = local_folder(path)
    return None if folder is None else str(folder)


def log_retention_value(ms: int) -> str:
    """``ms`` as a Delta interval property in its largest whole unit: ``interval 6 hours``.

    Both delta-rs and Delta on Spark read it; a time not in whole seconds is in milliseconds.
    """
    for unit in _WRITTEN_UNITS:
        if ms % _UNIT_MS[unit] == 0:
            return f"interval {ms // _UNIT_MS[unit]} {unit}s"
    return f"interval {ms} milliseconds"


def log_retention_ms(value: str | None) -> int | None:
    """A table's :data:`LOG_RETENTION_KEY` value in milliseconds.

    None (the property unset) is Delta's default, :data:`DELTA_LOG_RETENTION_MS`; a value this
    cannot read (``interval 1 day 2 hours``) gives None.
    """
    if value is None:
        return DELTA_LOG_RETENTION_MS
    m = _INTERVAL.match(value)
    unit = _UNIT_MS.get(m.group(2).lower()) if m else None
    return int(m.group(1)) * unit if m and unit else None


def longest_log_retention_ms(paths: Iterable[str], storage_options: dict[str, str] | None,
                             ) -> int | None:
    """The longest :func:`log_retention_ms` of the tables at ``paths``; None if one is unread."""
    from deltalake import DeltaTable

    each = [log_retention_ms(DeltaTable(path, storage_options=storage_options)
                             .metadata().configuration.get(LOG_RETENTION_KEY))
            for path in paths]
    known = [k for k in each if k is not None]
    return max(known) if known and len(known) == len(each) else None


def retain_logs(paths: Iterable[str], ms: int, storage_options: dict[str, str] | None,
                ) -> list[str]:
    """Give each table at ``paths`` a log retention of ``ms``, where it has another one.

    One metadata commit per table whose :data:`LOG_RETENTION_KEY` differs (none where it is
    already the value); the commit files already past the new retention go at a later Delta
    checkpoint (:data:`LOG_RETENTION_KEY`). Returns the paths of the tables changed.
    """
    from deltalake import DeltaTable

    want, changed = log_retention_value(ms), []
    for path in paths:
        table = DeltaTable(path, storage_options=storage_options)
        if table.metadata().configuration.get(LOG_RETENTION_KEY) != want:
            table.alter.set_table_properties({LOG_RETENTION_KEY: want})
            changed.append(path)
    return changed


class HistoryCompactor:
    """Compacts a history table every :data:`COMPACT_HISTORY_EVERY` appends, in the background.

    One compaction runs at a time, in its own thread and on its own snapshot, so no micro-batch
    waits for it; one that falls due while another runs is left to the table's next turn. A
    failed one is logged and retried at the next turn (it only ever concerns the files' layout).

    Args:
        table_path: A table's name → its path.
        storage_options: delta-rs storage options, as the writer's.
    """

    def __init__(self, table_path: Callable[[str], str],
                 storage_options: dict[str, str] | None) -> None:
        self._table_path = table_path
        self._storage_options = storage_options
        self._appends: dict[str, int] = {}
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._running: Future[None] | None = None

    def appended(self, table: str) -> None:
        """Count one committed append to ``table``; start its compaction when one is due."""
        with self._lock:
            n = self._appends[table] = self._appends.get(table, 0) + 1
            if n % COMPACT_HISTORY_EVERY or (self._running and not self._running.done()):
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="revise-compact")
            self._running = self._pool.submit(self._compact, table)

    def wait(self) -> None:
        """Wait for a running compaction (its failure is never raised)."""
        with self._lock:
            running = self._running
        if running is not None:
            wait([running])

    def _compact(self, table: str) -> None:
        from deltalake import DeltaTable

        path = self._table_path(table)
        try:
            # Its own snapshot: the writer's cached one is used by the next batch's append.
            target = DeltaTable(path, storage_options=self._storage_options)
            target.optimize.compact(target_size=HISTORY_FILE_BYTES)
        except Exception as e:  # noqa: BLE001 - the layout only: the next turn retries
            log.warning("compacting Delta table %s failed (%s: %s); retried later",
                        path, type(e).__name__, e)
