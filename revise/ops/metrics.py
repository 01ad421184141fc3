"""The job's Prometheus metrics (``revise run --metrics-port PORT``, docs/OPERATIONS.md).

Everything here comes from what the driver already holds; nothing is computed per record:

- Spark's progress report of each micro-batch (:meth:`JobMetrics.observe_progress`): input
  records, rate, per-partition lag (the source's ``latestOffset`` − ``endOffset``), the
  watermark, the stages' ``durationMs``, and revise's own commit steps (``revise``: collect,
  Kafka, Delta milliseconds, added by :class:`revise.spark.watch.JobDriver`);
- each committed micro-batch's Arrow tables (:meth:`JobMetrics.observe_batch`): revisions by
  timing and dead letters by reason, counted with one Arrow ``value_counts`` each, too-late
  records, and the open windows the operator reports per shard;
- each Delta write (:meth:`JobMetrics.delta_written`, in the ``after_write`` hook the driver
  gives the Delta tables): how far each table trails the changelog.

Every metric is named ``revise_…`` and labelled ``query_id``; they live in a registry of the
job's own (two jobs in one process do not clash) served by ``prometheus_client``'s HTTP server
until :meth:`JobMetrics.stop`.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from revise.errors import ConfigError
from revise.vocab import TABLE_NAMES

if TYPE_CHECKING:
    from revise.spark.output import BatchCounts

__all__ = ["DEAD_LETTER_CATEGORIES", "METRIC_NAMES", "SPARK_STAGES", "JobMetrics",
           "dead_letter_category"]

SPARK_STAGES: Final[Mapping[str, str]] = {
    "latestOffset": "latest_offset",
    "getBatch": "get_batch",
    "queryPlanning": "query_planning",
    "addBatch": "add_batch",
    "walCommit": "wal_commit",
    "commitOffsets": "commit_offsets",
    "triggerExecution": "trigger_execution",
}
"""Spark's ``durationMs`` keys → the ``stage`` label of ``revise_batch_stage_seconds``;
``add_batch`` holds revise's whole commit, whose ``collect`` step gets a stage of its own."""

BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                  120.0, 300.0)
"""Histogram buckets (s): an empty micro-batch's Kafka commit (~5 ms) to a large close (minutes)."""

DEAD_LETTER_CATEGORIES: Final = (
    ("empty value", "empty_value"),
    ("invalid JSON", "invalid_json"),
    ("value is a JSON", "not_an_object"),
    ("missing field", "missing_field"),
    (re.compile(r"^field .* is null$"), "null_field"),
    (re.compile(r"^field .* must be"), "wrong_type"),
    (re.compile(r"^field .* is out of range"), "out_of_range"),
    (re.compile(r"^field .* is not a finite number"), "not_finite"),
)
"""A dead letter's reason (``revise.spark.parse``, ``revise.spark.fields``) → the ``reason``
label: the reason's leading category, since a reason may quote the record's value (an
out-of-range time) and a label's values must stay few. Anything else is ``other``."""

METRIC_NAMES: Final = (
    "revise_job_info",
    "revise_input_records_total",
    "revise_input_records_per_second",
    "revise_input_lag_records",
    "revise_batches_total",
    "revise_last_batch_id",
    "revise_watermark_ms",
    "revise_watermark_delay_seconds",
    "revise_revisions_total",
    "revise_too_late_records_total",
    "revise_dead_letters_total",
    "revise_open_windows",
    "revise_batch_stage_seconds",
    "revise_kafka_transaction_seconds",
    "revise_delta_commit_seconds",
    "revise_kafka_last_committed_batch",
    "revise_delta_trailing_batches",
    "revise_delta_trailing_seconds",
)
"""Every metric the job exports (histograms add ``_bucket``, ``_sum``, ``_count``; counters a
``_created`` sample): the Grafana dashboard (docs/grafana/revise.json) uses only these."""


def dead_letter_category(reason: str) -> str:
    """The ``reason`` label of a dead letter's reason (:data:`DEAD_LETTER_CATEGORIES`).

    Trace: ``field 'ts' is out of range [0, 2^53): -5`` → ``out_of_range``.
    """
    for pattern, label in DEAD_LETTER_CATEGORIES:
        if isinstance(pattern, str) and reason.startswith(pattern):
            return label
        if isinstance(pattern, re.Pattern) and pattern.search(reason):
            return label
    return "other"


class JobMetrics:
    """One job's metrics and their HTTP server.

    Args:
        query_id: The job's id (the ``query_id`` label).
        input_topic: The Kafka input topic (its partitions' lag).
        port: The TCP port of ``/metrics`` (1–65535).
        host: The address to listen on (all interfaces by default, as exporters do).
        labels: Extra labels of ``revise_job_info`` (mode, window …).
        clock: Wall-clock seconds (tests pass a fake one).
    """

    def __init__(self, query_id: str, input_topic: str, *, port: int, host: str = "0.0.0.0",
                 labels: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.query_id = query_id
        self.input_topic = input_topic
        self.port = port
        self.host = host
        self.info = dict(labels or {})
        self._clock = clock
        self._lock = threading.Lock()
        self.registry = CollectorRegistry()
        r, q = self.registry, ["query_id"]
        self._input = Counter("revise_input_records", "Input records read from Kafka",
                              q, registry=r)
        self._batches = Counter("revise_batches", "Micro-batches Spark reported", q, registry=r)
        self._revisions = Counter("revise_revisions", "Revisions committed, by timing",
                                  [*q, "timing"], registry=r)
        self._late = Counter("revise_too_late_records", "Too-late records committed", q,
                             registry=r)
        self._dead = Counter("revise_dead_letters",
                             "Dead letters (bad input) committed, by reason category",
                             [*q, "reason"], registry=r)
        self._stage = Histogram("revise_batch_stage_seconds",
                                "Seconds of each stage of a micro-batch (Spark's durationMs; "
                                "collect: computing and collecting its output)",
                                [*q, "stage"], buckets=BUCKETS, registry=r)
        self._kafka = Histogram("revise_kafka_transaction_seconds",
                                "Seconds of a micro-batch's Kafka transaction", q,
                                buckets=BUCKETS, registry=r)
        self._delta = Histogram("revise_delta_commit_seconds",
                                "Seconds of a micro-batch's Delta writes", q,
                                buckets=BUCKETS, registry=r)
        for counter in (self._input, self._batches, self._late):
            counter.labels(query_id)  # exported as 0 before the first batch
        # Gauges read at scrape time (the watermark's delay moves with the clock).
        self._lag: dict[tuple[str, int], int] = {}
        self._rate = 0.0
        self._last_batch = -1
        self._watermark_ms: int | None = None
        self._open: dict[int, int] = {}
        self._kafka_batch = -1
        self._trailing: dict[str, deque[tuple[int, float]]] = {t: deque() for t in TABLE_NAMES}
        r.register(_Gauges(self))
        self._server: Any = None
        self._thread: threading.Thread | None = None

    # ---- the server ----------------------------------------------------------------------

    def start(self) -> JobMetrics:
        """Serve ``/metrics`` on :attr:`port` from a background thread.

        Raises:
            ConfigError: The port is taken (or cannot be bound).
        """
        from prometheus_client import start_http_server

        try:
            self._server, self._thread = start_http_server(self.port, addr=self.host,
                                                           registry=self.registry)
        except OSError as exc:
            msg = (f"--metrics-port {self.port}: cannot listen on {self.host}:{self.port} "
                   f"({exc.strerror or exc}); another process has it: give a free port")
            raise ConfigError(msg) from None
        return self

    def stop(self) -> None:
        """Stop the HTTP server and release the port."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    # ---- what the driver tells -----------------------------------------------------------

    def observe_progress(self, report: Mapping[str, Any]) -> None:
        """Account one Spark progress report (with revise's ``revise`` step timings)."""
        q = self.query_id
        source = self._kafka_source(report)
        rows = int((source or report).get("numInputRows") or 0)
        self._input.labels(q).inc(rows)
        self._batches.labels(q).inc()
        for key, stage in SPARK_STAGES.items():
            ms = (report.get("durationMs") or {}).get(key)
            if ms is not None:
                self._stage.labels(q, stage).observe(ms / 1000)
        steps = report.get("revise") or {}
        if "collect_ms" in steps:
            self._stage.labels(q, "collect").observe(steps["collect_ms"] / 1000)
        if steps.get("kafka_ms"):  # 0: the batch had no output, no transaction ran
            self._kafka.labels(q).observe(steps["kafka_ms"] / 1000)
        if steps.get("delta_ms"):
            self._delta.labels(q).observe(steps["delta_ms"] / 1000)
        with self._lock:
            self._rate = float(report.get("processedRowsPerSecond") or 0.0)
            self._last_batch = int(report.get("batchId", self._last_batch))
            watermark = _watermark_ms((report.get("eventTime") or {}).get("watermark"))
            if watermark is not None and watermark > 0:
                self._watermark_ms = watermark
            if source is not None:
                self._lag = _lag(source, self.input_topic) or self._lag

    def observe_batch(self, batch_id: int, counts: BatchCounts, *,
                      open_windows: Mapping[int, int], written: bool) -> None:
        """Account one committed micro-batch's output.

        Args:
            batch_id: The micro-batch.
            counts: What it produced: revisions by timing, too-late records, dead letters by
                reason.
            open_windows: Open windows per shard the batch called (shards not called keep
                their last count).
            written: False for a replay whose Kafka transactions were found committed: it is
                not counted again, but still trails until Delta has it.
        """
        q = self.query_id
        if written:
            for timing, n in counts.revisions.items():
                self._revisions.labels(q, timing).inc(n)
            if counts.late:
                self._late.labels(q).inc(counts.late)
            by_reason: dict[str, int] = {}
            for reason, n in counts.dead.items():
                label = dead_letter_category(reason)
                by_reason[label] = by_reason.get(label, 0) + n
            for label, n in by_reason.items():
                self._dead.labels(q, label).inc(n)
        now = self._clock()
        with self._lock:
            self._open.update(open_windows)
            revisions = counts.total_revisions
            rows = {"revisions": revisions, "latest": revisions, "late": counts.late,
                    "dead_letter": counts.total_dead}
            if any(rows.values()):  # a batch without output has no Kafka transaction
                self._kafka_batch = max(self._kafka_batch, batch_id)
            for table, n in rows.items():
                if n:
                    self._trailing[table].append((batch_id, now))

    def delta_written(self, table: str, batch_id: int) -> None:
        """``table`` now holds every micro-batch up to ``batch_id`` (a Delta write's hook)."""
        with self._lock:
            pending = self._trailing.get(table)
            while pending and pending[0][0] <= batch_id:
                pending.popleft()

    # ---- scrape-time values --------------------------------------------------------------

    def _gauges(self) -> Iterator[Metric]:
        q = self.query_id
        now = self._clock()
        with self._lock:
            info = GaugeMetricFamily("revise_job_info", "The job's settings (value 1)",
                                     labels=["query_id", *self.info])
            info.add_metric([q, *self.info.values()], 1)
            yield info
            yield _gauge("revise_input_records_per_second",
                         "Input records per second of the last micro-batch", q, self._rate)
            lag = GaugeMetricFamily("revise_input_lag_records",
                                    "Records in the input partition not yet read, as of the "
                                    "last micro-batch (latest offset - end offset)",
                                    labels=["query_id", "topic", "partition"])
            for (topic, partition), n in sorted(self._lag.items()):
                lag.add_metric([q, topic, str(partition)], n)
            yield lag
            yield _gauge("revise_last_batch_id", "The last micro-batch Spark reported", q,
                         self._last_batch)
            if self._watermark_ms is not None:
                yield _gauge("revise_watermark_ms", "The watermark (epoch ms)", q,
                             self._watermark_ms)
                yield _gauge("revise_watermark_delay_seconds",
                             "Seconds between now and the watermark", q,
                             max(0.0, now - self._watermark_ms / 1000))
            yield _gauge("revise_open_windows",
                         "Open windows in the shards the run's micro-batches have called", q,
                         sum(self._open.values()))
            yield _gauge("revise_kafka_last_committed_batch",
                         "The last micro-batch committed to the Kafka changelog", q,
                         self._kafka_batch)
            batches = GaugeMetricFamily("revise_delta_trailing_batches",
                                        "Micro-batches in the changelog not yet in the Delta "
                                        "table", labels=["query_id", "table"])
            seconds = GaugeMetricFamily("revise_delta_trailing_seconds",
                                        "Seconds since the oldest micro-batch in the changelog "
                                        "and not yet in the Delta table was committed to Kafka",
                                        labels=["query_id", "table"])
            for table, pending in self._trailing.items():
                batches.add_metric([q, table], len(pending))
                seconds.add_metric([q, table], max(0.0, now - pending[0][1]) if pending else 0.0)
            yield batches
            yield seconds

    def _kafka_source(self, report: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The report's Kafka source (the other one is the control files of a bounded run)."""
        for source in report.get("sources") or []:
            end = _offsets(source.get("endOffset"))
            if isinstance(end, dict) and self.input_topic in end:
                return source  # type: ignore[no-any-return]
        return None


class _Gauges(Collector):
    """The scrape-time gauges of a :class:`JobMetrics`."""

    def __init__(self, metrics: JobMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self._metrics._gauges()


def _gauge(name: str, text: str, query_id: str, value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, text, labels=["query_id"])
    g.add_metric([query_id], value)
    return g



def _offsets(value: Any) -> Any:
    """A source's offsets (a dict, or its JSON text in some Spark versions)."""
    if isinstance(value, str):
        import json

        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _lag(source: Mapping[str, Any], topic: str) -> dict[tuple[str, int], int]:
    """Per input partition: ``latestOffset − endOffset`` of the batch (never below 0)."""
    end = (_offsets(source.get("endOffset")) or {}).get(topic) or {}
    latest = (_offsets(source.get("latestOffset")) or {}).get(topic) or {}
    return {(topic, int(p)): max(0, int(latest.get(p, o)) - int(o)) for p, o in end.items()}


def _watermark_ms(text: Any) -> int | None:
    """Spark's ISO-8601 watermark (``2026-11-28T19:31:09.000Z``) in epoch ms."""
    if not text:
        return None
    try:
        return int(datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None
