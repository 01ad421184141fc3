"""Latency: how soon a window's first result and its final value reach Kafka (issue 12, item 3).

``python -m benchmarks.latency --rate 1000 --minutes 2 [--systems revise native]``

For each system in turn, on a fresh input and output topic of the embedded broker (or
``--bootstrap-servers``): starts the job unbounded (default trigger, or ``--trigger-ms``),
waits until it has run its first micro-batch, then produces ``--rate`` records/s for
``--minutes`` (the soak's feeder: ``--keys`` keys, event time = wall clock minus up to
``--disorder-ms``, Kafka timestamp = send time), then lets the job run idle for ``--idle-s``
seconds and stops it.

- ``revise``: ``revise run`` in revision mode, exactly-once changelog and Delta tables.
- ``revise-every-batch``: the same with ``--delta-commit-interval 0s`` (every Delta table
  committed per micro-batch, as before the commits were decoupled from it).
- ``native``: Spark's own update-mode aggregation (``from_json``, ``withWatermark`` = grace,
  ``groupBy(window, key)`` with count and sum, RocksDB state store) writing each updated row to
  Kafka with Spark's Kafka sink (at-least-once), same trigger and the same driver JVM settings
  (:func:`revise.spark.session.long_run_conf`).

Figures, per system, over the windows whose first record was sent while feeding (after
``--warmup-s``):

- first-result latency: Kafka timestamp of a window's first input record → when a
  ``read_committed`` consumer, reading the output topic throughout the run, received the
  window's first output message (revise: once its partition's transaction committed; native:
  once Spark's sink appended it). Not the output message's own timestamp: a stateful task
  sends its messages before its transaction commits and makes them readable; nor revise's
  ``emitted_at_ms``, the micro-batch's stamp, recorded before its tasks run;
- final-value latency: Kafka timestamp of the window's last input record → when the consumer
  received the first result whose ``count`` equals the number of records sent for it;
- batch duration of micro-batches with input while feeding, and of those without
  (``records=0``, batch 0 excepted: it starts the query): the cost of an empty micro-batch.
  Feeding leaves one of those (the watermark moves after the last record), so after the idle
  run ``--empty-probes`` single records follow, each with event time = now and ``--probe-gap-s``
  apart: each makes a one-record micro-batch and then an empty one, which closes windows;
- input lag at the end of feeding (records the job had not taken yet);
- the broker's CPU seconds while the system ran (start to stop) and per minute of the
  measured feed, when the broker runs on this machine (the embedded one, or ``revise broker
  start``'s): a longer ``--warmup-s`` makes the latter its warm CPU;
- the system's JVMs' CPU seconds per minute of the measured feed, by thread group
  (:mod:`benchmarks.jvm_threads`: the JIT compilers, the collector, the task threads, the
  state server, the query's planning thread, the rest): how much of a stream's first minutes
  its JVM still spends compiling;
- with ``--stages``, its Spark jobs' time stage by stage, from the job's event log
  (:mod:`benchmarks.stage_times`).

Ratios between the systems are measured side by side in one run; the machine's load is printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.chaos import CliRun, create_topics, use_repo_pythonpath
from benchmarks.jvm_threads import JvmThreadCpu
from benchmarks.proc_tree import cpu_seconds, local_broker_pids
from benchmarks.soak import CommittedRows, Feeder, input_lag
from benchmarks.stage_times import conf_dir, read_events, summarize
from revise.jobconfig import DEFAULT_TRIGGER_MS

__all__ = ["main"]

_BATCH = re.compile(r"batch=(\d+) records=(\d+) .*batch_ms=(\d+)")
_PART = re.compile(r"\b(\w+)_ms=(\d+)")


def _pct(xs: Sequence[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return float(s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))])


class Readable(CommittedRows):
    """The output topic's rows as a ``read_committed`` consumer gets them while the job runs.

    :attr:`rows` holds every one: ``(key, window_start_ms, count, at_ms)``, ``at_ms`` the wall
    clock when the row reached the consumer.
    """

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(bootstrap, topic, name="latency-reader")
        self.rows: list[tuple[str, int, int, int]] = []

    def seen(self, row: dict[str, Any], sent_ms: int, at_ms: int) -> None:
        """Keep the row with the time it was received."""
        self.rows.append((str(row["key"]), int(row["window_start_ms"]), int(row["count"]),
                          at_ms))


def _latencies(feeder: Feeder, rows: list[tuple[str, int, int, int]], fed_from_ms: int,
               fed_to_ms: int) -> dict[str, Any]:
    """First-result and final-value latency (ms) of the windows opened while feeding."""
    first: dict[tuple[str, int], int] = {}
    final: dict[tuple[str, int], int] = {}
    for key, ws, count, at in rows:
        w = (key, ws)
        first[w] = min(at, first.get(w, at))
        if count == feeder.counts.get(w) and w not in final:
            final[w] = at
    windows = [w for w, t in feeder.first_ms.items() if fed_from_ms <= t <= fed_to_ms]
    fr = [first[w] - feeder.first_ms[w] for w in windows if w in first]
    fv = [final[w] - feeder.last_ms[w] for w in windows if w in final]
    out: dict[str, Any] = {"windows": len(windows), "with_result": len(fr),
                           "with_final_value": len(fv)}
    for name, xs in (("first_result_ms", fr), ("final_value_ms", fv)):
        out[name] = {f"p{q}": _pct(xs, q) for q in (50, 95, 99)}
    return out


def _batches(log_text: str, probes_from: int | None = None) -> dict[str, Any]:
    """Median and p95 batch duration (ms) of micro-batches with and without input.

    Batches with input count up to batch ``probes_from`` (the probes' one-record batches are
    not the workload's); batches without input count from batch 1 on (batch 0 starts the
    query). Also the median of each part of a batch with input (``revise run``'s ``*_ms=``
    fields).
    """
    full: list[int] = []
    empty: list[int] = []
    parts: dict[str, list[int]] = {}
    for line in log_text.splitlines():
        m = _BATCH.search(line)
        if m is None or int(m.group(1)) == 0:
            continue
        if int(m.group(2)) == 0:
            empty.append(int(m.group(3)))
        elif probes_from is None or int(m.group(1)) < probes_from:
            full.append(int(m.group(3)))
            for name, ms in _PART.findall(line):
                parts.setdefault(name, []).append(int(ms))
    return {"batches": len(full) + len(empty),
            "batch_ms_p50": _pct(full, 50), "batch_ms_p95": _pct(full, 95),
            "empty_batches": len(empty), "empty_batch_ms_p50": _pct(empty, 50),
            "empty_batch_ms_p95": _pct(empty, 95),
            "batch_parts_ms_p50": {k: _pct(v, 50) for k, v in parts.items() if k != "batch"}}


def _start(system: str, args: argparse.Namespace, bootstrap: str, topics: dict[str, str],
           work: Path) -> CliRun:
    if system.startswith("revise"):
        argv = ["run", "--bootstrap-servers", bootstrap, "--input-topic", topics["in"],
                "--changelog-topic", topics["out"], "--late-topic", topics["late"],
                "--dead-letter-topic", topics["dead"], "--delta-path", str(work / "delta"),
                "--checkpoint", str(work / "checkpoint"), "--query-id", f"lat-{work.name}",
                "--window", args.window, "--grace", f"{args.grace_ms}ms"]
        if args.trigger_ms is not None:
            argv += ["--trigger", f"{args.trigger_ms}ms"]
        if args.shuffle_partitions is not None:
            argv += ["--shuffle-partitions", str(args.shuffle_partitions)]
        if args.shards is not None:
            argv += ["--shards", str(args.shards)]
        if system == "revise-every-batch":
            argv += ["--delta-commit-interval", "0s"]
        return CliRun(argv, cwd=work, log=work / "job.log")
    native_args = ["--native-child", bootstrap, topics["in"], topics["out"],
                   str(work / "checkpoint" / "spark"), args.window, str(args.grace_ms),
                   str(DEFAULT_TRIGGER_MS if args.trigger_ms is None else args.trigger_ms)]
    return CliRun(native_args, cwd=work, log=work / "job.log", module="benchmarks.latency")


def native(bootstrap: str, input_topic: str, output_topic: str, checkpoint: str, window: str,
           grace_ms: int, trigger_ms: int = DEFAULT_TRIGGER_MS) -> None:
    """Spark's own update-mode windowed aggregation, Kafka in and out (a child process)."""
    from pyspark.sql import functions as F

    from revise.config import WindowSpec
    from revise.spark.session import long_run_conf, spark_session

    # The same driver JVM settings as an unbounded revise run (its heap fixed at start).
    spark = spark_session("latency-native", ui=False, extra_conf=long_run_conf())
    spark.conf.set("spark.sql.streaming.stateStore.providerClass",
                   "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    size_s = WindowSpec.parse(window).size_ms // 1000
    events = (
        spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", input_topic).option("startingOffsets", "earliest").load()
        .select(F.from_json(F.col("value").cast("string"),
                            "key STRING, ts BIGINT, value DOUBLE").alias("e")).select("e.*")
        .withColumn("event_time", F.expr("timestamp_millis(ts)"))
        .withWatermark("event_time", f"{grace_ms} milliseconds")
    )
    agg = events.groupBy(F.window("event_time", f"{size_s} seconds"), "key").agg(
        F.count("*").alias("count"), F.sum("value").alias("sum"))
    out = agg.select(F.to_json(F.struct(
        "key", F.expr("unix_millis(window.start)").alias("window_start_ms"), "count", "sum",
    )).alias("value"))
    q = (out.writeStream.outputMode("update").format("kafka")
         .option("kafka.bootstrap.servers", bootstrap).option("topic", output_topic)
         .option("checkpointLocation", checkpoint)
         .trigger(processingTime=f"{trigger_ms} milliseconds").start())
    seen = -1
    while q.isActive:
        p = q.lastProgress
        if p is not None and p["batchId"] > seen:
            seen = p["batchId"]
            ms = (p.get("durationMs") or {}).get("triggerExecution", 0)
            print(f"batch={seen} records={p['numInputRows']} batch_ms={ms}", flush=True)
        time.sleep(0.2)


def _one(system: str, args: argparse.Namespace, bootstrap: str, root: Path) -> dict[str, Any]:
    from revise.config import WindowSpec

    tag = uuid.uuid4().hex[:6]
    work = root / f"{system}-{tag}"
    work.mkdir(parents=True)
    topics = {n: f"lat-{system}-{n}-{tag}" for n in ("in", "out", "late", "dead")}
    create_topics(bootstrap, list(topics.values()), partitions=4)
    readable = Readable(bootstrap, topics["out"])
    readable.start()
    broker = local_broker_pids(bootstrap, root / "broker")
    cpu_start = cpu_seconds(broker)
    run = _start(system, args, bootstrap, topics, work)
    feeder = Feeder(bootstrap, topics["in"], args.rate, args.keys,
                    WindowSpec.parse(args.window).size_ms, args.disorder_ms, seed=1,
                    track_windows=True)
    try:
        if not run.wait_for("batch=0 ", 300):
            msg = f"{system} did not start:\n{run.tail()}"
            raise RuntimeError(msg)
        feeder.start()
        time.sleep(args.warmup_s)  # Spark starts its Python workers on the first rows
        fed_from = int(time.time() * 1000)
        cpu_fed_from = cpu_seconds(broker)
        with JvmThreadCpu(exclude=broker) as jvm_threads:
            time.sleep(args.minutes * 60)
        feeder.stop.set()
        feeder.join(60)
        fed_to = int(time.time() * 1000)
        cpu_fed = cpu_seconds(broker) - cpu_fed_from
        lag = input_lag(bootstrap, topics["in"], work / "checkpoint")
        time.sleep(args.idle_s)
        probes_from = _last_batch(run.log()) + 1
        _probe_empty_batches(bootstrap, topics["in"], args.empty_probes, args.probe_gap_s)
    finally:
        feeder.stop.set()
        run.signal_group(15)
        run.wait(120)
        readable.stop.set()
        readable.join(30)
    figures = {"system": system, "produced": feeder.produced, "lag_at_end_of_feed": lag}
    if broker:  # a broker on this machine: its CPU while this system ran, and while fed
        figures |= {"broker_cpu_s": round(cpu_seconds(broker) - cpu_start, 1),
                    "broker_cpu_s_per_min_fed": round(cpu_fed / args.minutes, 1)}
    figures["jvm_cpu_s_per_min_fed"] = {group: round(seconds / args.minutes, 1)
                                        for group, seconds in jvm_threads.seconds.items()}
    figures |= _batches(run.log(), probes_from)
    figures |= _latencies(feeder, readable.rows, fed_from, fed_to)
    return figures


def _last_batch(log_text: str) -> int:
    """The highest micro-batch id in a job's log (-1: none yet)."""
    return max((int(m.group(1)) for m in _BATCH.finditer(log_text)), default=-1)


def _probe_empty_batches(bootstrap: str, topic: str, probes: int, gap_s: float) -> None:
    """Send ``probes`` single records, ``gap_s`` apart, each with event time = now.

    Each one is a micro-batch of one record that moves the watermark, then an empty micro-batch
    that closes what the watermark passed.
    """
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(probes):
        now = int(time.time() * 1000)
        producer.produce(topic, key=b"probe", timestamp=now,
                         value=f'{{"key":"probe-{i}","ts":{now},"value":1.0}}'.encode())
        producer.flush(30)
        time.sleep(gap_s)


def _line(f: dict[str, Any]) -> str:
    fr, fv = f["first_result_ms"], f["final_value_ms"]
    return (f"{f['system']:>7}  first result p50/p95/p99 {fr['p50']}/{fr['p95']}/{fr['p99']} ms"
            f"  final value p50/p95/p99 {fv['p50']}/{fv['p95']}/{fv['p99']} ms"
            f"  batch p50 {f['batch_ms_p50']} ms  empty batch p50 {f['empty_batch_ms_p50']} ms "
            f"({f['empty_batches']})  lag {f['lag_at_end_of_feed']}  windows "
            f"{f['with_result']}/{f['windows']}"
            + (f"  broker CPU {f['broker_cpu_s']} s ({f['broker_cpu_s_per_min_fed']} s a minute "
               "fed)" if "broker_cpu_s" in f else "")
            + "\n         JVM CPU s a minute fed: " + ", ".join(
                f"{group} {seconds}" for group, seconds in f["jvm_cpu_s_per_min_fed"].items())
            + "".join(f"\n         batch p50 {k} {v} ms"
                      for k, v in f.get("batch_parts_ms_p50", {}).items()))


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns 0 when every system ran."""
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=1000.0, help="input records/s")
    ap.add_argument("--minutes", type=float, default=2.0, help="how long to feed")
    ap.add_argument("--systems", nargs="+", default=["revise", "native"],
                    choices=["revise", "revise-every-batch", "native"])
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--window", default="tumbling:10s")
    ap.add_argument("--grace-ms", type=int, default=5000)
    ap.add_argument("--disorder-ms", type=int, default=2000)
    ap.add_argument("--idle-s", type=float, default=20.0, help="idle run after feeding")
    ap.add_argument("--warmup-s", type=float, default=0.0,
                    help="feed this long before the measured --minutes; windows whose first "
                    "record went out then are not counted (the first batches with rows start "
                    "Spark's Python workers)")
    ap.add_argument("--empty-probes", type=int, default=8,
                    help="single records sent after the idle run, each followed by an empty "
                         "micro-batch (samples of its cost)")
    ap.add_argument("--probe-gap-s", type=float, default=2.0,
                    help="seconds between those records")
    ap.add_argument("--bootstrap-servers")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--shuffle-partitions", type=int,
                    help="revise run --shuffle-partitions (stateful tasks per batch)")
    ap.add_argument("--shards", type=int,
                    help="revise run --shards (Python calls per batch, over the tasks)")
    ap.add_argument("--trigger-ms", type=int,
                    help="micro-batch interval of both systems (default: revise's own, "
                         f"{DEFAULT_TRIGGER_MS} ms)")
    ap.add_argument("--stages", action="store_true",
                    help="log each system's Spark events and print its micro-batches' time "
                         "stage by stage (benchmarks.stage_times)")
    ap.add_argument("--native-child", nargs=7, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.native_child:
        b, i, o, ck, window, grace, trigger = args.native_child
        native(b, i, o, ck, window, int(grace), int(trigger))
        return 0
    use_repo_pythonpath()
    root = Path(tempfile.mkdtemp(prefix="revise-latency-"))
    try:
        return _measure(args, root)
    finally:  # the broker's log, the jobs' checkpoints and tables: 60-200 MB a run
        shutil.rmtree(root, ignore_errors=True)


def _measure(args: argparse.Namespace, root: Path) -> int:
    from revise.infra import broker

    trigger = (f"default ({DEFAULT_TRIGGER_MS}ms)" if args.trigger_ms is None
               else f"{args.trigger_ms}ms")
    results = []
    with broker.given_or_embedded(args.bootstrap_servers, root / "broker") as bootstrap:
        print(f"latency: rate={args.rate:.0f}/s minutes={args.minutes} window={args.window} "
              f"grace={args.grace_ms}ms trigger={trigger} "
              f"load={os.getloadavg()[0]:.1f}", flush=True)
        for system in args.systems:
            events = root / f"events-{system}"
            if args.stages:  # the job's driver reads it at start; the feeder and probes ignore it
                os.environ["SPARK_CONF_DIR"] = str(conf_dir(root / f"conf-{system}", events))
            results.append(_one(system, args, bootstrap, root))
            print(_line(results[-1]), flush=True)
            if args.stages:
                shapes = summarize(read_events(events))
                results[-1]["stages"] = [dataclasses.asdict(s) for s in shapes]
                for shape in shapes[:3]:
                    print(f"         {shape.line()}", flush=True)
    print(f"load at the end: {os.getloadavg()[0]:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
