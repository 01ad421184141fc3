"""Several micro-batches' history rows in one Delta commit (``sinks.history_stage``).

Real Delta tables (delta-rs writes, delta-rs reads); a fake clock decides when a commit is due.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from sinks.delta_tables import DeltaTables
from sinks.history_stage import HISTORY_TABLES, HistoryStage, StageError

pytestmark = [pytest.mark.delta]

APP = "revise-q"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def batch(rev_table, late_table, dead_table, make_revision, make_late, make_dead):
    """Batch ``b``'s tables: two revisions, one late record, one dead letter."""

    def make(b: int):
        revs = [make_revision(k, 0, 10_000, b, batch_id=b) for k in ("a", "b")]
        return (rev_table(revs), late_table([make_late("a", b, batch_id=b, offset=b)]),
                dead_table([make_dead(f"{{bad {b}", batch_id=b, offset=b)]))

    return make


def _tables(delta_path, stage: HistoryStage | None, after_write=None) -> DeltaTables:
    return DeltaTables(str(delta_path), stage=stage, after_write=after_write).ensure()


def _rows(tables: DeltaTables, name: str) -> list[tuple]:
    t = DeltaTable(tables.table_path(name)).to_pyarrow_table()
    cols = {"revisions": ("key", "revision"), "late": ("offset",), "dead_letter": ("offset",)}
    return sorted(zip(*(t.column(c).to_pylist() for c in cols[name]), strict=True))


def _version(tables: DeltaTables, name: str) -> int | None:
    return DeltaTable(tables.table_path(name)).transaction_version(APP)


def _written(tmp_path, delta_path, batch, batches: int, after_write=None):
    """A 5 s stage and its tables after batches ``0..batches-1``, one second apart: batch 0
    appended at once, the others staged. Returns (clock, stage, tables)."""
    clock = Clock()
    stage = HistoryStage(tmp_path / "stage", 5.0, clock=clock)
    tables = _tables(delta_path, stage, after_write)
    for b in range(batches):
        clock.now += 1.0 if b else 0.0
        tables.write_batch("q", b, *batch(b))
    return clock, stage, tables


def _staged(stage: HistoryStage) -> list[str]:
    return sorted(p.name for p in stage.directory.iterdir()) if stage.directory.exists() else []


def test_batches_within_the_interval_wait_and_go_in_one_commit(tmp_path, delta_path, batch):
    clock = Clock()
    stage = HistoryStage(tmp_path / "stage", 5.0, clock=clock)
    tables = _tables(delta_path, stage)
    tables.write_batch("q", 0, *batch(0))  # no commit yet: appended at once
    v0 = tables.version("revisions")
    assert _version(tables, "revisions") == 0 and _staged(stage) == []
    for b in (1, 2):
        clock.now += 1.0
        tables.write_batch("q", b, *batch(b))
    # staged on disk, not in Delta: the tables are where batch 0 left them
    assert _staged(stage) == ["batch-000000000001", "batch-000000000002"]
    assert tables.version("revisions") == v0
    assert _rows(tables, "revisions") == [("a", 0), ("b", 0)]
    clock.now += 3.0  # 5 s since batch 0's commit: batch 3 is staged, then all three committed
    tables.write_batch("q", 3, *batch(3))
    assert tables.version("revisions") == v0 + 1  # one commit for batches 1-3
    for name in HISTORY_TABLES:
        assert _version(tables, name) == 3
    assert _rows(tables, "revisions") == sorted((k, b) for k in "ab" for b in range(4))
    assert _rows(tables, "late") == _rows(tables, "dead_letter") == [(b,) for b in range(4)]
    assert _staged(stage) == []
    assert tables.last_timings is not None and tables.last_timings.revisions > 0


def test_an_ending_run_commits_what_waits_then_appends_without_staging(
        tmp_path, delta_path, batch):
    """After ``end_staging`` (a bounded run asked for its close-all) a batch inside the
    interval is not staged: the batches waiting go first, in their own commit, then it."""
    clock, stage, tables = _written(tmp_path, delta_path, batch, 3)  # 1 and 2 staged
    assert _staged(stage) == ["batch-000000000001", "batch-000000000002"]
    v = tables.version("revisions")
    tables.end_staging()
    clock.now += 1.0  # still inside the interval
    tables.write_batch("q", 3, *batch(3))
    assert _staged(stage) == [] and not stage.pending
    assert tables.version("revisions") == v + 2  # batches 1-2, then batch 3
    for name in HISTORY_TABLES:
        assert _version(tables, name) == 3
    assert _rows(tables, "revisions") == sorted((k, b) for k in "ab" for b in range(4))
    assert _rows(tables, "late") == _rows(tables, "dead_letter") == [(b,) for b in range(4)]
    clock.now += 0.5  # and so on for any batch after it
    tables.write_batch("q", 4, *batch(4))
    assert _staged(stage) == [] and tables.version("revisions") == v + 3
    assert tables.last_timings is not None and tables.last_timings.revisions > 0


def test_a_run_that_dies_with_staged_batches_writes_them_at_the_next_start(
        tmp_path, delta_path, batch):
    _clock, stage, tables = _written(tmp_path, delta_path, batch, 3)
    assert _staged(stage) == ["batch-000000000001", "batch-000000000002"]
    del tables  # the process dies: no flush

    again = _tables(delta_path, HistoryStage(tmp_path / "stage", 5.0, clock=Clock()))
    assert again.recover_history("q") == 2
    assert _rows(again, "revisions") == sorted((k, b) for k in "ab" for b in range(3))
    assert _rows(again, "late") == [(0,), (1,), (2,)]
    assert _version(again, "dead_letter") == 2
    assert again.recover_history("q") == 0  # nothing left: the folder is empty
    assert _staged(again._history._stage) == []


def test_a_table_that_holds_a_staged_batch_is_not_given_it_again(tmp_path, delta_path, batch):
    """A commit cut short after ``revisions`` (killed at ``during_delta``), then the same
    batches again plus the replayed and a new one: each table gets each batch once."""
    _clock, stage, tables = _written(tmp_path, delta_path, batch, 3)
    # revisions alone got batches 1-2 (as a commit killed after its first table leaves it)
    revs = [b.tables["revisions"] for b in stage.pending]
    tables._history.append("revisions", pa.concat_tables(revs), APP, 2)
    del tables

    clock2 = Clock()
    again = _tables(delta_path, HistoryStage(tmp_path / "stage", 5.0, clock=clock2))
    assert again.recover_history("q") == 2
    # Spark replays batch 2 (it was not recorded), then batch 3 comes; both staged, then due
    clock2.now += 1.0
    again.write_batch("q", 2, *batch(2))
    clock2.now += 5.0
    again.write_batch("q", 3, *batch(3))
    assert _rows(again, "revisions") == sorted((k, b) for k in "ab" for b in range(4))
    assert _rows(again, "late") == _rows(again, "dead_letter") == [(b,) for b in range(4)]


def test_a_replayed_staged_batch_replaces_its_folder(tmp_path, delta_path, batch):
    clock = Clock()
    stage = HistoryStage(tmp_path / "stage", 5.0, clock=clock)
    tables = _tables(delta_path, stage)
    tables.write_batch("q", 0, *batch(0))
    tables.write_batch("q", 1, *batch(1))
    tables.write_batch("q", 1, *batch(1))  # replayed before the commit
    assert [b.batch_id for b in stage.pending] == [1]
    tables.flush()
    assert _rows(tables, "revisions") == sorted((k, b) for k in "ab" for b in range(2))
    assert _staged(stage) == []


def test_no_interval_appends_every_batch(tmp_path, delta_path, batch):
    stage = HistoryStage(tmp_path / "stage", 0, clock=Clock())
    tables = _tables(delta_path, stage)
    for b in range(3):
        tables.write_batch("q", b, *batch(b))
        assert _version(tables, "revisions") == b and _staged(stage) == []


def test_many_staged_rows_make_a_commit_due_before_the_interval(tmp_path, delta_path, batch):
    clock = Clock()
    stage = HistoryStage(tmp_path / "stage", 60.0, max_rows=8, clock=clock)
    tables = _tables(delta_path, stage)
    tables.write_batch("q", 0, *batch(0))
    tables.write_batch("q", 1, *batch(1))  # 4 rows staged
    assert _version(tables, "revisions") == 0
    tables.write_batch("q", 2, *batch(2))  # 8 rows: due
    assert _version(tables, "revisions") == 2 and _staged(stage) == []


def test_a_stage_of_another_query_is_refused(tmp_path, delta_path, batch):
    clock = Clock()
    tables = _tables(delta_path, HistoryStage(tmp_path / "stage", 5.0, clock=clock))
    tables.write_batch("other", 0, *batch(0))
    tables.write_batch("other", 1, *batch(1))
    again = _tables(delta_path, HistoryStage(tmp_path / "stage", 5.0, clock=Clock()))
    with pytest.raises(StageError, match="another query"):
        again.recover_history("q")


def test_staged_batches_are_committed_when_due_without_a_next_batch(tmp_path, delta_path, batch):
    """The job's watch loop commits the last staged batches of an input that went quiet."""
    calls: list[tuple[str, int]] = []
    clock, stage, tables = _written(tmp_path, delta_path, batch, 2,
                                    lambda table, b: calls.append((table, b)))  # the crash hook
    calls.clear()
    assert tables.commit_due_history() is False  # 1 s after the last commit: not due
    clock.now += 4.0
    with tables._history.lock:  # a write_batch holds the stage: it commits, not this call
        assert tables.commit_due_history() is False
    assert _version(tables, "revisions") == 0
    assert tables.commit_due_history() is True
    assert _version(tables, "revisions") == 1 and _staged(stage) == []
    assert tables.unbatched_seconds["revisions"] > 0  # the job adds these to its timings
    assert sorted(calls) == [("dead_letter", 1), ("late", 1), ("revisions", 1)]
    assert tables.commit_due_history() is False  # nothing staged


def test_a_table_with_nothing_new_staged_gets_no_commit(
        tmp_path, delta_path, batch, late_table, dead_table):
    """Staged batches without late records or dead letters commit nothing to those tables,
    nor an empty commit to one that already holds the only staged rows it had; the write hook
    sees every table's write, with the highest batch each holds."""
    clock = Clock()
    stage = HistoryStage(tmp_path / "stage", 5.0, clock=clock)
    calls: list[tuple[str, int]] = []
    tables = _tables(delta_path, stage, lambda table, b: calls.append((table, b)))
    tables.write_batch("q", 0, *batch(0))  # appended at once
    assert sorted(calls) == [("dead_letter", 0), ("late", 0), ("latest", 0), ("revisions", 0)]
    revs1, late1, _dead1 = batch(1)
    clock.now += 1.0
    tables.write_batch("q", 1, revs1, late1, dead_table([]))  # staged
    tables._history.append("late", late1.add_column(0, "query_id", pa.array(["q"])), APP, 1)
    before = {name: tables.version(name) for name in ("late", "dead_letter")}
    calls.clear()
    clock.now += 4.0
    tables.write_batch("q", 2, batch(2)[0], late_table([]), dead_table([]))  # staged, due
    assert _version(tables, "revisions") == 2
    assert {name: tables.version(name) for name in before} == before  # no empty commit
    assert _version(tables, "late") == 1 and _version(tables, "dead_letter") == 0
    assert _rows(tables, "late") == [(0,), (1,)]
    assert sorted(calls) == [("dead_letter", 2), ("late", 2), ("latest", 2), ("revisions", 2)]
    assert _staged(stage) == []
