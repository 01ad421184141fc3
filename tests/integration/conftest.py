"""Fixtures of the end-to-end tests: job configs, generated input, subprocess runs of the CLI.

Spark's Python workers and ``python -m revise`` subprocesses must import ``revise`` from this
checkout even when it is not pip-installed: the repository root is put on ``PYTHONPATH`` here, at
collection time, before any test starts the JVM (workers inherit the JVM's environment).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

REPO = Path(__file__).resolve().parents[2]
_paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if str(REPO) not in _paths:
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *_paths])
# The batch oracle lives with the engine tests.
sys.path.insert(0, str(REPO / "tests" / "revise"))

from integration_support import JobSetup, QueryRun  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture()
def job_setup(
    kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path,
    unique_id: Callable[[str], str],
) -> Callable[..., JobSetup]:
    """Factory: fresh input/output topics, query id, Delta path and checkpoint for one job."""

    def make(name: str = "job", *, partitions: int = 2, **engine: Any) -> JobSetup:
        root = tmp_path / name
        return JobSetup(
            bootstrap=kafka_bootstrap,
            input_topic=new_topic(f"{name}-in", partitions=partitions),
            changelog_topic=new_topic(f"{name}-changelog", partitions=partitions),
            late_topic=new_topic(f"{name}-late", partitions=partitions),
            dead_letter_topic=new_topic(f"{name}-dead", partitions=partitions),
            query_id=unique_id(name),
            delta_path=str(root / "delta"),
            checkpoint=str(root / "checkpoint"),
            workdir=root,
            **engine,
        )

    return make


@pytest.fixture(scope="session")
def query_run(
    kafka_bootstrap: str, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> QueryRun:
    """One real run (late and bad records included) shared by the query tests of both engines."""
    from revise.config import EngineConfig, WindowSpec
    from revise.generate import GeneratorConfig, generate, produce
    from revise.jobconfig import DeltaOutput, JobConfig, KafkaIO, SparkTuning
    from revise.spark.driver import run_job

    tmp = tmp_path_factory.mktemp("query")
    topic = f"query-in-{uuid.uuid4().hex[:8]}"
    stream = generate(GeneratorConfig(events=500, keys=5, seed=11, disorder_ms=1000,
                                      late_fraction=0.1, late_by_ms=2000, bad_fraction=0.03))
    produce(stream, bootstrap_servers=kafka_bootstrap, topic=topic, partitions=2)
    cfg = JobConfig(
        kafka=KafkaIO(bootstrap_servers=kafka_bootstrap, input_topic=topic,
                      changelog_topic=f"{topic}-changelog"),
        delta=DeltaOutput(path=str(tmp / "delta")),
        checkpoint=str(tmp / "ckpt"),
        engine=EngineConfig(window=WindowSpec.parse("tumbling:1s"), grace_ms=500,
                            query_id=f"q-{uuid.uuid4().hex[:8]}"),
        once=True, spark=SparkTuning(max_records_per_batch=100, shards=2),
    )
    result = run_job(cfg, spark=spark, timeout_s=240)
    assert result.revisions > 0 and result.late > 0 and result.dead_letters > 0
    return QueryRun(cfg.delta.path, cfg.engine.query_id, result.revisions, result.late)
