"""``revise compare``: revision mode against watermark mode on the same input.

What it does, in order:

1. Input: an existing ``--input-topic``, or a seeded stream it generates (``--events``,
   ``--keys``, ``--seed``, ``--disorder``, ``--late-fraction``, ``--late-by``,
   ``--bad-fraction``) into a fresh topic.
2. Runs the streaming job twice in one Spark session, one mode after the other, with the same
   window, grace, watermark delay, aggregates and ``--max-records-per-batch``; each run has its
   own query id (``compare-<run>-<mode>``), checkpoint, changelog topic and Delta root
   (``<delta-path>/<mode>``, so ``revise query --delta-path <delta-path>/revision`` works).
   Without ``--rate`` each run is bounded (``--once``): it reads the whole topic, then closes
   every window.
   With ``--rate R`` the input is replayed into a fresh topic per mode at R records/s *while*
   that mode's job runs unbounded (starting after its first micro-batch, so the job's start-up
   is not counted); once the job has read everything, it is stopped and restarted
   bounded on the same checkpoint to close the remaining windows.
3. Reads both runs' Delta ``revisions``/``late``/``dead_letter`` tables, the committed changelog
   (for the bytes written) and the input topic (for the records' Kafka timestamps), and
   computes the figures of :mod:`revise.compare_metrics` per window and in total.
4. Prints a side-by-side table; writes ``comparison.json``, ``windows.csv`` and three PNG plots
   (``latency_cdf.png``, ``accuracy_over_time.png``, ``revisions_per_window.png``) into
   ``--output``, and appends the totals to the Delta table ``<delta-path>/comparisons``
   (one row per ``run_id, mode, section, metric, value``).

How latency is measured:

- *Event time*: ``watermark_ms - window_end_ms`` of the revision (see
  :mod:`revise.compare_metrics`); deterministic for a given split into micro-batches. The
  first micro-batch runs before any watermark exists (watermark 0); its revisions are placed at
  the run's first real watermark (conservative: they came no later than that). Placing them at
  the earliest event time instead would let one very late record make them look minutes early.
- *Wall clock* (only with ``--rate``, else reported as not measured): from a record's Kafka
  timestamp (its arrival, stamped by the producer) to the revision's ``emitted_at_ms`` (stamped
  just before the micro-batch's Kafka transaction commits). First result: from the window's
  first accepted record; final value: from its last accepted record. It includes the
  micro-batch trigger interval (``--trigger``, 1 s by default for an unbounded run). The FINALs
  of windows still open when the replay ends are emitted by the bounded restart, so the tail
  of the final-value distribution includes that restart. With ``--rate`` the split into
  micro-batches depends on timing, so the two modes see the same records but not necessarily
  the same batches (their too-late counts can differ); without it both runs get the same split.

Trace (tumbling 10 s, grace 5 s): a window ``[0,10000)`` gets revision 0 at watermark 4000
(first result at −6 s in revision mode), its last late record at watermark 11000 (final value
at +1 s), and its FINAL at watermark 15000 (+5 s); watermark mode emits only that FINAL (+5 s).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from revise.cli_args import duration_type, maybe_duration, maybe_float, maybe_int
from revise.compare_metrics import (
    GraceOutcome,
    Percentiles,
    Volume,
    accuracy_over_time,
    anchor_initial_watermark,
    grace_what_if,
    percentiles,
    revisions_per_window,
    volume,
    wallclock_latency,
    window_summary,
)
from revise.config import (
    EngineConfig,
    WindowSpec,
    format_duration,
    parse_aggs,
)
from revise.errors import ConfigError
from revise.generate import EventStream, GeneratorConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "MODES",
    "CompareConfig",
    "Comparison",
    "ModeReport",
    "add_parser",
    "cmd_compare",
    "format_table",
    "run_compare",
]

MODES: tuple[str, str] = ("revision", "watermark")
PLOTS: tuple[str, ...] = ("latency_cdf.png", "accuracy_over_time.png", "revisions_per_window.png")
_MAX_TS = 2**53


# --------------------------------------------------------------------------- config


@dataclass(frozen=True, slots=True)
class CompareConfig:
    """What ``revise compare`` runs.

    Attributes:
        bootstrap_servers: Kafka bootstrap servers.
        output: Folder for the JSON, CSV and PNG files (created).
        delta_path: Delta root; each mode writes under ``<delta_path>/<mode>``, the figures go
            to ``<delta_path>/comparisons``.
        engine: Window, grace, watermark delay and aggregates (mode and query id are set per run).
        input_topic: An existing topic to read; None → generate ``generator`` into a new one.
        generator: The stream to generate when there is no input topic.
        max_records_per_batch: Records per micro-batch, the same for both runs.
        rate: Replay the input at this many records/s while each job runs (wall-clock latency).
        trigger_ms: Micro-batch interval of the rate-driven runs (None: the job's default).
        shards: Key shards of both jobs.
        grace_factors: Grace multipliers of the offline what-if.
        run_id: Names topics, query ids and checkpoints; unique per call by default.
        timeout_s: Give up a job after this long (None: no limit).
    """

    bootstrap_servers: str
    output: str
    delta_path: str
    engine: EngineConfig
    input_topic: str | None = None
    generator: GeneratorConfig | None = None
    max_records_per_batch: int = 1000
    rate: float | None = None
    trigger_ms: int | None = None
    shards: int = 4
    grace_factors: tuple[float, ...] = (1.0, 2.0, 4.0)
    run_id: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S") + "-"
                        + uuid.uuid4().hex[:6])
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if (self.input_topic is None) == (self.generator is None):
            msg = "give --input-topic to compare on an existing topic, or --events to generate one"
            raise ConfigError(msg)
        if self.max_records_per_batch < 1:
            msg = f"--max-records-per-batch must be >= 1, got {self.max_records_per_batch}"
            raise ConfigError(msg)
        if self.rate is not None and not self.rate > 0:
            msg = f"--rate must be > 0 records per second, got {self.rate}"
            raise ConfigError(msg)
        if not self.grace_factors or any(f <= 0 for f in self.grace_factors):
            msg = f"grace factors must be > 0, got {self.grace_factors}"
            raise ConfigError(msg)

    def query_id(self, mode: str) -> str:
        """The query id of one mode's run."""
        return f"compare-{self.run_id}-{mode}"


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class ModeReport:
    """The figures of one mode (times in ms)."""

    mode: str
    query_id: str
    volume: Volume
    first_event: Percentiles
    final_value_event: Percentiles
    final_event: Percentiles
    first_wall: Percentiles
    final_value_wall: Percentiles
    revisions_histogram: dict[int, int]
    too_late: int
    dead_letters: int
    job_seconds: float

    def to_dict(self) -> dict[str, object]:
        """JSON-ready plain values."""
        return {
            "mode": self.mode,
            "query_id": self.query_id,
            "volume": self.volume.to_dict(),
            "latency_event_ms": {
                "first_result": self.first_event.to_dict(),
                "final_value": self.final_value_event.to_dict(),
                "final_revision": self.final_event.to_dict(),
            },
            "latency_wall_ms": {
                "first_result": self.first_wall.to_dict(),
                "final_value": self.final_value_wall.to_dict(),
            },
            "revisions_per_window": {str(k): v for k, v in self.revisions_histogram.items()},
            "too_late_records": self.too_late,
            "dead_letters": self.dead_letters,
            "job_seconds": self.job_seconds,
        }


@dataclass(frozen=True, slots=True)
class Comparison:
    """Everything ``revise compare`` measured, and where it wrote it."""

    run_id: str
    settings: dict[str, object]
    modes: dict[str, ModeReport]
    windows: pd.DataFrame
    accuracy: dict[str, pd.DataFrame]
    grace: list[GraceOutcome]
    output: Path
    delta_path: str
    grace_ms: int
    wall_clock: bool

    @property
    def json_path(self) -> Path:
        """``<output>/comparison.json``."""
        return self.output / "comparison.json"

    @property
    def plot_paths(self) -> list[Path]:
        """The PNG files."""
        return [self.output / p for p in PLOTS]

    def to_dict(self) -> dict[str, object]:
        """The JSON document (per-window rows included)."""
        return {
            "run_id": self.run_id,
            "settings": self.settings,
            "modes": {m: r.to_dict() for m, r in self.modes.items()},
            "accuracy_over_time": {
                m: _records(a) for m, a in self.accuracy.items()
            },
            "grace_what_if": [g.to_dict() for g in self.grace],
            "windows": _records(self.windows),
            "files": {"json": str(self.json_path), "plots": [str(p) for p in self.plot_paths],
                      "windows_csv": str(self.output / "windows.csv"),
                      "comparisons_table": f"{self.delta_path}/comparisons"},
        }

    def metric_rows(self) -> pd.DataFrame:
        """Long-format totals for the ``comparisons`` Delta table."""
        rows: list[tuple[str, str, str, float | None]] = []

        def add(mode: str, section: str, metric: str, value: float | int | None) -> None:
            v = None if value is None or (isinstance(value, float) and math.isnan(value)) \
                else float(value)
            rows.append((mode, section, metric, v))

        for m, r in self.modes.items():
            for k, v in r.volume.to_dict().items():
                add(m, "volume", k, v)
            for name, p in (("first_result", r.first_event), ("final_value",
                            r.final_value_event), ("final_revision", r.final_event)):
                for q in ("p50", "p95", "p99", "mean"):
                    add(m, "latency_event_ms", f"{name}_{q}", getattr(p, q))
            for name, p in (("first_result", r.first_wall), ("final_value", r.final_value_wall)):
                for q in ("p50", "p95", "p99", "mean"):
                    add(m, "latency_wall_ms", f"{name}_{q}", getattr(p, q))
            add(m, "completeness", "too_late_records", r.too_late)
            add(m, "completeness", "dead_letters", r.dead_letters)
            acc = self.accuracy[m]
            for d, label in ((0, "at_window_end"), (self.grace_ms, "at_end_plus_grace")):
                row = _at(acc, d)
                if row is not None:
                    add(m, "accuracy", f"share_exact_{label}", row["share_exact"])
                    add(m, "accuracy", f"rel_err_count_{label}", row["rel_err_count"])
        for g in self.grace:
            add("both", "grace_what_if", f"too_late_at_grace_x{g.factor:g}", g.too_late)
            add("both", "grace_what_if", f"finals_changed_at_grace_x{g.factor:g}",
                g.finals_changed)
        frame = pd.DataFrame(rows, columns=["mode", "section", "metric", "value"])
        frame.insert(0, "run_id", self.run_id)
        frame.insert(1, "created_at_ms", int(time.time() * 1000))
        return frame


def _records(frame: pd.DataFrame) -> list[dict[str, object]]:
    out: list[dict[str, object]] = json.loads(frame.to_json(orient="records") or "[]")
    return out


def _at(acc: pd.DataFrame, d: int) -> pd.Series | None:
    """The accuracy row of the largest grid point <= d."""
    sel = acc[acc["since_end_ms"] <= d]
    return None if sel.empty else sel.iloc[-1]


# --------------------------------------------------------------------------- the run


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
    from revise.jobconfig import JobConfig
    from revise.spark.job import run_job
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
            produce(stream, bootstrap_servers=cfg.bootstrap_servers, topic=source_topic)
            echo(f"generated {len(stream)} records into {source_topic}")
    else:
        stream = _stream_of_topic(cfg.bootstrap_servers, str(source_topic)) if cfg.rate else None
    assert source_topic is not None

    # 2. one run per mode
    topics: dict[str, str] = {}
    seconds: dict[str, float] = {}
    progress: dict[str, list[dict[str, Any]]] = {}
    for mode in MODES:
        engine = EngineConfig(window=cfg.engine.window, grace_ms=cfg.engine.grace_ms,
                              watermark_delay_ms=cfg.engine.watermark_delay_ms,
                              aggs=cfg.engine.aggs, mode=mode,  # type: ignore[arg-type]
                              query_id=cfg.query_id(mode))
        topic = source_topic if cfg.rate is None else f"compare-input-{cfg.run_id}-{mode}"
        topics[mode] = topic
        job = JobConfig(
            bootstrap_servers=cfg.bootstrap_servers, input_topic=topic,
            changelog_topic=f"compare-{cfg.run_id}-{mode}-changelog",
            delta_path=f"{cfg.delta_path}/{mode}",
            checkpoint=str(out / "checkpoints" / mode), engine=engine, once=cfg.rate is None,
            max_records_per_batch=cfg.max_records_per_batch, shards=cfg.shards,
            trigger_ms=cfg.trigger_ms,
        )
        t0 = time.monotonic()
        if cfg.rate is None:
            echo(f"{mode} mode: bounded run of {topic} (query {engine.query_id})")
            progress[mode] = run_job(job, spark=spark, timeout_s=cfg.timeout_s).progress
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
    comparison = _compute(cfg, spark, topics, seconds, progress, out)

    # 4. write
    _write(comparison, spark)
    return comparison


def _stream_of_topic(bootstrap: str, topic: str) -> EventStream:
    """The records of an existing topic as an :class:`EventStream` (payloads and keys only)."""
    from sinks.kafka_changelog import read_committed

    msgs = sorted(read_committed(bootstrap, topic, timeout_s=120),
                  key=lambda m: ((m.timestamp() or (0, 0))[1], m.partition() or 0,
                                 m.offset() or 0))
    keys = np.array([(m.key() or b"").decode(errors="replace") for m in msgs], dtype=object)
    n = len(msgs)
    return EventStream(keys, np.zeros(n, np.int64), np.zeros(n), np.zeros(n, np.int8),
                       [m.value() or b"" for m in msgs])


def _run_at_rate(
    job: Any,
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
        The Spark progress reports of both runs.
    """
    from dataclasses import replace

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
            produce(stream, bootstrap_servers=job.bootstrap_servers, topic=job.input_topic,
                    rate=rate)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            stop.set()
        finally:
            produced.set()

    def on_progress(p: dict[str, Any]) -> None:
        consumed[0] += int(p.get("numInputRows") or 0)
        running.set()

    def watcher() -> None:
        while not stop.is_set():
            if running.is_set() and produced.is_set() and consumed[0] >= len(stream):
                stop.set()
            time.sleep(0.2)

    # The topic must exist before the job subscribes to it.
    produce(EventStream(stream.keys[:0], stream.ts_ms[:0], stream.values[:0], stream.kind[:0],
                        []), bootstrap_servers=job.bootstrap_servers, topic=job.input_topic)
    threads = [threading.Thread(target=producer, daemon=True),
               threading.Thread(target=watcher, daemon=True)]
    for t in threads:
        t.start()
    try:
        first = run_job(job, spark=spark, stop_event=stop, on_progress=on_progress,
                        timeout_s=timeout_s)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    if errors:
        raise errors[0]
    second = run_job(replace(job, once=True), spark=spark, timeout_s=timeout_s)
    return [*first.progress, *second.progress]


def _read_delta(spark: SparkSession, path: str) -> pd.DataFrame:
    return spark.read.format("delta").load(path).toPandas()


def _arrivals(bootstrap: str, topic: str) -> pd.DataFrame:
    """Well-formed input records with their Kafka timestamps, in arrival order."""
    import orjson

    from sinks.kafka_changelog import read_committed

    rows: list[tuple[str, int, float, int, int, int]] = []
    total = 0
    for m in read_committed(bootstrap, topic, timeout_s=120):
        total += 1
        try:
            obj = orjson.loads(m.value() or b"")
        except orjson.JSONDecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        k, ts, v = obj.get("key"), obj.get("ts"), obj.get("value", 0.0)
        if (not isinstance(k, str) or isinstance(ts, bool) or not isinstance(ts, int)
                or not 0 <= ts < _MAX_TS or isinstance(v, bool)
                or not isinstance(v, int | float)):
            continue
        rows.append((k, ts, float(v), m.partition() or 0, m.offset() or 0,
                     (m.timestamp() or (0, 0))[1]))
    frame = pd.DataFrame(rows, columns=["key", "ts_ms", "value", "partition", "offset",
                                        "arrival_ms"])
    frame = frame.sort_values(["arrival_ms", "partition", "offset"], kind="stable")
    frame.attrs["total_records"] = total
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


def _changelog_bytes(bootstrap: str, topic: str) -> tuple[int, int]:
    """(messages, key + value bytes) of the committed changelog."""
    from sinks.kafka_changelog import read_committed

    msgs = read_committed(bootstrap, topic, timeout_s=120)
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


def _compute(
    cfg: CompareConfig, spark: SparkSession, topics: dict[str, str], seconds: dict[str, float],
    progress: dict[str, list[dict[str, Any]]], out: Path,
) -> Comparison:
    revisions: dict[str, pd.DataFrame] = {}
    summaries: dict[str, pd.DataFrame] = {}
    lates: dict[str, pd.DataFrame] = {}
    dead: dict[str, int] = {}
    arrivals: dict[str, pd.DataFrame] = {}
    for mode in MODES:
        root = f"{cfg.delta_path}/{mode}"
        qid = cfg.query_id(mode)
        revs = _read_delta(spark, f"{root}/revisions")
        revisions[mode] = revs[revs["query_id"] == qid].reset_index(drop=True)
        late = _read_delta(spark, f"{root}/late")
        lates[mode] = late[late["query_id"] == qid].reset_index(drop=True)
        dl = _read_delta(spark, f"{root}/dead_letter")
        dead[mode] = int((dl["query_id"] == qid).sum())
        arrivals[mode] = _arrivals(cfg.bootstrap_servers, topics[mode])
        real = revisions[mode]["watermark_ms"]
        real = real[real > 0]
        if len(real):
            revisions[mode] = anchor_initial_watermark(revisions[mode], int(real.min()))
        summaries[mode] = window_summary(revisions[mode])
    span = cfg.engine.window.gap_ms if cfg.engine.window.kind == "session" else 0
    grid = _grid(list(summaries.values()), cfg.engine.window, cfg.engine.grace_ms)
    reports: dict[str, ModeReport] = {}
    accuracy: dict[str, pd.DataFrame] = {}
    frames: list[pd.DataFrame] = []
    for mode in MODES:
        s = summaries[mode]
        if cfg.rate is not None:
            wall = wallclock_latency(s, arrivals[mode], lates[mode], record_span_ms=span)
            s = s.merge(wall, on=["key", "window_start_ms", "window_end_ms"], how="left")
        else:
            s = s.assign(first_wall_ms=np.nan, final_wall_ms=np.nan)
        n_msgs, n_bytes = _changelog_bytes(cfg.bootstrap_servers,
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
            raise RuntimeError(msg)
        accuracy[mode] = accuracy_over_time(revisions[mode], grid)
        frames.append(s.assign(mode=mode))
    first = arrivals[MODES[0]]
    first = first.assign(batch=batch_of_records(first, progress[MODES[0]], topics[MODES[0]]))
    grace = grace_what_if(
        cfg.engine, first,
        factors=cfg.grace_factors, reference_finals=summaries[MODES[0]],
    )
    e = cfg.engine
    settings: dict[str, object] = {
        "window": str(e.window), "grace_ms": e.grace_ms, "watermark_delay_ms":
        e.watermark_delay_ms, "aggs": list(e.aggs), "max_records_per_batch":
        cfg.max_records_per_batch, "rate": cfg.rate, "trigger_ms": cfg.trigger_ms,
        "input_topics": topics, "generator": None if cfg.generator is None else {
            f: getattr(cfg.generator, f) for f in cfg.generator.__dataclass_fields__},
        "delta_paths": {m: f"{cfg.delta_path}/{m}" for m in MODES},
        "wall_clock_measured": cfg.rate is not None,
    }
    windows = pd.concat(frames, ignore_index=True)
    windows = windows[["mode", *[c for c in windows.columns if c != "mode"]]]
    return Comparison(cfg.run_id, settings, reports, windows, accuracy, grace, out,
                      cfg.delta_path, e.grace_ms, cfg.rate is not None)


# --------------------------------------------------------------------------- output


def _write(c: Comparison, spark: SparkSession) -> None:
    c.output.mkdir(parents=True, exist_ok=True)
    c.json_path.write_text(json.dumps(c.to_dict(), indent=2, allow_nan=False,
                                      default=_json_default) + "\n")
    c.windows.to_csv(c.output / "windows.csv", index=False)
    plot(c)
    rows = c.metric_rows()
    schema = ("run_id STRING, created_at_ms BIGINT, mode STRING, section STRING, "
              "metric STRING, value DOUBLE")
    (spark.createDataFrame(rows, schema=schema).write.format("delta").mode("append")
     .save(f"{c.delta_path}/comparisons"))


def _json_default(o: object) -> object:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return None if math.isnan(float(o)) else float(o)
    msg = f"not JSON serializable: {type(o).__name__}"
    raise TypeError(msg)


def plot(c: Comparison) -> list[Path]:
    """Draw the three PNGs of ``c`` into its output folder (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"revision": "tab:blue", "watermark": "tab:orange"}
    w = c.windows
    wall = c.wall_clock

    # latency CDFs
    panels = [("first_latency_ms", "first result (event time)"),
              ("final_value_latency_ms", "final value (event time)")]
    if wall:
        panels += [("first_wall_ms", "first result (wall clock)"),
                   ("final_wall_ms", "final value (wall clock)")]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (col, title) in zip(axes[0], panels, strict=True):
        for mode in MODES:
            x = np.sort(w.loc[w["mode"] == mode, col].dropna().to_numpy(dtype=float)) / 1000
            if len(x):
                ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=mode,
                        color=colors[mode])
        ax.axvline(0, color="grey", lw=0.8, ls=":")
        ax.set_title(f"latency to {title}")
        ax.set_xlabel("seconds after window end" if "event" in title
                      else "seconds after arrival in Kafka")
        ax.set_ylabel("share of windows")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(c.output / PLOTS[0], dpi=100)
    plt.close(fig)

    # accuracy over time
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    styles = {"count": "-", "sum": "--", "mean": ":"}
    grace_s = c.grace_ms / 1000
    for mode in MODES:
        acc = c.accuracy[mode]
        x = acc["since_end_ms"].to_numpy(dtype=float) / 1000
        for f, ls in styles.items():
            y = acc[f"rel_err_{f}"]
            if y.notna().any():
                ax1.plot(x, y, ls=ls, color=colors[mode], label=f"{mode}: {f}")
        ax2.plot(x, acc["share_exact"], color=colors[mode], label=f"{mode}: exact")
        ax2.plot(x, acc["share_answered"], color=colors[mode], ls=":", alpha=0.6,
                 label=f"{mode}: answered")
    for ax in (ax1, ax2):
        ax.axvline(0, color="grey", lw=0.8, ls=":")
        ax.axvline(grace_s, color="grey", lw=0.8, ls="--")
        ax.set_xlabel("seconds after window end (event time); dashed line: grace")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    ax1.set_title("mean relative error of the latest answer vs final")
    ax1.set_ylabel("relative error (no answer = 1)")
    ax2.set_title("share of windows whose latest answer is final")
    ax2.set_ylim(-0.02, 1.02)
    fig.tight_layout()
    fig.savefig(c.output / PLOTS[1], dpi=100)
    plt.close(fig)

    # revisions per window
    fig, ax = plt.subplots(figsize=(6, 4))
    hist = {m: c.modes[m].revisions_histogram for m in MODES}
    ks = sorted({k for h in hist.values() for k in h})
    xs = np.arange(len(ks))
    for i, mode in enumerate(MODES):
        ax.bar(xs + (i - 0.5) * 0.4, [hist[mode].get(k, 0) for k in ks], width=0.4,
               label=mode, color=colors[mode])
    ax.set_xticks(xs, [str(k) for k in ks])
    ax.set_xlabel("revisions per window (FINAL included)")
    ax.set_ylabel("windows")
    ax.set_title("output volume per window")
    ax.legend()
    fig.tight_layout()
    fig.savefig(c.output / PLOTS[2], dpi=100)
    plt.close(fig)
    return c.plot_paths


def _fmt_p(p: Percentiles, scale: float = 1000.0, unit: str = "s") -> str:
    if p.n == 0 or p.p50 is None or p.p95 is None or p.p99 is None:
        return "not measured"
    return f"{p.p50 / scale:.1f} / {p.p95 / scale:.1f} / {p.p99 / scale:.1f} {unit}"


def format_table(c: Comparison) -> str:
    """The side-by-side table ``revise compare`` prints."""
    r, w = c.modes["revision"], c.modes["watermark"]
    grace = c.grace_ms

    def acc(mode: str, d: int, col: str) -> str:
        row = _at(c.accuracy[mode], d)
        return "-" if row is None or pd.isna(row[col]) else f"{float(row[col]):.2f}"

    def hist_max(m: ModeReport) -> int:
        return max(m.revisions_histogram, default=0)

    lines: list[tuple[str, str, str]] = [
        ("windows closed", str(r.volume.windows), str(w.volume.windows)),
        ("input records", str(r.volume.input_records), str(w.volume.input_records)),
        ("revisions written", str(r.volume.revisions), str(w.volume.revisions)),
        ("revisions per window (mean / max)",
         f"{r.volume.revisions_per_window:.2f} / {hist_max(r)}",
         f"{w.volume.revisions_per_window:.2f} / {hist_max(w)}"),
        ("revisions per input record", f"{r.volume.revisions_per_input:.3f}",
         f"{w.volume.revisions_per_input:.3f}"),
        ("changelog bytes per input record", f"{r.volume.bytes_per_input:.1f}",
         f"{w.volume.bytes_per_input:.1f}"),
        ("first result, event time p50/p95/p99", _fmt_p(r.first_event), _fmt_p(w.first_event)),
        ("final value, event time p50/p95/p99", _fmt_p(r.final_value_event),
         _fmt_p(w.final_value_event)),
        ("FINAL revision, event time p50/p95/p99", _fmt_p(r.final_event), _fmt_p(w.final_event)),
        ("first result, wall clock p50/p95/p99", _fmt_p(r.first_wall), _fmt_p(w.first_wall)),
        ("final value, wall clock p50/p95/p99", _fmt_p(r.final_value_wall),
         _fmt_p(w.final_value_wall)),
        ("windows exact at window end", acc("revision", 0, "share_exact"),
         acc("watermark", 0, "share_exact")),
        ("count error at window end (mean)", acc("revision", 0, "rel_err_count"),
         acc("watermark", 0, "rel_err_count")),
        (f"windows exact at end + grace ({format_duration(grace)})",
         acc("revision", grace, "share_exact"), acc("watermark", grace, "share_exact")),
        ("too-late records", str(r.too_late), str(w.too_late)),
        ("dead letters", str(r.dead_letters), str(w.dead_letters)),
        ("job seconds", f"{r.job_seconds:.0f}", f"{w.job_seconds:.0f}"),
    ]
    width = max(len(a) for a, _, _ in lines)
    col = max(22, *(len(b) for _, b, _ in lines), *(len(x) for _, _, x in lines))
    out = [f"{'':<{width}}  {'revision':>{col}}  {'watermark':>{col}}",
           f"{'-' * width}  {'-' * col}  {'-' * col}"]
    out += [f"{a:<{width}}  {b:>{col}}  {x:>{col}}" for a, b, x in lines]
    out.append("")
    out.append("what a larger grace would have kept (offline re-run of the engine, both modes):")
    out.append(f"  {'grace':>8}  {'too-late records':>16}  {'finals changed':>14}  "
               f"{'FINAL latency p50':>17}")
    for g in c.grace:
        p50 = "-" if g.final_latency_p50_ms is None else f"{g.final_latency_p50_ms / 1000:.1f} s"
        out.append(f"  {format_duration(g.grace_ms):>8}  {g.too_late:>16}  "
                   f"{g.finals_changed:>14}  {p50:>17}")
    if not c.wall_clock:
        out.append("(wall-clock latency is measured only with --rate: the input must arrive "
                   "while the job runs)")
    return "\n".join(out)


# --------------------------------------------------------------------------- CLI


def add_parser(sub: Any) -> None:
    """Register ``revise compare`` on the CLI's subparsers."""
    p = sub.add_parser(
        "compare", help="run revision and watermark mode on the same input and compare",
        description="Run revision mode and watermark mode on the same input (an existing topic "
        "or a generated one), then report latency, output volume, accuracy over time and "
        "completeness side by side; figures go to OUTPUT as JSON and PNG and to the Delta "
        "table <delta-path>/comparisons.",
    )
    p.add_argument("--bootstrap-servers", help="Kafka HOST:PORT (default: the embedded broker, "
                   "started if needed)")
    p.add_argument("--input-topic", help="compare on this existing topic instead of generating")
    p.add_argument("--events", type=int, help="generate this many records (default 5000 when "
                   "no --input-topic)")
    p.add_argument("--keys", type=int, default=20, help="distinct keys of the generated input")
    p.add_argument("--seed", type=int, default=0, help="random seed of the generated input")
    p.add_argument("--disorder", default="2s", type=duration_type("--disorder"),
                   help="max event-time disorder of the generated input")
    p.add_argument("--late-fraction", type=float, default=0.05, help="share of late records")
    p.add_argument("--late-by", default="5s", type=duration_type("--late-by"),
                   help="scale of the heavy-tailed lateness")
    p.add_argument("--bad-fraction", type=float, default=0.0, help="share of malformed records")
    p.add_argument("--step", default="10ms", type=duration_type("--step"),
                   help="event-time advance per generated record")
    p.add_argument("--window", required=True, help="tumbling:SIZE | hopping:SIZE:ADVANCE | "
                   "session:GAP")
    p.add_argument("--grace", required=True, type=duration_type("--grace"),
                   help="how long after window end late records still correct it")
    p.add_argument("--watermark-delay", default="0ms", type=duration_type("--watermark-delay"),
                   help="watermark = max event time - this")
    p.add_argument("--aggs", default="count,sum,min,max,mean", help="aggregates to compute")
    p.add_argument("--max-records-per-batch", type=int, default=1000,
                   help="records per micro-batch in both runs")
    p.add_argument("--rate", type=float, help="replay the input at this many records/s while "
                   "each job runs, to measure wall-clock latency")
    p.add_argument("--trigger", type=duration_type("--trigger"),
                   help="micro-batch interval of the --rate runs (default 1s)")
    p.add_argument("--shards", type=int, default=4, help="key shards of both jobs")
    p.add_argument("--delta-path", help="Delta root (default OUTPUT/delta)")
    p.add_argument("--output", required=True, help="folder for comparison.json, windows.csv "
                   "and the PNG plots")
    p.add_argument("--timeout", type=duration_type("--timeout"),
                   help="give up a job after this long")
    p.set_defaults(handler=cmd_compare)


def config_from_args(args: argparse.Namespace) -> CompareConfig:
    """Build the :class:`CompareConfig` of ``revise compare``'s arguments."""
    from revise.infra import broker

    bootstrap = args.bootstrap_servers
    if not bootstrap:
        cluster = broker.status() or broker.start()
        bootstrap = cluster.bootstrap_servers
    events = maybe_int(args.events, "--events")
    if args.input_topic and events is not None:
        msg = "give --input-topic or --events, not both"
        raise ConfigError(msg)
    generator = None
    if not args.input_topic:
        generator = GeneratorConfig(
            events=events if events is not None else 5000,
            keys=maybe_int(args.keys, "--keys") or 1,
            seed=maybe_int(args.seed, "--seed") or 0,
            disorder_ms=maybe_duration(args.disorder, "--disorder") or 0,
            late_fraction=maybe_float(args.late_fraction, "--late-fraction") or 0.0,
            late_by_ms=maybe_duration(args.late_by, "--late-by") or 0,
            bad_fraction=maybe_float(args.bad_fraction, "--bad-fraction") or 0.0,
            step_ms=maybe_duration(args.step, "--step") or 0,
        )
    output = str(Path(args.output).expanduser().resolve())
    delta = args.delta_path or os.path.join(output, "delta")
    if "://" not in delta:
        delta = str(Path(delta).expanduser().resolve())
    engine = EngineConfig(
        window=WindowSpec.parse(args.window),
        grace_ms=maybe_duration(args.grace, "--grace") or 0,
        watermark_delay_ms=maybe_duration(args.watermark_delay, "--watermark-delay") or 0,
        aggs=parse_aggs(args.aggs),
    )
    timeout = maybe_duration(args.timeout, "--timeout")
    return CompareConfig(
        bootstrap_servers=bootstrap, output=output, delta_path=delta, engine=engine,
        input_topic=args.input_topic or None, generator=generator,
        max_records_per_batch=maybe_int(args.max_records_per_batch, "--max-records-per-batch")
        or 1000,
        rate=maybe_float(args.rate, "--rate"), trigger_ms=maybe_duration(args.trigger, "--trigger"),
        shards=maybe_int(args.shards, "--shards") or 4,
        timeout_s=None if timeout is None else timeout / 1000,
    )


def cmd_compare(args: argparse.Namespace) -> int:
    """``revise compare``: run both modes, print the table, write the files."""
    cfg = config_from_args(args)
    c = run_compare(cfg, echo=lambda s: print(s, flush=True))
    print()
    print(format_table(c))
    print()
    print(f"figures: {c.json_path}")
    for p in c.plot_paths:
        print(f"plot:    {p}")
    print(f"table:   {c.delta_path}/comparisons  (delta; one row per run, mode and metric)")
    print(f'try:     revise query "SELECT timing, count(*) FROM revision_history GROUP BY timing"'
          f" --delta-path {c.delta_path}/revision")
    return 0
