"""``--overlap-commit`` in the committer: the call returns before the batch's Delta writes, the
next call waits for them and fails with their error; ``sinks-done`` follows the finished
writes. Spark (whose tasks write Kafka) and Delta are stand-ins here; the crash chain against
the real ones is ``tests/integration/test_crash_restart.py``."""

from __future__ import annotations

import dataclasses
import threading
import time
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from test_job_options import config

from revise.checkpoint import OFFSETS_LOG, spark_log_dir
from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA, REVISION_SCHEMA
from revise.spark import committer as committer_module
from revise.spark.committer import BatchCommitter, JobResult
from revise.spark.output import BatchCounts, BatchOutput
from revise.spark.rewind import read_done
from sinks.delta_txn import DeltaWriteError

_ROW = {"query_id": "q", "mode": "revision", "key": "k", "window_start_ms": 0,
        "window_end_ms": 10, "revision": 0, "timing": "EARLY", "is_final": False,
        "retracted": False, "count": 1, "n_late": 0, "max_lateness_ms": 0, "watermark_ms": 0,
        "batch_id": 0, "emitted_at_ms": 0, "completeness": 0.5, "est_count": 2.0}


NOTHING_COLLECTED = pa.table({"kind": pa.array([], pa.string())})
"""What the stand-in batch collects (its decoding is stood in for too)."""


class _Changelog:
    """The tasks' writer as the committer sees it: the settings each batch's tasks get."""

    crash = None

    def __init__(self) -> None:
        self.batches: list[int] = []

    def settings(self, batch_id: int, emitted_at_ms: int) -> str:
        self.batches.append(batch_id)
        return f"{batch_id}:{emitted_at_ms}"


class _Tables:
    """Blocks each Delta write until released; fails batch 1's."""

    last_timings = None

    def __init__(self) -> None:
        self.release = threading.Event()
        self.release.set()
        self.written: list[int] = []

    def write_files(self, _query_id: str, batch_id: int, *_a: Any, **_k: Any) -> None:
        assert self.release.wait(30)
        if batch_id == 1:
            msg = "batch 1: the Delta store is gone"
            raise DeltaWriteError(msg)
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


def _output(revisions: pa.Table) -> BatchOutput:
    """A batch's output counting ``revisions`` (no data files: the Delta writes are stand-ins)."""
    return BatchOutput(counts=BatchCounts.of(
        revisions, LATE_SCHEMA.empty_table(), DEAD_LETTER_SCHEMA.empty_table()))


def _no_spark(monkeypatch: pytest.MonkeyPatch, out: BatchOutput) -> None:
    """The batch's run on Spark (its tasks writing Kafka) and its decoding: ``out``."""
    monkeypatch.setattr(committer_module, "write", lambda _df, _settings: NOTHING_COLLECTED)
    monkeypatch.setattr(committer_module, "decode_output", lambda _collected: out)


@pytest.mark.parametrize("overlap", [True, False])
def test_the_call_returns_before_the_writes_and_the_next_one_raises_their_error(
        tmp_path, monkeypatch, overlap):
    out = _output(pa.Table.from_pylist([_ROW], schema=REVISION_SCHEMA))
    _no_spark(monkeypatch, out)
    base = config()
    cfg = dataclasses.replace(base, checkpoint=str(tmp_path),
                              spark=dataclasses.replace(base.spark, overlap_commit=overlap))
    changelog, tables = _Changelog(), _Tables()
    committer = BatchCommitter(cfg, changelog, tables, JobResult("q"))  # type: ignore[arg-type]
    if not overlap:  # the writes run inside the call: nothing to wait for
        committer(_Batch(), 0)  # type: ignore[arg-type]
        assert (changelog.batches, tables.written, read_done(cfg.checkpoint)) == ([0], [0], 0)
        return
    tables.release.clear()
    committer(_Batch(), 0)  # type: ignore[arg-type]
    assert tables.written == [] and read_done(cfg.checkpoint) is None  # still running
    tables.release.set()
    committer(_Batch(), 1)  # type: ignore[arg-type]  # waits for batch 0 first
    assert (tables.written, read_done(cfg.checkpoint)) == ([0], 0)
    with pytest.raises(DeltaWriteError, match="store is gone"):
        committer(_Batch(), 2)  # type: ignore[arg-type]  # batch 1's error, before computing 2
    assert changelog.batches == [0, 1]  # batch 2 never ran
    assert isinstance(committer.error, DeltaWriteError)
    assert read_done(cfg.checkpoint) == 0 and tables.written == [0]
    committer.wait()  # the error was taken once
    committer.close()


def test_a_batch_is_stamped_with_its_trigger_time_from_sparks_offset_log(tmp_path, monkeypatch):
    """A replay (a new committer on the same checkpoint: a restart) gets the same stamp; a
    batch without an offset log entry gets the wall clock."""
    out = _output(pa.Table.from_pylist([_ROW], schema=REVISION_SCHEMA))
    _no_spark(monkeypatch, out)
    cfg = dataclasses.replace(config(), checkpoint=str(tmp_path))
    offsets = spark_log_dir(cfg.checkpoint, OFFSETS_LOG)
    offsets.mkdir(parents=True)
    (offsets / "4").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1234,"conf":{}}\n'
                               '{"in":{"0":5}}\n')
    seen: list[str] = []
    monkeypatch.setattr(committer_module, "write",
                        lambda _df, settings: seen.append(settings) or NOTHING_COLLECTED)
    monkeypatch.setattr(committer_module, "time", SimpleNamespace(
        time=lambda: 3_000.0, monotonic=time.monotonic, sleep=time.sleep))
    for _run in range(2):
        committer = BatchCommitter(cfg, _Changelog(), _Tables(),  # type: ignore[arg-type]
                                   JobResult("q"))
        committer(_Batch(), 4)  # type: ignore[arg-type]
    committer(_Batch(), 5)  # type: ignore[arg-type]
    assert seen == ["4:1234", "4:1234", "5:3000000"]
