"""The watch loop wakes when a micro-batch's sink returns, and waits for Spark's report of it.

Spark's query is a stub here (its report appears a few polls after the sink returned, as Spark
writes the commit log first); the committer is the real one. The end of a real bounded run is
covered by every integration test that runs ``--once``.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pyarrow as pa
from test_job_options import config
from test_overlap_commit import _ROW, NOTHING_COLLECTED, _Batch, _Changelog, _output, _Tables

from revise.records import REVISION_SCHEMA
from revise.spark import committer as committer_module
from revise.spark.committer import BatchCommitter, JobResult
from revise.spark.watch import JobDriver


class _Query:
    """``lastProgress`` shows batch ``batch_id`` from the ``shows_after``-th read on."""

    isActive = True

    def __init__(self, batch_id: int, shows_after: int) -> None:
        self.batch_id = batch_id
        self.shows_after = shows_after
        self.reads = 0

    @property
    def lastProgress(self) -> dict[str, Any] | None:
        self.reads += 1
        return {"batchId": self.batch_id} if self.reads >= self.shows_after else None


def _driver(tmp_path, monkeypatch, query: _Query) -> tuple[JobDriver, BatchCommitter]:
    out = _output(pa.Table.from_pylist([_ROW], schema=REVISION_SCHEMA))
    monkeypatch.setattr(committer_module, "write", lambda _df, _settings: NOTHING_COLLECTED)
    monkeypatch.setattr(committer_module, "decode_output", lambda _collected: out)
    cfg = dataclasses.replace(config(), checkpoint=str(tmp_path))
    committer = BatchCommitter(cfg, _Changelog(), _Tables(), JobResult("q"))  # type: ignore[arg-type]
    driver = JobDriver(query, cfg, committer,  # type: ignore[arg-type]
                       bounded=None, stop_event=None, on_progress=None,
                       timeout_s=None, started=0.0)
    return driver, committer


def test_a_returned_sink_wakes_the_loop_until_sparks_report_of_batch_0_is_read(
        tmp_path, monkeypatch):
    query = _Query(batch_id=0, shows_after=3)
    driver, committer = _driver(tmp_path, monkeypatch, query)
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (driver._wait(600.0), done.set()))
    waiter.start()
    assert not done.wait(0.3)  # nothing returned: the loop sleeps, Spark is not asked
    assert query.reads == 0
    committer(_Batch(), 0)  # type: ignore[arg-type]
    waiter.join(60)
    assert done.is_set()
    assert query.reads == 3  # polled until the report of batch 0 showed, not one read more
    assert not committer.returned.is_set()  # taken: the next wait sleeps again


def test_a_batch_already_reported_does_not_end_the_wait_early(tmp_path, monkeypatch):
    query = _Query(batch_id=4, shows_after=1)
    driver, committer = _driver(tmp_path, monkeypatch, query)
    driver.last_batch_id = 4  # the loop has seen batch 4: its report is not news
    committer(_Batch(), 5)  # type: ignore[arg-type]
    driver._wait(600.0)  # returns after REPORT_WAIT_S of polling, not 600 s
    assert query.reads > 3
