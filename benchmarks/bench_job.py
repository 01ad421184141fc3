"""Benchmark of the streaming job (issue 4): ``python -m benchmarks.bench_job``.

On one topic of generated events (default 2M events, 10,000 keys, tumbling 10 s windows, 1 %
late, batches of ``--batch`` records) it runs, each in a fresh process (own JVM, own peak
memory), one after the other on the same input:

- ``revision-eos``: ``revise run --once`` in revision mode with the exactly-once changelog;
- ``revision-plain``: the same with a plain (non-transactional, at-least-once) producer;
- ``revision-overlap``: ``revision-eos`` with ``--overlap-commit`` (a batch's Delta commits
  run while Spark computes the next batch; not in the default set);
- ``revision-noop``: ``revision-eos`` with its output switched off (``JobConfig.dry_run``:
  the same engine, counts and commits, but no Kafka message or transaction and no Delta file
  or commit; not in the default set): ``revision-eos`` ÷ ``revision-noop`` is the output's
  own cost;
- ``watermark-eos``: watermark mode, exactly-once;
- ``spark-native``: Spark's own windowed aggregation (update mode, noop sink, same topic and
  micro-batch size, watermark delay = grace, RocksDB state store), the peer;
- ``spark-native-kafka``: the same writing every updated row as JSON to a Kafka topic with
  Spark's own (at-least-once) Kafka sink (not in the default set).

Issue 12's workloads: ``--keys 1000 --partitions 4 --variants
revision-eos,revision-plain,watermark-eos,spark-native-kafka`` (throughput, item 2) and
``--events 2000000 --keys 1000000 --window tumbling:24h --grace 1h --batch 100000`` (state
that grows, item 1: compare ``batch_s_first5`` with ``batch_s_last5`` and ``checkpoint_mb``).

For each: records/s over the whole run (revise: from ``run_job`` to its return, set-up
included; native: from the query's start), records/s after the first micro-batch (Spark's
warm-up), time to the first revision, seconds spent computing and collecting the micro-batches
(``collect_s``), in the Kafka commit and in the Delta writes, the peak RSS of the process
tree (driver JVM, Python driver and Python workers) and of each of the three
(``peak_rss_jvm_driver_workers_mb``), and the CPU seconds each of those three spent
(``cpu_s``; :mod:`benchmarks.proc_tree`): on a machine whose cores the run keeps busy, throughput
follows the CPU work, so this says which side a variant's extra time is spent on
(``--jvm-threads``: the JVM's by thread group, ``cpu_jvm_threads_s``), and those the Kafka
broker spent meanwhile when it runs on this machine (``cpu_broker_s``: the embedded one, or
``revise broker start``'s): its share of the cores is part of what the output costs here. On
a standalone cluster (``REVISE_SPARK_MASTER=spark://…``) the executors are processes apart:
their JVMs' and Python workers' CPU seconds are ``cpu_executors_s``. Ratios are of figures
measured side by side in the same run; ``--repeat N`` runs N rounds of all variants
round-robin and reports each variant's median run. ``VARIANT+c1`` runs a variant with only the
JVM's quick C1 compiler (``-XX:TieredStopAtLevel=1``) beside the others: the JIT compilers'
share of a short run's CPU against the slower code they leave; ``VARIANT+jit1`` with the JVM's
own compile thresholds, which revise doubles (``revise.spark.session.JIT_OPTIONS``);
``VARIANT+jdk`` on another Java, ``--java-home DIR`` (its class archive trained beforehand:
``JAVA_HOME=DIR python -m revise.infra.cds``). A shared broker (``--bootstrap``) keeps such
options to the job's JVMs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.jvm_threads import JvmThreadCpu
from benchmarks.proc_tree import CpuUse, PeakRss, local_broker_pids
from benchmarks.variants import (
    ALL_VARIANTS,
    BASELINE_SUFFIX,
    JDK_SUFFIX,
    JVM_SUFFIXES,
    VARIANTS,
    pairs,
    split_jvm_suffixes,
)
from revise.infra.procs import JVM_OPTIONS_ENV, java_home_env
from revise.kafka import SPARK_SOURCE_DEFAULTS

__all__ = ["main"]

def _one(args: argparse.Namespace) -> dict[str, Any]:
    """Run one variant in this process; returns its figures."""
    from revise.spark.session import spark_session

    spark = spark_session(f"bench-{args.variant}", ui=False)
    run = uuid.uuid4().hex[:6]
    work = Path(args.work) / f"{args.variant}-{run}"
    threads = JvmThreadCpu() if args.jvm_threads else contextlib.nullcontext()
    context = spark.sparkContext
    # On a standalone cluster the executors are processes of their own: counted by app id.
    app_id = context.applicationId if (context.master or "").startswith("spark://") else None
    cpu_use = CpuUse(app_id, local_broker_pids(args.bootstrap, Path(args.work) / "broker"))
    with PeakRss() as rss, cpu_use as cpu, threads:
        if args.variant.startswith("spark-native"):
            figures = _native(spark, args, work)
        else:
            figures = _revise(spark, args, work, run)
    figures["peak_rss_mb"] = round(rss.peak_bytes / 2**20)
    figures["peak_rss_jvm_driver_workers_mb"] = "/".join(
        str(round(rss.peaks.get(k, 0) / 2**20)) for k in ("jvm", "driver", "workers"))
    figures["cpu_s"] = cpu.seconds
    if isinstance(threads, JvmThreadCpu):
        figures["cpu_jvm_threads_s"] = threads.seconds
    figures["cpu_jvm_driver_workers_s"] = "/".join(
        str(cpu.seconds.get(k, 0.0)) for k in ("jvm", "driver", "workers"))
    if app_id is not None:
        figures["cpu_executors_s"] = "/".join(
            str(cpu.seconds.get(k, 0.0)) for k in ("executors", "executor_workers"))
    figures["cpu_broker_s"] = cpu.seconds.get("broker")
    return figures


def _revise(spark: Any, args: argparse.Namespace, work: Path, run: str) -> dict[str, Any]:
    from revise.config import EngineConfig, WindowSpec
    from revise.jobconfig import DeltaOutput, JobConfig, KafkaIO, SparkTuning
    from revise.spark.driver import run_job
    from revise.vocab import Mode

    mode: Mode = "watermark" if args.variant.startswith("watermark") else "revision"
    cfg = JobConfig(
        kafka=KafkaIO(bootstrap_servers=args.bootstrap, input_topic=args.topic,
                      changelog_topic=f"bench-changelog-{run}", late_topic=f"bench-late-{run}",
                      dead_letter_topic=f"bench-dead-{run}",
                      transactional=args.variant != "revision-plain"),
        delta=DeltaOutput(path=str(work / "delta")), checkpoint=str(work / "checkpoint"),
        engine=EngineConfig(window=WindowSpec.parse(args.window), grace_ms=args.grace_ms,
                            mode=mode, query_id=f"bench-{run}"),
        once=True,
        spark=SparkTuning(max_records_per_batch=args.batch, shards=args.shards,
                          overlap_commit=args.variant == "revision-overlap"),
        dry_run=args.variant == "revision-noop",
    )
    t0 = time.monotonic()
    result = run_job(cfg, spark=spark)
    total = time.monotonic() - t0
    first = result.first_progress or {}
    first_s = (first.get("durationMs") or {}).get("triggerExecution", 0) / 1000
    data_rows = result.input_records - cfg.spark.shards  # the close-all commands are not input
    return _batch_figures(list(result.recent_progress), work / "checkpoint") | {
        "variant": args.variant,
        "records": data_rows,
        "seconds": round(total, 1),
        "records_per_s": round(data_rows / total),
        "records_per_s_after_first_batch": round(
            (data_rows - int(first.get("numInputRows") or 0)) / max(total - first_s, 1e-9)
        ),
        "first_revision_s": round(result.first_revision_s or 0.0, 1),
        "batches": result.batches,
        "revisions": result.revisions,
        "kafka_commit_s": round(result.kafka_seconds, 1),
        "delta_write_s": round(result.delta_seconds, 1),
        "collect_s": round(result.collect_seconds, 1),
        "delta_tables_s": {k: round(v, 1) for k, v in result.delta_table_seconds.items()},
        # None for a --baseline tree older than the coalescing merger (one MERGE per batch).
        "latest_merges": getattr(result, "latest_merges", None),
        # The bytes the driver collected from the tasks (None: a tree that did not count them).
        "collected_mb": (None if getattr(result, "collected_bytes", None) is None
                         else round(result.collected_bytes / 2**20, 1)),
    }


def _native(spark: Any, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from pyspark.sql import functions as F

    # The clock starts where revise's does (``run_job``, the session already up): before the
    # query is defined, whose first analysis warms the JVM up (~2.5 s here) for either system.
    t0 = time.monotonic()
    events = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .option("maxOffsetsPerTrigger", str(args.batch))
        .options(**({"kafka.max.poll.records": str(args.native_max_poll_records)}
                    if args.native_max_poll_records else {}))
        .load()
        .select(F.from_json(F.col("value").cast("string"),
                            "key STRING, ts BIGINT, value DOUBLE").alias("e"))
        .select("e.*")
        .where("key IS NOT NULL AND ts IS NOT NULL AND value IS NOT NULL")
        .withColumn("event_time", F.expr("timestamp_millis(ts)"))
        .withWatermark("event_time", f"{args.grace_ms} milliseconds")
    )
    size_s = args.window_ms // 1000
    agg = events.groupBy(F.window("event_time", f"{size_s} seconds"), "key").agg(
        F.count("*").alias("count"), F.sum("value").alias("sum"), F.min("value").alias("min"),
        F.max("value").alias("max"), F.avg("value").alias("mean"),
    )
    if args.variant == "spark-native-kafka":
        out = agg.select(F.to_json(F.struct(
            "key", F.expr("unix_millis(window.start)").alias("window_start_ms"),
            F.expr("unix_millis(window.end)").alias("window_end_ms"),
            "count", "sum", "min", "max", "mean")).alias("value"))
        writer = (out.writeStream.outputMode("update").format("kafka")
                  .option("kafka.bootstrap.servers", args.bootstrap)
                  .option("topic", f"bench-native-out-{uuid.uuid4().hex[:6]}"))
    else:
        writer = agg.writeStream.outputMode("update").format("noop")
    q = (writer.option("checkpointLocation", str(work / "checkpoint"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    total = time.monotonic() - t0
    progress = q.recentProgress
    rows = sum(int(p.get("numInputRows") or 0) for p in progress)
    first = progress[0] if progress else {}
    first_s = (first.get("durationMs") or {}).get("triggerExecution", 0) / 1000
    return _batch_figures(progress, work / "checkpoint") | {
        "variant": args.variant,
        "records": rows,
        "seconds": round(total, 1),
        "records_per_s": round(rows / total),
        "records_per_s_after_first_batch": round(
            (rows - int(first.get("numInputRows") or 0)) / max(total - first_s, 1e-9)
        ),
        "first_revision_s": round(first_s, 1),
        "batches": len(progress),
        "revisions": sum(
            int(s.get("numRowsUpdated") or 0)
            for p in progress for s in (p.get("stateOperators") or [])
        ),
        "collect_s": None,
        "kafka_commit_s": None,
        "delta_write_s": None,
    }


def _batch_figures(progress: list[dict[str, Any]], checkpoint: Path) -> dict[str, Any]:
    """Mean seconds of the first and the last five data micro-batches, and checkpoint MB.

    The first data micro-batch (Spark's warm-up) is left out. For revise, also the same two
    means of each commit step (``steps_first5`` / ``steps_last5``: ``collect``, ``kafka``,
    ``delta``, from the ``revise`` entry the driver adds to each progress report), which says
    which step grows when the batch does. ``micro_batches`` lists every micro-batch Spark
    reported (id, input rows, seconds, and revise's steps in ms): the ``--json`` file keeps it,
    so the cost of a single batch (the close-all of a bounded run, say) can be read off.
    """
    data = [p for p in progress if int(p.get("numInputRows") or 0) > 1_000][1:]
    secs = [(p.get("durationMs") or {}).get("triggerExecution", 0) / 1000 for p in data]

    def mean(xs: list[float]) -> float | None:
        return round(sum(xs) / len(xs), 2) if xs else None

    size = sum(f.stat().st_size for f in checkpoint.rglob("*") if f.is_file())
    figures: dict[str, Any] = {"batch_s_first5": mean(secs[:5]), "batch_s_last5": mean(secs[-5:]),
                               "checkpoint_mb": round(size / 2**20, 1),
                               "micro_batches": [_batch_row(p) for p in progress]}
    steps = [p["revise"] for p in data if p.get("revise")]
    if steps:
        for label, part in (("steps_first5", steps[:5]), ("steps_last5", steps[-5:])):
            figures[label] = {name.removesuffix("_ms"): mean([s[name] / 1000 for s in part])
                              for name in part[0]}
    return figures


def _batch_row(progress: dict[str, Any]) -> dict[str, Any]:
    """One micro-batch of a progress report: id, input rows, seconds, revise's steps (ms).

    ``spark_ms`` is Spark's own split of the batch (``durationMs``: ``queryPlanning``,
    ``addBatch`` — the sink, so revise's steps —, ``walCommit``, ``commitOffsets``…), which
    says where a batch's time outside revise's steps goes.
    """
    durations = progress.get("durationMs") or {}
    return {"batch_id": progress.get("batchId"),
            "rows": int(progress.get("numInputRows") or 0),
            "seconds": durations.get("triggerExecution", 0) / 1000,
            **(progress.get("revise") or {}),
            "spark_ms": {k: v for k, v in durations.items() if k != "triggerExecution"}}


def _table(rows: list[dict[str, Any]]) -> str:
    cols = ["variant", "records", "seconds", "records_per_s", "records_per_s_after_first_batch",
            "first_revision_s", "batches", "revisions", "collect_s", "kafka_commit_s",
            "delta_write_s", "batch_s_first5", "batch_s_last5", "checkpoint_mb", "peak_rss_mb",
            "peak_rss_jvm_driver_workers_mb", "cpu_jvm_driver_workers_s", "cpu_broker_s"]
    head = "| " + " | ".join(cols) + " |"
    sep = "|" + "|".join("---" for _ in cols) + "|"
    body = ["| " + " | ".join("-" if r.get(c) is None else str(r.get(c)) for c in cols) + " |"
            for r in rows]
    return "\n".join([head, sep, *body])


def main(argv: list[str] | None = None) -> int:
    """Entry point: generate the input, run every variant in its own process, print figures."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_job", description=__doc__)
    p.add_argument("--events", type=int, default=2_000_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--batch", type=int, default=500_000, help="max records per micro-batch")
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--window", default="tumbling:10s")
    p.add_argument("--grace", default="10s")
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help=f"comma-separated, of {', '.join(ALL_VARIANTS)}; a name ending in "
                        + ", ".join(f"{sfx} runs that variant with {what} ({opt})"
                                    for sfx, (opt, what) in JVM_SUFFIXES.items()))
    p.add_argument("--partitions", type=int, default=4, help="input topic partitions")
    p.add_argument("--bootstrap", help="Kafka bootstrap (default: an embedded broker started here)")
    p.add_argument("--variant", help=argparse.SUPPRESS)
    p.add_argument("--topic", help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    p.add_argument("--repeat", type=int, default=1,
                   help="rounds of all variants (round-robin, rotating the order); the table "
                        "shows each variant's median run")
    p.add_argument("--json", help="also write every run's figures to this JSON file")
    p.add_argument("--native-max-poll-records", type=int, default=None, metavar="N",
                   help="the native variants' Kafka consumer max.poll.records (default: "
                        "Kafka's, 500; revise's source uses "
                        f"{SPARK_SOURCE_DEFAULTS['max.poll.records']})")
    p.add_argument("--jvm-threads", action="store_true",
                   help="also report the driver JVM's CPU by thread group (JIT, GC, executor "
                        "tasks, state server, stream; benchmarks.jvm_threads), sampled from "
                        "/proc every 0.5 s (not for the @base variants)")
    p.add_argument("--java-home", metavar="DIR",
                   help="the Java of the VARIANT+jdk variants (their JAVA_HOME)")
    p.add_argument("--baseline", metavar="DIR",
                   help="a source tree of another revise commit (e.g. a git worktree): a "
                        "variant named VARIANT@base runs VARIANT with DIR first on PYTHONPATH "
                        "(driver and Python workers), beside the others on the same input")
    args = p.parse_args(argv)
    from revise.config import WindowSpec, parse_duration

    args.grace_ms = parse_duration(args.grace, option="--grace")
    args.window_ms = WindowSpec.parse(args.window).size_ms
    if args.variant:  # a child process: run one variant, print its JSON
        print("BENCH " + json.dumps(_one(args)), flush=True)
        return 0
    return _parent(args)


def _child(
    args: argparse.Namespace, variant: str, topic: str, work: Path, bootstrap: str
) -> dict[str, Any] | None:
    """Run one variant in a fresh process; its figures, or None (reported) if it failed."""
    env = {**os.environ, "REVISE_SPARK_LOG_LEVEL": "ERROR"}
    name, cwd = variant, None
    options: list[str] = []
    if args.native_max_poll_records:
        options += ["--native-max-poll-records", str(args.native_max_poll_records)]
    if args.jvm_threads:
        options.append("--jvm-threads")
    if JDK_SUFFIX in variant:
        if not args.java_home:
            print(f"{variant} needs --java-home DIR", file=sys.stderr)
            return None
        variant = variant.replace(JDK_SUFFIX, "")
        env.update(java_home_env(args.java_home, env.get("PATH", "")))
    variant, jvm_extra = split_jvm_suffixes(variant)
    if jvm_extra:
        env[JVM_OPTIONS_ENV] = " ".join(filter(None, [env.get(JVM_OPTIONS_ENV), *jvm_extra]))
    if variant.endswith(BASELINE_SUFFIX):
        options = []  # another tree's bench_job may not know them
        if not args.baseline:
            print(f"{variant} needs --baseline DIR", file=sys.stderr)
            return None
        variant = variant.removesuffix(BASELINE_SUFFIX)
        # ``python -m`` puts the working directory first on sys.path: run from the tree.
        cwd = str(Path(args.baseline).resolve())
        env["PYTHONPATH"] = os.pathsep.join([cwd, *filter(None, [env.get("PYTHONPATH")])])
    cmd = [sys.executable, "-m", "benchmarks.bench_job", "--variant", variant, "--topic", topic,
           "--work", str(work), "--bootstrap", bootstrap, "--batch", str(args.batch),
           "--shards", str(args.shards), "--window", args.window, "--grace", args.grace,
           *options]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, cwd=cwd)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH ")), None)
    if proc.returncode != 0 or line is None:
        # kept: the run's work folder is removed at the end
        fd, log = tempfile.mkstemp(prefix=f"revise-bench-{name.replace('@', '-')}-",
                                   suffix=".stderr")
        os.write(fd, proc.stderr.encode())
        os.close(fd)
        print(f"{name} failed (exit {proc.returncode}; its whole stderr: {log}):\n"
              f"{proc.stderr[-3000:]}", file=sys.stderr)
        return None
    row: dict[str, Any] = json.loads(line[6:])
    row["variant"] = name
    return row


def _median_run(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median records/s (the lower middle one for an even count)."""
    ordered = sorted(rows, key=lambda r: r["records_per_s"])
    return ordered[(len(ordered) - 1) // 2]


def _parent(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="revise-bench-"))
    try:
        return _measure(args, work)
    finally:  # the broker's log and every run's checkpoint and tables: up to GBs a run
        shutil.rmtree(work, ignore_errors=True)


def _measure(args: argparse.Namespace, work: Path) -> int:
    """Generate the input into a broker under ``work``, run every variant, print the figures."""
    from revise.generate import GeneratorConfig, generate, produce
    from revise.infra import broker

    with broker.given_or_embedded(args.bootstrap, work / "broker") as bootstrap:
        topic = f"bench-input-{uuid.uuid4().hex[:6]}"
        t0 = time.monotonic()
        stream = generate(GeneratorConfig(events=args.events, keys=args.keys, seed=42,
                                          disorder_ms=2_000, late_fraction=0.01,
                                          late_by_ms=30_000, step_ms=1))
        produce(stream, bootstrap_servers=bootstrap, topic=topic, partitions=args.partitions)
        print(f"input: {args.events} events, {args.keys} keys, 1% late, topic {topic} "
              f"({time.monotonic() - t0:.0f}s to generate and produce)", flush=True)
        runs: dict[str, list[dict[str, Any]]] = {}
        variants = args.variants.split(",")
        for round_ in range(1, args.repeat + 1):
            # Round-robin, each round starting one variant later, so drift in the machine's
            # load and the first run's cold broker hit every variant alike.
            shift = (round_ - 1) % len(variants)
            for variant in variants[shift:] + variants[:shift]:
                row = _child(args, variant, topic, work, bootstrap)
                if row is None:
                    return 1
                runs.setdefault(variant, []).append(row)
                shown = {k: v for k, v in row.items() if k != "micro_batches"}  # --json has it
                print(f"round {round_} {variant}: {shown}", flush=True)
            for ours, peer in pairs(variants):
                a, b = runs[ours][-1], runs[peer][-1]
                print(f"round {round_}: {ours} / {peer} throughput "
                      f"{a['records_per_s'] / b['records_per_s']:.2f}", flush=True)
        rows = [_median_run(runs[v]) for v in variants]
        print()
        print(_table(rows))
        by = {r["variant"]: r for r in rows}
        note = f" (median of {args.repeat} rounds)" if args.repeat > 1 else ""
        print()
        for ours, peer in pairs(variants):
            ratio = by[ours]["records_per_s"] / by[peer]["records_per_s"]
            print(f"{ours} / {peer} throughput{note}: {ratio:.2f}")
        if "revision-eos" in by and "revision-plain" in by:
            cost = 1 - by["revision-eos"]["records_per_s"] / by["revision-plain"]["records_per_s"]
            print(f"exactly-once cost vs plain producer{note}: {cost:+.1%} of throughput")
        if args.json:
            Path(args.json).write_text(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
