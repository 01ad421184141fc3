"""Running the job: preflight, start the query, drive it until it stops, report what it did.

The query (:mod:`revise.spark.stream`) runs the engine in Spark's stateful operator
(:mod:`revise.spark.operator`); its sink is the :class:`~revise.spark.committer.BatchCommitter`.
This module starts it; :class:`revise.spark.watch.JobDriver` watches it.

Why these choices (checked on Spark 4.2, pinned by tests/integration/test_spark_semantics.py):

- The watermark is Spark's, computed from every partition's accepted records, identical for
  all shards (``getCurrentWatermarkInMs()``). The stateful operator uses event-time timers,
  and Spark drops the operator's input rows whose watermarked column is behind the
  watermark; the operator's input has no such column (the event time is dropped after
  ``withWatermark``, :func:`revise.spark.stream.build_stream`), so the engine sees every
  late record and decides itself.
- Each shard's timeout is the watermark that closes its next window
  (``Engine.next_close_ms``): Spark calls a shard only when it has rows or that watermark is
  reached, and runs a micro-batch without new data exactly when the watermark moved, so
  windows close as the watermark advances even for keys that receive nothing, while an idle
  job runs no micro-batches and an idle shard's state is neither read nor rewritten.
- ``availableNow`` ends without the micro-batch that would close the last windows. A bounded
  run (``--once``) instead records the input's end offsets at start, runs until the query has
  read them, then drops a close-all command file into the control source; the micro-batch
  that reads it closes every window (one FINAL each) and the job stops. The command is part of
  the checkpointed input, so a crash and restart replays it exactly.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from revise import allocator_for_run
from revise.checkpoint import (
    OFFSETS_LOG,
    checkpoint_fingerprint,
    control_dir,
    spark_dir,
    stage_dir,
    write_fingerprint,
)
from revise.errors import ConfigError
from revise.jobconfig import (
    DRY_RUN_KEY,
    EMIT_POLICY_KEY,
    JobConfig,
    check_state_layout,
)
from revise.ops.metrics import JobMetrics
from revise.ops.runfile import RunFile, RunInfo
from revise.spark.advice import retention_note
from revise.spark.close_all import BoundedEnd
from revise.spark.committer import (
    BatchCommitter,
    CrashHook,
    JobResult,
    OutputHook,
    crash_hook_from_env,
    delta_crash_point,
)
from revise.spark.failures import JobError, commit_failure
from revise.spark.output import BatchOutput
from revise.spark.rewind import rewind_unfinished
from revise.spark.session import long_run_conf, spark_session, sql_setting
from revise.spark.spark_log import batch_offsets, last_entry, recorded_shuffle_partitions
from revise.spark.stream import build_stream
from revise.spark.task_output import TaskWriter, merge_on_executor, task_crash_from_env
from revise.spark.watch import JobDriver, ProgressCallback
from sinks.delta_tables import AfterWrite, DeltaSchemaError, DeltaTables
from sinks.file_stage import FileStage
from sinks.kafka import ProducerFencedError, end_offsets, ensure_topics

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["JobError", "JobResult", "preflight", "run_job"]

log = logging.getLogger("revise.job")


def _check_checkpoint(cfg: JobConfig) -> None:
    """Refuse a checkpoint written under settings that change the state's meaning."""
    check_state_layout(cfg.checkpoint)
    want = cfg.fingerprint()
    have = checkpoint_fingerprint(cfg.checkpoint)
    if have is not None:
        # recorded only when on: one turned off differs too
        keys = [*want, *(k for k in (EMIT_POLICY_KEY, DRY_RUN_KEY) if k not in want)]
        diff = {k: (have.get(k), want.get(k)) for k in keys if have.get(k) != want.get(k)}
        if diff:
            lines = ", ".join(
                f"{k}: checkpoint has {a!r}, asked {b!r}" for k, (a, b) in diff.items()
            )
            msg = (
                f"--checkpoint {cfg.checkpoint} belongs to a job with other settings ({lines}); "
                "use the original settings or a new --checkpoint (and --query-id)"
            )
            raise ConfigError(msg)
    else:
        write_fingerprint(cfg.checkpoint, want)


def preflight(cfg: JobConfig) -> None:
    """Run the checks that need no Spark, before Spark starts.

    The input topic must exist (missing output topics are created) and the checkpoint, if
    any, must have been written with these settings. :func:`run_job` runs it; callers need
    not.

    Raises:
        ConfigError: Either check failed (the CLI exits 2).
    """
    ensure_topics(cfg.kafka.bootstrap_servers, cfg.kafka.input_topic,
                  (cfg.kafka.changelog_topic, cfg.kafka.late_topic, cfg.kafka.dead_letter_topic),
                  client_config=cfg.kafka_settings.admin_conf())
    _check_checkpoint(cfg)


SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"


def shuffle_partitions(spark: SparkSession, cfg: JobConfig) -> int:
    """The stateful operator's partition count for a new checkpoint of ``cfg``.

    The operator groups by shard, so partitions beyond ``cfg.spark.shards`` would only run empty
    state-store tasks every micro-batch: by default the shard count, capped by the session's
    own setting and, on a local master, by its cores (one stateful task per core: each task
    is a Python call with fixed costs, and on 2 cores 2 tasks instead of 4 made a micro-batch
    at 1,000 records/s 0.76-0.92x as long, docs/lab/benchmarks-diary.md);
    ``cfg.spark.shuffle_partitions`` when given. Spark records the value in the checkpoint's
    offset log and reuses it on every restart.
    """
    if cfg.spark.shuffle_partitions is not None:
        return cfg.spark.shuffle_partitions
    session = int(spark.conf.get(SHUFFLE_PARTITIONS, "200") or "200")
    cap = min(cfg.spark.shards, session)
    sc = spark.sparkContext
    if (sc.master or "").startswith("local"):
        cap = min(cap, sc.defaultParallelism)
    return max(1, cap)


def state_partitions(spark: SparkSession, cfg: JobConfig) -> int:
    """The stateful operator's partition count this run: the checkpoint's, else a new one's.

    Spark keeps a checkpoint's first ``spark.sql.shuffle.partitions`` on every restart
    (recorded with each batch's offsets); the shards' grouping keys are chosen for it.
    """
    return recorded_shuffle_partitions(cfg.checkpoint) or shuffle_partitions(spark, cfg)


def run_job(
    cfg: JobConfig,
    *,
    spark: SparkSession | None = None,
    master: str | None = None,
    stop_event: threading.Event | None = None,
    on_progress: ProgressCallback | None = None,
    crash_hook: CrashHook | None = None,
    timeout_s: float | None = None,
) -> JobResult:
    """Run the job until stopped (or, with ``cfg.once``, until the input at start is done).

    Args:
        cfg: The job's configuration.
        spark: A session to use; when None, the project's session is started after the
            preflight (so configuration errors come before Spark's start-up). With a session,
            the preflight and the sinks' start run beside the query's definition (its
            analysis in the JVM takes seconds when cold).
        master: The Spark master of that session (None: local, or spark-submit's).
        stop_event: Set it to stop cleanly (the CLI sets it on SIGINT/SIGTERM).
        on_progress: Called with each new Spark progress report (a dict).
        crash_hook: Test hook called at the commit's crash points (see ``REVISE_CRASH_AT``).
        timeout_s: Give up (JobError) after this long; None: no limit.

    Raises:
        ConfigError: The input topic is missing, the checkpoint belongs to other settings, or
            the Delta tables under the path have another --aggs list's columns, or
            ``$REVISE_DRIVER_START_HEAP`` / ``$REVISE_DRIVER_MEMORY`` is not a size.
        ProducerFencedError: Another instance with the same query id took over.
        JobError: The streaming query failed.
    """
    metrics = _job_metrics(cfg)  # before Spark: a taken --metrics-port ends the run at once
    if metrics is not None:
        on_progress = _progress_to(metrics, on_progress)
    try:
        return _run_job(cfg, spark=spark, master=master, stop_event=stop_event,
                        on_progress=on_progress, crash_hook=crash_hook, timeout_s=timeout_s,
                        metrics=metrics)
    finally:
        if metrics is not None:
            metrics.stop()


# Longer than ~60 lines: the wiring of the query in one sequence.
def _run_job(cfg: JobConfig, *, spark: SparkSession | None, master: str | None,
             stop_event: threading.Event | None, on_progress: ProgressCallback | None,
             crash_hook: CrashHook | None, timeout_s: float | None,
             metrics: JobMetrics | None) -> JobResult:
    """:func:`run_job`, with its metrics (None: no ``--metrics-port``)."""
    t_start = time.monotonic()
    # delta-rs's allocator: a bounded run keeps freed pages a second, an unbounded one returns
    # them at once (flat memory for days); set before the Delta tables load delta-rs.
    allocator_for_run(bounded=cfg.once)
    # An unbounded run's driver takes its heap at start (flat memory for days); a
    # bad size in the environment is a configuration error, raised before anything is created.
    driver_conf = None if spark is not None or cfg.once else long_run_conf()
    crash = crash_hook or crash_hook_from_env()
    after_write = _after_delta_write(crash, metrics)
    # The transactional producer's open (init_transactions, reading the progress topic: ~0.7 s)
    # runs while Spark starts and analyses the query (seconds): neither needs the other.
    with ThreadPoolExecutor(2, thread_name_prefix="revise-open") as pool:
        preparing: Future[_Prepared] | None = None
        prepared: _Prepared | None = None
        try:
            if spark is None:  # Kafka, the checkpoint and Delta checked before Spark starts
                prepared = _prepare(cfg, pool, after_write)
                spark = spark_session(f"revise-{cfg.query_id}", master=master,
                                      extra_conf=driver_conf)
            else:  # a session is up: define the query while they are checked
                preparing = pool.submit(_prepare, cfg, pool, after_write)
            control = control_dir(cfg.checkpoint)
            control.mkdir(parents=True, exist_ok=True)
            partitions = state_partitions(spark, cfg)
            stream = build_stream(spark, cfg, str(control), partitions)  # planned at start
            if preparing is not None:
                prepared = preparing.result()
            assert prepared is not None
            tables, ends = prepared.tables, prepared.ends
            tables.run_latest_merges(merge_on_executor(spark))
            changelog = prepared.opening.result()  # this producer has fenced older instances
            rewind_unfinished(cfg.checkpoint)  # a batch Spark recorded, the sinks did not
        except BaseException:
            _wait_for_open(prepared, preparing)
            raise
    result = JobResult(cfg.query_id)
    bounded = None
    if ends is not None:
        bounded = BoundedEnd(cfg.kafka.input_topic, ends, str(control), cfg.spark.shards)
        # A checkpoint whose last micro-batch read the input to its end (or an empty input)
        # closes in the first one: the command goes in before the query starts.
        read, logged = batch_offsets(cfg.checkpoint, last_entry(cfg.checkpoint, OFFSETS_LOG),
                                     cfg.kafka.input_topic)
        if bounded.start_batch(read or {}, logged):
            tables.end_staging()
    committer = BatchCommitter(cfg, changelog, tables, result, crash, bounded=bounded,
                               on_output=None if metrics is None else _output_to(metrics))
    # A bounded run never needs a micro-batch without input: every one after the input's end
    # reads a close-all command (revise.spark.close_all), and the one that closes is its last.
    # Without this, Spark would start one more as soon as that one moved the watermark, and the
    # stop would wait for it (~0.6 s on a large state).
    no_data_off = (sql_setting(spark, NO_DATA_BATCHES, "false") if bounded is not None
                   else contextlib.nullcontext())
    with sql_setting(spark, SHUFFLE_PARTITIONS, str(partitions)), no_data_off:
        query = (
            stream.writeStream.outputMode("update")
            .queryName(f"revise_{cfg.query_id}".replace("-", "_").replace(".", "_"))
            .option("checkpointLocation", str(spark_dir(cfg.checkpoint)))
            .trigger(processingTime=f"{cfg.effective_trigger_ms} milliseconds")
            .foreachBatch(committer)
            .start()
        )
    driver = JobDriver(query, cfg, committer, bounded=bounded, stop_event=stop_event,
                       on_progress=on_progress, timeout_s=timeout_s, started=t_start)
    run_file = _run_file(cfg)  # revise status: where the job writes, and that it runs
    ran = False
    try:
        driver.run()
        committer.wait()  # --overlap-commit: the last batch's Kafka and Delta writes
        ran = True
    except JobError as exc:
        clearer = commit_failure(cfg, committer.error)
        if clearer is None:
            raise
        raise clearer from exc
    finally:
        if query.isActive:
            query.stop()
        if not ran:  # the run's own error is the one raised; the next start rewinds
            with contextlib.suppress(Exception):
                committer.wait()
        committer.close()
        with contextlib.suppress(Exception):  # a JVM that is gone keeps no producer
            changelog.close(spark)
        # The staged history appends and the last batch's MERGE into latest (step 3d runs in
        # the background). When the run failed, its error is the one raised; the next start
        # writes the staged batches and redoes the MERGE.
        try:
            latest_s = tables.flush(raise_error=ran)
        finally:
            run_file.stop()
    per_table = result.delta_table_seconds
    per_table["latest"] = per_table.get("latest", 0.0) + latest_s
    for name, seconds in tables.unbatched_seconds.items():  # staged commits between batches
        per_table[name] = per_table.get(name, 0.0) + seconds
    result.latest_merges = tables.latest_merges
    if isinstance(committer.error, ProducerFencedError):
        raise committer.error
    result.seconds = time.monotonic() - t_start
    return result


def _job_metrics(cfg: JobConfig) -> JobMetrics | None:
    """The job's metrics, served on ``cfg.metrics_port`` (None when it has none).

    Raises:
        ConfigError: The port is taken.
    """
    if cfg.metrics_port is None:
        return None
    e = cfg.engine
    return JobMetrics(cfg.query_id, cfg.kafka.input_topic, port=cfg.metrics_port,
                      labels={"mode": e.mode, "window": str(e.window)}).start()


def _progress_to(metrics: JobMetrics,
                 on_progress: ProgressCallback | None) -> ProgressCallback:
    """Each progress report to the metrics, then to ``on_progress``."""

    def report(progress: dict[str, Any]) -> None:
        metrics.observe_progress(progress)
        if on_progress is not None:
            on_progress(progress)

    return report


def _after_delta_write(crash: CrashHook | None, metrics: JobMetrics | None) -> AfterWrite | None:
    """The Delta tables' ``after_write``: the ``during_delta`` crash point, then the metrics."""
    crash_point = delta_crash_point(crash)
    if metrics is None:
        return crash_point
    told = metrics

    def written(table: str, batch_id: int) -> None:
        if crash_point is not None:
            crash_point(table, batch_id)
        told.delta_written(table, batch_id)

    return written


def _output_to(metrics: JobMetrics) -> OutputHook:
    """The committer's ``on_output``: each batch's output (after Kafka) to the metrics."""

    def output(batch_id: int, out: BatchOutput, kafka: bool) -> None:
        metrics.observe_batch(batch_id, out.fresh_counts(), open_windows=out.open_windows,
                              written=kafka)

    return output


def _run_file(cfg: JobConfig) -> RunFile:
    """The job's run file in its checkpoint (:mod:`revise.ops.runfile`), written and beating."""
    return RunFile(cfg.checkpoint, RunInfo(
        query_id=cfg.query_id, state="running", pid=0, host="", started_ms=0, heartbeat_ms=0,
        bootstrap_servers=cfg.kafka.bootstrap_servers, input_topic=cfg.kafka.input_topic,
        changelog_topic=cfg.kafka.changelog_topic, progress_topic=cfg.kafka.progress_topic,
        delta_path=cfg.delta.path, metrics_port=cfg.metrics_port, once=cfg.once,
    )).start()


@dataclass(frozen=True, slots=True)
class _Prepared:
    """What the start needs besides Spark: the Delta tables, the input's ends, the producer."""

    tables: DeltaTables
    ends: dict[int, int] | None
    opening: Future[TaskWriter]


def _prepare(cfg: JobConfig, pool: ThreadPoolExecutor,
             after_write: AfterWrite | None) -> _Prepared:
    """The start's checks and sinks: preflight, the Delta tables, the producer's open on ``pool``.

    ``after_write`` is the Delta tables' hook after each write (the crash point, the metrics).

    Then the input's end offsets (a bounded run) and the recovery of what a crashed run left
    staged or unmerged; the producer opens meanwhile, after the preflight (a run with a
    configuration error fences no running instance).

    Raises:
        ConfigError: The preflight failed, or the Delta tables under the path have another
            --aggs list's columns.
    """
    preflight(cfg)
    kafka = cfg.kafka_settings
    try:
        tables = DeltaTables(cfg.delta.path, revision_schema=cfg.revision_schema,
                             stage=_history_stage(cfg),
                             latest_min_rest_s=cfg.delta.commit_interval_ms / 1000,
                             log_retention_ms=cfg.delta.log_retention_ms,
                             after_write=after_write).ensure()
    except DeltaSchemaError as exc:
        raise ConfigError(str(exc)) from None
    note = retention_note(cfg, tables.longest_log_retention_ms)
    if note:
        log.info(note)
    opening = pool.submit(_changelog(cfg))
    try:
        ends = (end_offsets(cfg.kafka.bootstrap_servers, cfg.kafka.input_topic,
                            client_config=kafka.consumer_conf()) if cfg.once else None)
        _recover_history(tables, cfg.query_id)
        _catch_up_latest(tables, cfg.query_id)
    except BaseException:
        _wait_for_open(_Prepared(tables, None, opening), None)
        raise
    return _Prepared(tables, ends, opening)


def _changelog(cfg: JobConfig) -> Callable[[], TaskWriter]:
    """The tasks' changelog writer, opened (every state partition taken over) when called."""
    kafka = cfg.kafka_settings
    writer = TaskWriter(
        query_id=cfg.query_id, progress_topic=cfg.kafka.progress_topic,
        topics={"revision": cfg.kafka.changelog_topic, "late": cfg.kafka.late_topic,
                "dead": cfg.kafka.dead_letter_topic},
        partitions=max(cfg.spark.shards, cfg.spark.shuffle_partitions or 0,
                       recorded_shuffle_partitions(cfg.checkpoint) or 0),
        java_conf=kafka.java_conf(),
        # a dry run writes nothing, so it takes no partition over (a live job keeps its own)
        transactional=cfg.kafka.transactional and not cfg.dry_run,
        crash=task_crash_from_env())
    return lambda: writer.open(cfg.kafka.bootstrap_servers, kafka.producer_conf(),
                               kafka.consumer_conf())


def _history_stage(cfg: JobConfig) -> FileStage:
    return FileStage(stage_dir(cfg.checkpoint), cfg.delta.commit_interval_ms / 1000)


def _recover_history(tables: DeltaTables, query_id: str) -> None:
    """Write the micro-batches the last run staged for Delta and did not commit (a crash)."""
    batches = tables.recover_history(query_id)
    if batches:
        log.warning("Delta history caught up with %d staged micro-batches the last run had "
                    "not committed", batches)


def _catch_up_latest(tables: DeltaTables, query_id: str) -> None:
    """Redo a ``latest`` MERGE that the last run's crash lost (step 3d runs in the background)."""
    merged = tables.catch_up_latest(query_id)
    if merged:
        log.warning("latest caught up with %d revisions the last run had not merged into it",
                    merged)


def _wait_for_open(prepared: _Prepared | None,
                   preparing: Future[_Prepared] | None) -> None:
    """Wait for a failed start's open (and preparation) to end: none is left running.

    The open's own producers are closed by ``adopt``; no task has run yet, so no JVM keeps one.
    """
    if prepared is None and preparing is not None:
        try:
            prepared = preparing.result()
        except BaseException:  # noqa: BLE001 - it closed its own producer; the start's error wins
            return
    if prepared is None:
        return
    with contextlib.suppress(Exception):  # the start-up step's error is the one to raise
        prepared.opening.result()
