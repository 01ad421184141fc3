"""``latest``'s MERGE with deletion vectors, against a model and read back by delta-rs and Spark.

Each MERGE marks the rows of the windows it revises in deletion vectors and writes its rows in
one new file; files half deleted, and small files once several gathered, are rewritten by a
later MERGE. Whatever the files, ``latest`` must hold one row per window, its highest
revision, and no retracted window.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA, REVISION_SCHEMA
from sinks import latest_merge, merge_on_read
from sinks.delta_log import read_snapshot
from sinks.delta_tables import DeltaTables

pytestmark = [pytest.mark.spark, pytest.mark.delta]


def _batch(make_revision, rows, batch_id):
    return pa.Table.from_pylist(
        [make_revision(k, s, s + 10, rev, batch_id=batch_id, retracted=gone, count=rev + 1,
                       timing="EARLY").to_row()
         for k, s, rev, gone in rows], schema=REVISION_SCHEMA)


def _write(tables, make_revision, rows, batch_id):
    tables.write_batch("q", batch_id, _batch(make_revision, rows, batch_id),
                       LATE_SCHEMA.empty_table(), DEAD_LETTER_SCHEMA.empty_table())


def _rs_latest(tables):
    """(key, window start) → (revision, count) as delta-rs reads ``latest`` (vectors applied)."""
    rows = pa.table(DeltaTable(tables.table_path("latest")).scan()).to_pylist()
    got = {(r["key"], r["window_start_ms"]): (r["revision"], r["count"]) for r in rows}
    assert len(got) == len(rows), "two rows for one window"
    return got


def _spark_latest(spark, tables):
    rows = spark.read.format("delta").load(tables.table_path("latest")).collect()
    got = {(r.key, r.window_start_ms): (r.revision, r["count"]) for r in rows}
    assert len(got) == len(rows), "two rows for one window"
    return got


@pytest.mark.parametrize("store", ["folder", "folder, files added", "object store"])
def test_random_batches_leave_the_highest_revision_per_window(
    spark, delta_path, make_revision, monkeypatch, store,
):
    if store == "object store":  # delta-rs's copy-on-write MERGE, as on s3://
        monkeypatch.setattr(latest_merge, "local_folder", lambda _path: None)
    if store == "folder, files added":  # no file is small: each batch's file joins latest
        monkeypatch.setattr(merge_on_read, "SMALL_FILE_BYTES", 0)
    # Small thresholds so that the run rewrites files often, both ways.
    monkeypatch.setattr(merge_on_read, "SMALL_FILES", 3)
    rng = np.random.default_rng(11)
    tables = DeltaTables(str(delta_path)).ensure()
    model: dict[tuple[str, int], int] = {}  # the highest revision seen per window
    gone: set[tuple[str, int]] = set()  # windows whose highest revision is retracted
    shared: list[str] = []  # latest's files that are a batch's revisions file
    for b in range(24):
        rows = []
        for _ in range(int(rng.integers(5, 40))):
            w = (f"k{rng.integers(0, 30)}", int(rng.integers(0, 4)) * 10)
            # Lower, equal or higher; after a retraction only higher: the engine never sends
            # a window's lower revision later, and only a row in latest can outrank one.
            rev = max(model.get(w, -1) + int(rng.integers(1 if w in gone else -1, 3)), 0)
            retracted = bool(rng.random() < 0.1)
            rows.append((w[0], w[1], rev, retracted))
        # A batch holds each (window, revision) once, as the engine emits it.
        rows = list({(k, s, r): (k, s, r, x) for k, s, r, x in rows}.values())
        _write(tables, make_revision, rows, b)
        for k, s, rev, retracted in sorted(rows, key=lambda r: r[2]):
            if rev > model.get((k, s), -1):
                model[(k, s)] = rev
                (gone.add if retracted else gone.discard)((k, s))
        want = {w: (r, r + 1) for w, r in model.items() if w not in gone}
        assert _rs_latest(tables) == want, f"after batch {b}"
        history = list((delta_path / "revisions").glob("part-*.parquet"))
        shared += [f.path for f in read_snapshot(tables.table_path("latest")).files
                   if any((delta_path / "latest" / f.path).samefile(h) for h in history)]
    assert _spark_latest(spark, tables) == want
    snapshot = read_snapshot(tables.table_path("latest"))
    vectors = any(f.deletion_vector for f in snapshot.files)
    assert vectors == (store != "object store"), "deletion vectors are the folder's MERGE's"
    assert bool(shared) == (store == "folder, files added"), "batch files added as they are"
    history = spark.sql(
        f"DESCRIBE HISTORY delta.`{tables.table_path('latest')}`").collect()
    assert sum(h.operation == "MERGE" for h in history) == 24
    # latest checkpoints every 10 versions: the reads above went through checkpoints.
    assert list((delta_path / "latest" / "_delta_log").glob("*.checkpoint.parquet"))


def test_a_merge_writes_the_batch_and_marks_the_rows_it_replaces(
    spark, delta_path, make_revision,
):
    tables = DeltaTables(str(delta_path)).ensure()
    path = tables.table_path("latest")
    big = [(f"k{i:04d}", 0, 0, False) for i in range(5_000)]
    _write(tables, make_revision, big, 0)
    (first,) = read_snapshot(path).files
    # Batch 1 revises 100 windows of 5,000 and opens 10: the big file stays, with a vector
    # of 100 rows; one new file of 110 rows.
    _write(tables, make_revision, [(f"k{i:04d}", 0, 1, False) for i in range(100)]
           + [(f"n{i}", 0, 0, False) for i in range(10)], 1)
    files = {f.path: f for f in read_snapshot(path).files}
    assert first.path in files and files[first.path].deletion_vector["cardinality"] == 100
    (new,) = (f for p, f in files.items() if p != first.path)
    assert new.num_records == 110
    assert spark.read.format("delta").load(path).count() == 5_010
    # Batch 2 revises 2,500 more: half the big file is deleted, so it is rewritten.
    _write(tables, make_revision, [(f"k{i:04d}", 0, 1, False) for i in range(100, 2_600)], 2)
    assert first.path not in {f.path for f in read_snapshot(path).files}
    latest = _spark_latest(spark, tables)
    assert len(latest) == 5_010
    assert sum(rev == 1 for rev, _ in latest.values()) == 2_600
    # A replay of batch 1 (lower revisions, already in) changes nothing.
    version = DeltaTable(path).version()
    _write(tables, make_revision, [(f"k{i:04d}", 0, 0, False) for i in range(100)], 1)
    assert DeltaTable(path).version() == version


@pytest.mark.parametrize("links", [True, False])
def test_a_batch_file_joins_latest_as_it_is_with_its_other_rows_deleted(
    spark, delta_path, make_revision, monkeypatch, links,
):
    """A MERGE adds the ``revisions`` file itself (a hard link, or a copy where there is
    none) with a deletion vector for its rows that are not their window's latest; it writes
    no data file of its own."""
    monkeypatch.setattr(merge_on_read, "SMALL_FILE_BYTES", 1)
    if not links:  # as if revisions were on another file system than latest
        real_link = merge_on_read.os.link

        def link(src, dst, *args, **kwargs):
            if "revisions" in str(src):
                raise OSError(18, "Invalid cross-device link")
            return real_link(src, dst, *args, **kwargs)

        monkeypatch.setattr(merge_on_read.os, "link", link)
    tables = DeltaTables(str(delta_path)).ensure()
    path = delta_path / "latest"
    _write(tables, make_revision, [(f"k{i}", 0, 0, False) for i in range(50)], 0)
    # Batch 1: k0 twice (revisions 1 and 2), k1 retracted, k2 at the revision latest holds.
    _write(tables, make_revision, [("k0", 0, 1, False), ("k0", 0, 2, False),
                                   ("k1", 0, 1, True), ("k2", 0, 0, False),
                                   *((f"n{i}", 0, 0, False) for i in range(20))], 1)
    files = {f.path: f for f in read_snapshot(str(path)).files}
    assert all(p.startswith("part-latest-b") for p in files), files  # no MERGE-written file
    history = sorted((delta_path / "revisions").glob("part-b1-*.parquet"))
    (second,) = (f for p, f in files.items() if p.startswith("part-latest-b1-"))
    assert (path / second.path).samefile(history[0]) == links
    assert (path / second.path).read_bytes() == history[0].read_bytes()
    # Its rows k0 rev 1, k1 (retracted) and k2 (not higher) are deleted; k0 and k1 of batch 0
    # too.
    assert second.deletion_vector["cardinality"] == 3
    (first,) = (f for p, f in files.items() if p != second.path)
    assert first.deletion_vector["cardinality"] == 2
    want = {(f"k{i}", 0): (0, 1) for i in range(2, 50)} | {("k0", 0): (2, 3)} | {
        (f"n{i}", 0): (0, 1) for i in range(20)}
    assert _rs_latest(tables) == want
    assert _spark_latest(spark, tables) == want
    assert not [p.name for p in path.iterdir() if p.name.endswith(".tmp")]


def test_a_merge_cut_short_before_its_commit_places_the_same_files_again(
    spark, delta_path, make_revision, monkeypatch,
):
    """A MERGE that placed the batch's file in ``latest`` and failed before its commit leaves
    it there, unreferenced; the batch's MERGE again keeps it under the same name and commits
    the batch once."""
    from sinks.delta_files import write_data_file
    from sinks.delta_txn import DeltaWriteError

    monkeypatch.setattr(merge_on_read, "SMALL_FILE_BYTES", 1)
    tables = DeltaTables(str(delta_path)).ensure()
    _write(tables, make_revision, [(f"k{i}", 0, 0, False) for i in range(20)], 0)
    rows = _batch(make_revision, [("k0", 0, 1, False), ("n", 0, 0, False)], 1)
    files = {"revisions": [write_data_file(tables.table_path("revisions"), rows,
                                           prefix="b1-p0")]}
    real = merge_on_read.commit_actions

    def killed(*_args, **_kwargs):
        raise OSError("killed before the commit")

    monkeypatch.setattr(merge_on_read, "commit_actions", killed)
    with pytest.raises(DeltaWriteError, match="killed before the commit"):
        tables.write_files("q", 1, files)
    placed = sorted(p.name for p in (delta_path / "latest").glob("part-latest-b1-*"))
    assert len(placed) == 1
    assert _rs_latest(tables) == {(f"k{i}", 0): (0, 1) for i in range(20)}

    monkeypatch.setattr(merge_on_read, "commit_actions", real)
    tables.write_files("q", 1, files)  # the replay: revisions has it, latest not yet
    want = {(f"k{i}", 0): (0, 1) for i in range(1, 20)} | {("k0", 0): (1, 2), ("n", 0): (0, 1)}
    assert _rs_latest(tables) == want
    assert _spark_latest(spark, tables) == want
    assert sorted(p.name for p in (delta_path / "latest").glob("part-latest-b1-*")) == placed
    assert placed[0] in {f.path for f in read_snapshot(tables.table_path("latest")).files}
    assert not [p.name for p in (delta_path / "latest").iterdir() if p.name.endswith(".tmp")]
    version = DeltaTable(tables.table_path("latest")).version()
    tables.write_files("q", 1, files)
    assert DeltaTable(tables.table_path("latest")).version() == version


def test_small_files_are_gathered_without_changing_the_rows(
    spark, delta_path, make_revision, monkeypatch,
):
    monkeypatch.setattr(merge_on_read, "SMALL_FILES", 2)
    tables = DeltaTables(str(delta_path)).ensure()
    for b in range(4):  # new windows each batch: every MERGE adds a small file
        _write(tables, make_revision, [(k, b, 0, False) for k in "abc"], b)
    # MERGE 2 found two small files and rewrote them into its own; MERGE 3 added one.
    assert len(read_snapshot(tables.table_path("latest")).files) == 2
    assert _spark_latest(spark, tables) == {(k, b): (0, 1) for k in "abc" for b in range(4)}
    _write(tables, make_revision, [("a", 3, 9, False)], 3)  # a replay: skipped
    assert _rs_latest(tables)[("a", 3)] == (0, 1)


def test_ensure_gives_an_earlier_latest_deletion_vectors_once(delta_path, make_revision):
    old = DeltaTables(str(delta_path))
    DeltaTable.create(old.table_path("latest"), schema=old.schema("latest"),
                      configuration={"delta.checkpointInterval": "10"})
    old.ensure()
    latest = DeltaTable(old.table_path("latest"))
    assert "deletionVectors" in (latest.protocol().writer_features or [])
    assert "deletionVectors" in (latest.protocol().reader_features or [])
    version = latest.version()
    old.ensure()
    assert DeltaTable(old.table_path("latest")).version() == version  # nothing committed
    _write(old, make_revision, [("a", 0, 0, False)], 0)
    assert _rs_latest(old) == {("a", 0): (0, 1)}


def test_a_merge_that_loses_the_race_for_its_version_reads_again(
    spark, delta_path, make_revision, monkeypatch,
):
    """A zombie and its successor MERGE batch 1 at once: the zombie's commit finds its version
    taken (put-if-absent), reads the table again, finds the batch in and writes nothing."""
    zombie = DeltaTables(str(delta_path)).ensure()
    successor = DeltaTables(str(delta_path))
    _write(successor, make_revision, [("a", 0, 0, False), ("b", 0, 0, False)], 0)
    real = merge_on_read.read_snapshot
    reads = []

    def stale_then_real(path, **kw):
        snapshot = real(path, **kw)
        reads.append(snapshot.version)
        if len(reads) == 1:  # the zombie read the log; the successor commits before it does
            _write(successor, make_revision, [("a", 0, 1, False)], 1)
        return snapshot

    monkeypatch.setattr(merge_on_read, "read_snapshot", stale_then_real)
    _write(zombie, make_revision, [("a", 0, 1, False), ("c", 0, 0, False)], 1)
    assert reads[0] == reads[1]  # both planned on the same version
    # The zombie's plan (with window c) lost version v + 1 to the successor's, whole.
    assert _spark_latest(spark, zombie) == {("a", 0): (1, 2), ("b", 0): (0, 1)}
    history = spark.sql(f"DESCRIBE HISTORY delta.`{zombie.table_path('latest')}`").collect()
    assert sum(h.operation == "MERGE" for h in history) == 2
    log = delta_path / "latest" / "_delta_log"
    assert not [p.name for p in log.iterdir() if p.name.endswith(".tmp")]
