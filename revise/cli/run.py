"""``revise run``: the streaming job."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from revise.cli.args import (
    absolute_path,
    add_engine_options,
    add_field_options,
    duration_type,
    embedded_bootstrap,
    engine_config,
    maybe_duration,
    maybe_int,
)
from revise.cli.kafka import kafka_settings
from revise.config import parse_mode
from revise.jobconfig import (
    DEFAULT_DELTA_COMMIT_INTERVAL_MS,
    DEFAULT_SHARDS,
    DeltaOutput,
    InputFields,
    JobConfig,
    KafkaIO,
    SparkTuning,
    check_state_layout,
    parse_ts_format,
)
from revise.kafka import (
    KafkaSettings,
    add_kafka_arguments,
    render_client_configs,
    revise_client_configs,
)

__all__ = ["add_parser", "batch_parts", "cmd_run", "job_config_from_args", "progress_logger"]

log = logging.getLogger("revise")


def add_parser(sub: Any) -> None:
    """Register ``revise run``."""
    p = sub.add_parser("run", help="run the streaming job", description="Run the streaming job: "
                       "Kafka in; revisions to a transactional changelog topic and Delta tables.")
    p.add_argument("--bootstrap-servers", help="Kafka HOST:PORT (default: the embedded broker; "
                   "a secure embedded broker is used as its `revise` user)")
    add_kafka_arguments(p)
    p.add_argument("--print-config", action="store_true",
                   help="print every Kafka client's effective settings (secrets as ***), exit 0")
    p.add_argument("--input-topic", required=True, help="topic of JSON events")
    p.add_argument("--changelog-topic", required=True, help="topic of revisions (transactional)")
    p.add_argument("--late-topic", help="optional topic of too-late records")
    p.add_argument("--dead-letter-topic", help="optional topic of bad input")
    p.add_argument("--delta-path", required=True, help="folder of the Delta tables")
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint folder")
    p.add_argument("--query-id", required=True, help="the job's stable id")
    add_engine_options(p)
    p.add_argument("--trigger", type=duration_type("--trigger"),
                   help="micro-batch interval (default: back-to-back with --once, else 500ms)")
    p.add_argument("--max-records-per-batch", type=int, help="cap on records per micro-batch")
    p.add_argument("--delta-commit-interval", type=duration_type("--delta-commit-interval"),
                   help="least time between two commits of the Delta history tables "
                        "(revisions, late, dead_letter); the micro-batches in between wait in "
                        "the checkpoint folder and go in one commit, so a run of days keeps "
                        "Delta's log small (default 5s; 0s: commit every micro-batch)")
    p.add_argument("--delta-log-retention", type=duration_type("--delta-log-retention"),
                   help="how long the Delta tables keep their log's commit files, set on them "
                        "at start (delta.logRetentionDuration; at least 1m): each file kept "
                        "costs every later Delta write, and time travel reaches back this far "
                        "(default: each table's own, Delta's 30 days; a run of days on a local "
                        "disk wants 1d or less, docs/RELIABILITY.md)")
    p.add_argument("--overlap-commit", action="store_true",
                   help="commit each micro-batch's Delta writes while Spark computes the "
                        "next one, instead of before it starts (the Kafka transactions are "
                        "the stateful tasks', inside the batch); still "
                        "exactly once (a restart reruns a batch whose writes a crash cut "
                        "short); needs a local or mounted --checkpoint")
    p.add_argument("--once", action="store_true",
                   help="process the input available at start, close every window, stop")
    p.add_argument("--shards", type=int, default=DEFAULT_SHARDS,
                   help="key shards (fixed per checkpoint)")
    p.add_argument("--shuffle-partitions", type=int,
                   help="stateful tasks per micro-batch of a new checkpoint (default: --shards, "
                        "at most the session's spark.sql.shuffle.partitions)")
    add_field_options(p)
    p.add_argument("--no-transactions", action="store_true",
                   help="plain at-least-once producer instead of exactly-once (benchmarks)")
    p.add_argument("--master", help="Spark master (default local[*]; spark-submit's wins)")
    p.add_argument("--timeout", type=duration_type("--timeout"), help="give up after this long")
    p.add_argument("--metrics-port", type=int,
                   help="serve the job's Prometheus metrics at http://HOST:PORT/metrics while "
                        "it runs (docs/OPERATIONS.md); a taken port is an error")
    p.set_defaults(handler=cmd_run)


def job_config_from_args(args: argparse.Namespace,
                         kafka: KafkaSettings | None = None) -> JobConfig:
    """Build the :class:`~revise.jobconfig.JobConfig` of ``revise run``.

    ``kafka``: the client settings (with their bootstrap address); None: plaintext to
    ``--bootstrap-servers`` or the embedded broker.
    """
    bootstrap = kafka.bootstrap_servers if kafka is not None else None
    delta_interval = maybe_duration(args.delta_commit_interval, "--delta-commit-interval")
    if delta_interval is None:
        delta_interval = DEFAULT_DELTA_COMMIT_INTERVAL_MS
    checkpoint = absolute_path(args.checkpoint)
    return JobConfig(
        kafka=KafkaIO(
            bootstrap_servers=bootstrap or embedded_bootstrap(args.bootstrap_servers),
            settings=kafka or KafkaSettings(None),
            input_topic=args.input_topic,
            changelog_topic=args.changelog_topic,
            late_topic=args.late_topic,
            dead_letter_topic=args.dead_letter_topic,
            transactional=not args.no_transactions,
        ),
        delta=DeltaOutput(
            path=absolute_path(args.delta_path),
            commit_interval_ms=delta_interval,
            log_retention_ms=maybe_duration(args.delta_log_retention, "--delta-log-retention"),
        ),
        checkpoint=checkpoint,
        engine=engine_config(args, mode=parse_mode(args.mode), query_id=args.query_id),
        spark=SparkTuning(
            trigger_ms=maybe_duration(args.trigger, "--trigger"),
            max_records_per_batch=maybe_int(args.max_records_per_batch,
                                            "--max-records-per-batch"),
            shards=maybe_int(args.shards, "--shards") or DEFAULT_SHARDS,
            shuffle_partitions=maybe_int(args.shuffle_partitions, "--shuffle-partitions"),
            overlap_commit=bool(args.overlap_commit),
        ),
        input=InputFields(
            key_field=args.key_field,
            ts_field=args.ts_field,
            value_field=args.value_field,
            ts_format=parse_ts_format(str(args.ts_format)),
        ),
        once=bool(args.once),
        metrics_port=maybe_int(args.metrics_port, "--metrics-port"),
    )


def install_stop_handlers() -> threading.Event:
    """SIGINT/SIGTERM set the returned event: the job stops after the current micro-batch."""
    stop = threading.Event()

    def handler(signum: int, _frame: Any) -> None:
        log.info("signal=%s stopping cleanly after the current micro-batch", signum)
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return stop


def batch_parts(p: dict[str, Any]) -> str:
    """Where a micro-batch's time went, in ms (docs/BENCHMARKS.md, per-micro-batch cost model).

    Spark's ``durationMs``: ``offsets_ms`` (latestOffset + getBatch), ``plan_ms``
    (queryPlanning), ``sink_ms`` (addBatch: computing the batch and revise's whole commit),
    ``log_ms`` (walCommit + commitOffsets); revise's commit steps inside ``sink_ms``:
    ``collect_ms`` (compute, collect, decode), ``kafka_ms``, ``delta_ms``.
    """
    d = p.get("durationMs") or {}
    parts = {
        "offsets_ms": d.get("latestOffset", 0) + d.get("getBatch", 0),
        "plan_ms": d.get("queryPlanning", 0),
        "sink_ms": d.get("addBatch", 0),
        "log_ms": d.get("walCommit", 0) + d.get("commitOffsets", 0),
        **(p.get("revise") or {}),
    }
    return " ".join(f"{k}={v}" for k, v in parts.items())


def progress_logger(start: float) -> Callable[[dict[str, Any]], None]:
    """Log one structured line per micro-batch: records, rate, watermark, input lag."""

    def report(p: dict[str, Any]) -> None:
        rows = int(p.get("numInputRows") or 0)
        rate = float(p.get("processedRowsPerSecond") or 0.0)
        wm = (p.get("eventTime") or {}).get("watermark", "-")
        lag = "-"
        sources = p.get("sources") or []
        if sources:
            metrics = sources[0].get("metrics") or {}
            lag = metrics.get("maxOffsetsBehindLatest", "-")
        ms = (p.get("durationMs") or {}).get("triggerExecution", 0)
        log.info(
            "batch=%s records=%d rec_per_s=%.0f watermark=%s input_lag=%s batch_ms=%s "
            "elapsed_s=%.1f %s",
            p.get("batchId"), rows, rate, wm, lag, ms, time.monotonic() - start, batch_parts(p),
        )

    return report


def cmd_run(args: argparse.Namespace) -> int:
    """``revise run``."""
    if args.print_config:
        settings = kafka_settings(args, probe=False)
        from revise.spark.task_output import PRODUCER_DEFAULTS
        from sinks.kafka.changelog_config import DEFAULT_PRODUCER_CONFIG

        print(render_client_configs(settings, revise_client_configs(
            settings, query_id=args.query_id, producer_defaults=DEFAULT_PRODUCER_CONFIG,
            task_producer_defaults=PRODUCER_DEFAULTS)))
        return 0
    # Options and the checkpoint's state layout first (exit 2 with the fix), before any Kafka
    # client or Spark starts.
    options = job_config_from_args(args, KafkaSettings(None).with_bootstrap("options-check:0"))
    check_state_layout(options.checkpoint)
    if not args.once:  # $REVISE_DRIVER_START_HEAP / $REVISE_DRIVER_MEMORY are options too
        from revise.spark.session import long_run_conf

        long_run_conf()
    topics = (args.input_topic, args.changelog_topic, args.late_topic, args.dead_letter_topic)
    cfg = job_config_from_args(args, kafka_settings(args, topics=topics))
    from revise.spark.driver import run_job

    stop = install_stop_handlers()
    start = time.monotonic()
    log.info("query_id=%s mode=%s window=%s grace_ms=%d input=%s once=%s",
             cfg.query_id, cfg.engine.mode, cfg.engine.window, cfg.engine.grace_ms,
             cfg.kafka.input_topic, cfg.once)
    # run_job runs its preflight (configuration errors, exit 2) before Spark starts.
    timeout_ms = maybe_duration(args.timeout, "--timeout")
    result = run_job(cfg, master=args.master, stop_event=stop, on_progress=progress_logger(start),
                     timeout_s=None if timeout_ms is None else timeout_ms / 1000)
    log.info(
        "done query_id=%s batches=%d input_records=%d revisions=%d late=%d dead_letters=%d "
        "replayed_batches=%d seconds=%.1f stopped_by_signal=%s",
        result.query_id, result.batches, result.input_records, result.revisions, result.late,
        result.dead_letters, result.skipped_batches, result.seconds, result.stopped_by_signal,
    )
    return 0
