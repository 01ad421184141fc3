"""An unbounded job's Delta commits with ``--delta-commit-interval``: fewer commits than
micro-batches, and the last staged batches committed while the job idles.

The job runs without ``--once`` on a few hundred records in micro-batches of 100 (the 500 ms
trigger) with a 20 s interval: the first micro-batch is appended at once, every later one
comes within the interval and is staged. Once the input is used up no micro-batch follows (the
watermark stops moving), so the staged batches reach Delta only through the job's watch loop
(``DeltaTables.commit_due_history``): while the job still runs, Delta ``revisions`` must come
to equal the committed changelog and the stage folder must empty.

The same run is given ``--delta-log-retention 12h``: the job sets it on its four tables.
"""

from __future__ import annotations

import signal
import time

import pytest
from deltalake import DeltaTable as RustDeltaTable
from integration_support import CliRun, Outputs

from revise.checkpoint import stage_dir
from revise.generate import GeneratorConfig, generate, produce
from revise.vocab import TABLE_NAMES
from sinks.delta_layout import LOG_RETENTION_KEY

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.delta, pytest.mark.slow]

INTERVAL_S = 20
"""Longer than the whole input takes after the first micro-batch's commit (a few seconds),
so every later micro-batch waits in the stage until the watch loop commits it."""


def _ident(row: dict) -> tuple:
    return (row["key"], row["window_start_ms"], row["window_end_ms"], row["revision"])


def test_an_idle_job_commits_its_staged_batches_and_commits_less_than_per_batch(
        job_setup, tmp_path):
    setup = job_setup("commits", window="tumbling:2s", grace_ms=1_000, max_records_per_batch=100)
    produce(generate(GeneratorConfig(events=600, keys=10, seed=3, disorder_ms=500)),
            bootstrap_servers=setup.bootstrap, topic=setup.input_topic)
    args = [a for a in setup.cli_args() if a != "--once"]
    args += ["--delta-commit-interval", f"{INTERVAL_S}s", "--delta-log-retention", "12h"]
    run = CliRun(args, cwd=tmp_path, log=tmp_path / "run.log")
    try:
        assert run.wait_for("batch=5 ", 300), run.tail()  # the input is used up by then
        deadline = time.monotonic() + INTERVAL_S + 60
        while True:
            out = Outputs.read(setup)
            kafka = sorted(_ident(r) for _p, _o, r in out.kafka_revisions)
            delta = sorted(_ident(r) for r in out.revisions)
            staged = list(stage_dir(setup.checkpoint).glob("batch-*"))
            if kafka and kafka == delta and not staged:
                break
            assert time.monotonic() < deadline, (len(kafka), len(delta), staged, run.tail())
            time.sleep(2)
        assert run.proc.poll() is None, "the job stopped: its end, not its watch loop, committed"
        # fewer commits to revisions than micro-batches with revisions
        with_output = {r["batch_id"] for _p, _o, r in out.kafka_revisions}
        history = RustDeltaTable(f"{setup.delta_path}/revisions").history()
        appends = [h for h in history if h.get("operation") == "WRITE"]
        assert 0 < len(appends) < len(with_output), (len(appends), sorted(with_output))
        for name in TABLE_NAMES:
            conf = RustDeltaTable(f"{setup.delta_path}/{name}").metadata().configuration
            assert conf.get(LOG_RETENTION_KEY) == "interval 12 hours", (name, conf)
    finally:
        run.signal_group(signal.SIGTERM)
        run.wait(120)
