"""The short chaos run of CI: ``benchmarks.chaos.run_chaos`` with three kills, one of each kind.

1. ``random``: SIGKILL of the job's process group after a random delay from its start;
2. ``delta``: the job kills itself between the Delta tables of a batch (``during_delta``);
3. ``close``: SIGKILL shortly after the bounded run drops its close-all command, i.e. during
   the micro-batch that closes every window.

Each kill is followed by a restart on the same checkpoint; the last run completes. Then
``check_run``: the read_committed changelog equals Delta, nothing lost or duplicated, every FINAL
equals the batch oracle over the job's split. The 20-kill run is ``python -m benchmarks.chaos``
(docs/RELIABILITY.md).
"""

from __future__ import annotations

import random
import signal

import pytest

from benchmarks.chaos import run_chaos
from revise.generate import GeneratorConfig, generate, produce

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.delta, pytest.mark.slow]


def test_three_kinds_of_kills_then_exactly_once_and_finals_hold(job_setup):
    setup = job_setup("chaos", window="tumbling:2s", grace_ms=3_000, max_records_per_batch=200)
    stream = generate(GeneratorConfig(events=1_200, keys=10, seed=7, disorder_ms=2_000,
                                      late_fraction=0.05, late_by_ms=3_000, bad_fraction=0.04))
    produce(stream, bootstrap_servers=setup.bootstrap, topic=setup.input_topic)
    seed = random.randrange(1_000_000)

    # A quiet machine runs the whole input in ~5.5 s after the first micro-batch (2026-11-26):
    # a random kill up to 6 s after it could land after the end and stop the chain early.
    result = run_chaos(setup, kills=3, seed=seed, data_batches=6, max_delay_s=3.0,
                       kinds=("random", "delta", "close"))

    log = [f"{k.kind} {k.detail} rc={k.exit_code}" for k in result.kills]
    assert [k.kind for k in result.kills] == ["random", "delta", "close", "final"], log
    assert all(k.exit_code == -signal.SIGKILL for k in result.kills[:3]), (seed, log)
    assert result.kills[-1].exit_code == 0, log
    assert "during_delta" in result.kills[1].detail
    assert result.windows > 10 and result.revisions >= result.windows, (seed, log)
    assert result.too_late > 0 and result.dead_letters > 0, (seed, log)
