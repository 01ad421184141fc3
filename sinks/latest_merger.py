"""Step 3d of the commit in the background: MERGEs into ``latest`` that coalesce micro-batches.

A MERGE into ``latest`` has a cost of its own besides its rows: reading the table's log and
the window columns of the live rows its windows may be in, and one commit
(:mod:`sinks.latest_merge`); on an object store, where it is copy-on-write, it rewrites every
file holding a window it updates. A MERGE of several batches' revisions (their highest
revision per window) costs far less than a MERGE of each, and one MERGE per micro-batch
would add a Delta version to ``latest`` per micro-batch.

:class:`LatestMerger` runs the MERGEs on one background thread and **coalesces** the batches
that arrive while it works or rests:

- After a MERGE that took ``d`` seconds it rests ``d × rest_ratio`` seconds (default 6: the
  MERGEs run at most a seventh of the time), and at least ``min_rest_s`` (the job's
  ``--delta-commit-interval``), collecting batches; then it merges all of
  them at once, tagged with the highest batch id (Delta's app transaction version: a replay
  of any of them is then a no-op). A cheap MERGE (a small table) rests ``min_rest_s``, so
  ``latest`` then trails the changelog by about that long; an expensive one by a few
  micro-batches.
- The backlog is bounded (``max_batches`` micro-batches, ``max_rows`` revisions): a full
  backlog is merged as soon as the running MERGE ends, and :meth:`submit` waits for that
  (the job's only wait on ``latest``).
- :meth:`flush` merges the backlog now and waits (the end of a run).
- A failed MERGE stops the merger: later batches are not merged (``latest``'s app version must
  not pass a batch it does not hold), and :meth:`submit` / :meth:`flush` raise the error. The
  job fails; its next start merges the missing batches from ``revisions``
  (:meth:`LatestTable.catch_up`), as it does after a crash.

Trace (a MERGE takes 1 s, a micro-batch 1 s, rest ratio 3): batch 0 submitted at 0 s → MERGE
{0} (0–1 s); rest 1–4 s while batches 1–4 arrive; MERGE {1, 2, 3, 4} tagged 4 (4–5 s); rest
5–8 s…: 3 MERGEs for 9 batches instead of 9, ``latest`` at most 4–5 batches behind.

:class:`sinks.latest_merge.LatestTable` gives the merger its MERGE.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from revise.errors import ReviseError
from sinks.delta_files import DataFile

__all__ = ["MAX_PENDING_BATCHES", "MAX_PENDING_ROWS", "REST_RATIO", "LatestMerger", "Merge",
           "MergeFailed"]

REST_RATIO: Final = 6.0
"""Rest this many times the last MERGE's duration before the next one. On the 1M-key
daily workload, where each MERGE rewrites the whole table, 6 ran 6 MERGEs where 3 ran 8, and
the whole run took 0.91 and 0.93 of the time side by side (docs/lab/benchmarks-diary.md, 2026-11-27
18:55): the MERGEs' CPU (delta-rs) competes with the micro-batches on the driver's machine.
``latest`` trails by a few more micro-batches while such MERGEs run; a cheap MERGE rests
``min_rest_s`` either way."""
MAX_PENDING_BATCHES: Final = 16
"""Micro-batches the backlog holds at most; with those of a running MERGE, ``latest`` trails
``revisions`` by no more than twice this."""
MAX_PENDING_ROWS: Final = 1_000_000
"""Revisions the backlog's files hold at most: what one MERGE reads into memory (~100-300 bytes
each as Arrow); the backlog itself holds only the files' records."""

Merge = Callable[[Sequence[DataFile], str, int], float]
"""``merge(files, app_id, batch_id)``: one idempotent MERGE of ``revisions`` data files; its
seconds."""


class MergeFailed(ReviseError, RuntimeError):
    """A background MERGE failed; ``batch_ids`` were not merged (nor anything after them)."""

    def __init__(self, batch_ids: tuple[int, ...], cause: BaseException) -> None:
        self.batch_ids = batch_ids
        self.cause = cause
        batches = ", ".join(map(str, batch_ids))
        super().__init__(f"batch {batches} ({type(cause).__name__}: {cause})")


@dataclass(frozen=True, slots=True)
class _Pending:
    app_id: str
    batch_id: int
    files: tuple[DataFile, ...]
    before: Callable[[], None] | None


class LatestMerger:
    """One background thread merging submitted micro-batches into ``latest``, coalesced.

    Args:
        merge: The MERGE itself (:meth:`LatestTable.merge`).
        rest_ratio: Rest this many times the last MERGE's duration before the next.
        min_rest_s: Rest at least this long after a MERGE (the job's
            ``--delta-commit-interval``: cheap MERGEs then commit every few seconds, not
            every micro-batch, and ``latest``'s log grows as slowly as the history tables').
        max_batches: The backlog's bound in micro-batches.
        max_rows: The backlog's bound in revisions.
    """

    def __init__(self, merge: Merge, *, rest_ratio: float = REST_RATIO,
                 min_rest_s: float = 0.0, max_batches: int = MAX_PENDING_BATCHES,
                 max_rows: int = MAX_PENDING_ROWS) -> None:
        self._merge = merge
        self._rest_ratio = rest_ratio
        self._min_rest_s = min_rest_s
        self._max_batches = max_batches
        self._max_rows = max_rows
        self._cond = threading.Condition()
        self._pending: list[_Pending] = []
        self._running = False
        self._flushing = False
        self._ready_at = 0.0  # monotonic time the merger's rest ends
        self._merged_s = 0.0  # MERGE seconds not yet reported by take_seconds
        self._merges = 0
        self._error: MergeFailed | None = None
        self._thread: threading.Thread | None = None

    @property
    def merges(self) -> int:
        """MERGEs run so far (each covers one or more micro-batches)."""
        return self._merges

    def submit(self, app_id: str, batch_id: int, files: Sequence[DataFile],
               before: Callable[[], None] | None = None) -> float:
        """Queue ``batch_id``'s ``revisions`` data files for a MERGE; the seconds spent waiting.

        The backlog holds the files' records, not their rows: the rows are read when merged.

        Returns at once unless the backlog is full; then it waits for the running MERGE to
        end (and take the backlog). ``before`` is called on the merger's thread just before
        the MERGE that includes this batch.

        Raises:
            MergeFailed: an earlier MERGE failed (nothing is queued any more).
        """
        t0 = time.perf_counter()
        with self._cond:
            self._raise_error()
            while self._full() and self._error is None:
                self._cond.wait()
            self._raise_error()
            self._pending.append(_Pending(app_id, batch_id, tuple(files), before))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="revise-latest",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return time.perf_counter() - t0

    def hurry(self) -> None:
        """Merge the backlog now, without waiting: :meth:`flush` then waits for it.

        The caller does other work meanwhile (the end of a run commits the staged history
        beside the last MERGE).
        """
        with self._cond:
            self._flushing = True
            self._cond.notify_all()

    def flush(self, *, raise_error: bool = True) -> None:
        """Merge the backlog now and wait for it (and for a running MERGE).

        Raises:
            MergeFailed: a MERGE failed, unless ``raise_error`` is false.
        """
        self.hurry()
        with self._cond:
            while (self._pending or self._running) and self._error is None:
                self._cond.wait()
            self._flushing = False
            if raise_error:
                self._raise_error()

    def take_seconds(self) -> float:
        """Seconds the MERGEs took since the last call."""
        with self._cond:
            seconds, self._merged_s = self._merged_s, 0.0
            return seconds

    def clear_error(self) -> None:
        """Forget a failed MERGE once ``latest`` is known to be caught up with ``revisions``."""
        with self._cond:
            self._error = None

    def check(self) -> None:
        """Raise a failed MERGE's error (:class:`MergeFailed`), if any."""
        with self._cond:
            self._raise_error()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _full(self) -> bool:
        rows = sum(f.num_records for p in self._pending for f in p.files)
        return len(self._pending) >= self._max_batches or rows >= self._max_rows

    def _loop(self) -> None:
        """Merge the backlog whenever it is due; end when it is empty (a submit starts anew).

        The thread holds this merger (and, through ``merge``, its tables), so it does not
        outlive the work: an idle writer keeps no thread and can be garbage-collected.
        """
        while True:
            with self._cond:
                while not self._due():
                    if not self._pending or self._error is not None:
                        self._thread = None
                        return
                    self._cond.wait(max(self._ready_at - time.monotonic(), 0.0))
                group, self._pending = self._pending, []
                self._running = True
                self._cond.notify_all()  # a submit waiting on a full backlog may go on
            took, error = self._run(group)
            with self._cond:
                self._running = False
                self._merged_s += took
                rest = max(took * self._rest_ratio, self._min_rest_s)
                self._ready_at = time.monotonic() + rest
                if error is not None:
                    self._error = error
                    self._pending.clear()
                self._cond.notify_all()

    def _due(self) -> bool:
        """Whether the backlog is to be merged now (called holding the lock)."""
        if not self._pending or self._error is not None:
            return False
        return self._flushing or self._full() or time.monotonic() >= self._ready_at

    def _run(self, group: list[_Pending]) -> tuple[float, MergeFailed | None]:
        took = 0.0
        done = 0
        try:
            # One MERGE per run of batches of one query (a root may hold several queries).
            while done < len(group):
                end = done + 1
                while end < len(group) and group[end].app_id == group[done].app_id:
                    end += 1
                run = group[done:end]
                for p in run:
                    if p.before is not None:
                        p.before()
                files = [f for p in run for f in p.files]
                took += self._merge(files, run[-1].app_id, run[-1].batch_id)
                self._merges += 1
                done = end
        except BaseException as e:  # noqa: BLE001 - handed to the job's thread
            return took, MergeFailed(tuple(p.batch_id for p in group[done:]), e)
        return took, None
