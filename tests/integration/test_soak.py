"""The short soak of CI: ``benchmarks.soak`` for a minute and a half at 300 records/s.

The 30-minute run at 2,000 records/s and its figures are in docs/RELIABILITY.md (``python -m
benchmarks.soak --minutes 30 --rate 2000``); a memory goal cannot be judged in 90 s on a shared
machine, so this run checks what the long one depends on:

- the job runs unbounded (no ``--once``) and keeps up: every sample after the first sees
  micro-batches, first results and a small input lag;
- every figure the soak reports is measured from the real processes (driver JVM, Python driver,
  at least one Python worker; the JVM's open descriptors and sockets in CLOSE_WAIT);
- the running processes carry the settings that keep memory flat: the driver JVM started with
  its heap fixed (``-Xms`` of :func:`revise.spark.session.long_run_conf` and
  ``-XX:+AlwaysPreTouch``), and the Python driver's delta-rs allocator setting is revise's.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.soak import main as soak
from revise import DELTA_RS_MALLOC_CONF
from revise.spark.session import long_run_conf

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.delta, pytest.mark.slow]

RATE = 300


def test_a_short_soak_measures_an_unbounded_run_with_flat_memory_settings(
        kafka_bootstrap, tmp_path):
    out = tmp_path / "soak.json"
    rc = soak(["--minutes", "1.5", "--rate", str(RATE), "--keys", "20", "--window",
               "tumbling:5s", "--grace-ms", "2000", "--sample-s", "30", "--baseline-minute",
               "0.5", "--bootstrap-servers", kafka_bootstrap, "--workdir", str(tmp_path / "wd"),
               "--json", str(out)])

    assert rc == 0
    report = json.loads(out.read_text())
    samples = report["samples"]
    assert len(samples) == 3, samples
    for s in samples:
        assert s["rss_driver_jvm_mib"] > 0 and s["rss_python_driver_mib"] > 0, s
        assert s["jvm_fds"] > 0 and 0 <= s["jvm_close_wait"] < s["jvm_fds"], s
    for s in samples[1:]:  # a full interval after the first micro-batch
        assert s["python_workers"] >= 1 and s["rss_python_workers_mib"] > 0, s
        assert s["batches"] > 0 and s["batch_ms_p50"] is not None, s
        assert s["windows"] > 0 and s["first_result_ms_p50"] is not None, s
        assert s["input_lag"] < 10 * RATE, s  # under 10 s of input: the job keeps up
    assert samples[-1]["produced"] >= RATE * 60, samples[-1]

    driver = report["driver"]
    xms = long_run_conf()["spark.driver.extraJavaOptions"].split()[0]
    assert xms in driver["jvm_options"] and "-XX:+AlwaysPreTouch" in driver["jvm_options"], driver
    assert driver["malloc_conf"] == DELTA_RS_MALLOC_CONF, driver
    assert set(report["verdict"]) >= {"memory_change_pct", "batch_duration_flat", "lag_flat"}
