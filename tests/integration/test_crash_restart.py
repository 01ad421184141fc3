"""Crash and restart: ``python -m revise run --once`` killed at every point of the commit
sequence, restarted on the same checkpoint each time, then run to the end; and killed while
micro-batches wait in the Delta history stage.

The chain runs with ``--delta-commit-interval 0s`` (every micro-batch appended to the history
tables at once), so each of its crash points falls in the batch it aims at; the staged commits
of the default interval have their own test below.

One checkpoint goes through the whole chain (each restart first replays the batch the last one died
in, so every crash point also follows a replay of an earlier crash):

1. ``before_kafka_commit`` (transaction open, not committed → aborted by the next instance);
2. ``after_kafka`` (Kafka committed, Delta not written, Spark has not recorded the batch);
3. ``during_delta`` (``revisions`` written, ``late``/``dead_letter``/``latest`` not);
4. ``before_latest`` (Spark has recorded the batch, its ``latest`` MERGE has not run: no replay
   redoes it, the next start's catch-up from ``revisions`` must);
5. ``after_delta`` (Kafka and the Delta appends written, the ``latest`` MERGE running, Spark has
   not recorded the batch);
6. a clean restart to completion.

Then a read_committed consumer and a Delta reader must see every revision exactly once, the
two must agree, and the FINALs must equal the batch oracle over the job's micro-batch split
(``integration_support.check_run``). Each crash point aims at the batch after the first one
Spark has not committed yet (read from the checkpoint), so every run also completes a batch; the
last ones land on the batch that reads the rest of the input and closes every window, whose
FINALs are replayed too. SIGKILL of the whole process group at a random moment, and during the
batch that closes, is ``test_chaos``.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest
from console_lines import foreign_lines
from deltalake import DeltaTable as RustDeltaTable
from integration_support import CliRun, check_run

from revise.checkpoint import stage_dir
from revise.generate import GeneratorConfig, generate, produce
from revise.spark.spark_log import last_committed_batch

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.delta, pytest.mark.slow]

RUN_TIMEOUT_S = 300


def _next_batch(checkpoint: str) -> int:
    return last_committed_batch(checkpoint) + 1


def _crash_at(point: str, args: list[str], checkpoint: str, n_data_batches: int,
              tmp_path: Path) -> tuple[int, CliRun]:
    """Run the job killed at ``point`` of the batch after the first one not yet committed.

    Every batch up to ``n_data_batches - 1`` reads input, so has output and the crash fires;
    the close-all follows in a micro-batch of its own.
    """
    target = min(_next_batch(checkpoint) + 1, n_data_batches - 1)
    run = CliRun(args, cwd=tmp_path, env={"REVISE_CRASH_AT": f"{point}:{target}"},
                 log=tmp_path / f"run-{point}-{target}.log")
    rc = run.wait(RUN_TIMEOUT_S)
    assert rc == -signal.SIGKILL, f"no crash at {point}:{target} (rc={rc}):\n{run.tail()}"
    assert f"killing the job at {point} of batch" in run.log()
    return target, run


def test_kill_at_every_commit_point_loses_and_duplicates_nothing(
    job_setup, tmp_path
):
    setup = job_setup("crash", window="tumbling:2s", grace_ms=3_000, max_records_per_batch=200)
    n_data_batches = 6  # 1,200 events, <= 200 per batch: 6+ batches, the last one closes
    stream = generate(GeneratorConfig(events=1_200, keys=10, seed=5, disorder_ms=2_000,
                                      late_fraction=0.05, late_by_ms=3_000, bad_fraction=0.04))
    produce(stream, bootstrap_servers=setup.bootstrap, topic=setup.input_topic)
    args = [*setup.cli_args(), "--delta-commit-interval", "0s"]
    history = []

    # 1.–6. each commit point, aimed at the first batch not yet committed; after_partition_commit
    # kills the job once partition 0's transaction committed, the other partition's in any state
    for point in ("before_kafka_commit", "after_partition_commit", "after_kafka",
                  "during_delta", "before_latest", "after_delta"):
        target, run = _crash_at(point, args, setup.checkpoint, n_data_batches, tmp_path)
        history.append(f"{point}:{target}")
        if point == "before_latest":  # latest left behind: a batch Spark recorded is not in it
            app = f"revise-{setup.query_id}"
            behind = {t: RustDeltaTable(f"{setup.delta_path}/{t}").transaction_version(app)
                      for t in ("revisions", "latest")}
            assert behind["revisions"] >= target > (behind["latest"] or -1), behind
            assert _next_batch(setup.checkpoint) > target, "Spark had not recorded the batch"
        if len(history) > 1 and history[-2].startswith("before_latest:"):
            # this start redid that MERGE from revisions, before its first batch
            assert re.search(r"latest caught up with \d+ revisions", run.log()), run.tail()

    # 7. to completion
    run = CliRun(args, cwd=tmp_path, log=tmp_path / "run-final.log")
    rc = run.wait(RUN_TIMEOUT_S)
    assert rc == 0, run.tail()
    # the batch that died after_delta was committed to Kafka: the restart skipped it there
    replayed = re.search(r"replayed_batches=(\d+)", run.log())
    assert replayed and int(replayed.group(1)) >= 1, run.tail()
    # each batch line splits its time: Spark's parts and the commit's steps (issue 12, item 4)
    assert re.search(r"batch=\d+ records=\d+ .*sink_ms=\d+ log_ms=\d+ collect_ms=\d+ "
                     r"kafka_ms=\d+ delta_ms=\d+", run.log()), run.tail()
    # without -v a bounded run prints revise's own lines only, even after crashes and replays
    foreign = foreign_lines(run.log())
    assert not foreign, "lines that are not revise's own:\n" + "\n".join(foreign)

    report = check_run(setup)
    assert report.windows > 10 and report.late_revisions > 0 and report.too_late > 0, history


def _staged(checkpoint: str) -> list[str]:
    folder = stage_dir(checkpoint)
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_kill_with_batches_staged_for_delta_loses_and_duplicates_nothing(job_setup, tmp_path):
    """Micro-batches Spark has recorded but whose history data files wait in the stage (a long
    ``--delta-commit-interval``) are committed by the next start, before its first batch."""
    setup = job_setup("staged", window="tumbling:2s", grace_ms=3_000, max_records_per_batch=200)
    stream = generate(GeneratorConfig(events=1_000, keys=10, seed=7, disorder_ms=2_000,
                                      late_fraction=0.05, late_by_ms=3_000, bad_fraction=0.04))
    produce(stream, bootstrap_servers=setup.bootstrap, topic=setup.input_topic)
    args = [*setup.cli_args(), "--delta-commit-interval", "1h"]

    # batch 0 is appended at once (no commit yet), 1 and 2 wait in the stage; killed in batch 3
    run = CliRun(args, cwd=tmp_path, env={"REVISE_CRASH_AT": "before_kafka:3"},
                 log=tmp_path / "run-staged.log")
    rc = run.wait(RUN_TIMEOUT_S)
    assert rc == -signal.SIGKILL, f"no crash (rc={rc}):\n{run.tail()}"
    assert _next_batch(setup.checkpoint) == 3, "Spark had not recorded batches 0-2"
    assert _staged(setup.checkpoint) == ["batch-000000000001.json", "batch-000000000002.json"]
    app = f"revise-{setup.query_id}"
    assert RustDeltaTable(f"{setup.delta_path}/revisions").transaction_version(app) == 0

    run = CliRun(args, cwd=tmp_path, log=tmp_path / "run-final.log")
    rc = run.wait(RUN_TIMEOUT_S)
    assert rc == 0, run.tail()
    assert "Delta history caught up with 2 staged micro-batches" in run.log(), run.tail()
    assert _staged(setup.checkpoint) == []  # the end of the run committed the rest
    report = check_run(setup)
    assert report.windows > 10 and report.too_late > 0


def test_overlap_commit_killed_after_spark_recorded_the_batch_loses_and_duplicates_nothing(
    job_setup, tmp_path
):
    """``--overlap-commit``: a micro-batch's Kafka and Delta writes run while Spark records it
    and computes the next one. Killed there (``after_record``: Spark recorded the batch, its
    writes had not begun) and at the points inside those writes, each restart first rewinds
    Spark's record of the unfinished batch (``revise.spark.rewind``) and runs it again."""
    from revise.spark.rewind import read_done

    setup = job_setup("overlap", window="tumbling:2s", grace_ms=3_000,
                      max_records_per_batch=200)
    n_data_batches = 5
    stream = generate(GeneratorConfig(events=1_000, keys=10, seed=11, disorder_ms=2_000,
                                      late_fraction=0.05, late_by_ms=3_000, bad_fraction=0.04))
    produce(stream, bootstrap_servers=setup.bootstrap, topic=setup.input_topic)
    args = [*setup.cli_args(), "--delta-commit-interval", "0s", "--overlap-commit"]
    rewound = 0
    for point in ("after_record", "before_kafka_commit", "after_record", "after_kafka"):
        target, run = _crash_at(point, args, setup.checkpoint, n_data_batches, tmp_path)
        rewound += len(re.findall(r"was recorded by Spark but its Kafka and Delta writes",
                                  run.log()))
        if point == "after_record":  # Spark is one batch past what the sinks finished
            assert _next_batch(setup.checkpoint) == target + 1
            assert read_done(setup.checkpoint) == target - 1

    run = CliRun(args, cwd=tmp_path, log=tmp_path / "run-final.log")
    rc = run.wait(RUN_TIMEOUT_S)
    assert rc == 0, run.tail()
    rewound += len(re.findall(r"was recorded by Spark but its Kafka and Delta writes", run.log()))
    assert rewound >= 2, "the restarts after after_record rewound nothing"
    assert read_done(setup.checkpoint) == _next_batch(setup.checkpoint) - 1
    report = check_run(setup)
    assert report.windows > 10 and report.late_revisions > 0 and report.too_late > 0
