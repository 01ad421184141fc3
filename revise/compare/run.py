"""Running both modes on the same input and computing the figures (see :mod:`revise.compare`)."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from revise.compare.config import MODES, CompareConfig
from revise.compare.metrics import (
    accuracy_fields,
    accuracy_over_time,
    anchor_initial_watermark,
    percentiles,
    revisions_per_window,
    volume,
    wallclock_latency,
    window_summary,
)
from revise.compare.report import write
from revise.compare.results import Comparison, ModeReport
from revise.compare.sweep import recommend, run_sweep, sweep_settings
from revise.compare.whatif import grace_what_if, replay_batches
from revise.config import WindowSpec
from revise.errors import ReviseError
from revise.generate import EventStream
from revise.kafka import KafkaSettings
from revise.query.local import read_table
from revise.vocab import MAX_TS_MS, WINDOW_BOUNDS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from revise.jobconfig import JobConfig

__all__ = ["CompareError", "batch_of_records", "offset_ranges", "run_compare"]


class CompareError(ReviseError, RuntimeError):
    """A comparison run produced outputs that contradict the guarantees (or failed)."""


# Longer than ~60 lines: the four numbered steps of the module docstring, in order.
def run_compare(
    cfg: CompareConfig,
    *,
    spark: SparkSession | None = None,
    echo: Callable[[str], None] = print,
) -> Comparison:
    """Run both modes on the same input, compute the figures and write them out.

    Args:
        cfg: What to run.
        spark: Session to use (the project's session when None).
        echo: Where progress lines go.

    Returns:
        The :class:`Comparison` (also written to ``cfg.output`` and ``<delta>/comparisons``).
    """
    from revise.generate import generate, produce
    from revise.jobconfig import (
        DeltaOutput,
        InputFields,
        JobConfig,
        KafkaIO,
        SparkTuning,
        parse_ts_format,
    )
    from revise.spark.driver import run_job
    from revise.spark.session import spark_session

    out = Path(cfg.output).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    spark = spark or spark_session("revise-compare")

    # 1. input
    source_topic = cfg.input_topic
    stream: EventStream | None = None
    if cfg.generator is not None:
        source_topic = f"compare-input-{cfg.run_id}"
        stream = generate(cfg.generator)
        if cfg.rate is None:
            produce(stream, bootstrap_servers=cfg.bootstrap_servers, topic=source_topic,
                    kafka=cfg.kafka)
            echo(f"generated {len(stream)} records into {source_topic}")
    else:
        stream = _stream_of_topic(cfg.kafka_settings, str(source_topic)) if cfg.rate else None
    assert source_topic is not None

    # 2. one run per mode
    topics: dict[str, str] = {}
    seconds: dict[str, float] = {}
    progress: dict[str, list[dict[str, Any]]] = {}
    jobs: dict[str, JobConfig] = {}
    for mode in MODES:
        # watermark mode emits one FINAL per window: nothing for an emit policy to thin
        base = cfg.engine if mode == "revision" else replace(
            cfg.engine, emit_min_change=None, emit_every_ms=None)
        engine = replace(base, mode=mode, query_id=cfg.query_id(mode))
        topic = source_topic if cfg.rate is None else f"compare-input-{cfg.run_id}-{mode}"
        topics[mode] = topic
        job = JobConfig(
            kafka=KafkaIO(bootstrap_servers=cfg.bootstrap_servers, input_topic=topic,
                          changelog_topic=f"compare-{cfg.run_id}-{mode}-changelog",
                          settings=cfg.kafka),
            delta=DeltaOutput(path=f"{cfg.delta_path}/{mode}"),
            checkpoint=str(out / "checkpoints" / mode), engine=engine, once=cfg.rate is None,
            spark=SparkTuning(max_records_per_batch=cfg.max_records_per_batch,
                              shards=cfg.shards, trigger_ms=cfg.trigger_ms),
            input=InputFields(key_field=cfg.key_field, ts_field=cfg.ts_field,
                              ts_format=parse_ts_format(cfg.ts_format),
                              value_field=cfg.value_field),
        )
        jobs[mode] = job
        t0 = time.monotonic()
        if cfg.rate is None:
            echo(f"{mode} mode: bounded run of {topic} (query {engine.query_id})")
            progress[mode] = []
            run_job(job, spark=spark, timeout_s=cfg.timeout_s,
                    on_progress=_collect_offset_ranges(progress[mode]))
        else:
            assert stream is not None
            echo(f"{mode} mode: replaying {len(stream)} records at {cfg.rate:g}/s into {topic} "
                 f"while the job runs (query {engine.query_id})")
            progress[mode] = _run_at_rate(job, stream, cfg.rate, spark=spark,
                                          timeout_s=cfg.timeout_s, run_job=run_job,
                                          produce=produce)
        seconds[mode] = time.monotonic() - t0
        echo(f"{mode} mode: done in {seconds[mode]:.0f}s")

    # 3. gather and compute
    arrivals: dict[str, pd.DataFrame] = {
        mode: _arrivals(cfg.kafka_settings, topics[mode]) if cfg.default_fields
        else _arrivals_parsed(spark, jobs[mode]) for mode in MODES}
    comparison = _compute(cfg, topics, arrivals, seconds, progress, out)

    # 4. write
    write(comparison)
    return comparison


def _stream_of_topic(kafka: KafkaSettings, topic: str) -> EventStream:
    """The records of an existing topic as an :class:`EventStream` (payloads and keys only)."""
    from sinks.kafka import read_committed

    msgs = sorted(read_committed(str(kafka.bootstrap_servers), topic, timeout_s=120,
                                 client_config=kafka.consumer_conf()),
                  key=lambda m: ((m.timestamp() or (0, 0))[1], m.partition() or 0,
                                 m.offset() or 0))
    keys = np.array([(m.key() or b"").decode(errors="replace") for m in msgs], dtype=object)
    n = len(msgs)
    return EventStream(keys, np.zeros(n, np.int64), np.zeros(n), np.zeros(n, np.int8),
                       [m.value() or b"" for m in msgs])


# Longer than ~60 lines: one straight sequence (threads, then the runs); see the docstring.
def _run_at_rate(
    job: JobConfig,
    stream: EventStream,
    rate: float,
    *,
    spark: SparkSession,
    timeout_s: float | None,
    run_job: Callable[..., Any],
    produce: Callable[..., int],
) -> list[dict[str, Any]]:
    """Produce ``stream`` at ``rate`` while ``job`` runs unbounded; then close it bounded.

    Returns:
        The offset ranges (:func:`offset_ranges`) of both runs' micro-batches.
    """
    stop = threading.Event()
    running = threading.Event()
    produced = threading.Event()
    consumed = [0]
    errors: list[BaseException] = []

    def producer() -> None:
        # Start the replay once the query has run its first (empty) micro-batch, so the job's
        # start-up is not counted as latency (the job runs a micro-batch every trigger).
        running.wait(timeout=300)
        running.set()
        try:
            produce(stream, bootstrap_servers=job.kafka.bootstrap_servers,
                    topic=job.kafka.input_topic, rate=rate, kafka=job.kafka.settings)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            stop.set()
        finally:
            produced.set()

    ranges: list[dict[str, Any]] = []

    def on_progress(p: dict[str, Any]) -> None:
        consumed[0] += int(p.get("numInputRows") or 0)
        ranges.append(offset_ranges(p))
        running.set()

    def watcher() -> None:
        while not stop.is_set():
            if running.is_set() and produced.is_set() and consumed[0] >= len(stream):
                stop.set()
            time.sleep(0.2)

    # The topic must exist before the job subscribes to it.
    produce(EventStream(stream.keys[:0], stream.ts_ms[:0], stream.values[:0], stream.kind[:0],
                        []), bootstrap_servers=job.kafka.bootstrap_servers,
            topic=job.kafka.input_topic, kafka=job.kafka.settings)
    threads = [threading.Thread(target=producer, daemon=True),
               threading.Thread(target=watcher, daemon=True)]
    for t in threads:
        t.start()
    try:
        run_job(job, spark=spark, stop_event=stop, on_progress=on_progress,
                        timeout_s=timeout_s)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    if errors:
        raise errors[0]
    run_job(replace(job, once=True), spark=spark, timeout_s=timeout_s,
            on_progress=_collect_offset_ranges(ranges))
    return ranges


def _arrivals(kafka: KafkaSettings, topic: str) -> pd.DataFrame:
    """Well-formed input records with their Kafka timestamps, in arrival order."""
    import orjson

    from sinks.kafka import read_committed

    rows: list[tuple[str, int, float, int, int, int]] = []
    total = 0
    for m in read_committed(str(kafka.bootstrap_servers), topic, timeout_s=120,
                            client_config=kafka.consumer_conf()):
        total += 1
        try:
            obj = orjson.loads(m.value() or b"")
        except orjson.JSONDecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        k, ts, v = obj.get("key"), obj.get("ts"), obj.get("value", 0.0)
        if (not isinstance(k, str) or isinstance(ts, bool) or not isinstance(ts, int)
                or not 0 <= ts < MAX_TS_MS or isinstance(v, bool)
                or not isinstance(v, int | float)):
            continue
        rows.append((k, ts, float(v), m.partition() or 0, m.offset() or 0,
                     (m.timestamp() or (0, 0))[1]))
    frame = pd.DataFrame(rows, columns=["key", "ts_ms", "value", "partition", "offset",
                                        "arrival_ms"])
    frame = frame.sort_values(["arrival_ms", "partition", "offset"], kind="stable")
    frame.attrs["total_records"] = total
    return frame.reset_index(drop=True)


def _arrivals_parsed(spark: SparkSession, job: JobConfig) -> pd.DataFrame:
    """:func:`_arrivals` of input in other fields (dotted paths, grouped keys, time formats).

    The topic is read once by Spark and classified by the job's own parser
    (``revise.spark.stream.parsed_input``), so a record is well-formed here exactly when the job
    accepted it, with the same key text and event time (``@timestamp`` included). ``value`` is
    the first numeric aggregated field (0.0 when none).
    """
    from pyspark.sql import functions as F

    from revise.spark.stream import input_columns, kafka_input, parsed_input

    # Cached: both frames below come from one read of the topic.
    raw = (kafka_input(spark.read, job).option("startingOffsets", "earliest")
           .option("endingOffsets", "latest").load().persist())
    numeric = [c for c, _f in input_columns(job).numeric]
    value = F.col(numeric[0]) if numeric else F.lit(0.0)
    try:
        good: pd.DataFrame = (
            parsed_input(raw, job).where(F.col("reason").isNull())
            .select("key", "ts_ms", value.cast("double").alias("value"), "partition", "offset")
            .toPandas())
        times: pd.DataFrame = raw.select("partition", "offset",
                                         F.unix_millis("timestamp").alias("arrival_ms")).toPandas()
    finally:
        raw.unpersist()
    frame = good.merge(times, on=["partition", "offset"], how="left")
    frame = frame.sort_values(["arrival_ms", "partition", "offset"], kind="stable")
    frame.attrs["total_records"] = len(times)
    return frame.reset_index(drop=True)


def _offsets(raw: Any, topic: str) -> dict[int, int] | None:
    """``{partition: offset}`` of ``topic`` in a progress report's start/end offset."""
    if raw is None:
        return None
    obj = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(obj, dict) or topic not in obj:
        return None
    return {int(p): int(o) for p, o in obj[topic].items()}


def batch_of_records(arrivals: pd.DataFrame, progress: Sequence[dict[str, Any]],
                     topic: str) -> pd.Series:
    """The micro-batch id that read each input record, from Spark's progress reports.

    A batch read ``[startOffset, endOffset)`` of every partition of ``topic``; records outside
    every reported range (not expected) get the id after the last one.
    """
    batch = np.full(len(arrivals), -1, dtype=np.int64)
    part = arrivals["partition"].to_numpy()
    off = arrivals["offset"].to_numpy()
    last = -1
    for p in progress:
        bid = int(p.get("batchId", -1))
        for src in p.get("sources") or []:
            end = _offsets(src.get("endOffset"), topic)
            if end is None:
                continue
            start = _offsets(src.get("startOffset"), topic) or {}
            for partition, hi in end.items():
                lo = start.get(partition, 0)
                if hi > lo:
                    batch[(part == partition) & (off >= lo) & (off < hi)] = bid
                    last = max(last, bid)
    batch[batch < 0] = last + 1
    return pd.Series(batch, index=arrivals.index, name="batch")


def _collect_offset_ranges(into: list[dict[str, Any]]) -> Callable[[dict[str, Any]], None]:
    """A progress callback appending each report's :func:`offset_ranges` to ``into``."""
    return lambda p: into.append(offset_ranges(p))


def offset_ranges(progress: dict[str, Any]) -> dict[str, Any]:
    """What :func:`batch_of_records` needs of a Spark progress report: id and offset ranges.

    Keeping only this (not the whole report, with its metrics and durations) keeps a
    comparison's memory small however many micro-batches its runs take.
    """
    return {
        "batchId": progress.get("batchId"),
        "sources": [{"startOffset": src.get("startOffset"), "endOffset": src.get("endOffset")}
                    for src in progress.get("sources") or []],
    }


def _changelog_bytes(kafka: KafkaSettings, topic: str) -> tuple[int, int]:
    """(messages, key + value bytes) of the committed changelog."""
    from sinks.kafka import read_committed

    msgs = read_committed(str(kafka.bootstrap_servers), topic, timeout_s=120,
                          client_config=kafka.consumer_conf())
    return len(msgs), sum(len(m.key() or b"") + len(m.value() or b"") for m in msgs)


def _grid(summaries: Sequence[pd.DataFrame], window: WindowSpec, grace_ms: int) -> list[int]:
    """Offsets from the window end for the accuracy curves: ~60 steps covering every revision."""
    lows = [int(s["first_latency_ms"].min()) for s in summaries if len(s)]
    highs = [int(s["final_latency_ms"].max()) for s in summaries if len(s)]
    span = window.size_ms or window.gap_ms
    lo = min([-span, *lows])
    hi = max([grace_ms, *highs])
    step = max(1, math.ceil((hi - lo) / 60))
    grid = set(range(lo, hi + step, step)) | {0, grace_ms}
    return sorted(grid)


# Longer than ~60 lines: read both modes, then one report per mode, then the what-if.
def _compute(
    cfg: CompareConfig, topics: dict[str, str], arrivals: dict[str, pd.DataFrame],
    seconds: dict[str, float],
    progress: dict[str, list[dict[str, Any]]], out: Path,
) -> Comparison:
    revisions: dict[str, pd.DataFrame] = {}
    summaries: dict[str, pd.DataFrame] = {}
    lates: dict[str, pd.DataFrame] = {}
    dead: dict[str, int] = {}
    fields = accuracy_fields(cfg.engine.aggs)
    for mode in MODES:
        root = f"{cfg.delta_path}/{mode}"
        qid = cfg.query_id(mode)
        # delta-rs, in-process: the same frames Spark's reader gives, without its round trip.
        revisions[mode] = read_table(f"{root}/revisions", query_id=qid)
        lates[mode] = read_table(f"{root}/late", query_id=qid)
        dead[mode] = len(read_table(f"{root}/dead_letter", query_id=qid))
        real = revisions[mode]["watermark_ms"]
        real = real[real > 0]
        if len(real):
            revisions[mode] = anchor_initial_watermark(revisions[mode], int(real.min()))
        summaries[mode] = window_summary(revisions[mode], fields)
    span = cfg.engine.window.gap_ms if cfg.engine.window.kind == "session" else 0
    grid = _grid(list(summaries.values()), cfg.engine.window, cfg.engine.grace_ms)
    reports: dict[str, ModeReport] = {}
    accuracy: dict[str, pd.DataFrame] = {}
    frames: list[pd.DataFrame] = []
    for mode in MODES:
        s = summaries[mode]
        if cfg.rate is not None:
            wall = wallclock_latency(s, arrivals[mode], lates[mode], record_span_ms=span)
            s = s.merge(wall, on=list(WINDOW_BOUNDS), how="left")
        else:
            s = s.assign(first_wall_ms=np.nan, final_wall_ms=np.nan)
        n_msgs, n_bytes = _changelog_bytes(cfg.kafka_settings,
                                           f"compare-{cfg.run_id}-{mode}-changelog")
        reports[mode] = ModeReport(
            mode=mode, query_id=cfg.query_id(mode),
            volume=volume(revisions[mode],
                          input_records=int(arrivals[mode].attrs.get("total_records", 0)),
                          changelog_bytes=n_bytes),
            first_event=percentiles(s["first_latency_ms"]),
            final_value_event=percentiles(s["final_value_latency_ms"]),
            final_event=percentiles(s["final_latency_ms"]),
            first_wall=percentiles(s["first_wall_ms"]),
            final_value_wall=percentiles(s["final_wall_ms"]),
            revisions_histogram=revisions_per_window(s),
            too_late=len(lates[mode]), dead_letters=dead[mode], job_seconds=seconds[mode],
        )
        if n_msgs != len(revisions[mode]):
            msg = (f"{mode} run: {n_msgs} changelog messages but {len(revisions[mode])} Delta "
                   "revisions; the exactly-once guarantee did not hold")
            raise CompareError(msg)
        accuracy[mode] = accuracy_over_time(revisions[mode], grid, fields)
        frames.append(s.assign(mode=mode))
    first = arrivals[MODES[0]]
    first = first.assign(batch=batch_of_records(first, progress[MODES[0]], topics[MODES[0]]))
    batches = replay_batches(first)
    grace = grace_what_if(
        cfg.engine, batches,
        factors=cfg.grace_factors,
        reference_finals=summaries[MODES[0]] if "count" in fields else None,
    )
    sweep = (run_sweep(cfg.engine, batches, sweep_settings(cfg.engine, cfg.sweep))
             if cfg.sweep is not None else [])
    recommended, recommendation = (recommend(sweep, cfg.target_accuracy) if sweep
                                   else (None, None))
    e = cfg.engine
    settings: dict[str, object] = {
        "window": str(e.window), "grace_ms": e.grace_ms, "watermark_delay_ms":
        e.watermark_delay_ms, "aggs": list(e.aggs.columns), "accuracy_fields": list(fields),
        "emit_min_change": e.emit_min_change, "emit_every_ms": e.emit_every_ms,
        "max_records_per_batch":
        cfg.max_records_per_batch, "rate": cfg.rate, "trigger_ms": cfg.trigger_ms,
        "input_topics": topics, "generator": None if cfg.generator is None else {
            f: getattr(cfg.generator, f) for f in cfg.generator.__dataclass_fields__},
        "delta_paths": {m: f"{cfg.delta_path}/{m}" for m in MODES},
        "wall_clock_measured": cfg.rate is not None,
    }
    windows = pd.concat(frames, ignore_index=True)
    windows = windows[["mode", *[c for c in windows.columns if c != "mode"]]]
    return Comparison(cfg.run_id, settings, reports, windows, accuracy, grace, out,
                      cfg.delta_path, e.grace_ms, cfg.rate is not None, fields,
                      tuple(sweep), recommended, recommendation)
