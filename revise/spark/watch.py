"""Watching a started query: progress reports, stop requests, a bounded run's end, failures.

:func:`revise.spark.driver.run_job` starts the query and hands it to :class:`JobDriver`, which
polls it from the driver's main thread until it ends. Between polls it commits the Delta
history batches that are due (the micro-batches staged while the job was idle).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from revise.jobconfig import JobConfig
from revise.spark.close_all import BoundedEnd
from revise.spark.committer import BatchCommitter
from revise.spark.failures import (
    JobError,
    checkpoint_taken_over,
    failure_message,
)
from revise.spark.spark_log import last_committed_batch
from sinks.delta_tables import DeltaWriteError
from sinks.kafka import ProducerFencedError

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

__all__ = ["HISTORY_RETRY_S", "POLL_S", "REPORT_WAIT_S", "JobDriver", "ProgressCallback"]

log = logging.getLogger("revise.job")

ProgressCallback = Callable[[dict[str, Any]], None]

HISTORY_RETRY_S = 10.0
"""Seconds before the watch loop retries a failed commit of staged Delta history batches."""
POLL_S = 0.2
"""The watch loop's interval when no micro-batch ends (stop requests, timeouts, failures)."""
REPORT_WAIT_S = 0.5
"""How long the watch loop polls for the report of a batch whose sink returned."""


class JobDriver:
    """Watches a started query: reports progress, honours stop requests, ends a bounded run.

    Args:
        query: The started streaming query.
        cfg: The job's configuration.
        committer: The query's sink (its ``result`` is filled; its ``error`` tells why a
            failed query failed).
        bounded: A bounded run's end (:class:`~revise.spark.close_all.BoundedEnd`, which the
            committer writes the close-all command through), or None: an unbounded run.
        stop_event: Set to stop between micro-batches.
        on_progress: Called with each new Spark progress report.
        timeout_s: Raise JobError after this long (s); None: no limit.
        started: ``time.monotonic()`` when the run started.
    """

    def __init__(self, query: StreamingQuery, cfg: JobConfig, committer: BatchCommitter, *,
                 bounded: BoundedEnd | None, stop_event: threading.Event | None,
                 on_progress: ProgressCallback | None, timeout_s: float | None,
                 started: float) -> None:
        self.query = query
        self.cfg = cfg
        self.committer = committer
        self.result = committer.result
        self.bounded = bounded
        self.stop_event = stop_event
        self.on_progress = on_progress
        self.timeout_s = timeout_s
        self.started = started
        self.last_batch_id = -1
        self.committed_at_start = last_committed_batch(cfg.checkpoint)
        self._history_retry_at = 0.0

    def run(self) -> None:
        """Poll the query until it ends, fails, is stopped or times out.

        It polls every :data:`POLL_S`, and as soon as a micro-batch's sink returns
        (:meth:`_wait`).

        Raises:
            ProducerFencedError: Another instance with the same query id took over.
            JobError: The query failed, or did not finish within ``timeout_s``.
        """
        query = self.query
        while True:
            self._raise_if_failed()
            if not query.isActive:
                self._absorb()
                return
            self._absorb()
            if self.stop_event is not None and self.stop_event.is_set():
                self.result.stopped_by_signal = True
                _stop_between_batches(query)
                self._absorb()
                return
            if self.timeout_s is not None and time.monotonic() - self.started > self.timeout_s:
                query.stop()
                msg = f"the job did not finish within {self.timeout_s:.0f}s"
                raise JobError(msg)
            if self.bounded is not None and self.bounded.closed:
                _stop_between_batches(query)
                self._absorb()
                return
            self._commit_due_history()
            self._wait(POLL_S)

    def _wait(self, timeout_s: float) -> None:
        """Sleep ``timeout_s``, or less: until a micro-batch's sink returned and Spark reported it.

        Spark writes the batch's commit log and its progress report a few milliseconds after
        the sink (the committer) returns; polling only every ``timeout_s`` would see them up to
        that late. A bounded run's end waits on two such reports (the input read, then the
        close-all read), so waking on the committer's return, then polling every 10 ms until
        the report is there (at most :data:`REPORT_WAIT_S`), ends it ~0.2 s sooner.
        """
        returned = self.committer.returned
        if not returned.wait(timeout_s):
            return
        returned.clear()
        deadline = time.monotonic() + REPORT_WAIT_S
        while time.monotonic() < deadline and self.query.isActive:
            if self._unseen_report() is not None:
                return
            time.sleep(0.01)

    def _unseen_report(self) -> dict[str, Any] | None:
        """Spark's last progress report, if it is of a batch not accounted yet (else None)."""
        last = self.query.lastProgress
        if last is None or last.get("batchId") is None or last["batchId"] <= self.last_batch_id:
            return None
        return last

    def _commit_due_history(self) -> None:
        """Commit the Delta history batches whose interval has passed with no batch after them.

        A failure is logged and retried after :data:`HISTORY_RETRY_S`: the batches stay staged,
        and the next micro-batch's own commit of them fails the job if Delta stays broken.
        """
        now = time.monotonic()
        if now < self._history_retry_at:
            return
        try:
            self.committer.commit_due_history()  # nothing while a batch's writes run
        except DeltaWriteError as exc:
            self._history_retry_at = now + HISTORY_RETRY_S
            log.warning("%s (retried in %.0f s)", exc, HISTORY_RETRY_S)

    def _absorb(self) -> None:
        """Account the progress reports of batches not seen yet.

        Polled every :data:`POLL_S` and after each batch: ``lastProgress`` is one report over
        py4j; ``recentProgress`` (up to 100, each re-parsed from JSON) is read only when more
        than one batch finished since the last poll, so an idle or steady driver does not parse
        500 reports a second.
        """
        last = self._unseen_report()
        if last is None:
            return
        news = [last] if last["batchId"] == self.last_batch_id + 1 else self.query.recentProgress
        for progress in news:
            bid = progress.get("batchId")
            if bid is None or bid <= self.last_batch_id:
                continue
            self.last_batch_id = bid
            if self.bounded is not None:
                self.bounded.see(progress)
            steps = self.committer.take_steps(bid)
            # the commit's own steps, beside Spark's durationMs
            report = progress if steps is None else {**progress, "revise": steps}
            self.result.add_progress(report)
            if self.on_progress is not None:
                self.on_progress(report)

    def _raise_if_failed(self) -> None:
        """Turn a failed query into the error the caller can act on (decided by its type)."""
        exc = self.query.exception()
        if exc is None:
            return
        text = str(exc).strip()
        if isinstance(self.committer.error, ProducerFencedError):
            msg = (
                f"this instance of query {self.cfg.query_id!r} was fenced: another instance "
                "with the same --query-id took over; this one stops"
            )
            raise ProducerFencedError(msg) from None
        if checkpoint_taken_over(text) or self._overtaken():
            msg = (
                f"this instance of query {self.cfg.query_id!r} was fenced: another instance "
                f"wrote the next micro-batch to --checkpoint {self.cfg.checkpoint} first "
                "(Spark refused this one's write); this one stops, nothing it did is committed"
            )
            raise ProducerFencedError(msg) from None
        raise JobError(failure_message(self.cfg, text or repr(exc)))

    def _overtaken(self) -> bool:
        """Whether Spark's commit log holds batches this instance never ran.

        Another instance on this checkpoint ran them while this one was stalled (a woken
        zombie), whichever error Spark gave this one. This instance commits at most one batch
        past the last it saw reported, so more than that is somebody else's.
        """
        mine = max(self.last_batch_id, self.committed_at_start)
        return last_committed_batch(self.cfg.checkpoint) > mine + 1


def _stop_between_batches(query: StreamingQuery, wait_s: float = 30.0) -> None:
    """Stop the query right after a micro-batch has committed (or after ``wait_s``).

    Stopping in the middle of a batch is safe (the batch is replayed on restart) but makes
    Spark log an interrupted batch; between batches it is silent. Under steady input (or
    trigger 0 under ``--once``) batches run back to back, so the trigger is rarely seen
    inactive: the moment just after a batch reports its progress (its commit log is written
    then) is the gap to aim for.
    """
    deadline = time.monotonic() + wait_s

    def last_batch() -> Any:
        progress = query.lastProgress
        return progress.get("batchId") if progress else None

    last = last_batch()
    while time.monotonic() < deadline and query.isActive:
        if not query.status.get("isTriggerActive", False):
            break
        if last_batch() != last:
            break
        # With no new input Spark checks its sources every 10 ms; a check is a trigger too, so
        # the gaps between them are ~10 ms long: look more often than that to hit one.
        time.sleep(0.004)
    query.stop()
