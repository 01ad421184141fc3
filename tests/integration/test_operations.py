"""Operating a real job: its Prometheus metrics scraped over HTTP while it runs, and
``revise status`` of a running and of a stopped job (real Kafka, Spark, Delta).

1. An unbounded ``revise run --metrics-port`` over generated input (late and bad records
   included): once it has read everything and Delta has caught up, a scrape's counters equal
   what a ``read_committed`` consumer and a Delta reader see; ``revise status`` says it runs
   (exit 0); SIGTERM stops it, the port is released, and ``revise status`` says stopped (3).
2. A bounded run (``run_job``): ``job_status`` of its checkpoint against Spark's logs, the
   changelog's progress marker and the Delta tables; the CLI's JSON and exit codes; a run file
   left behind by a killed job, a live and a stalled heartbeat.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from integration_support import REPO, CliRun, read_delta, spark_batches
from metrics_scrape import scrape

from revise.checkpoint import RUN_FILE
from revise.generate import GeneratorConfig, generate, produce
from revise.infra.procs import free_port
from revise.ops.metrics import dead_letter_category
from revise.ops.runfile import STALE_S, RunInfo, read_run_file
from revise.ops.status import BEHIND, OK, STOPPED, job_status
from sinks.kafka import (
    decode_late,
    decode_revision,
    last_committed,
    read_committed,
    read_progress,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.delta]

RUN_TIMEOUT_S = 300


def by_label(samples: dict, name: str, label: str) -> dict[str, float]:
    return {dict(labels)[label]: v for (n, labels), v in samples.items() if n == name}


def one(samples: dict, name: str) -> float:
    (v,) = [v for (n, _labels), v in samples.items() if n == name]
    return v


def status_cli(checkpoint: str, *extra: str) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "revise", "status", "--checkpoint", checkpoint, *extra],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def _settled(port: int, produced: int, deadline: float) -> dict:
    """A scrape once the job read every record and Delta holds every batch, twice alike."""
    before: dict | None = None
    while time.monotonic() < deadline:
        try:
            now = scrape(port)
        except OSError:
            time.sleep(1)
            continue
        done = (one(now, "revise_input_records_total") == produced
                and sum(by_label(now, "revise_input_lag_records", "partition").values()) == 0
                and sum(by_label(now, "revise_delta_trailing_batches", "table").values()) == 0)
        stable = before is not None and all(
            one(now, n) == one(before, n)
            for n in ("revise_last_batch_id", "revise_kafka_last_committed_batch"))
        if done and stable:
            return now
        before = now if done else None
        time.sleep(2)
    raise AssertionError(f"the job did not settle; last scrape: {before}")


def test_metrics_of_a_running_job_match_what_it_wrote_and_status_follows_it(job_setup, tmp_path):
    setup = job_setup("ops", partitions=2, max_records_per_batch=200)
    stream = generate(GeneratorConfig(events=700, keys=6, seed=5, disorder_ms=1_500,
                                      late_fraction=0.08, late_by_ms=6_000, bad_fraction=0.05))
    produce(stream, bootstrap_servers=setup.bootstrap, topic=setup.input_topic)
    port = free_port()
    args = [a for a in setup.cli_args() if a != "--once"] + ["--metrics-port", str(port)]
    run = CliRun(args, cwd=tmp_path, log=tmp_path / "run.log")
    try:
        s = _settled(port, len(stream), time.monotonic() + RUN_TIMEOUT_S)

        # What a read_committed consumer and a Delta reader see.
        changelog = [decode_revision(m.value()).to_row()
                     for m in read_committed(setup.bootstrap, setup.changelog_topic, timeout_s=60)]
        late = [decode_late(m.value()) for m in read_committed(setup.bootstrap, setup.late_topic,
                                                               timeout_s=60)]
        revisions = read_delta(setup.delta_path, "revisions")
        dead = read_delta(setup.delta_path, "dead_letter")
        timings = Counter(r["timing"] for r in changelog)
        assert timings == Counter(r["timing"] for r in revisions)
        assert by_label(s, "revise_revisions_total", "timing") == timings
        assert timings["EARLY"] > 0 and timings["FINAL"] > 0
        assert one(s, "revise_too_late_records_total") == len(late) > 0
        reasons = Counter(dead_letter_category(r["reason"]) for r in dead)
        assert by_label(s, "revise_dead_letters_total", "reason") == reasons
        assert sum(reasons.values()) == int((stream.kind == 2).sum()) > 0
        windows = {(r["key"], r["window_start_ms"]) for r in changelog}
        finals = {(r["key"], r["window_start_ms"]) for r in changelog if r["is_final"]}
        assert one(s, "revise_open_windows") == len(windows - finals) > 0
        marker = last_committed(read_progress(setup.bootstrap, "_revise_progress",
                                              setup.query_id))
        assert marker is not None
        assert one(s, "revise_kafka_last_committed_batch") == marker.batch
        assert one(s, "revise_watermark_ms") >= max(r["watermark_ms"] for r in changelog)
        assert one(s, "revise_watermark_delay_seconds") > 0
        stages = by_label(s, "revise_batch_stage_seconds_count", "stage")
        assert stages["trigger_execution"] == one(s, "revise_batches_total") > 0
        assert stages["add_batch"] > 0 and stages["collect"] > 0
        assert one(s, "revise_kafka_transaction_seconds_count") > 0
        assert one(s, "revise_delta_commit_seconds_count") > 0

        # revise status while it runs: running, caught up (exit 0), the same batch and watermark
        rc, out = status_cli(setup.checkpoint, "--format", "json")
        assert rc == OK, out
        st = json.loads(out)
        assert st["running"] is True and st["state"] == "running"
        assert st["last_batch_id"] == one(s, "revise_last_batch_id")
        assert st["kafka_batch_id"] == one(s, "revise_kafka_last_committed_batch")
        assert st["watermark_ms"] == one(s, "revise_watermark_ms")
        assert st["input_lag_total"] == 0 and st["latest_caught_up"] is True
        assert st["metrics_port"] == port and st["pid"] == run.proc.pid

        os.kill(run.proc.pid, signal.SIGTERM)  # the driver only: it stops its JVM itself
        assert run.wait(RUN_TIMEOUT_S) == 0, run.tail()
        with pytest.raises(OSError):
            scrape(port)  # the server stopped with the job
        rc, out = status_cli(setup.checkpoint)
        assert rc == STOPPED, out
        assert "stopped (stopped cleanly)" in out
        assert " ".join(out.split()).count("latest caught up yes") == 1, out
    finally:
        run.signal_group(signal.SIGKILL)


def test_a_taken_metrics_port_ends_the_run_with_exit_2(job_setup, tmp_path):
    setup = job_setup("taken")
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = CliRun([*setup.cli_args(), "--metrics-port", str(port)], cwd=tmp_path,
                     log=tmp_path / "taken.log")
        assert run.wait(120) == 2, run.tail()
    assert f"--metrics-port {port}" in run.log() and "give a free port" in run.log()


def test_status_of_a_stopped_bounded_run_and_of_run_files_left_behind(job_setup, spark, tmp_path):
    from revise.spark.driver import run_job

    setup = job_setup("status", partitions=2, max_records_per_batch=150)
    stream = generate(GeneratorConfig(events=400, keys=4, seed=8, disorder_ms=1_000,
                                      late_fraction=0.05, late_by_ms=6_000, bad_fraction=0.05))
    produce(stream, bootstrap_servers=setup.bootstrap, topic=setup.input_topic)
    result = run_job(setup.job_config(), spark=spark, timeout_s=RUN_TIMEOUT_S)
    assert result.revisions > 0 and result.dead_letters > 0

    st = job_status(setup.checkpoint)
    batches = spark_batches(setup.checkpoint, setup.input_topic)
    revisions = read_delta(setup.delta_path, "revisions")
    dead = read_delta(setup.delta_path, "dead_letter")
    marker = last_committed(read_progress(setup.bootstrap, "_revise_progress", setup.query_id))
    assert st.running is False and st.why == "stopped cleanly" and st.exit_code == STOPPED
    assert st.query_id == setup.query_id
    assert st.last_batch_id == batches[-1].batch_id
    assert st.watermark_ms == batches[-1].watermark_ms
    ends = {int(p): n for p, n in batches[-1].kafka_end.items()}
    assert st.input_lag == {p: 0 for p in ends} and sum(ends.values()) == len(stream)
    assert marker is not None and st.kafka_batch_id == marker.batch
    assert st.kafka_batch_id >= max(r["batch_id"] for r in revisions)
    tables = {t.table: t for t in st.delta}
    # A table's app transaction is the highest batch of its last commit (a staged commit's
    # batches may end with one that had no rows for it), never past the changelog's.
    top = st.kafka_batch_id
    assert top >= tables["revisions"].batch_id >= max(r["batch_id"] for r in revisions)
    assert top >= tables["dead_letter"].batch_id >= max(r["batch_id"] for r in dead)
    assert tables["latest"].batch_id is not None
    assert tables["latest"].batch_id >= tables["revisions"].batch_id
    assert st.latest_caught_up is True and st.staged_batches == 0

    rc, out = status_cli(setup.checkpoint, "--format", "json")
    assert rc == STOPPED, out
    as_json = json.loads(out)
    assert as_json["exit_code"] == STOPPED and as_json["running"] is False
    assert as_json["last_batch_id"] == st.last_batch_id
    assert as_json["delta"]["revisions"]["batch_id"] == tables["revisions"].batch_id

    # A job killed with SIGKILL leaves "running" behind with a dead pid: stopped.
    info = read_run_file(setup.checkpoint)
    assert info is not None and info.state == "stopped" and info.pid == os.getpid()
    dead_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout.strip()
    _write(setup.checkpoint, dataclasses.replace(info, state="running", pid=int(dead_pid)))
    st = job_status(setup.checkpoint)
    assert not st.running and "is gone" in st.why and st.exit_code == STOPPED
    # A live pid with a fresh heartbeat: running and caught up.
    now_ms = int(time.time() * 1000)
    _write(setup.checkpoint, dataclasses.replace(info, state="running", heartbeat_ms=now_ms))
    rc, out = status_cli(setup.checkpoint)
    assert rc == OK, out
    # The same, its heartbeat stuck for more than half the stale limit: stalled, behind.
    old = now_ms - int(STALE_S * 1000 * 0.75)
    _write(setup.checkpoint, dataclasses.replace(info, state="running", heartbeat_ms=old))
    st = job_status(setup.checkpoint)
    assert st.running and st.exit_code == BEHIND and "no heartbeat" in st.behind[0]
    # And past the stale limit: stopped (killed elsewhere, or frozen).
    _write(setup.checkpoint, dataclasses.replace(
        info, state="running", heartbeat_ms=now_ms - int(STALE_S * 1000) - 5_000))
    assert job_status(setup.checkpoint).exit_code == STOPPED


def _write(checkpoint: str, info: RunInfo) -> None:
    (Path(checkpoint) / RUN_FILE).write_text(info.to_json())
