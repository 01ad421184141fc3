"""End to end on the real systems: generated Kafka input → ``run_job(once=True)`` on Spark →
transactional changelog + Delta tables, checked against the batch oracle over the job's own
micro-batch split (see ``integration_support.check_run`` for the full list of promises).

Each case is one bounded run (1,200 events with disorder, late and malformed records, three
micro-batches of input, the last of which also closes every window) on the session's Spark.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from integration_support import REPO, check_run, spark_batches

from revise.generate import GeneratorConfig, generate, produce
from revise.spark.driver import NO_DATA_BATCHES, run_job

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
    # The close came with the rest of the input: the batch that read it is the last one and
    # read input records (revise.spark.close_all), so no micro-batch of its own; and no
    # micro-batch read nothing (Spark's no-data batches are off for a bounded run only).
    batches = spark_batches(setup.checkpoint, setup.input_topic)
    *_, before, last = batches
    assert last.control is not None and before.control is None
    assert last.kafka_end != before.kafka_end, "the close took a micro-batch of its own"
    assert all((b.kafka_end, b.control) != (a.kafka_end, a.control)
               for a, b in zip(batches, batches[1:], strict=False)), batches
    assert spark.conf.get(NO_DATA_BATCHES) == "true", "the session's own setting changed"
    assert result.input_records >= len(stream)
    assert result.revisions == report.revisions
    # The input really exercised what is checked.
    assert report.windows > 10 and report.too_late > 0 and report.dead > 0
    if mode == "revision":
        assert report.late_revisions > 0, "no accepted late record produced a LATE revision"
        assert report.revisions > report.windows
    else:
        assert report.revisions == report.windows
    if window.startswith("session"):
        assert report.retracted > 0, "no session merge or extension happened"


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
