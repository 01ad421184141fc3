"""The per-micro-batch time split of ``revise run``'s batch lines (issue 12, item 4)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from revise.cli.run import batch_parts
from revise.spark.committer import STEP_MS_KEPT, BatchCommitter, JobResult


def _committer() -> BatchCommitter:
    none: Any = None  # the step timings need none of the committer's sinks
    # nor of its settings but this one
    cfg: Any = SimpleNamespace(spark=SimpleNamespace(overlap_commit=False))
    return BatchCommitter(cfg, none, none, JobResult("q"))


def test_batch_parts_split_spark_and_commit_steps() -> None:
    progress = {
        "batchId": 7,
        "durationMs": {"latestOffset": 12, "getBatch": 3, "queryPlanning": 40, "addBatch": 610,
                       "walCommit": 20, "commitOffsets": 15, "triggerExecution": 700},
        "revise": {"collect_ms": 420, "kafka_ms": 30, "delta_ms": 150},
    }
    assert batch_parts(progress) == ("offsets_ms=15 plan_ms=40 sink_ms=610 log_ms=35 "
                                     "collect_ms=420 kafka_ms=30 delta_ms=150")


def test_batch_parts_of_a_report_without_commit_steps() -> None:
    assert batch_parts({"durationMs": {"addBatch": 5}}) == (
        "offsets_ms=0 plan_ms=0 sink_ms=5 log_ms=0")


def test_step_timings_are_taken_once_and_only_the_recent_ones_kept() -> None:
    c = _committer()
    n = STEP_MS_KEPT + 8
    for b in range(n):
        c._steps(b, 0.4204, 0.03, 0.1506)
    assert c.take_steps(0) is None  # an unbounded run does not keep every batch's
    assert c.take_steps(n - 1) == {"collect_ms": 420, "kafka_ms": 30, "delta_ms": 151}
    assert c.take_steps(n - 1) is None
    assert c.take_steps(n - STEP_MS_KEPT) is not None
    assert c.take_steps(n - STEP_MS_KEPT - 1) is None
