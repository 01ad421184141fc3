"""``--overlap-commit`` in the committer: the call returns before the batch's writes, the next
call waits for them and fails with their error; ``sinks-done`` follows the finished writes.
Spark, Kafka and Delta are stand-ins here; the crash chain against the real ones is
``tests/integration/test_crash_restart.py``."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pyarrow as pa
import pytest
from test_job_options import config

from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA, REVISION_SCHEMA
from revise.spark import committer as committer_module
from revise.spark.committer import BatchCommitter, JobResult
from revise.spark.output import BatchTables
from revise.spark.rewind import read_done
from sinks.kafka import ChangelogCommitError, CommitResult

_ROW = {"query_id": "q", "mode": "revision", "key": "k", "window_start_ms": 0,
        "window_end_ms": 10, "revision": 0, "timing": "EARLY", "is_final": False,
        "retracted": False, "count": 1, "n_late": 0, "max_lateness_ms": 0, "watermark_ms": 0,
        "batch_id": 0, "emitted_at_ms": 0, "completeness": 0.5, "est_count": 2.0}


class _Changelog:
    """Blocks each commit until released; fails batch 1's."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.committed: list[int] = []

    def commit_batch(self, batch_id: int, *_a: Any, **_k: Any) -> CommitResult:
        assert self.release.wait(30)
        if batch_id == 1:
            msg = "batch 1: the broker is gone"
            raise ChangelogCommitError(msg)
        self.committed.append(batch_id)
        return CommitResult(batch_id, False, 2, 0.0, None)


class _Tables:
    last_timings = None

    def __init__(self) -> None:
        self.written: list[int] = []

    def write_batch(self, _query_id: str, batch_id: int, *_a: Any, **_k: Any) -> None:
        self.written.append(batch_id)


class _Context:
    def __init__(self) -> None:
        self.properties: dict[str, str | None] = {}

    def setLocalProperty(self, key: str, value: str | None) -> None:
        self.properties[key] = value


class _Session:
    def __init__(self) -> None:
        self.sparkContext = _Context()


class _Batch:
    def __init__(self) -> None:
        self.sparkSession = _Session()

    def toArrow(self) -> None:
        return None


@pytest.mark.parametrize("overlap", [True, False])
def test_the_call_returns_before_the_writes_and_the_next_one_raises_their_error(
        tmp_path, monkeypatch, overlap):
    out = BatchTables(pa.Table.from_pylist([_ROW], schema=REVISION_SCHEMA),
                      LATE_SCHEMA.empty_table(), DEAD_LETTER_SCHEMA.empty_table())
    monkeypatch.setattr(committer_module, "decode_output", lambda _collected, _schema: out)
    base = config()
    cfg = dataclasses.replace(base, checkpoint=str(tmp_path),
                              spark=dataclasses.replace(base.spark, overlap_commit=overlap))
    changelog, tables = _Changelog(), _Tables()
    committer = BatchCommitter(cfg, changelog, tables, JobResult("q"))  # type: ignore[arg-type]
    if not overlap:  # the writes run inside the call: nothing to wait for
        changelog.release.set()
        committer(_Batch(), 0)  # type: ignore[arg-type]
        assert (changelog.committed, tables.written, read_done(cfg.checkpoint)) == ([0], [0], 0)
        return
    committer(_Batch(), 0)  # type: ignore[arg-type]
    assert changelog.committed == [] and read_done(cfg.checkpoint) is None  # still running
    changelog.release.set()
    committer(_Batch(), 1)  # type: ignore[arg-type]  # waits for batch 0 first
    assert (changelog.committed, tables.written, read_done(cfg.checkpoint)) == ([0], [0], 0)
    with pytest.raises(ChangelogCommitError, match="broker is gone"):
        committer(_Batch(), 2)  # type: ignore[arg-type]  # batch 1's error, before computing 2
    assert isinstance(committer.error, ChangelogCommitError)
    assert read_done(cfg.checkpoint) == 0 and tables.written == [0]
    committer.wait()  # the error was taken once
    committer.close()
