"""The command line: ``revise run | generate | compare | query | broker | spark | demo``.

Every option also reads ``REVISE_<OPTION>`` from the environment (``--query-id`` ←
``REVISE_QUERY_ID``); the command line wins. Durations take a unit: ``500ms``, ``10s``, ``5m``,
``1h``. Exit codes: 0 success, 2 usage or configuration error (the message says what is wrong
and how to fix it), 1 runtime failure.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from revise.cli_args import duration_type, maybe_duration, maybe_int
from revise.config import EngineConfig, WindowSpec, parse_aggs, parse_duration
from revise.errors import ConfigError, InfraError, ReviseError

__all__ = ["build_parser", "main"]

log = logging.getLogger("revise")

Handler = Callable[[argparse.Namespace], int]


# --------------------------------------------------------------------------- helpers


class _EnvDefaults(argparse.ArgumentParser):
    """An ArgumentParser whose options fall back to ``REVISE_<OPTION>`` environment variables."""

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:  # type: ignore[override]
        long = next((a for a in args if isinstance(a, str) and a.startswith("--")), None)
        if long is not None and kwargs.get("action") not in ("help", "version"):
            env = "REVISE_" + long[2:].upper().replace("-", "_")
            if env in os.environ:
                raw = os.environ[env]
                if kwargs.get("action") == "store_true":
                    kwargs["default"] = raw.strip().lower() in ("1", "true", "yes", "on")
                else:
                    kwargs["default"] = raw
                    kwargs["required"] = False
            help_text = kwargs.get("help")
            if help_text is not None and help_text is not argparse.SUPPRESS:
                kwargs["help"] = f"{help_text} [env {env}]"
        return super().add_argument(*args, **kwargs)


def _embedded_bootstrap(given: str | None, *, start: bool = False) -> str:
    """The given bootstrap servers, else the running embedded broker's (optionally started)."""
    if given:
        return given
    from revise.infra import broker

    cluster = broker.status()
    if cluster is None and start:
        cluster = broker.start()
    if cluster is None:
        msg = (
            "--bootstrap-servers is required: no embedded broker is running "
            "(start one with `revise broker start`, or pass HOST:PORT)"
        )
        raise ConfigError(msg)
    return cluster.bootstrap_servers


def _setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("py4j", "py4j.clientserver", "py4j.java_gateway"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _progress_logger(start: float) -> Callable[[dict[str, Any]], None]:
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
            "elapsed_s=%.1f",
            p.get("batchId"), rows, rate, wm, lag, ms, time.monotonic() - start,
        )

    return report


# --------------------------------------------------------------------------- run


def _add_engine_options(p: argparse.ArgumentParser, *, mode: bool = True) -> None:
    p.add_argument("--window", required=True,
                   help="tumbling:SIZE | hopping:SIZE:ADVANCE | session:GAP")
    p.add_argument("--grace", required=True, type=duration_type("--grace"),
                   help="how long after window end late records still correct it")
    p.add_argument("--watermark-delay", default="0ms", type=duration_type("--watermark-delay"),
                   help="watermark = max event time - this (default 0ms)")
    p.add_argument("--aggs", default="count,sum,min,max,mean", help="aggregates to compute")
    if mode:
        p.add_argument("--mode", choices=("revision", "watermark"), default="revision",
                       help="revision: every change then FINAL; watermark: FINAL only")


def _engine_config(args: argparse.Namespace, *, mode: str, query_id: str) -> EngineConfig:
    delay = args.watermark_delay
    if isinstance(delay, str):
        delay = parse_duration(delay, option="--watermark-delay")
    grace = args.grace
    if not isinstance(grace, int):
        grace = parse_duration(grace, option="--grace")
    return EngineConfig(
        window=WindowSpec.parse(args.window),
        grace_ms=grace,
        watermark_delay_ms=delay,
        aggs=parse_aggs(args.aggs),
        mode=mode,  # type: ignore[arg-type]
        query_id=query_id,
    )


def _add_run(sub: Any) -> None:
    p = sub.add_parser("run", help="run the streaming job", description="Run the streaming job: "
                       "Kafka in; revisions to a transactional changelog topic and Delta tables.")
    p.add_argument("--bootstrap-servers", help="Kafka HOST:PORT (default: the embedded broker)")
    p.add_argument("--input-topic", required=True, help="topic of JSON events")
    p.add_argument("--changelog-topic", required=True, help="topic of revisions (transactional)")
    p.add_argument("--late-topic", help="optional topic of too-late records")
    p.add_argument("--dead-letter-topic", help="optional topic of bad input")
    p.add_argument("--delta-path", required=True, help="folder of the Delta tables")
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint folder")
    p.add_argument("--query-id", required=True, help="the job's stable id")
    _add_engine_options(p)
    p.add_argument("--trigger", type=duration_type("--trigger"),
                   help="micro-batch interval (default: back-to-back with --once, else 1s)")
    p.add_argument("--max-records-per-batch", type=int, help="cap on records per micro-batch")
    p.add_argument("--once", action="store_true",
                   help="process the input available at start, close every window, stop")
    p.add_argument("--shards", type=int, default=8, help="key shards (fixed per checkpoint)")
    p.add_argument("--key-field", default="key", help="JSON field of the key")
    p.add_argument("--ts-field", default="ts", help="JSON field of the event time (epoch ms)")
    p.add_argument("--value-field", default="value", help="JSON field of the value")
    p.add_argument("--no-transactions", action="store_true",
                   help="plain at-least-once producer instead of exactly-once (benchmarks)")
    p.add_argument("--master", help="Spark master (default local[*]; spark-submit's wins)")
    p.add_argument("--timeout", type=duration_type("--timeout"), help="give up after this long")
    p.set_defaults(handler=cmd_run)


def job_config_from_args(args: argparse.Namespace) -> Any:
    """Build the :class:`~revise.jobconfig.JobConfig` of ``revise run``."""
    from revise.jobconfig import JobConfig

    return JobConfig(
        bootstrap_servers=_embedded_bootstrap(args.bootstrap_servers),
        input_topic=args.input_topic,
        changelog_topic=args.changelog_topic,
        late_topic=args.late_topic,
        dead_letter_topic=args.dead_letter_topic,
        delta_path=str(Path(args.delta_path).expanduser().resolve()) if "://" not in args.delta_path
        else args.delta_path,
        checkpoint=str(Path(args.checkpoint).expanduser().resolve()) if "://" not in args.checkpoint
        else args.checkpoint,
        engine=_engine_config(args, mode=args.mode, query_id=args.query_id),
        trigger_ms=maybe_duration(args.trigger, "--trigger"),
        max_records_per_batch=maybe_int(args.max_records_per_batch, "--max-records-per-batch"),
        once=bool(args.once),
        shards=maybe_int(args.shards, "--shards") or 8,
        key_field=args.key_field,
        ts_field=args.ts_field,
        value_field=args.value_field,
        transactional=not args.no_transactions,
    )


def _install_stop_handlers() -> threading.Event:
    stop = threading.Event()

    def handler(signum: int, _frame: Any) -> None:
        log.info("signal=%s stopping cleanly after the current micro-batch", signum)
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return stop


def cmd_run(args: argparse.Namespace) -> int:
    """``revise run``."""
    cfg = job_config_from_args(args)
    from revise.spark.job import preflight, run_job
    from revise.spark.session import spark_session

    preflight(cfg)  # configuration errors before Spark's start-up, not after it
    stop = _install_stop_handlers()
    start = time.monotonic()
    log.info("query_id=%s mode=%s window=%s grace_ms=%d input=%s once=%s",
             cfg.query_id, cfg.engine.mode, cfg.engine.window, cfg.engine.grace_ms,
             cfg.input_topic, cfg.once)
    spark = spark_session(f"revise-{cfg.query_id}", master=args.master)
    result = run_job(cfg, spark=spark, stop_event=stop, on_progress=_progress_logger(start),
                     timeout_s=(args.timeout / 1000) if isinstance(args.timeout, int) else None)
    log.info(
        "done query_id=%s batches=%d input_records=%d revisions=%d late=%d dead_letters=%d "
        "replayed_batches=%d seconds=%.1f stopped_by_signal=%s",
        result.query_id, result.batches, result.input_records, result.revisions, result.late,
        result.dead_letters, result.skipped_batches, result.seconds, result.stopped_by_signal,
    )
    return 0


# --------------------------------------------------------------------------- generate


def _add_generate(sub: Any) -> None:
    p = sub.add_parser("generate", help="write a reproducible out-of-order event stream",
                       description="Write a seeded stream of JSON events with disorder, late "
                       "and malformed records to a Kafka topic.")
    p.add_argument("--bootstrap-servers", help="Kafka HOST:PORT (default: the embedded broker)")
    p.add_argument("--topic", required=True, help="topic to write (created if missing)")
    _add_generator_options(p)
    p.add_argument("--partitions", type=int, default=4, help="partitions if the topic is created")
    p.set_defaults(handler=cmd_generate)


def _add_generator_options(p: argparse.ArgumentParser, *, events_required: bool = True) -> None:
    p.add_argument("--events", type=int, required=events_required, help="number of records")
    p.add_argument("--keys", type=int, default=100, help="distinct keys")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--disorder", default="0ms", type=duration_type("--disorder"),
                   help="max event-time disorder")
    p.add_argument("--late-fraction", type=float, default=0.0, help="share of late records")
    p.add_argument("--late-by", default="1m", type=duration_type("--late-by"),
                   help="scale of the heavy-tailed lateness")
    p.add_argument("--bad-fraction", type=float, default=0.0, help="share of malformed records")
    p.add_argument("--rate", type=float, help="records per second (default: as fast as possible)")


def generator_config_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~revise.generate.GeneratorConfig` of ``revise generate``."""
    from revise.generate import GeneratorConfig

    return GeneratorConfig(
        events=maybe_int(args.events, "--events") or 0,
        keys=maybe_int(args.keys, "--keys") or 1,
        seed=maybe_int(args.seed, "--seed") or 0,
        disorder_ms=maybe_duration(args.disorder, "--disorder") or 0,
        late_fraction=float(args.late_fraction),
        late_by_ms=maybe_duration(args.late_by, "--late-by") or 0,
        bad_fraction=float(args.bad_fraction),
    )


def cmd_generate(args: argparse.Namespace) -> int:
    """``revise generate``."""
    from revise.generate import generate, produce

    cfg = generator_config_from_args(args)
    bootstrap = _embedded_bootstrap(args.bootstrap_servers)
    stream = generate(cfg)
    t0 = time.monotonic()
    n = produce(stream, bootstrap_servers=bootstrap, topic=args.topic,
                rate=float(args.rate) if args.rate else None, partitions=args.partitions)
    kinds = {name: int((stream.kind == code).sum())
             for code, name in ((0, "on_time"), (1, "late"), (2, "bad"))}
    print(f"wrote {n} records to {args.topic} on {bootstrap} in {time.monotonic() - t0:.1f}s "
          f"(on time {kinds['on_time']}, delayed {kinds['late']}, malformed {kinds['bad']})")
    return 0


# --------------------------------------------------------------------------- broker


def _add_broker(sub: Any) -> None:
    p = sub.add_parser("broker", help="the embedded Apache Kafka broker",
                       description="Start, stop or inspect the embedded Apache Kafka broker "
                       "(KRaft, single node by default).")
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--home", help="revise's home folder; the broker lives in HOME/broker "
                   "(default ~/.revise)")
    p.add_argument("--port", type=int, help="client port of the first node (default: a free one)")
    p.add_argument("--nodes", type=int, default=1, help="Kafka processes in the cluster")
    p.set_defaults(handler=cmd_broker)


def cmd_broker(args: argparse.Namespace) -> int:
    """``revise broker start|stop|status``."""
    from revise.infra import broker

    # --home (and REVISE_HOME) name revise's home; the broker's own folder is HOME/broker, the
    # same place broker.default_home() finds it, so every command agrees on one broker.
    home = Path(args.home).expanduser() / "broker" if args.home else None
    if args.action == "start":
        cluster = broker.start(home, port=maybe_int(args.port, "--port"),
                               nodes=maybe_int(args.nodes, "--nodes") or 1)
        print(_describe(cluster))
        return 0
    if args.action == "stop":
        stopped = broker.stop(home)
        print("stopped" if stopped else "not running")
        return 0
    found = broker.status(home)
    if found is None:
        print("not running")
        return 3
    print(_describe(found))
    return 0


def _describe(cluster: Any) -> str:
    pids = ",".join(map(str, cluster.pids))
    return f"running bootstrap={cluster.bootstrap_servers} pids={pids} home={cluster.home}"


# --------------------------------------------------------------------------- demo


def _add_demo(sub: Any) -> None:
    p = sub.add_parser("demo", help="the whole pipeline end to end on embedded defaults",
                       description="Start the embedded broker, generate an out-of-order stream "
                       "with late and bad records, run the job to completion and show the result.")
    p.add_argument("--events", type=int, default=20_000, help="records to generate")
    p.add_argument("--keys", type=int, default=50, help="distinct keys")
    p.add_argument("--seed", type=int, default=7, help="random seed")
    p.add_argument("--out", help="folder for the Delta tables and checkpoint "
                   "(default $REVISE_HOME/demo/<run>)")
    p.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    """``revise demo``."""
    from revise.demo import run_demo

    return run_demo(events=int(args.events), keys=int(args.keys), seed=int(args.seed),
                    out=Path(args.out) if args.out else None)


# --------------------------------------------------------------------------- entry


def build_parser() -> argparse.ArgumentParser:
    """The ``revise`` argument parser with every subcommand."""
    parser = _EnvDefaults(
        prog="revise",
        description="Speculative out-of-order windowing on Apache Spark: numbered, corrected, "
        "exactly-once revisions of windowed aggregates in Kafka and Delta Lake.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_EnvDefaults)
    _add_run(sub)
    _add_generate(sub)
    _add_optional(sub, "revise.compare")
    _add_optional(sub, "revise.query")
    _add_broker(sub)
    _add_optional(sub, "revise.cli_spark")
    _add_demo(sub)
    return parser


def _add_optional(sub: Any, module: str) -> None:
    """Subcommands whose module provides ``add_parser(sub)`` (registered when present)."""
    import importlib

    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module:
            return
        raise
    mod.add_parser(sub)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 2 usage/config error, 1 runtime failure)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)
    handler: Handler = args.handler
    try:
        return handler(args)
    except ConfigError as exc:
        print(f"revise {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except InfraError as exc:
        print(f"revise {args.command}: error: {exc}", file=sys.stderr)
        return 2 if _is_setup_problem(exc) else 1
    except ReviseError as exc:
        print(f"revise {args.command}: failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"revise {args.command}: interrupted", file=sys.stderr)
        return 130


def _is_setup_problem(exc: InfraError) -> bool:
    text = str(exc)
    setup = ("not installed", "not on PATH", "already in use", "not writable")
    return any(s in text for s in setup)
