"""The job's Prometheus metrics (revise.ops.metrics): what a scrape over HTTP shows after the
driver told it a progress report and a committed batch; the registry per job; the port; the
Grafana dashboard uses only exported names."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pyarrow as pa
import pytest
from metrics_scrape import scrape

from revise.errors import ConfigError
from revise.infra.procs import free_port
from revise.ops.metrics import METRIC_NAMES, JobMetrics, dead_letter_category
from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA, REVISION_SCHEMA
from revise.spark.output import BatchCounts

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana" / "revise.json"


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def progress(batch_id: int, *, rows: int, end: dict[str, int], latest: dict[str, int],
             watermark: str = "2026-11-28T10:00:00.000Z") -> dict:
    return {
        "batchId": batch_id, "numInputRows": rows + 1, "processedRowsPerSecond": 250.0,
        "eventTime": {"watermark": watermark},
        "durationMs": {"addBatch": 900, "triggerExecution": 1000, "latestOffset": 20},
        "sources": [{"description": "KafkaV2[Subscribe[in]]", "numInputRows": rows,
                     "endOffset": {"in": end}, "latestOffset": {"in": latest}},
                    {"description": "FileStreamSource[control]", "numInputRows": 1,
                     "endOffset": {"logOffset": 0}, "latestOffset": None}],
        "revise": {"collect_ms": 300, "kafka_ms": 40, "delta_ms": 120},
    }


def revisions(timings: list[str]) -> pa.Table:
    row = {"query_id": "q", "mode": "revision", "key": "k", "window_start_ms": 0,
           "window_end_ms": 10, "revision": 0, "is_final": False, "retracted": False,
           "watermark_ms": 0, "batch_id": 0, "emitted_at_ms": 0}
    return pa.Table.from_pylist([{**row, "timing": t} for t in timings], schema=REVISION_SCHEMA)


def dead(reasons: list[str]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"raw_value": "x", "reason": r, "topic": "in", "partition": 0, "offset": i,
          "batch_id": 0} for i, r in enumerate(reasons)], schema=DEAD_LETTER_SCHEMA)


def late(n: int) -> pa.Table:
    return pa.Table.from_pylist(
        [{"key": "k", "ts_ms": 1, "value": 1.0, "window_start_ms": 0, "window_end_ms": 10,
          "watermark_ms": 30, "lateness_ms": 29, "reason": "too late", "batch_id": 0,
          "topic": "in", "partition": 0, "offset": i} for i in range(n)], schema=LATE_SCHEMA)


@pytest.fixture()
def metrics():
    clock = [1_795_860_000.0 + 90]  # 90 s after the watermark below
    m = JobMetrics("q", "in", port=free_port(), host="127.0.0.1", clock=lambda: clock[0],
                   labels={"mode": "revision", "window": "tumbling:10s"}).start()
    m.clock = clock  # type: ignore[attr-defined]
    yield m
    m.stop()


def test_a_scrape_shows_what_the_driver_told(metrics):
    metrics.observe_progress(progress(0, rows=100, end={"0": 60, "1": 40},
                                      latest={"0": 75, "1": 40}))
    bad = dead(["invalid JSON", "field 'ts' is out of range [0, 2^53): -5",
                "field 'ts' is out of range [0, 2^53): -7", "missing field 'key'"])
    metrics.observe_batch(0, BatchCounts.of(revisions(["EARLY", "EARLY", "LATE", "FINAL"]),
                                            late(3), bad),
                          open_windows={0: 5, 1: 7}, written=True)
    metrics.observe_progress(progress(1, rows=20, end={"0": 75, "1": 45},
                                      latest={"0": 75, "1": 50}))
    metrics.observe_batch(1, BatchCounts.of(revisions(["FINAL"]), late(0), dead([])),
                          open_windows={1: 2},
                          written=True)
    metrics.observe_batch(2, BatchCounts.of(revisions([]), late(0), dead([])), open_windows={1: 2},
                          written=False)  # no output: no Kafka transaction
    s = scrape(metrics.port)
    assert value(s, "revise_input_records_total", query_id="q") == 120  # Kafka rows only
    assert value(s, "revise_batches_total", query_id="q") == 2
    assert value(s, "revise_input_lag_records", query_id="q", topic="in", partition="0") == 0
    assert value(s, "revise_input_lag_records", query_id="q", topic="in", partition="1") == 5
    assert value(s, "revise_revisions_total", query_id="q", timing="EARLY") == 2
    assert value(s, "revise_revisions_total", query_id="q", timing="LATE") == 1
    assert value(s, "revise_revisions_total", query_id="q", timing="FINAL") == 2
    assert value(s, "revise_too_late_records_total", query_id="q") == 3
    assert value(s, "revise_dead_letters_total", query_id="q", reason="out_of_range") == 2
    assert value(s, "revise_dead_letters_total", query_id="q", reason="invalid_json") == 1
    assert value(s, "revise_dead_letters_total", query_id="q", reason="missing_field") == 1
    assert value(s, "revise_open_windows", query_id="q") == 7  # shard 0 kept its 5
    assert value(s, "revise_watermark_ms", query_id="q") == 1_795_860_000_000
    assert value(s, "revise_watermark_delay_seconds", query_id="q") == pytest.approx(90)
    assert value(s, "revise_last_batch_id", query_id="q") == 1
    assert value(s, "revise_kafka_last_committed_batch", query_id="q") == 1
    assert value(s, "revise_batch_stage_seconds_count", query_id="q", stage="add_batch") == 2
    assert value(s, "revise_batch_stage_seconds_sum", query_id="q", stage="add_batch") == 1.8
    assert value(s, "revise_batch_stage_seconds_sum", query_id="q", stage="collect") == 0.6
    assert value(s, "revise_kafka_transaction_seconds_sum", query_id="q") == pytest.approx(0.08)
    assert value(s, "revise_delta_commit_seconds_count", query_id="q") == 2
    assert value(s, "revise_job_info", query_id="q", mode="revision", window="tumbling:10s") == 1
    # Nothing written to Delta yet: both batches trail in revisions and latest, one in late.
    assert value(s, "revise_delta_trailing_batches", query_id="q", table="revisions") == 2
    assert value(s, "revise_delta_trailing_batches", query_id="q", table="late") == 1
    metrics.clock[0] += 4
    metrics.delta_written("revisions", 0)
    metrics.delta_written("late", 1)
    s = scrape(metrics.port)
    assert value(s, "revise_delta_trailing_batches", query_id="q", table="revisions") == 1
    assert value(s, "revise_delta_trailing_batches", query_id="q", table="latest") == 2
    assert value(s, "revise_delta_trailing_batches", query_id="q", table="late") == 0
    assert value(s, "revise_delta_trailing_seconds", query_id="q", table="latest") == 4
    assert value(s, "revise_delta_trailing_seconds", query_id="q", table="late") == 0


def test_a_replayed_batch_is_not_counted_again_but_trails_until_delta_has_it(metrics):
    metrics.observe_batch(4, BatchCounts.of(revisions(["EARLY"]), late(1), dead([])),
                          open_windows={},
                          written=False)
    s = scrape(metrics.port)
    assert ("revise_revisions_total", (("query_id", "q"), ("timing", "EARLY"))) not in s
    assert value(s, "revise_too_late_records_total", query_id="q") == 0
    assert value(s, "revise_delta_trailing_batches", query_id="q", table="revisions") == 1
    metrics.delta_written("revisions", 9)
    assert value(scrape(metrics.port), "revise_delta_trailing_batches", query_id="q",
                 table="revisions") == 0


def test_every_exported_name_is_listed_and_the_list_has_no_stale_name(metrics):
    metrics.observe_progress(progress(0, rows=1, end={"0": 1}, latest={"0": 1}))
    metrics.observe_batch(0, BatchCounts.of(revisions(["EARLY"]), late(1), dead(["empty value"])),
                          open_windows={0: 1}, written=True)
    names = {_base(name) for name, _labels in scrape(metrics.port)}
    assert names == set(METRIC_NAMES)


def test_two_jobs_in_one_process_keep_their_own_registries():
    a = JobMetrics("a", "in", port=free_port(), host="127.0.0.1").start()
    b = JobMetrics("b", "in", port=free_port(), host="127.0.0.1").start()
    try:
        a.observe_progress(progress(0, rows=10, end={"0": 10}, latest={"0": 10}))
        sa, sb = scrape(a.port), scrape(b.port)
        assert value(sa, "revise_input_records_total", query_id="a") == 10
        assert value(sb, "revise_input_records_total", query_id="b") == 0
        assert not any(dict(labels).get("query_id") == "a" for _n, labels in sb)
    finally:
        a.stop()
        b.stop()


def test_a_taken_port_is_a_configuration_error_and_stop_releases_the_port():
    m = JobMetrics("q", "in", port=free_port(), host="127.0.0.1").start()
    try:
        with pytest.raises(ConfigError, match=f"--metrics-port {m.port}: .*give a free port"):
            JobMetrics("q2", "in", port=m.port, host="127.0.0.1").start()
    finally:
        m.stop()
    with socket.socket() as s:  # released: binding it again works
        s.bind(("127.0.0.1", m.port))
    with pytest.raises(OSError):
        scrape(m.port)


@pytest.mark.parametrize(("reason", "label"), [
    ("empty value", "empty_value"),
    ("invalid JSON", "invalid_json"),
    ("value is a JSON array, expected an object", "not_an_object"),
    ("missing field 'ts'", "missing_field"),
    ("field 'key' is null", "null_field"),
    ("field 'ts' must be an integer (epoch ms), got STRING", "wrong_type"),
    ("field 'ts' is out of range [0, 2^53): 99999999999999999", "out_of_range"),
    ("field 'value' is not a finite number", "not_finite"),
    ("something new", "other"),
])
def test_dead_letter_reasons_fold_into_few_labels(reason, label):
    assert dead_letter_category(reason) == label


def _base(sample: str) -> str:
    """A sample's metric name: histograms' and counters' suffixes dropped."""
    for suffix in ("_bucket", "_sum", "_count", "_created"):
        if sample.endswith(suffix) and sample.removesuffix(suffix) in METRIC_NAMES:
            return sample.removesuffix(suffix)
    if sample.endswith("_created"):  # a counter's creation time: revise_x_total → revise_x_created
        return sample.removesuffix("_created") + "_total"
    return sample


def test_the_grafana_dashboard_uses_only_exported_metrics_and_covers_the_job():
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v.get("query", "") for v in dash["templating"]["list"] if v["type"] == "query"]
    used = {_base(n) for e in exprs for n in re.findall(r"\brevise_[a-z_]+", e)}
    assert used <= set(METRIC_NAMES), used - set(METRIC_NAMES)
    # the panels a team alerts on
    for needed in ("revise_input_lag_records", "revise_watermark_delay_seconds",
                   "revise_revisions_total", "revise_too_late_records_total",
                   "revise_dead_letters_total", "revise_batch_stage_seconds",
                   "revise_kafka_transaction_seconds", "revise_delta_commit_seconds",
                   "revise_delta_trailing_seconds"):
        assert needed in used, needed
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])


def test_a_metrics_port_outside_1_65535_is_refused():
    from revise.config import EngineConfig, WindowSpec
    from revise.jobconfig import DeltaOutput, JobConfig, KafkaIO

    def cfg(port: int) -> JobConfig:
        return JobConfig(kafka=KafkaIO(bootstrap_servers="b:1", input_topic="in",
                                       changelog_topic="c"),
                         delta=DeltaOutput(path="/d"), checkpoint="/c", metrics_port=port,
                         engine=EngineConfig(window=WindowSpec.parse("tumbling:1s"),
                                             grace_ms=0, query_id="q"))

    for bad in (0, -1, 70000):
        with pytest.raises(ConfigError, match="--metrics-port must be a TCP port"):
            cfg(bad)
    assert cfg(9464).metrics_port == 9464


def test_run_job_refuses_a_taken_metrics_port_before_anything_starts(tmp_path):
    from revise.config import EngineConfig, WindowSpec
    from revise.jobconfig import DeltaOutput, JobConfig, KafkaIO
    from revise.spark.driver import run_job

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = JobConfig(kafka=KafkaIO(bootstrap_servers="127.0.0.1:1", input_topic="in",
                                      changelog_topic="c"),
                        delta=DeltaOutput(path=str(tmp_path / "d")), checkpoint=str(tmp_path / "c"),
                        metrics_port=port, engine=EngineConfig(
                            window=WindowSpec.parse("tumbling:1s"), grace_ms=0, query_id="q"))
        with pytest.raises(ConfigError, match=f"--metrics-port {port}"):
            run_job(cfg)  # no Kafka at 127.0.0.1:1: the port is checked first
    assert not (tmp_path / "c").exists()


def test_the_metrics_port_comes_from_the_option_or_the_environment(monkeypatch):
    from revise.cli import build_parser
    from revise.cli.run import job_config_from_args
    from revise.kafka.settings import KafkaSettings

    base = ["run", "--bootstrap-servers", "127.0.0.1:1", "--input-topic", "in",
            "--changelog-topic", "out", "--delta-path", "/tmp/revise-d", "--checkpoint",
            "/tmp/revise-c", "--query-id", "q", "--window", "tumbling:1s", "--grace", "1s"]

    def port(*extra: str) -> int | None:
        args = build_parser().parse_args([*base, *extra])
        cfg = job_config_from_args(args, KafkaSettings(None).with_bootstrap("127.0.0.1:1"))
        return cfg.metrics_port

    monkeypatch.delenv("REVISE_METRICS_PORT", raising=False)
    assert port() is None
    assert port("--metrics-port", "9464") == 9464
    monkeypatch.setenv("REVISE_METRICS_PORT", "9555")
    assert port() == 9555
    with pytest.raises(ConfigError, match="--metrics-port must be a TCP port"):
        port("--metrics-port", "0")
