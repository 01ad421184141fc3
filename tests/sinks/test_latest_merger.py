"""The background merger of step 3d (no Delta here: the MERGE is a recording stand-in).

What the job relies on: every submitted batch is merged exactly once and in order, a MERGE of
several batches is tagged with the highest batch id, the backlog is bounded, and a failed MERGE
stops all later ones (``latest``'s app version must never pass a batch it lacks).
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Sequence

import pytest

from sinks.delta_files import DataFile
from sinks.latest_merger import LatestMerger, MergeFailed

NEVER = 1e9
"""A rest ratio under which the merger waits for a flush or a full backlog."""


class Recorder:
    """A MERGE that records what it was given; it can hold until released, or fail."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.calls: list[tuple[str, int, list[int]]] = []
        self.release = threading.Event()
        self.release.set()
        self.started = threading.Event()
        self.fail_on = fail_on

    def __call__(self, files: Sequence[DataFile], app_id: str, batch_id: int) -> float:
        self.started.set()
        self.release.wait(30)
        batches = [int(f.path.removeprefix("b")) for f in files]
        if self.fail_on is not None and self.fail_on in batches:
            raise OSError("disk gone")
        self.calls.append((app_id, batch_id, batches))
        return 0.001


def rows(batch_id: int, n: int = 1) -> tuple[DataFile, ...]:
    """The record of one ``revisions`` data file of ``batch_id`` holding ``n`` rows."""
    return (DataFile(f"b{batch_id}", 100, 0, n, "{}"),)


def test_hurry_merges_a_resting_backlog_without_waiting_and_flush_waits_for_it():
    """The end of a run: the last MERGE starts, the caller commits the history meanwhile."""
    merge = Recorder()
    merger = LatestMerger(merge, rest_ratio=NEVER)
    merger.submit("revise-q", 0, rows(0))
    merger.flush()  # now it rests (practically for ever)
    merger.submit("revise-q", 1, rows(1))
    merge.started.clear()
    merge.release.clear()  # the MERGE of batch 1 holds until released
    merger.hurry()  # returns while that MERGE runs
    assert merge.started.wait(30)
    assert merge.calls == [("revise-q", 0, [0])]
    merge.release.set()
    merger.flush()
    assert merge.calls == [("revise-q", 0, [0]), ("revise-q", 1, [1])]


def test_batches_that_arrive_while_it_rests_are_merged_together_tagged_with_the_last():
    merge = Recorder()
    merger = LatestMerger(merge, rest_ratio=NEVER)
    merger.submit("revise-q", 0, rows(0))
    merger.flush()  # batch 0 alone; now it rests (practically for ever)
    for b in (1, 2, 3):
        assert merger.submit("revise-q", b, rows(b)) < 5
    assert merge.calls == [("revise-q", 0, [0])]  # 1-3 wait in the backlog
    merger.flush()
    assert merge.calls == [("revise-q", 0, [0]), ("revise-q", 3, [1, 2, 3])]
    assert merger.merges == 2
    merger.flush()  # nothing pending: no MERGE
    assert merger.merges == 2
    assert merger.take_seconds() == pytest.approx(0.002)
    assert merger.take_seconds() == 0.0


def test_without_rest_each_batch_is_merged_on_its_own():
    merge = Recorder()
    merger = LatestMerger(merge, rest_ratio=0.0)
    for b in range(4):
        merger.submit("revise-q", b, rows(b))
        merger.flush()
    assert [c[1] for c in merge.calls] == [0, 1, 2, 3]


def test_a_cheap_merge_still_rests_the_least_rest_then_takes_what_came_meanwhile():
    merge = Recorder()  # each MERGE "takes" 1 ms: the ratio alone would rest 3 ms
    merger = LatestMerger(merge, rest_ratio=3.0, min_rest_s=0.4)
    merger.submit("revise-q", 0, rows(0))
    deadline = time.monotonic() + 5
    while not merge.calls and time.monotonic() < deadline:  # the first MERGE goes at once
        time.sleep(0.01)
    t0 = time.monotonic()
    for b in (1, 2, 3):
        merger.submit("revise-q", b, rows(b))
    time.sleep(0.1)
    assert merge.calls == [("revise-q", 0, [0])]  # still resting
    while len(merge.calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert merge.calls[1] == ("revise-q", 3, [1, 2, 3])
    assert time.monotonic() - t0 >= 0.3
    merger.flush()


def test_a_full_backlog_is_merged_without_resting_and_holds_the_writer_meanwhile():
    merge = Recorder()
    merger = LatestMerger(merge, rest_ratio=NEVER, max_batches=2)
    merger.submit("revise-q", 0, rows(0))
    merger.flush()
    merger.submit("revise-q", 1, rows(1))
    merge.release.clear()
    merge.started.clear()
    merger.submit("revise-q", 2, rows(2))  # full: merged now, though resting
    assert merge.started.wait(10)  # the MERGE of {1, 2} is running (held)
    merger.submit("revise-q", 3, rows(3))
    merger.submit("revise-q", 4, rows(4))  # full again, and a MERGE is running
    blocked = threading.Thread(target=merger.submit, args=("revise-q", 5, rows(5)))
    blocked.start()
    blocked.join(0.5)
    assert blocked.is_alive()  # the writer waits for the running MERGE
    merge.release.set()
    blocked.join(10)
    assert not blocked.is_alive()
    merger.flush()
    assert [c[2] for c in merge.calls] == [[0], [1, 2], [3, 4], [5]]


def test_the_backlog_is_bounded_in_rows_too():
    merge = Recorder()
    merger = LatestMerger(merge, rest_ratio=NEVER, max_rows=10)
    merger.submit("revise-q", 0, rows(0))
    merger.flush()
    merger.submit("revise-q", 1, rows(1, 4))
    merger.submit("revise-q", 2, rows(2, 6))  # 10 rows: full
    merger.submit("revise-q", 3, rows(3))
    merger.flush()
    assert [c[1] for c in merge.calls] == [0, 2, 3]


def test_the_hook_of_each_batch_runs_before_the_merge_that_holds_it():
    seen: list[str] = []
    merger = LatestMerger(lambda r, a, b: seen.append(f"merge {b}") or 0.001, rest_ratio=NEVER)
    merger.submit("revise-q", 0, rows(0), before=lambda: seen.append("before 0"))
    merger.flush()
    merger.submit("revise-q", 1, rows(1), before=lambda: seen.append("before 1"))
    merger.submit("revise-q", 2, rows(2), before=lambda: seen.append("before 2"))
    merger.flush()
    assert seen == ["before 0", "merge 0", "before 1", "before 2", "merge 2"]


def test_batches_of_two_queries_are_never_merged_under_one_tag():
    merge = Recorder()
    merger = LatestMerger(merge, rest_ratio=NEVER)
    merger.submit("revise-a", 0, rows(0))
    merger.flush()
    merger.submit("revise-a", 1, rows(1))
    merger.submit("revise-b", 7, rows(7))
    merger.submit("revise-a", 2, rows(2))
    merger.flush()
    assert merge.calls[1:] == [("revise-a", 1, [1]), ("revise-b", 7, [7]),
                               ("revise-a", 2, [2])]


def test_a_failed_merge_stops_every_later_one_until_cleared():
    merge = Recorder(fail_on=2)
    merger = LatestMerger(merge, rest_ratio=NEVER)
    merger.submit("revise-q", 0, rows(0))
    merger.flush()
    merger.submit("revise-q", 1, rows(1))
    merger.submit("revise-q", 2, rows(2))
    with pytest.raises(MergeFailed, match=r"batch 1, 2 \(OSError: disk gone\)") as failed:
        merger.flush()
    assert failed.value.batch_ids == (1, 2)
    with pytest.raises(MergeFailed):
        merger.submit("revise-q", 3, rows(3))  # refused: latest must not pass batch 1
    merger.flush(raise_error=False)
    with pytest.raises(MergeFailed):
        merger.check()
    assert [c[1] for c in merge.calls] == [0]
    merger.clear_error()  # latest caught up from revisions (DeltaTables.catch_up_latest)
    merger.submit("revise-q", 4, rows(4))
    merger.flush()
    assert [c[1] for c in merge.calls] == [0, 4]


def test_an_idle_merger_keeps_no_thread_and_can_be_collected():
    """Its thread ends with the backlog; one left waiting would keep the tables alive."""
    merge = Recorder()
    merger = LatestMerger(merge, rest_ratio=0.0)
    merger.submit("revise-q", 0, rows(0))
    merger.flush()
    ref = weakref.ref(merger)
    del merger
    for _ in range(100):  # the thread returns right after the flush wakes
        gc.collect()
        if ref() is None:
            break
        time.sleep(0.05)
    assert ref() is None
    assert [c[1] for c in merge.calls] == [0]
