"""Issue 13 end to end on the real systems: ``revise run`` with ``FN(FIELD)`` aggregates over
nested JSON (several numeric fields, p50/p99, distinct, a grouped key of two nested fields,
ISO-8601 event time with offsets) → exactly-once changelog and Delta tables, every FINAL equal
to the batch computation over its accepted records (``check_run`` with
:mod:`fields_oracle`); ``revise query`` shows the new columns on both engines. A second, small
run takes event time from the Kafka record timestamp (``--ts-field @timestamp``).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import subprocess
import sys
import time

import fields_oracle
import pytest
from integration_support import REPO, CliRun, JobSetup, check_run, read_delta

from revise.config import EngineConfig
from revise.inputspec import InputSpec

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.delta]

BASE_MS = 1_795_000_000_000  # 2026-11-18
AGGS = ("count,sum(bytes),mean(http.latency_ms),max(http.latency_ms),p50(http.latency_ms),"
        "p99(http.latency_ms),distinct(user.id)")
ZONES = [dt.timedelta(0), dt.timedelta(hours=1), dt.timedelta(hours=-5, minutes=-30),
         dt.timedelta(hours=5)]


def _iso(ms: int, rnd: random.Random) -> str:
    """``ms`` as ISO-8601 text in a random zone and zone spelling (Z, +01:00, -0530, +05)."""
    zone = rnd.choice(ZONES)
    at = dt.datetime.fromtimestamp(ms / 1000, dt.UTC).astimezone(dt.timezone(zone))
    text = at.replace(tzinfo=None).isoformat(timespec="milliseconds")
    if rnd.random() < 0.1:  # sub-ms digits are truncated
        text += "7"
    minutes = int(zone.total_seconds() // 60)
    sign, h, m = "+" if minutes >= 0 else "-", abs(minutes) // 60, abs(minutes) % 60
    spelled = {0: "Z", 60: f"{sign}{h:02d}:{m:02d}", -330: f"{sign}{h:02d}{m:02d}",
               300: f"{sign}{h:02d}"}[minutes]
    return text + spelled


def _payloads(n: int, seed: int) -> list[bytes]:
    """Nested events with disorder, late and too-late ones, and ~5 % bad input of each kind."""
    rnd = random.Random(seed)
    out: list[bytes] = []
    for i in range(n):
        ts = BASE_MS + i * 12 - rnd.randint(0, 1_500)
        if rnd.random() < 0.05:
            ts -= rnd.randint(2_000, 6_000)
        user: object = f"u{rnd.randint(0, 30)}" if rnd.random() < 0.8 else rnd.randint(0, 5)
        ev = {"req": {"endpoint": rnd.choice(["/a", "/b", "/cart"]),
                      "region": rnd.choice(["eu", 7])},
              "time": _iso(ts, rnd),
              "http": {"latency_ms": round(rnd.lognormvariate(3.0, 0.8), 2)},
              "bytes": rnd.randint(100, 5_000), "user": {"id": user}}
        bad = rnd.random()
        if bad < 0.015:
            ev["time"] = ev["time"][:19]  # no zone: a dead letter
        elif bad < 0.025:
            del ev["http"]["latency_ms"]
        elif bad < 0.03:
            ev["http"]["latency_ms"] = "12"
        elif bad < 0.035:
            ev["req"]["region"] = {"x": 1}
        elif bad < 0.04:
            ev["user"]["id"] = None
        out.append(b"{not json" if 0.04 <= bad < 0.045 else json.dumps(ev).encode())
    return out


def test_several_fields_percentiles_distinct_grouped_key_iso_time(job_setup, spark, tmp_path):
    from revise.query import run_query
    from revise.query.local import run_query_local

    setup: JobSetup = job_setup("aggs", window="tumbling:2s", grace_ms=2_000,
                                max_records_per_batch=150, aggs=AGGS,
                                key_field="req.endpoint,req.region", ts_field="time",
                                ts_format="iso8601")
    # One partition: the job's micro-batches are then the same every run, and this split gives
    # accepted late records (LATE revisions) and too-late ones (oracle, 150-record batches: 25, 17).
    setup.produce(_payloads(900, seed=13), partition=0)
    run = CliRun(setup.cli_args(), cwd=REPO, log=tmp_path / "run.log")
    assert run.wait(420) == 0, run.tail()

    cfg: EngineConfig = setup.engine_config()
    spec = InputSpec.build(key_field=setup.key_field, ts_field=setup.ts_field,
                           ts_format=setup.ts_format, aggs=cfg.aggs)
    report = check_run(setup, fields_oracle.parser(spec), fields_oracle.expected(cfg.aggs))
    assert report.windows > 20 and report.too_late > 0 and report.late_revisions > 0
    dead = read_delta(setup.delta_path, "dead_letter")
    reasons = {r["reason"].split(":")[0] for r in dead}
    assert "field 'time' has no time zone" in reasons, reasons
    assert {"missing field 'http.latency_ms'", "invalid JSON",
            "field 'http.latency_ms' must be a number, got STRING",
            "field 'user.id' is null"} <= reasons, reasons

    # The new columns through both query engines, with the grouped key's members.
    sql = ("SELECT key, window_start_ms, count, p99_http_latency_ms, prev_p99_http_latency_ms, "
           "distinct_user_id, sum_bytes FROM final_windows "
           "ORDER BY key, window_start_ms")
    proc = subprocess.run([sys.executable, "-m", "revise", "query", sql, "--delta-path",
                           setup.delta_path, "--format", "json"], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    printed = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    local = run_query_local(sql, setup.delta_path).to_dict("records")
    remote = run_query(sql, setup.delta_path, spark=spark).to_dict("records")
    assert local == remote and len(printed) == len(local) == report.windows
    for a, b in zip(printed, local, strict=True):  # --format json prints 15 significant digits
        assert a["key"] == b["key"] and a["distinct_user_id"] == b["distinct_user_id"]
        assert math.isclose(a["p99_http_latency_ms"], b["p99_http_latency_ms"], rel_tol=1e-14)
    members = run_query("SELECT DISTINCT get_json_object(key, '$[0]') AS endpoint, "
                        "get_json_object(key, '$[1]') AS region FROM final_windows",
                        setup.delta_path, spark=spark)
    assert set(members["endpoint"]) == {"/a", "/b", "/cart"}
    assert set(members["region"]) == {"eu", "7"}


def test_kafka_record_timestamp_as_event_time(job_setup, spark):
    from confluent_kafka import Producer

    from revise.spark.driver import run_job

    setup: JobSetup = job_setup("kts", window="tumbling:1s", grace_ms=500,
                                max_records_per_batch=100, aggs="count,p95(v),distinct(v)",
                                ts_field="@timestamp", partitions=1)
    rnd = random.Random(5)
    # Record timestamps near now, not BASE_MS: the broker's time retention (168 h) deletes
    # records whose timestamps are older than that, so a fixed date read back nothing here a
    # week after it was written.
    base_ms = (time.time_ns() // 1_000_000_000 - 3_600) * 1_000
    producer = Producer({"bootstrap.servers": setup.bootstrap, "enable.idempotence": True})
    for i in range(300):
        ts = base_ms + i * 20 - rnd.randint(0, 600)
        value = {"key": f"k{i % 3}", "v": rnd.randint(1, 50)}
        producer.produce(setup.input_topic, json.dumps(value).encode(), timestamp=ts)
    assert producer.flush(30) == 0
    result = run_job(setup.job_config(), spark=spark, timeout_s=300)

    cfg = setup.engine_config()
    spec = InputSpec.build(ts_field="@timestamp", aggs=cfg.aggs)
    report = check_run(setup, fields_oracle.parser(spec), fields_oracle.expected(cfg.aggs))
    assert result.revisions == report.revisions and report.windows >= 18
    assert report.dead == 0
