"""Zombie fencing: two instances of one query id on one checkpoint.

Instance A starts and commits its first micro-batch, then freezes (SIGSTOP of its whole process
group: driver and JVM, as in a long GC pause or a partitioned host). Instance B starts on the
same checkpoint with the same query id, fences A's transactional producer (same
``transactional.id``), replays from the checkpoint and runs to completion. Then A wakes up
(SIGCONT). A must stop with a non-zero exit and say why, and nothing A does after waking may
show up in Kafka or Delta: exactly-once still holds, and the outputs equal the batch oracle over
the micro-batch split of the checkpoint.

With ``--overlap-commit``, A freezes at the worst moment that mode adds: Spark has recorded a
micro-batch whose Kafka and Delta writes have not begun. B must rewind that record and run the
batch again, and A's writes after waking must be refused.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest
from integration_support import CliRun, check_run

from revise.generate import GeneratorConfig, generate, produce
from revise.spark.rewind import read_done
from revise.spark.spark_log import last_committed_batch

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.delta, pytest.mark.slow]

RUN_TIMEOUT_S = 300


def test_a_woken_zombie_is_fenced_and_exactly_once_holds(job_setup, tmp_path):
    setup = job_setup("zombie", window="tumbling:2s", grace_ms=3_000, max_records_per_batch=200)
    stream = generate(GeneratorConfig(events=800, keys=10, seed=3, disorder_ms=2_000,
                                      late_fraction=0.05, late_by_ms=3_000, bad_fraction=0.04))
    produce(stream, bootstrap_servers=setup.bootstrap, topic=setup.input_topic)
    args = setup.cli_args()

    a = CliRun(args, cwd=tmp_path, log=tmp_path / "a.log")
    try:
        assert a.wait_for("batch=0 ", RUN_TIMEOUT_S), a.tail()  # batch 0 committed
        a.signal_group(signal.SIGSTOP)

        b = CliRun(args, cwd=tmp_path, log=tmp_path / "b.log")
        assert b.wait(RUN_TIMEOUT_S) == 0, b.tail()
    finally:
        a.signal_group(signal.SIGCONT)
    rc = a.wait(120)  # a fenced instance must not hang

    log = a.log()
    assert rc == 1, f"the zombie exited with {rc}:\n{a.tail()}"
    assert "revise run: failed:" in log, a.tail()
    assert "fenced" in log and "another instance" in log, a.tail()
    # issue 9 item 7: the fenced zombie's traceback is not printed twice (py4j and Spark)
    assert log.count("Traceback (most recent call last)") <= 1, a.tail(120)

    check_run(setup)


def _frozen(pid: int, timeout_s: float = 30.0) -> bool:
    """Whether process ``pid`` is stopped (state ``T`` in ``/proc``), waiting up to the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "T":
            return True
        time.sleep(0.05)
    return False


def test_a_zombie_woken_with_its_batch_recorded_but_unwritten_is_fenced(job_setup, tmp_path):
    setup = job_setup("zombie-overlap", window="tumbling:2s", grace_ms=3_000,
                      max_records_per_batch=200)
    stream = generate(GeneratorConfig(events=800, keys=10, seed=5, disorder_ms=2_000,
                                      late_fraction=0.05, late_by_ms=3_000, bad_fraction=0.04))
    produce(stream, bootstrap_servers=setup.bootstrap, topic=setup.input_topic)
    args = [*setup.cli_args(), "--delta-commit-interval", "0s", "--overlap-commit"]

    a = CliRun(args, cwd=tmp_path, env={"REVISE_CRASH_AT": "after_record:1:stop"},
               log=tmp_path / "a.log")
    try:
        assert a.wait_for("REVISE_CRASH_AT: freezing", RUN_TIMEOUT_S), a.tail()
        assert _frozen(a.proc.pid), a.tail()
        # Spark recorded batch 1; the sinks finished batch 0 only
        assert (last_committed_batch(setup.checkpoint), read_done(setup.checkpoint)) == (1, 0)

        b = CliRun(args, cwd=tmp_path, log=tmp_path / "b.log")
        assert b.wait(RUN_TIMEOUT_S) == 0, b.tail()
        assert re.search(r"micro-batch 1 was recorded by Spark but its Kafka and Delta writes",
                         b.log()), b.tail()
        b_done = read_done(setup.checkpoint)
    finally:
        a.signal_group(signal.SIGCONT)
    rc = a.wait(120)

    log = a.log()
    assert rc == 1, f"the zombie exited with {rc}:\n{a.tail()}"
    assert "fenced" in log and "another instance" in log, a.tail()
    assert read_done(setup.checkpoint) == b_done  # the zombie did not lower (or move) it
    check_run(setup)
