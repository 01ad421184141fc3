"""Micro-batches' data files staged between commits (``sinks.file_stage``).

Real Delta tables (delta-rs commits and reads); a fake clock decides when a commit is due.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from revise.records import REVISION_SCHEMA
from sinks.delta_files import DataFile, commit_files, write_data_file
from sinks.delta_schema import arrow_schema
from sinks.delta_tables import DeltaTables
from sinks.delta_txn import DeltaRoot
from sinks.file_stage import (
    FileStage,
    FileStageError,
    StagedFiles,
    commit_staged,
    staged_batches,
)
from tests.sinks.test_delta_data_files import revisions

pytestmark = [pytest.mark.delta]

APP = "revise-q"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def late(n: int, batch_id: int) -> pa.Table:
    """``n`` too-late records of batch ``batch_id`` in ``late``'s schema."""
    schema = arrow_schema("late")
    given = {"query_id": ["q"] * n, "key": [f"k{i}" for i in range(n)],
             "reason": ["too late: window closed"] * n, "topic": ["in"] * n,
             "batch_id": [batch_id] * n, "offset": list(range(n))}
    cols = [pa.array(given.get(f.name, [0] * n), f.type) for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


@pytest.fixture()
def root(tmp_path: Path) -> DeltaRoot:
    DeltaTables(str(tmp_path / "delta")).ensure()
    return DeltaRoot(str(tmp_path / "delta"), None)


def _write(root: DeltaRoot, b: int, *, with_late: bool) -> dict[str, list[DataFile]]:
    """Batch ``b``'s files as two tasks write them: revisions always, late records maybe."""
    files = {"revisions": [write_data_file(root.table_path("revisions"),
                                           revisions(10, batch_id=b, key=f"s{s}-", seed=b),
                                           prefix=f"b{b}-s{s}") for s in range(2)],
             "late": []}
    if with_late:
        files["late"] = [write_data_file(root.table_path("late"), late(3, b), prefix=f"b{b}")]
    return files


def _batches(root: DeltaRoot, table: str) -> dict[int, int]:
    """Rows per batch id in ``table``."""
    rows = DeltaTable(root.table_path(table)).to_pyarrow_table(columns=["batch_id"])
    return {c["values"]: c["counts"] for c in pc.value_counts(rows["batch_id"]).to_pylist()}


def test_a_staged_batch_record_round_trips_through_json(root: DeltaRoot) -> None:
    batch = StagedFiles(APP, 3, {t: tuple(fs) for t, fs in
                                 _write(root, 3, with_late=True).items()})
    assert StagedFiles.from_json(batch.to_json()) == batch
    assert batch.rows == 23
    with pytest.raises(FileStageError, match="StagedFiles.to_json"):
        StagedFiles.from_json(b'{"app_id": "x"}')


def test_staged_batches_are_due_by_interval_rows_or_end(root: DeltaRoot, tmp_path: Path) -> None:
    clock = Clock()
    stage = FileStage(tmp_path / "stage", 5.0, max_rows=50, clock=clock)
    assert not stage.due()
    stage.stage(APP, 0, _write(root, 0, with_late=False))
    assert stage.due()  # nothing committed yet: the first batch goes at once
    commit_staged(root, stage, arrow_schema)
    clock.now += 2
    stage.stage(APP, 1, _write(root, 1, with_late=False))
    assert not stage.due()
    clock.now += 3
    assert stage.due()
    commit_staged(root, stage, arrow_schema)
    for b in (2, 3):
        stage.stage(APP, b, _write(root, b, with_late=True))
    assert not stage.due()
    stage.stage(APP, 4, _write(root, 4, with_late=True))  # 69 rows ≥ 50
    assert stage.due()
    commit_staged(root, stage, arrow_schema)
    stage.stage(APP, 5, _write(root, 5, with_late=False))
    assert not stage.due()
    stage.end()
    assert stage.due()


def test_staged_batches_commit_once_in_one_transaction_per_table(
        root: DeltaRoot, tmp_path: Path) -> None:
    stage = FileStage(tmp_path / "stage", 5.0, clock=Clock())
    for b in range(1, 5):
        stage.stage(APP, b, _write(root, b, with_late=b == 2))
    assert [b for b, _ in staged_batches(tmp_path / "stage")] == [1, 2, 3, 4]
    assert DeltaTable(root.table_path("revisions")).to_pyarrow_table().num_rows == 0

    seconds = commit_staged(root, stage, arrow_schema)
    assert set(seconds) == {"revisions", "late"}  # dead_letter: no files, not touched
    assert _batches(root, "revisions") == {b: 20 for b in range(1, 5)}
    assert _batches(root, "late") == {2: 3}
    for table in ("revisions", "late"):
        assert DeltaTable(root.table_path(table)).version() == 1
        assert DeltaTable(root.table_path(table)).transaction_version(APP) == 4
    assert DeltaTable(root.table_path("dead_letter")).version() == 0
    assert staged_batches(tmp_path / "stage") == []
    assert stage.pending == []


def test_recovery_commits_exactly_the_staged_batches_not_yet_in(
        root: DeltaRoot, tmp_path: Path) -> None:
    stage = FileStage(tmp_path / "stage", 5.0, clock=Clock())
    written = {b: _write(root, b, with_late=True) for b in range(1, 6)}
    for b, files in written.items():
        stage.stage(APP, b, files)
    # the crash: revisions got batches 1-3 (a commit before the stage's), late batch 1 only
    commit_files(root, "revisions", APP, 3,
                 [f for b in (1, 2, 3) for f in written[b]["revisions"]], REVISION_SCHEMA)
    commit_files(root, "late", APP, 1, written[1]["late"], arrow_schema("late"))
    # replayed batches 2 and 5 were staged again with new files (same rows)
    for b in (2, 5):
        stage.stage(APP, b, _write(root, b, with_late=True))

    restarted = FileStage(tmp_path / "stage", 5.0, clock=Clock())
    assert [b.batch_id for b in restarted.recover(APP)] == [1, 2, 3, 4, 5]
    commit_staged(DeltaRoot(root.path, None), restarted, arrow_schema)
    assert _batches(root, "revisions") == {b: 20 for b in range(1, 6)}
    assert _batches(root, "late") == {b: 3 for b in range(1, 6)}
    for table in ("revisions", "late"):
        assert DeltaTable(root.table_path(table)).version() == 2
        assert DeltaTable(root.table_path(table)).transaction_version(APP) == 5

    # a crash after the commits, before the records went: they are found in, committed never
    again = FileStage(tmp_path / "stage", 5.0, clock=Clock())
    assert again.recover(APP) == []
    for b in (4, 5):
        again.stage(APP, b, written[b])
    assert commit_staged(DeltaRoot(root.path, None), again, arrow_schema) == {
        "revisions": 0.0, "late": 0.0}
    assert DeltaTable(root.table_path("revisions")).version() == 2
    assert _batches(root, "revisions") == {b: 20 for b in range(1, 6)}


def test_recovery_refuses_another_querys_batches_and_drops_cut_short_records(
        root: DeltaRoot, tmp_path: Path) -> None:
    folder = tmp_path / "stage"
    FileStage(folder).stage("revise-other", 1, _write(root, 1, with_late=False))
    (folder / ".batch-000000000002.json.999.tmp").write_bytes(b'{"app_')
    with pytest.raises(FileStageError, match="belongs to another query"):
        FileStage(folder).recover(APP)
    assert not (folder / ".batch-000000000002.json.999.tmp").exists()
    assert [b.batch_id for b in FileStage(folder).recover("revise-other")] == [1]
