"""What a user reads: a bounded ``revise run`` prints revise's own lines only (every line of its
stdout and stderr has one of revise's shapes, tests/integration/console_lines.py); Spark's, the
JVM's, the Python workers' and librdkafka's lines go to the log file it names once. A run that
fails still says why on the console, and where the rest is; ``-v`` prints it all on the console.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from console_lines import SPARK_LOG4J, foreign_lines, log_file
from integration_support import CliRun

from revise.generate import GeneratorConfig, generate, produce

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.delta]

RUN_TIMEOUT_S = 300


def test_a_bounded_run_prints_only_its_own_lines_and_the_rest_goes_to_its_log_file(
        job_setup, tmp_path: Path) -> None:
    setup = job_setup("console", window="tumbling:2s", grace_ms=3_000, max_records_per_batch=300)
    stream = generate(GeneratorConfig(events=900, keys=10, seed=3, disorder_ms=2_000,
                                      late_fraction=0.05, late_by_ms=3_000, bad_fraction=0.04))
    produce(stream, bootstrap_servers=setup.bootstrap, topic=setup.input_topic)
    home = tmp_path / "home"
    run = CliRun(setup.cli_args(), cwd=tmp_path, env={"REVISE_HOME": str(home)},
                 log=tmp_path / "run.log")
    assert run.wait(RUN_TIMEOUT_S) == 0, run.tail()
    output = run.log()
    assert re.search(r"INFO revise batch=\d+ records=\d+ ", output), output
    assert re.search(r"INFO revise done query_id=\S+ batches=\d+ ", output), output
    foreign = foreign_lines(output)
    assert not foreign, "lines that are not revise's own:\n" + "\n".join(foreign)

    path = log_file(output)
    assert path.parent == home / "logs" and path.name.startswith("run-"), path
    written = path.read_text(errors="replace")
    assert SPARK_LOG4J.search(written), written[-3000:]  # Spark's log4j lines
    assert "Streaming TransformWithStateInPandas Python worker" in written  # a Python worker's
    assert re.search(r"INFO revise done query_id=", written)  # revise's own, in order with them


def test_a_run_whose_jvm_cannot_start_says_so_and_names_the_log_file(
        job_setup, tmp_path: Path) -> None:
    setup = job_setup("console-fails")
    home = tmp_path / "home"
    env = {"REVISE_HOME": str(home), "JAVA_HOME": str(tmp_path / "no-java")}
    run = CliRun(setup.cli_args(), cwd=tmp_path, env=env, log=tmp_path / "run.log")
    assert run.wait(RUN_TIMEOUT_S) == 1, run.tail()
    output = run.log()
    assert "revise run: error: the Spark driver JVM did not start" in output, output
    path = log_file(output)
    assert f"revise run: Spark's and the Kafka clients' lines are in {path}" in output, output
    assert "no-java/bin/java" in path.read_text()  # the JVM launcher's own complaint, kept

    # -v: the launcher's lines on the console, and no log file
    verbose = CliRun([*setup.cli_args(), "-v"], cwd=tmp_path, env=env,
                     log=tmp_path / "run-v.log")
    assert verbose.wait(RUN_TIMEOUT_S) == 1, verbose.tail()
    assert "lines go to" not in verbose.log() and "spark-class" in verbose.log(), verbose.log()
    assert sorted(p.name for p in (home / "logs").iterdir()) == [path.name]
