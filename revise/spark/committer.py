"""The commit of a micro-batch: exactly once to the Kafka changelog and the Delta tables.

:class:`BatchCommitter` is the query's ``foreachBatch`` sink; its ``__call__`` docstring numbers
the whole commit sequence once (1–4, with the tasks' Kafka sub-steps 1a–1d and the Delta
sub-steps 3a–3e) and names the crash points the crash tests kill the process at. The tasks'
writer (``revise/infra/java/revise/jvm/TaskChangelog.java``), :meth:`sinks.delta_tables.
DeltaTables.write_files` and code comments use the same numbers.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from revise.jobconfig import JobConfig
from revise.spark.close_all import BoundedEnd, set_input_end
from revise.spark.output import BatchOutput, decode_output
from revise.spark.rewind import record_done
from revise.spark.spark_log import batch_offsets, batch_timestamp, last_committed_batch
from revise.spark.task_output import TaskWriter, set_batch, write, zombie_error
from revise.vocab import TABLE_NAMES
from sinks.delta_tables import AfterWrite, DeltaTables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["CRASH_POINTS", "RECENT_PROGRESS", "BatchCommitter", "CrashHook", "JobResult",
           "OutputHook", "crash_hook_from_env", "delta_crash_point"]

log = logging.getLogger("revise.job")

CrashHook = Callable[[str, int], None]
OutputHook = Callable[[int, BatchOutput, bool], None]
"""``hook(batch_id, output, written)``: a micro-batch's output once Kafka has it (or, when it
is empty, once collected); ``written`` is False for a replay whose transaction was found
committed, and for an empty batch."""

CRASH_POINTS: Final = ("before_kafka", "after_kafka", "during_delta", "after_delta",
                       "before_latest", "after_record")
"""Where :meth:`BatchCommitter.__call__` calls its crash hook (named under steps 1–3); the
tasks' own points are ``revise.spark.task_output.TASK_CRASH_POINTS``."""

RECENT_PROGRESS: Final = 64
"""How many of the latest Spark progress reports a :class:`JobResult` keeps."""


@dataclass(slots=True)
class JobResult:
    """What a run did (the driver's view); nothing in it grows with the number of batches.

    Attributes:
        query_id: The job's id.
        batches: Micro-batches committed (including replays found committed).
        input_records: Input rows Spark reported read (close-all commands included).
        revisions: Revisions committed.
        late: Too-late records committed.
        dead_letters: Dead letters committed.
        skipped_batches: Batches whose Kafka transaction was found committed (replays).
        first_revision_s: Seconds from the committer's start to the first revision (None: none).
        seconds: Wall time of the whole run (s).
        commit_seconds: Time in the committer (s), of which ``collect_seconds`` computing and
            collecting the batch, ``kafka_seconds`` the Kafka transaction and
            ``delta_seconds`` the Delta writes; ``delta_table_seconds`` per table.
        collected_bytes: Bytes the driver collected from the tasks (Arrow, decoded size).
        latest_merges: MERGEs into ``latest`` (one covers one or more micro-batches).
        last_watermark_ms: The highest watermark a committed revision carried (ms).
        stopped_by_signal: The run ended because the stop event was set.
        first_progress: Spark's progress report of the first micro-batch (None: no batch).
        recent_progress: The last :data:`RECENT_PROGRESS` progress reports.
    """

    query_id: str
    batches: int = 0
    input_records: int = 0
    revisions: int = 0
    late: int = 0
    dead_letters: int = 0
    skipped_batches: int = 0
    first_revision_s: float | None = None
    seconds: float = 0.0
    commit_seconds: float = 0.0
    collect_seconds: float = 0.0
    collected_bytes: int = 0
    kafka_seconds: float = 0.0
    delta_seconds: float = 0.0
    delta_table_seconds: dict[str, float] = field(default_factory=dict)
    latest_merges: int = 0
    last_watermark_ms: int = 0
    stopped_by_signal: bool = False
    first_progress: dict[str, Any] | None = None
    recent_progress: deque[dict[str, Any]] = field(
        default_factory=lambda: deque(maxlen=RECENT_PROGRESS))

    def add_progress(self, progress: dict[str, Any]) -> None:
        """Account one new Spark progress report."""
        self.input_records += int(progress.get("numInputRows") or 0)
        if self.first_progress is None:
            self.first_progress = progress
        self.recent_progress.append(progress)


def crash_hook_from_env() -> CrashHook | None:
    """``REVISE_CRASH_AT=<point>:<batch_id>`` SIGKILLs this process at that point (tests only).

    Points are :data:`CRASH_POINTS`; :meth:`BatchCommitter.__call__` says where each one is.
    The hook fires at the first batch ``>= batch_id``, once. ``<point>:<batch_id>:stop``
    freezes the process group instead (SIGSTOP: the driver, its JVM and Python workers, as in
    a long pause) until someone sends it SIGCONT; the job then goes on from that point.
    """
    spec = os.environ.get("REVISE_CRASH_AT")
    if not spec:
        return None
    point, _, rest = spec.partition(":")
    batch, _, how = rest.partition(":")
    target = int(batch or 0)
    fired = threading.Event()

    def hook(at: str, batch_id: int) -> None:
        if at != point or batch_id < target or fired.is_set():
            return
        fired.set()
        if how == "stop":
            log.warning("REVISE_CRASH_AT: freezing the job at %s of batch %d", at, batch_id)
            os.killpg(os.getpgrp(), signal.SIGSTOP)
            return
        log.warning("REVISE_CRASH_AT: killing the job at %s of batch %d", at, batch_id)
        os.kill(os.getpid(), signal.SIGKILL)

    return hook


STEP_MS_KEPT = 32
"""Batches whose step timings :meth:`BatchCommitter.take_steps` keeps until taken."""


def delta_crash_point(crash_hook: CrashHook | None) -> AfterWrite | None:
    """The ``during_delta`` crash point: after a write to ``revisions`` (step 3a).

    The Delta tables' ``after_write`` (given at their construction), so it fires wherever that
    write happens: in a batch's step 3, or in a staged commit made between micro-batches, at
    the stop or at the next start's recovery; ``batch_id`` is the highest batch the write
    holds. None without a crash hook.
    """
    if crash_hook is None:
        return None
    hook = crash_hook

    def during_delta(table: str, batch_id: int) -> None:
        if table == "revisions":
            hook("during_delta", batch_id)

    return during_delta


class BatchCommitter:
    """The ``foreachBatch`` sink: commits each micro-batch exactly once to Kafka and Delta."""

    def __init__(
        self,
        cfg: JobConfig,
        changelog: TaskWriter,
        tables: DeltaTables,
        result: JobResult,
        crash_hook: CrashHook | None = None,
        bounded: BoundedEnd | None = None,
        on_output: OutputHook | None = None,
    ) -> None:
        self.cfg = cfg
        self.bounded = bounded
        self.changelog = changelog
        self.tables = tables
        self.result = result
        self.crash_hook = crash_hook
        self.started = time.monotonic()
        self._task_crash_told = False
        self.last_batch_id: int | None = None
        self.error: BaseException | None = None
        self._step_ms: dict[int, dict[str, int]] = {}  # see take_steps
        self._step_lock = threading.Lock()  # foreachBatch's thread adds, the driver's takes
        # --overlap-commit: steps 2-3 of a batch run here while Spark computes the next one.
        self._pool = (ThreadPoolExecutor(1, thread_name_prefix="revise-commit")
                      if cfg.spark.overlap_commit else None)
        self._pending: Future[None] | None = None
        self._sinks_lock = threading.Lock()  # steps 2-3, and the staged commits between them
        self.on_output = on_output
        """Told each batch's output after step 2, before step 3 (the job's metrics)."""
        self.returned = threading.Event()
        """Set each time a call returns (or raises): Spark records the batch next, and the
        driver's watch loop wakes to see it (:class:`revise.spark.watch.JobDriver`)."""

    def _crash(self, point: str, batch_id: int) -> None:
        if self.crash_hook is not None:
            self.crash_hook(point, batch_id)

    # Longer than ~60 lines: the docstring is the one numbering of the commit sequence and
    # the body follows it step by step.
    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Commit micro-batch ``batch_id``; a replay after a crash changes nothing.

        The commit sequence (the one numbering of it; the same numbers mark the code here and
        in the sinks; crash points in brackets):

        1. Run the batch in the tasks. The driver first records the batch's ``emitted_at_ms``
           in the checkpoint (a replay reuses it) and hands it and the input's end offsets to
           the tasks; [``before_kafka``: nothing written]. Each stateful task computes its
           shards, writes their history rows as Delta data files (invisible until committed)
           and, in the same task, its partition's messages to Kafka
           (``revise.jvm.TaskChangelog``):
           1a. skip if the partition's progress (the committed offset of the group
               ``revise-<query_id>``) is at this batch or past it (a replay);
           1b. begin the partition's transaction; produce its revisions (key = the window),
               too-late records and dead letters; flush;
           1c. send the progress (offset ``batch_id + 1``, epoch, ``emitted_at_ms``) into the
               transaction; [``before_kafka_commit``: inside the open transaction, in the
               first task to get there]
           1d. commit. [``after_partition_commit``: that partition committed, the others in
               any state] A fenced producer (another attempt of the task) is replaced and the
               partition retried from 1a; a higher epoch in the progress (a newer instance of
               the query) fails the task: this instance is a zombie and stops.
           The driver collects the tasks' reports, their data files' records, counts and the
           revisions for ``latest``. A batch with no output at all ends here.
        2. Account the tasks' Kafka reports (a batch every writing partition skipped is a
           replay). [``after_kafka``: Kafka committed, Delta not written]
        3. Delta (``DeltaTables.write_files``), each commit tagged with the app transaction
           (revise-<query_id>, batch_id) so a replayed batch is a no-op. The batch's file
           records are staged (``<checkpoint>/delta-files``) and 3a–3c commit every staged
           batch, tagged with the highest id, once ``--delta-commit-interval`` has passed since
           the last commit (``sinks.file_stage``; the next start commits a crash's staged
           batches before its first micro-batch):
           3a. commit ``revisions``' files; [``during_delta``: after 3a, the others in any
               state; also after 3a of a staged commit made between micro-batches or at the
               stop]
           3b. commit ``late``'s files;
           3c. commit ``dead_letter``'s files;
           3d. MERGE ``latest`` (only a higher revision replaces a row), in the background:
               it runs while Spark computes the next batches, and one MERGE covers the
               batches that arrived meanwhile, at least the interval apart
               (``sinks.latest_merge``); step 3 waits only when that backlog is full. A
               MERGE lost to a crash after step 4 is redone from
               ``revisions`` when the job starts again (``DeltaTables.catch_up_latest``).
               [``before_latest``: in 3d's thread, once Spark has recorded the batch (step 4),
               before the MERGE that holds it: no replay will redo it]
           3e. record the batch in ``<checkpoint>/sinks-done`` (:mod:`revise.spark.rewind`).
           [``after_delta``: 3a–3c written, 3d running, Spark has not recorded the batch]
        4. Return: Spark records the batch in its commit log. A crash anywhere before this
           replays the batch with the same offsets and state, so the same revisions, and
           steps 1 and 3 turn the replay into no-ops where they already happened.

        With ``--overlap-commit`` (``JobConfig.overlap_commit``) steps 2–3 run on a background
        thread: the call returns after step 1, Spark records the batch and computes the next
        one meanwhile, and the next call first waits for them (and fails with their error).
        [``after_record``: in that thread, once Spark has recorded the batch, before step 2.]
        A crash after step 4 but before 3e leaves Spark's record one batch past
        ``sinks-done``; the next start removes that record before the query starts
        (:func:`~revise.spark.rewind.rewind_unfinished`), so the batch is replayed as above.
        """
        t0 = time.monotonic()
        try:
            self.wait()  # --overlap-commit: the previous batch's step 3 (raises its error)
            # 1. the tasks learn where this batch's input ends (a conditional close-all's
            # condition) and its emitted_at_ms (recorded first: a replay reuses it); a bounded
            # run whose input this batch reads to the end writes the close-all the next one
            # reads (revise.spark.close_all)
            read, control = batch_offsets(self.cfg.checkpoint, batch_id, self.cfg.kafka.input_topic)
            spark = df.sparkSession
            set_input_end(spark, read)
            if self.bounded is not None and self.bounded.start_batch(read, control):
                self.tables.end_staging()  # the close's FINALs: no staging them for the stop
            emitted_at = batch_timestamp(self.cfg.checkpoint, batch_id)
            if emitted_at is None:  # no offset log entry (a stand-in batch): nothing replays it
                emitted_at = int(time.time() * 1000)
            set_batch(spark, emitted_at)
            self._crash("before_kafka", batch_id)
            self._arm_task_crash(batch_id)
            # 1-2. compute the batch; each task commits its partition's messages to Kafka
            collected = write(df, self.changelog.settings(batch_id, emitted_at))
            self.result.collected_bytes += collected.nbytes
            out = decode_output(collected)
            collect_s = time.monotonic() - t0
            self.result.collect_seconds += collect_s
            if self._pool is None:
                self._sinks(batch_id, out, t0, collect_s)
            else:
                self._pending = self._pool.submit(self._sinks, batch_id, out, t0, collect_s)
        except BaseException as exc:
            fenced = zombie_error(exc)
            self.error = exc if fenced is None else fenced
            if fenced is not None:
                raise fenced from None
            raise
        finally:
            self.returned.set()
        # 4. return → Spark commits the batch

    def _arm_task_crash(self, batch_id: int) -> None:
        """Say so when this batch's tasks will kill the job (``REVISE_CRASH_AT``, tests only)."""
        crash = self.changelog.crash
        if crash is None or self._task_crash_told:
            return
        point, target, partition = crash.split(":")
        if batch_id >= int(target):
            self._task_crash_told = True
            log.warning("REVISE_CRASH_AT: killing the job at %s of batch %d (in the task of "
                        "partition %s)", point, batch_id, "any" if partition == "*" else partition)

    def wait(self) -> None:
        """Wait for the batch whose steps 2-3 run in the background (``--overlap-commit``).

        Raises:
            BaseException: What those steps raised (the job fails; the next start rewinds
                Spark's record of the batch, :mod:`revise.spark.rewind`).
        """
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        """Stop the background commit thread (after :meth:`wait`)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def _sinks(self, batch_id: int, out: BatchOutput, t0: float, collect_s: float) -> None:
        """Step 3 of batch ``batch_id`` and its record in ``sinks-done``."""
        try:
            with self._sinks_lock:
                self._write_sinks(batch_id, out, t0, collect_s)
                record_done(self.cfg.checkpoint, batch_id)
        except BaseException as exc:
            self.error = exc
            raise

    def _write_sinks(self, batch_id: int, out: BatchOutput, t0: float, collect_s: float) -> None:
        if self._pool is not None:
            self._crash_once_recorded("after_record", batch_id)
        # 2. what the tasks' Kafka transactions did: a replay finds every partition committed
        kafka_s = sum(float(r.get("seconds", 0.0)) for r in out.reports)
        writers = [r for r in out.reports if r.get("messages")]  # tasks with messages
        skipped = bool(writers) and all(r.get("skipped") for r in writers)
        if out.empty or self.cfg.dry_run:  # a dry run's tasks wrote no file to commit
            self._account(batch_id, out, None, t0, kafka_s)
            self._steps(batch_id, collect_s, kafka_s, 0.0)
            self._tell(batch_id, out, written=False)
            return
        self._crash("after_kafka", batch_id)
        self._tell(batch_id, out, written=not skipped)
        # 3. Delta: idempotent per (query_id, batch_id)
        td = time.monotonic()
        self.tables.write_files(
            self.cfg.query_id, batch_id, out.files,
            defer_latest=True,
            before_latest=lambda: self._crash_once_recorded("before_latest", batch_id),
        )
        delta_s = time.monotonic() - td
        self._account_delta(delta_s)
        self._crash("after_delta", batch_id)
        self._account(batch_id, out, skipped, t0, kafka_s)
        self._steps(batch_id, collect_s, kafka_s, delta_s)

    def _tell(self, batch_id: int, out: BatchOutput, *, written: bool) -> None:
        if self.on_output is not None:
            self.on_output(batch_id, out, written)

    def commit_due_history(self) -> bool:
        """Commit the staged Delta history whose interval has passed, unless a batch writes.

        The driver's watch loop calls it between micro-batches; it returns False at once while
        a batch's steps 2-3 run (with ``--overlap-commit``, beside the loop), which commit
        what is due themselves (:meth:`sinks.delta_tables.DeltaTables.commit_due_history`).

        Raises:
            DeltaWriteError: the appends failed; the batches stay staged.
        """
        if not self._sinks_lock.acquire(blocking=False):
            return False
        try:
            return self.tables.commit_due_history()
        finally:
            self._sinks_lock.release()

    def _crash_once_recorded(self, point: str, batch_id: int, wait_s: float = 60.0) -> None:
        """The crash hook at ``point``, once Spark's commit log holds ``batch_id`` (or later)."""
        if self.crash_hook is None:
            return
        deadline = time.monotonic() + wait_s
        while (last_committed_batch(self.cfg.checkpoint) < batch_id
               and time.monotonic() < deadline):
            time.sleep(0.01)
        self._crash(point, batch_id)

    def take_steps(self, batch_id: int) -> dict[str, int] | None:
        """Milliseconds of batch ``batch_id``'s commit steps 1–3, once (None: not kept).

        Keys ``collect_ms``, ``kafka_ms``, ``delta_ms``; the driver adds them to the batch's
        progress report as ``revise``.
        """
        with self._step_lock:
            return self._step_ms.pop(batch_id, None)

    def _steps(self, batch_id: int, collect_s: float, kafka_s: float, delta_s: float) -> None:
        steps = {"collect_ms": round(collect_s * 1000), "kafka_ms": round(kafka_s * 1000),
                 "delta_ms": round(delta_s * 1000)}
        with self._step_lock:
            self._step_ms[batch_id] = steps
            while len(self._step_ms) > STEP_MS_KEPT:  # a run keeps the last few, not all
                del self._step_ms[min(self._step_ms)]

    def _account_delta(self, seconds: float) -> None:
        self.result.delta_seconds += seconds
        timings = self.tables.last_timings
        if timings is not None:
            per = self.result.delta_table_seconds
            for name in TABLE_NAMES:
                per[name] = per.get(name, 0.0) + getattr(timings, name)

    def _account(
        self, batch_id: int, out: BatchOutput, skipped: bool | None, t0: float,
        kafka_s: float,
    ) -> None:
        r = self.result
        r.batches += 1
        self.last_batch_id = batch_id
        counts = out.counts
        r.revisions += counts.total_revisions
        r.late += counts.late
        r.dead_letters += counts.total_dead
        if counts.total_revisions:
            if r.first_revision_s is None:
                r.first_revision_s = time.monotonic() - self.started
            if counts.watermark_ms is not None:
                r.last_watermark_ms = max(r.last_watermark_ms, counts.watermark_ms)
        if skipped:
            r.skipped_batches += 1
        r.kafka_seconds += kafka_s
        r.commit_seconds += time.monotonic() - t0
