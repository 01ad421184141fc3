"""Faults that must end in a clear error (exit 1), lose nothing, and resume on restart.

Each test runs ``python -m revise run --once`` as a subprocess over 1,200 records in
micro-batches of 100, injects the fault once micro-batches flow, then removes its cause, restarts
the job on the same checkpoint, lets it finish and runs ``check_run`` (read_committed changelog =
Delta revisions, nothing lost or duplicated, every FINAL equal to the batch oracle).

How each fault is made (the tests run as root, where ``chmod`` stops no write):

(a) input topic deleted: ``AdminClient.delete_topics`` while the job reads it. To resume, the
    topic is recreated with the same partitions and the same records (keyed, in the same order,
    so every record gets its old partition and offset), as an operator restoring it would.
(b) Delta folder unwritable: a read-only bind mount of the Delta folder onto itself
    (``mount --bind`` + ``mount -o remount,bind,ro``): every write fails with EROFS, for root
    too, and ``umount`` gives the folder back untouched.
(c) checkpoint filesystem full: the checkpoint folder is a small tmpfs (``mount -t tmpfs -o
    size=...``) from the start; mid-run a filler file takes its free space, so Spark's next
    offset/state/commit write fails with ENOSPC. Deleting the filler is the fix.
(d) SIGTERM in the middle of a micro-batch: sent to the Python driver (as ``kill PID`` or a
    container stop would). SPEC §7: SIGTERM stops cleanly, so the exit code is 0; at that moment
    the committed changelog and Delta ``revisions`` must agree (no half-applied batch), and the
    restart finishes the run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from integration_support import CliRun, JobSetup, Outputs, check_run

from revise.generate import EventStream, GeneratorConfig, generate, produce

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.delta, pytest.mark.slow]

RUN_TIMEOUT_S = 300


def _input(setup: JobSetup, events: int = 1_200) -> EventStream:
    stream = generate(GeneratorConfig(events=events, keys=10, seed=21, disorder_ms=2_000,
                                      late_fraction=0.04, late_by_ms=3_000, bad_fraction=0.03))
    produce(stream, bootstrap_servers=setup.bootstrap, topic=setup.input_topic)
    return stream


def _fails_clearly(run: CliRun, *words: str) -> str:
    rc = run.wait(RUN_TIMEOUT_S)
    log = run.log()
    assert rc == 1, f"exit {rc}, expected 1:\n{run.tail()}"
    lines = [ln for ln in log.splitlines() if ln.startswith("revise run: failed:")]
    assert lines, f"no 'revise run: failed:' line:\n{run.tail()}"
    assert "Traceback" not in log.split(lines[-1])[-1], run.tail()
    for w in words:
        assert w.lower() in lines[-1].lower(), f"{w!r} not in {lines[-1]!r}"
    return lines[-1]


def _finish(setup: JobSetup, tmp_path: Path) -> None:
    run = CliRun(setup.cli_args(), cwd=tmp_path, log=tmp_path / "restart.log")
    assert run.wait(RUN_TIMEOUT_S) == 0, run.tail()
    report = check_run(setup)
    assert report.windows > 10 and report.too_late > 0 and report.dead > 0, report


def _start(setup: JobSetup, tmp_path: Path, batch: int = 2) -> CliRun:
    run = CliRun(setup.cli_args(), cwd=tmp_path, log=tmp_path / "first.log")
    assert run.wait_for(f"batch={batch} ", RUN_TIMEOUT_S), run.tail()
    return run


@contextlib.contextmanager
def _mounted(args: list[str], target: Path) -> Iterator[None]:
    subprocess.run(["mount", *args, str(target)], check=True)
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


def test_input_topic_deleted_while_running(job_setup, tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    setup = job_setup("fault-topic", max_records_per_batch=100)
    stream = _input(setup)
    admin = AdminClient({"bootstrap.servers": setup.bootstrap})
    run = _start(setup, tmp_path)
    try:
        admin.delete_topics([setup.input_topic])[setup.input_topic].result(30)
        line = _fails_clearly(run, setup.input_topic)
    finally:
        run.signal_group(signal.SIGKILL)
    assert "deleted" in line or "does not exist" in line, line

    # the operator restores the topic: same partitions, same records, same offsets
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(Exception):
            admin.delete_topics([setup.input_topic])[setup.input_topic].result(10)
        try:
            admin.create_topics([NewTopic(setup.input_topic, num_partitions=2)])[
                setup.input_topic].result(30)
            break
        except Exception:  # noqa: BLE001 - any failure to recreate it: retried until the deadline
            assert time.monotonic() < deadline, "could not recreate the input topic"
            time.sleep(1)
    produce(stream, bootstrap_servers=setup.bootstrap, topic=setup.input_topic)
    _finish(setup, tmp_path)


def test_delta_folder_made_unwritable_mid_run(job_setup, tmp_path):
    setup = job_setup("fault-delta", max_records_per_batch=100)
    _input(setup)
    run = _start(setup, tmp_path)
    delta = Path(setup.delta_path)
    try:
        with _mounted(["--bind", str(delta)], delta):
            subprocess.run(["mount", "-o", "remount,bind,ro", str(delta)], check=True)
            with pytest.raises(OSError):
                (delta / "probe").write_text("root cannot write here")
            _fails_clearly(run, "delta", setup.delta_path)
    finally:
        run.signal_group(signal.SIGKILL)
    _finish(setup, tmp_path)


def test_checkpoint_filesystem_full(job_setup, tmp_path):
    setup = job_setup("fault-ckpt", max_records_per_batch=100)
    _input(setup)
    ckpt = Path(setup.checkpoint)
    ckpt.mkdir(parents=True)
    with _mounted(["-t", "tmpfs", "-o", "size=256m", "tmpfs"], ckpt):
        run = _start(setup, tmp_path)
        filler = ckpt / "filler"
        try:
            with open(filler, "wb") as f, contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * (1 << 20))
            _fails_clearly(run, "checkpoint", "no space left")
        finally:
            run.signal_group(signal.SIGKILL)
        filler.unlink()
        _finish(setup, tmp_path)


def test_sigterm_mid_batch_stops_cleanly_and_the_batch_is_whole(job_setup, tmp_path):
    setup = job_setup("fault-term", max_records_per_batch=100)
    _input(setup)
    run = _start(setup, tmp_path)
    try:
        time.sleep(0.4)  # into the next micro-batch
        os.kill(run.proc.pid, signal.SIGTERM)
        rc = run.wait(RUN_TIMEOUT_S)
    finally:
        run.signal_group(signal.SIGKILL)
    assert rc == 0, run.tail()
    assert "stopped_by_signal=True" in run.log(), run.tail()
    # No half-applied batch: Kafka's committed revisions are exactly Delta's.
    out = Outputs.read(setup)
    kafka = sorted((r["key"], r["window_start_ms"], r["revision"], r["batch_id"])
                   for _p, _o, r in out.kafka_revisions)
    delta = sorted((r["key"], r["window_start_ms"], r["revision"], r["batch_id"])
                   for r in out.revisions)
    assert kafka and kafka == delta
    _finish(setup, tmp_path)
