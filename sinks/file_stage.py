"""The history tables' commits, several micro-batches at once: their data files staged meanwhile.

The tasks write each micro-batch's data files into the tables' folders
(:func:`sinks.delta_files.write_data_file`); the driver commits them at most once per
``interval_s`` (``--delta-commit-interval``), because every Delta commit adds a file to the
table's log and each commit costs more as the log grows. Between commits, the batches' file
records (:class:`~sinks.delta_files.DataFile`) wait in a local folder of the driver:

    <directory>/batch-000000000012.json   {"app_id", "batch_id", "files": {table: [DataFile]}}

one small JSON per batch, written whole and durably (:func:`sinks.atomic.write_atomic`) before
the batch's commit returns to Spark. :func:`commit_staged` then adds every staged batch's files
to each table in one transaction per table, tagged with the highest staged batch id, and only
the files of the batches above the table's app transaction version
(:func:`sinks.delta_files.commit_batches`); once every table holds them, the JSONs go.

Why it loses nothing: a batch Spark has recorded (and will never replay) has its files in the
tables' folders and its record here, until every table's log names them. The job's next start
calls :meth:`FileStage.recover` then :func:`commit_staged`, before its first micro-batch.

Why nothing is committed twice: each table receives only the staged batches above its recorded
version of the app id; a batch Spark replays after a crash writes new files (the replay's), is
staged again (its record replaced) and skipped by every table that already holds it (its new
files stay unreferenced). A batch with no files for a table needs nothing from it, so a table
none of the staged batches has files for is not even read.

Trace (interval 5 s, a micro-batch every 0.5 s): batches 0–9 staged; at t = 5 s one commit per
table adds their files as (revise-q, 9) and the ten JSONs are deleted; kill after batches 10–11
were staged, batch 10's commit to ``revisions`` done → the next start finds 10–11 staged,
``revisions`` at version 10: it commits batch 11's files there and 10–11's to ``late``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final

import orjson
import pyarrow as pa

from revise.errors import ReviseError
from sinks.atomic import write_atomic
from sinks.delta_files import DataFile, commit_batches
from sinks.delta_txn import AfterWrite, DeltaRoot, run_writes

__all__ = ["DEFAULT_INTERVAL_S", "MAX_STAGED_ROWS", "FileStage", "FileStageError",
           "StagedFiles", "commit_staged", "staged_batches"]

DEFAULT_INTERVAL_S: Final = 5.0
"""Seconds between two history commits of a busy job (``revise run --delta-commit-interval``)."""
MAX_STAGED_ROWS: Final = 1_000_000
"""Staged rows (all tables) that make a commit due before the interval has passed."""

_PREFIX: Final = "batch-"
_SUFFIX: Final = ".json"


class FileStageError(ReviseError, RuntimeError):
    """The stage folder holds batches of another query, or a record that does not parse."""


@dataclass(frozen=True, slots=True)
class StagedFiles:
    """One staged micro-batch: its app id, batch id and data files per table."""

    app_id: str
    batch_id: int
    files: Mapping[str, tuple[DataFile, ...]]

    @property
    def rows(self) -> int:
        """Rows over all its files."""
        return sum(f.num_records for fs in self.files.values() for f in fs)

    def to_json(self) -> bytes:
        """The batch's record in the stage folder."""
        return orjson.dumps({
            "app_id": self.app_id, "batch_id": self.batch_id,
            "files": {t: [orjson.Fragment(f.to_json()) for f in fs]
                      for t, fs in self.files.items()},
        })

    @classmethod
    def from_json(cls, data: bytes) -> StagedFiles:
        """The record :meth:`to_json` wrote.

        Raises:
            FileStageError: ``data`` is not such a record.
        """
        try:
            obj = orjson.loads(data)
            files = {t: tuple(DataFile.from_json(orjson.dumps(f)) for f in fs)
                     for t, fs in obj["files"].items()}
            return cls(str(obj["app_id"]), int(obj["batch_id"]), files)
        except (ReviseError, orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
            msg = (f"not a staged batch record ({type(e).__name__}: {e}); expected "
                   "StagedFiles.to_json's JSON")
            raise FileStageError(msg) from e


class FileStage:
    """Where micro-batches' data files wait for their Delta commit (see the module).

    Every batch is staged (:meth:`stage`); :meth:`due` says when to commit them
    (:func:`commit_staged`).

    Args:
        directory: A local folder of the driver (e.g. ``<checkpoint>/delta-files``).
        interval_s: Least seconds between two commits; 0 makes every batch due at once.
        max_rows: Staged rows (all tables) that make a commit due at once.
        clock: Monotonic seconds (tests pass a fake one).
    """

    def __init__(self, directory: str | Path, interval_s: float = DEFAULT_INTERVAL_S, *,
                 max_rows: int = MAX_STAGED_ROWS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = Path(directory)
        self.interval_s = float(interval_s)
        self.max_rows = max_rows
        self._clock = clock
        self._pending: dict[int, StagedFiles] = {}
        self._last_commit: float | None = None
        self.ending = False
        """Set by :meth:`end`: every staged batch is due at once."""

    @property
    def pending(self) -> list[StagedFiles]:
        """The staged batches, by batch id."""
        return [self._pending[b] for b in sorted(self._pending)]

    def end(self) -> None:
        """The run stops after its next batches: whatever is staged is due at once."""
        self.ending = True

    def due(self) -> bool:
        """Whether the staged batches should be committed now.

        Trace (interval 5 s): nothing staged → False; first batch ever → True; a batch 2 s
        after the last commit → False, 5 s after → True.
        """
        if not self._pending:
            return False
        if self.ending or self._last_commit is None:
            return True
        if sum(b.rows for b in self._pending.values()) >= self.max_rows:
            return True
        return self._clock() - self._last_commit >= self.interval_s

    def stage(self, app_id: str, batch_id: int,
              files: Mapping[str, Sequence[DataFile]]) -> StagedFiles:
        """Record one batch's files (table → files) durably; a replay's record replaces it.

        Raises:
            OSError: The folder could not be written (the batch is then not staged).
        """
        batch = StagedFiles(app_id, batch_id, {t: tuple(fs) for t, fs in files.items()})
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomic(self._path(batch_id), batch.to_json())
        self._pending[batch_id] = batch
        return batch

    def committed(self) -> None:
        """Every staged batch is in every table: forget them; restart the interval's clock."""
        for batch_id in self._pending:
            self._path(batch_id).unlink(missing_ok=True)
        self._pending.clear()
        self._last_commit = self._clock()

    def recover(self, app_id: str) -> list[StagedFiles]:
        """Load the batches a previous run staged and did not commit; they are pending now.

        Raises:
            FileStageError: A staged batch belongs to another app id, or does not parse.
        """
        if not self.directory.is_dir():
            return []
        for leftover in self.directory.glob(f".{_PREFIX}*.tmp"):  # a stage cut short
            leftover.unlink(missing_ok=True)
        for path in sorted(self.directory.glob(f"{_PREFIX}*{_SUFFIX}")):
            batch = StagedFiles.from_json(path.read_bytes())
            if batch.app_id != app_id:
                msg = (f"{path} holds a micro-batch of {batch.app_id!r}, not of {app_id!r}: "
                       "this checkpoint belongs to another query; give this job its own "
                       "--checkpoint")
                raise FileStageError(msg)
            self._pending[batch.batch_id] = batch
        return self.pending

    def _path(self, batch_id: int) -> Path:
        return self.directory / f"{_PREFIX}{batch_id:012d}{_SUFFIX}"


def commit_staged(root: DeltaRoot, stage: FileStage, schema: Callable[[str], pa.Schema], *,
                  after_write: AfterWrite | None = None) -> dict[str, float]:
    """Commit every staged batch's files, one transaction per table; the seconds per table.

    Each table gets the files of the staged batches above its version of the app id, tagged
    with the highest staged batch id (:func:`sinks.delta_files.commit_batches`); the tables
    are committed at once (separate logs). The stage forgets the batches once every table
    holds them.

    Args:
        root: The Delta root of the tables.
        stage: The staged batches (all of one app id).
        schema: Each table's Arrow schema.
        after_write: Told after each table's commit with the highest staged batch id.

    Raises:
        DeltaWriteError: A commit failed; the batches stay staged (the next commit, or the
            next start's :meth:`FileStage.recover`, retries them).
    """
    batches = stage.pending
    if not batches:
        return {}
    app_id, last = batches[-1].app_id, batches[-1].batch_id
    tables = sorted({t for b in batches for t, fs in b.files.items() if fs})
    writes: dict[str, Callable[[], float]] = {}
    for t in tables:
        files = {b.batch_id: b.files.get(t, ()) for b in batches}
        writes[t] = partial(commit_batches, root, t, app_id, files, schema(t))
    failure = (f"Delta commit of the staged batches {batches[0].batch_id}-{last} under "
               f"{root.path!r} failed ({{error}}); they stay in {str(stage.directory)!r} and "
               "the next commit or start commits them")
    seconds = run_writes(writes, last, failure, after_write)
    stage.committed()
    return seconds


def staged_batches(directory: str | Path) -> list[tuple[int, float]]:
    """The micro-batches staged in ``directory``, without loading them: (batch id, staged at).

    ``staged at`` is the record's modification time (epoch s); by batch id. Empty when the
    folder does not exist (``revise status`` reads it from another process than the job's).
    """
    try:
        paths = [p for p in Path(directory).glob(f"{_PREFIX}*{_SUFFIX}") if p.is_file()]
        return sorted((int(p.name.removeprefix(_PREFIX).removesuffix(_SUFFIX)),
                       p.stat().st_mtime) for p in paths)
    except (OSError, ValueError):  # committed (deleted) while listed: the next look sees it
        return []
