"""Steps 3a–3c in fewer commits: several micro-batches' history rows in one Delta commit.

Every Delta commit adds a file to the table's ``_delta_log``, and each commit costs more as the
log grows (37 → 105 ms per micro-batch for the four tables over 2,400 micro-batches,
docs/lab/benchmarks-diary.md): at two micro-batches a second, a run of days would spend seconds per
micro-batch in Delta. The changelog must stay per micro-batch (its latency is the point); the
history tables (``revisions``, ``late``, ``dead_letter``) need not.

:class:`HistoryStage` lets ``DeltaTables.write_batch`` append a micro-batch's history rows at
at once when the last history commit is at least ``interval_s`` old, and otherwise
**stage** them: write them to a local folder (one sub-folder per batch, Arrow IPC files,
fsync'd, renamed into place by :func:`sinks.atomic.put_in_place`), keep them in memory, and
commit every staged batch in one Delta append per table once the interval has passed since the
last commit (or the staged rows reach ``max_rows``), tagged with the highest batch id: at the
next micro-batch, or from the job's watch loop (``DeltaTables.commit_due_history``, every 0.2 s)
when the input has gone quiet and no micro-batch comes. The job's ``latest`` MERGE has its own
background cadence (``sinks.latest_merge``), at least the same interval apart.

Why it loses nothing: a batch is staged (durable on disk) before the commit returns to Spark,
so a batch Spark has recorded and will never replay is either in the tables or in the folder.
The job's next start commits what the folder holds (``DeltaTables.recover_history``) before its
first micro-batch, and before it brings ``latest`` up to ``revisions``. A staged batch's folder
is deleted only once all three tables hold it.

Why nothing is written twice: each commit carries the app transaction ``(revise-<query_id>,
highest batch id)``, and a table receives only the staged batches above its own recorded
version. A batch Spark replays after a crash (its Kafka transaction found committed, its rows
re-stamped with the committed ``emitted_at_ms``) is staged again with the same rows and skipped
by every table that already holds it.

While the job runs, ``revisions``, ``late`` and ``dead_letter`` trail the changelog by at most
``interval_s`` (plus one micro-batch); when it stops they are complete. ``interval_s = 0``
appends every micro-batch at once.

Trace (interval 5 s, a micro-batch every 0.5 s): batch 0 appended at once (t = 0, v0);
batches 1–9 staged; batch 10 (t = 5 s) staged, then 1–10 appended in one commit per table (v10)
and their folders deleted; kill at t = 6 s after batches 11–12 were staged → the next start
appends 11–12 (v12) before Spark's first micro-batch.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

import pyarrow as pa
import pyarrow.ipc as ipc

from revise.errors import ReviseError
from sinks.atomic import put_in_place, write_synced

__all__ = ["DEFAULT_INTERVAL_S", "HISTORY_TABLES", "MAX_STAGED_ROWS", "HistoryStage",
           "StagedBatch", "StageError", "staged_on_disk"]

HISTORY_TABLES: Final = ("revisions", "late", "dead_letter")
"""The append-only tables a stage holds rows for."""
DEFAULT_INTERVAL_S: Final = 5.0
"""Seconds between two history commits of a busy job (``revise run --delta-commit-interval``)."""
MAX_STAGED_ROWS: Final = 1_000_000
"""Staged rows (all tables) that make a commit due before the interval has passed."""

_PREFIX: Final = "batch-"
_META: Final = "meta.json"


class StageError(ReviseError, RuntimeError):
    """The stage folder holds batches of another query (its checkpoint was reused)."""


@dataclass(frozen=True, slots=True)
class StagedBatch:
    """One staged micro-batch: its app id, batch id and history rows (table → rows)."""

    app_id: str
    batch_id: int
    tables: dict[str, pa.Table]

    @property
    def rows(self) -> int:
        """Rows over all its tables."""
        return sum(t.num_rows for t in self.tables.values())


class HistoryStage:
    """Where micro-batches' history rows wait for their Delta commit (see the module).

    Args:
        directory: A local folder of the driver (the job uses ``<checkpoint>/delta-staged``).
        interval_s: Least seconds between two history commits; 0 commits every batch.
        max_rows: Staged rows that make a commit due at once.
        clock: Monotonic seconds (tests pass a fake one).
    """

    def __init__(self, directory: str | Path, interval_s: float = DEFAULT_INTERVAL_S, *,
                 max_rows: int = MAX_STAGED_ROWS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = Path(directory)
        self.interval_s = float(interval_s)
        self.max_rows = max_rows
        self._clock = clock
        self._pending: dict[int, StagedBatch] = {}
        self._last_commit: float | None = None
        self.ending = False
        """Set by :meth:`end`: the run stops after its next batches."""

    @property
    def pending(self) -> list[StagedBatch]:
        """The staged batches, by batch id."""
        return [self._pending[b] for b in sorted(self._pending)]

    def end(self) -> None:
        """The run stops after its next batches (a bounded run's close-all): stage no more.

        The stop commits whatever waits here at once, so a batch staged now would only have
        its rows written twice (the close-all's FINALs of every open window, the run's
        largest batch on a large state). Batches already waiting still go first
        (:meth:`should_stage`): the caller commits them before appending the next one.
        """
        self.ending = True

    def should_stage(self) -> bool:
        """Whether the next batch waits here: batches wait already, or the last commit is recent.

        Not once the run is ending (:meth:`end`), unless batches wait already.
        """
        if self._pending:
            return True
        if self.ending or self.interval_s <= 0 or self._last_commit is None:
            return False
        return self._clock() - self._last_commit < self.interval_s

    def due(self) -> bool:
        """Whether the staged batches should be committed now."""
        if not self._pending:
            return False
        if sum(b.rows for b in self._pending.values()) >= self.max_rows:
            return True
        return self._last_commit is None or self._clock() - self._last_commit >= self.interval_s

    def stage(self, app_id: str, batch_id: int, tables: dict[str, pa.Table]) -> None:
        """Write one batch's rows to the folder (durably; a replay's replaces it) and keep them.

        Raises:
            OSError: The folder could not be written (the batch is then not staged).
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.directory / f"{_PREFIX}{batch_id:012d}"
        tmp = self.directory / f".{final.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for name, rows in tables.items():
            if rows.num_rows:
                write_synced(tmp / f"{name}.arrow", _ipc_writer(rows))
        write_synced(tmp / _META, json.dumps({"app_id": app_id, "batch_id": batch_id}))
        shutil.rmtree(final, ignore_errors=True)  # a replayed batch: same rows
        put_in_place(tmp, final)
        self._pending[batch_id] = StagedBatch(app_id, batch_id, dict(tables))

    def committed(self) -> None:
        """Every staged batch is in every table (or none waited): forget them; restart the clock."""
        for batch_id in self._pending:
            shutil.rmtree(self.directory / f"{_PREFIX}{batch_id:012d}", ignore_errors=True)
        self._pending.clear()
        self._last_commit = self._clock()

    def recover(self, app_id: str, schemas: dict[str, pa.Schema]) -> list[StagedBatch]:
        """Load the batches a previous run staged and did not commit; they are pending now.

        ``schemas`` gives each table's schema, for the tables a batch had no rows for.

        Raises:
            StageError: A staged batch belongs to another app id.
        """
        if not self.directory.is_dir():
            return []
        for leftover in self.directory.glob(f".{_PREFIX}*.tmp"):  # a stage cut short
            shutil.rmtree(leftover, ignore_errors=True)
        for folder in sorted(self.directory.glob(f"{_PREFIX}*")):
            meta = json.loads((folder / _META).read_text())
            if meta["app_id"] != app_id:
                msg = (f"{folder} holds a micro-batch of {meta['app_id']!r}, not of "
                       f"{app_id!r}: this checkpoint belongs to another query; give this job "
                       "its own --checkpoint")
                raise StageError(msg)
            tables = {name: (_read(folder / f"{name}.arrow")
                             if (folder / f"{name}.arrow").is_file()
                             else schema.empty_table())
                      for name, schema in schemas.items()}
            batch_id = int(meta["batch_id"])
            self._pending[batch_id] = StagedBatch(app_id, batch_id, tables)
        return self.pending


def staged_on_disk(directory: str | Path) -> list[tuple[int, float]]:
    """The micro-batches staged in ``directory``, without loading them: (batch id, staged at).

    ``staged at`` is the folder's modification time (epoch s); by batch id. Empty when the
    folder does not exist. ``revise status`` reads it (another process than the job's).
    """
    try:
        folders = [f for f in Path(directory).glob(f"{_PREFIX}*") if f.is_dir()]
        return sorted((int(f.name.removeprefix(_PREFIX)), f.stat().st_mtime) for f in folders)
    except (OSError, ValueError):  # committed (deleted) while listed: the next look sees it
        return []


def _ipc_writer(rows: pa.Table) -> Callable[[BinaryIO], None]:
    """A writer of ``rows`` as one Arrow IPC file, for :func:`sinks.atomic.write_synced`."""
    def write(f: BinaryIO) -> None:
        with ipc.new_file(f, rows.schema) as writer:
            writer.write_table(rows)
    return write


def _read(path: Path) -> pa.Table:
    with ipc.open_file(pa.memory_map(str(path))) as reader:
        return reader.read_all()
