"""End to end on the real systems: generated Kafka input → ``run_job(once=True)`` on Spark →
transactional changelog + Delta tables, checked against the batch oracle over the job's own
micro-batch split (see ``integration_support.check_run`` for the full list of promises).

Each case is one bounded run (1,200 events with disorder, late and malformed records, three
micro-batches of input, the last of which also closes every window) on the session's Spark.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from integration_support import REPO, check_run, read_delta, spark_batches

from revise.errors import ConfigError
from revise.generate import GeneratorConfig, generate, produce
from revise.spark.driver import NO_DATA_BATCHES, run_job
from sinks import latest_merge
from sinks.kafka import read_committed

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.delta]

CASES = {
    # (window, grace_ms, mode)
    "tumbling": ("tumbling:2s", 3_000, "revision"),
    "hopping": ("hopping:4s:2s", 2_000, "revision"),
    "session": ("session:150ms", 1_000, "revision"),
    "tumbling-watermark-mode": ("tumbling:2s", 3_000, "watermark"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_once_run_is_exactly_once_and_matches_the_oracle(case, job_setup, spark):
    window, grace, mode = CASES[case]
    setup = job_setup(case.split("-")[0], window=window, grace_ms=grace, mode=mode,
                      max_records_per_batch=400)
    stream = generate(GeneratorConfig(events=1_200, keys=12, seed=11, disorder_ms=2_000,
                                      late_fraction=0.05, late_by_ms=3_000, bad_fraction=0.04))
    produce(stream, bootstrap_servers=setup.bootstrap, topic=setup.input_topic)

    result = run_job(setup.job_config(), spark=spark, timeout_s=400)

    report = check_run(setup)
    # The close has a micro-batch of its own, after the one that read the input to its end
    # (revise.spark.close_all: every task then closes at the global watermark); it is the
    # last, and no other micro-batch read nothing (Spark's no-data batches are off for a
    # bounded run only).
    batches = spark_batches(setup.checkpoint, setup.input_topic)
    *_, before, last = batches
    assert last.control is not None and before.control is None
    assert last.kafka_end == before.kafka_end, "the close came with input"
    assert all((b.kafka_end, b.control) != (a.kafka_end, a.control)
               for a, b in zip(batches, batches[1:], strict=False)), batches
    assert spark.conf.get(NO_DATA_BATCHES) == "true", "the session's own setting changed"
    # Each revision is stamped with its micro-batch's trigger time as Spark's offset log
    # records it (what a replay of the batch would reuse).
    stamps = {b.batch_id: b.timestamp_ms for b in batches}
    stamped = {(r["batch_id"], r["emitted_at_ms"]) for r in read_delta(setup.delta_path,
                                                                       "revisions")}
    assert stamped <= set(stamps.items()) and len(stamped) > 1, (stamped, stamps)
    assert result.input_records >= len(stream)
    assert result.revisions == report.revisions
    # The tasks' producers, in this JVM in local mode, were closed when the query stopped.
    assert spark._jvm.revise.jvm.TaskChangelog.kept(setup.job_config().query_id) == 0
    # The input really exercised what is checked.
    assert report.windows > 10 and report.too_late > 0 and report.dead > 0
    if mode == "revision":
        assert report.late_revisions > 0, "no accepted late record produced a LATE revision"
        assert report.revisions > report.windows
    else:
        assert report.revisions == report.windows
    if window.startswith("session"):
        assert report.retracted > 0, "no session merge or extension happened"


def test_a_dry_run_counts_what_the_job_writes_and_writes_nothing(job_setup, spark):
    setup = job_setup("dry", max_records_per_batch=400)
    stream = generate(GeneratorConfig(events=800, keys=8, seed=5, disorder_ms=2_000,
                                      late_fraction=0.05, late_by_ms=3_000, bad_fraction=0.04))
    produce(stream, bootstrap_servers=setup.bootstrap, topic=setup.input_topic)

    dry = run_job(dataclasses.replace(setup.job_config(), dry_run=True), spark=spark,
                  timeout_s=400)

    assert dry.revisions > 0 and dry.late > 0 and dry.dead_letters > 0
    for topic in (setup.changelog_topic, setup.late_topic, setup.dead_letter_topic):
        assert read_committed(setup.bootstrap, topic) == [], topic
    assert not list(Path(setup.delta_path).rglob("*.parquet"))
    # Its checkpoint's progress is not the output's: a run that writes refuses it ...
    with pytest.raises(ConfigError, match="dry_run"):
        run_job(setup.job_config(), spark=spark, timeout_s=120)
    # ... and from a checkpoint of its own writes exactly what the dry run counted.
    real_setup = dataclasses.replace(setup, checkpoint=str(setup.workdir / "real-checkpoint"))
    real = run_job(real_setup.job_config(), spark=spark, timeout_s=400)
    assert (real.revisions, real.late, real.dead_letters) == (
        dry.revisions, dry.late, dry.dead_letters)
    assert check_run(real_setup).revisions == real.revisions


def test_the_merges_into_latest_run_on_an_executor(job_setup, spark, monkeypatch):
    # A MERGE in this (the driver's) process fails: the run passes only if Spark ran them.
    def not_here(*_args: Any) -> float:
        raise AssertionError("a MERGE into latest ran in the driver's process")

    monkeypatch.setattr(latest_merge, "_merge", not_here)
    setup = job_setup("merge-task", max_records_per_batch=300)
    stream = generate(GeneratorConfig(events=900, keys=10, seed=7, disorder_ms=2_000,
                                      late_fraction=0.05, late_by_ms=3_000))
    produce(stream, bootstrap_servers=setup.bootstrap, topic=setup.input_topic)

    result = run_job(setup.job_config(), spark=spark, timeout_s=400)

    assert result.latest_merges >= 1
    report = check_run(setup)  # latest: the highest revision of every window
    assert report.windows > 10 and report.revisions == result.revisions


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "revise", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def test_cli_rejects_a_window_without_unit(job_setup):
    setup = job_setup("cli")
    args = setup.cli_args()
    args[args.index("--window") + 1] = "tumbling:10"
    proc = _cli(*args)
    assert proc.returncode == 2, proc.stderr
    assert '--window "tumbling:10" has no unit' in proc.stderr
    assert "tumbling:10s" in proc.stderr  # says how to fix it


def test_run_job_on_a_session_rejects_a_missing_input_topic_and_starts_no_query(
        spark, job_setup, unique_id):
    """With a session, the preflight runs beside the query's definition: its error still wins,
    and no query, producer or Delta table is left behind."""
    from revise.errors import ConfigError

    setup = job_setup("session-missing")
    setup.input_topic = unique_id("no-such-topic")
    active = {q.id for q in spark.streams.active}
    with pytest.raises(ConfigError, match="does not exist"):
        run_job(setup.job_config(), spark=spark, timeout_s=120)
    assert {q.id for q in spark.streams.active} == active
    assert not (Path(setup.delta_path) / "latest").exists()


def test_cli_rejects_a_missing_input_topic(job_setup, unique_id):
    setup = job_setup("cli")
    setup.input_topic = unique_id("no-such-topic")
    proc = _cli(*setup.cli_args())
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"--input-topic {setup.input_topic!r} does not exist" in proc.stderr
    assert "revise generate" in proc.stderr  # says how to fix it
    assert "Traceback" not in proc.stderr


def test_an_emit_policy_sends_fewer_revisions_and_the_same_finals(job_setup, spark):
    """The same input twice, without and with ``--emit-min-change 0.25 --emit-every 1s``."""
    stream = generate(GeneratorConfig(events=1_200, keys=6, seed=5, disorder_ms=2_000,
                                      late_fraction=0.05, late_by_ms=3_000, bad_fraction=0.02))
    runs = {}
    for name, policy in (("plain", {}), ("policy", {"emit_min_change": 0.25,
                                                     "emit_every_ms": 1_000})):
        setup = job_setup(name, window="tumbling:4s", grace_ms=3_000,
                          max_records_per_batch=100, **policy)
        produce(stream, bootstrap_servers=setup.bootstrap, topic=setup.input_topic)
        run_job(setup.job_config(), spark=spark, timeout_s=400)
        runs[name] = (setup, check_run(setup))  # dense, prev = previous emitted, FINAL = oracle
    (plain, seen), (throttled, thinned) = runs["plain"], runs["policy"]
    assert spark_batches(plain.checkpoint, plain.input_topic) == spark_batches(
        throttled.checkpoint, throttled.input_topic), "the two runs split the input differently"
    assert thinned.windows == seen.windows > 10
    assert thinned.revisions < seen.revisions, (thinned.revisions, seen.revisions)

    def finals(setup):
        rows = read_delta(setup.delta_path, "revisions")
        return {(r["key"], r["window_start_ms"], r["window_end_ms"]):
                tuple(r[c] for c in ("count", "sum", "min", "max", "mean", "n_late",
                                     "max_lateness_ms", "watermark_ms", "batch_id"))
                for r in rows if r["is_final"]}

    assert finals(throttled) == finals(plain)
    by_window = defaultdict(list)
    for r in sorted(read_delta(throttled.delta_path, "revisions"), key=lambda r: r["revision"]):
        by_window[(r["key"], r["window_start_ms"])].append(r)
    for rows in by_window.values():  # each EARLY/LATE after rev 0 meets both rules
        for prev, row in zip(rows, rows[1:], strict=False):
            if not row["is_final"]:
                assert row["watermark_ms"] - prev["watermark_ms"] >= 1_000
                assert any(abs(row[c] - prev[c]) >= 0.25 * abs(prev[c]) > 0 or
                           (prev[c] == 0 and row[c] != 0)
                           for c in ("count", "sum", "min", "max", "mean"))
