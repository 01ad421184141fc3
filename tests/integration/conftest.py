"""Fixtures of the end-to-end tests: job configs, generated input, subprocess runs of the CLI.

Spark's Python workers and ``python -m revise`` subprocesses must import ``revise`` from this
checkout even when it is not pip-installed: the repository root is put on ``PYTHONPATH`` here, at
collection time, before any test starts the JVM (workers inherit the JVM's environment).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
_paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if str(REPO) not in _paths:
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *_paths])
# The batch oracle lives with the engine tests.
sys.path.insert(0, str(REPO / "tests" / "revise"))

from integration_support import JobSetup  # noqa: E402


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
