"""Chaos: SIGKILL one bounded ``revise run --once`` job many times, restart it, check everything.

``python -m benchmarks.chaos --kills 20 --seed S [--events N --keys K --max-records-per-batch M
--bootstrap-servers HOST:PORT]``

One job (tumbling 2 s windows, grace 3 s) over a generated input with disorder, late records and
bad records, split into small micro-batches. The job is started as a subprocess (its own process
group: the Python driver and Spark's JVM) and SIGKILLed, then restarted on the same checkpoint,
until it has been killed ``--kills`` times; then it runs to the end. Three kinds of kills, mixed
by the seeded plan:

- ``random``: a random delay (uniform 0–``--max-delay`` s) after the run's first micro-batch
  reports progress (Spark's start-up takes 10–40 s on a busy machine; a kill in it tests little):
  anywhere in a micro-batch, the Kafka transaction or the Delta writes;
- ``delta``: ``REVISE_CRASH_AT=during_delta:<batch>``, the job kills itself between the Delta
  tables (``revisions`` written, ``late``/``dead_letter``/``latest`` not) of a chosen batch;
- ``close``: a random delay (0–0.5 s) after Spark plans the micro-batch that reads the job's
  close-all command (its control offset in the offset log passes the one before the command
  appeared), i.e. during the bounded run's last micro-batch, which reads the rest of the input
  and closes every window (with one stateful task per core that batch and the run's stop take
  ~1–2 s on a quiet machine, so a longer delay can miss it).

Then ``integration_support.check_run`` checks every exactly-once and FINAL promise: the
read_committed changelog equals Delta ``revisions``, nothing lost or duplicated, every FINAL equals
the batch oracle over the job's own micro-batch split. The checker and the oracle live with the
tests (``tests/integration/integration_support.py``, ``tests/revise/oracle.py``); this module puts
those folders on ``sys.path`` rather than moving them.

Prints the seed, the kill log and the figures; ``--json FILE`` writes them too. Exit 0 when every
check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO / "tests" / "integration", REPO / "tests" / "revise"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from integration_support import CliRun, JobSetup, check_run  # noqa: E402

from revise.checkpoint import OFFSETS_LOG, control_dir  # noqa: E402
from revise.generate import GeneratorConfig, generate, produce  # noqa: E402
from revise.spark.spark_log import (  # noqa: E402
    batch_offsets,
    last_committed_batch,
    last_entry,
)

__all__ = ["ChaosResult", "CliRun", "Kill", "create_topics", "main", "run_chaos",
           "use_repo_pythonpath"]

RUN_TIMEOUT_S = 300.0
KINDS = ("random", "delta", "close")
CLOSE_DELAY_MAX_S = 0.5
"""Longest delay of a ``close`` kill after the close-all command (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class Kill:
    """One run of the job and how it ended.

    Attributes:
        run: 1-based run number.
        kind: ``random``, ``delta`` or ``close`` (see the module docstring), ``final`` for the
            run to completion.
        detail: The delay (s) or crash point used.
        next_batch_before: First micro-batch Spark had not committed when the run started.
        next_batch_after: The same after the run.
        seconds: Wall time of the run (s).
        exit_code: The process's exit code (-9: SIGKILL).
    """

    run: int
    kind: str
    detail: str
    next_batch_before: int
    next_batch_after: int
    seconds: float
    exit_code: int


@dataclass
class ChaosResult:
    """What a chaos run did and what the checker saw."""

    seed: int
    kills: list[Kill] = field(default_factory=list)
    seconds: float = 0.0
    windows: int = 0
    revisions: int = 0
    late_revisions: int = 0
    too_late: int = 0
    dead_letters: int = 0

    @property
    def n_kills(self) -> int:
        """Runs that ended by SIGKILL."""
        return sum(1 for k in self.kills if k.exit_code == -signal.SIGKILL)

    def kinds(self) -> dict[str, int]:
        """Kills per kind."""
        out: dict[str, int] = {}
        for k in self.kills:
            if k.exit_code == -signal.SIGKILL:
                out[k.kind] = out.get(k.kind, 0) + 1
        return out


def use_repo_pythonpath() -> None:
    """Put this checkout first on ``PYTHONPATH`` so the job and Spark's workers import it."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(REPO) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *paths])


def next_batch(checkpoint: str) -> int:
    """The first micro-batch id Spark has not recorded in its commit log."""
    return last_committed_batch(checkpoint) + 1


def _close_files(checkpoint: str) -> int:
    control = control_dir(checkpoint)
    return len(list(control.glob("close-*.json"))) if control.is_dir() else 0


def _planned_control(setup: JobSetup) -> int:
    """The control offset of the last micro-batch in the offset log (-1: none or no file)."""
    checkpoint = setup.checkpoint
    return batch_offsets(checkpoint, last_entry(checkpoint, OFFSETS_LOG), setup.input_topic)[1]


def create_topics(bootstrap: str, names: Sequence[str], partitions: int) -> None:
    """Create topics with the broker's default replication (3 on a 3-node embedded cluster)."""
    from sinks.kafka.admin import create_topics as create

    create(bootstrap, names, partitions=partitions, timeout_s=60)


def _plan(rng: random.Random, i: int, kills: int, nb: int, data_batches: int) -> str:
    """The kind of kill number ``i`` (0-based): at least one of each, close-all ones last."""
    closes = max(1, kills // 5)
    if i >= kills - closes or nb >= data_batches - 1:
        return "close"
    if i == 0:
        return "random"
    if i == 1:
        return "delta"
    return rng.choice(("random", "random", "delta"))


def _one_run(setup: JobSetup, kind: str, rng: random.Random, data_batches: int,
             max_delay_s: float, log: Path) -> tuple[str, int]:
    """Start the job, kill it as ``kind`` says; returns (detail, exit code)."""
    args = setup.cli_args()
    env: dict[str, str] = {}
    nb = next_batch(setup.checkpoint)
    detail = ""
    if kind == "delta":
        target = min(nb + rng.randint(0, 2), max(data_batches - 1, nb))
        env["REVISE_CRASH_AT"] = f"during_delta:{target}"
        detail = env["REVISE_CRASH_AT"]
    run = CliRun(args, cwd=setup.workdir, env=env, log=log)
    try:
        if kind == "random":
            delay = rng.uniform(0.0, max_delay_s)
            detail = f"{delay:.2f}s after its first micro-batch"
            run.wait_for("batch=", RUN_TIMEOUT_S)
            _sleep_unless_done(run, delay)
            run.signal_group(signal.SIGKILL)
        elif kind == "close":
            before = _close_files(setup.checkpoint)
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while (_close_files(setup.checkpoint) <= before and run.proc.poll() is None
                   and time.monotonic() < deadline):
                time.sleep(0.05)
            control = _planned_control(setup)
            while (_planned_control(setup) <= control and run.proc.poll() is None
                   and time.monotonic() < deadline):
                time.sleep(0.02)
            delay = rng.uniform(0.0, CLOSE_DELAY_MAX_S)
            detail = f"{delay:.2f}s into the batch that closes"
            _sleep_unless_done(run, delay)
            run.signal_group(signal.SIGKILL)
        return detail, run.wait(RUN_TIMEOUT_S)
    except BaseException:
        run.signal_group(signal.SIGKILL)
        raise


def _sleep_unless_done(run: CliRun, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and run.proc.poll() is None:
        time.sleep(0.02)


def run_chaos(setup: JobSetup, *, kills: int, seed: int, data_batches: int,
              max_delay_s: float = 8.0, kinds: Sequence[str] | None = None) -> ChaosResult:
    """Kill the job ``kills`` times (as planned from ``seed``), run it to the end, check it.

    Args:
        setup: The job; its input must already be in the input topic.
        kills: How many SIGKILLs to deliver (runs that finish first end the kill phase).
        seed: Seed of the plan and of the random delays.
        data_batches: Expected number of data micro-batches (input / max per batch).
        max_delay_s: Upper bound of a random kill's delay after the first micro-batch (s).
        kinds: An explicit kind per kill instead of the seeded plan.

    Returns:
        The kill log and the checker's figures.

    Raises:
        AssertionError: A run failed, or an exactly-once / FINAL check did not hold.
    """
    rng = random.Random(seed)
    result = ChaosResult(seed)
    setup.workdir.mkdir(parents=True, exist_ok=True)  # the runs' logs go there
    t0 = time.monotonic()
    for i in range(kills):
        nb = next_batch(setup.checkpoint)
        kind = kinds[i] if kinds else _plan(rng, i, kills, nb, data_batches)
        tr = time.monotonic()
        detail, rc = _one_run(setup, kind, rng, data_batches, max_delay_s,
                              setup.workdir / f"run-{i + 1:02d}-{kind}.log")
        kill = Kill(i + 1, kind, detail, nb, next_batch(setup.checkpoint),
                    round(time.monotonic() - tr, 1), rc)
        result.kills.append(kill)
        print(f"kill {kill.run:2d} {kind:6s} {detail:38s} batches {nb:3d} -> "
              f"{kill.next_batch_after:3d} rc={rc} {kill.seconds:5.1f}s", flush=True)
        if rc == 0:
            break  # the job finished before this kill landed
        assert rc == -signal.SIGKILL, f"run {i + 1} failed with exit {rc}: see its log"
    nb = next_batch(setup.checkpoint)
    final = CliRun(setup.cli_args(), cwd=setup.workdir, log=setup.workdir / "run-final.log")
    rc = final.wait(RUN_TIMEOUT_S)
    result.kills.append(Kill(len(result.kills) + 1, "final", "to completion", nb,
                             next_batch(setup.checkpoint), 0.0, rc))
    assert rc == 0, f"the final run failed (exit {rc}):\n{final.tail()}"
    result.seconds = round(time.monotonic() - t0, 1)
    report = check_run(setup)
    result.windows, result.revisions = report.windows, report.revisions
    result.late_revisions, result.too_late = report.late_revisions, report.too_late
    result.dead_letters = report.dead
    return result


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("--kills", type=int, default=20, help="SIGKILLs to deliver (default 20)")
    p.add_argument("--seed", type=int, default=None, help="plan seed (default: random)")
    p.add_argument("--events", type=int, default=3_000, help="input records (default 3000)")
    p.add_argument("--keys", type=int, default=20, help="distinct keys (default 20)")
    p.add_argument("--max-records-per-batch", type=int, default=100,
                   help="micro-batch size in records (default 100)")
    p.add_argument("--max-delay", type=float, default=8.0,
                   help="upper bound of a random kill's delay after the first micro-batch, s "
                        "(default 8)")
    p.add_argument("--bootstrap-servers", default=None,
                   help="an existing broker; default: start an embedded one in a temp folder")
    p.add_argument("--workdir", default=None, help="where the checkpoint, Delta and logs go")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit code."""
    args = _parser().parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    use_repo_pythonpath()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="revise-chaos-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(f"seed={seed} kills={args.kills} events={args.events} "
          f"max_records_per_batch={args.max_records_per_batch} workdir={work}", flush=True)
    from revise.infra import broker

    embedded = contextlib.ExitStack()  # the broker started here, if none was given
    bootstrap = embedded.enter_context(
        broker.given_or_embedded(args.bootstrap_servers, work / "broker"))
    try:
        tag = uuid.uuid4().hex[:8]
        setup = JobSetup(
            bootstrap=bootstrap, input_topic=f"chaos-in-{tag}",
            changelog_topic=f"chaos-changelog-{tag}", late_topic=f"chaos-late-{tag}",
            dead_letter_topic=f"chaos-dead-{tag}", query_id=f"chaos-{tag}",
            delta_path=str(work / "delta"), checkpoint=str(work / "checkpoint"), workdir=work,
            max_records_per_batch=args.max_records_per_batch,
        )
        create_topics(bootstrap, [setup.input_topic, setup.changelog_topic, setup.late_topic,
                                  setup.dead_letter_topic], partitions=2)
        stream = generate(GeneratorConfig(
            events=args.events, keys=args.keys, seed=seed, disorder_ms=2_000,
            late_fraction=0.03, late_by_ms=3_000, bad_fraction=0.03))
        produce(stream, bootstrap_servers=bootstrap, topic=setup.input_topic)
        data_batches = math.ceil(args.events / args.max_records_per_batch)
        try:
            result = run_chaos(setup, kills=args.kills, seed=seed, data_batches=data_batches,
                               max_delay_s=args.max_delay)
        except AssertionError as exc:
            print(f"chaos: FAILED: {exc}", file=sys.stderr)
            return 1
    finally:
        embedded.close()
    figures = {**asdict(result), "n_kills": result.n_kills, "kinds": result.kinds(),
               "restarts": len(result.kills) - 1, "events": args.events}
    print(f"seed={seed} kills={result.n_kills} {result.kinds()} restarts={len(result.kills) - 1}"
          f" seconds={result.seconds} windows={result.windows} revisions={result.revisions}"
          f" late_revisions={result.late_revisions} too_late={result.too_late}"
          f" dead_letters={result.dead_letters}: exactly-once and every FINAL checked OK")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    if result.n_kills < args.kills:
        print(f"chaos: only {result.n_kills} of {args.kills} kills landed before the job "
              "finished; use more --events", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
