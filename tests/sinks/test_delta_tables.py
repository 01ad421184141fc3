"""The Delta tables: written by delta-rs, read back by real Spark + Delta.

Idempotent replays, a concurrent writer of the same batch, the latest MERGE, views.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from revise.query.views import REGISTERED_VIEWS, register_views, table_schema, view_sql
from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA, REVISION_SCHEMA
from revise.vocab import TABLE_NAMES
from sinks import merge_on_read
from sinks.delta_tables import DeltaTables, DeltaWriteError

pytestmark = [pytest.mark.spark, pytest.mark.delta]


@pytest.fixture()
def frames():
    """Arrow tables from revise records (revisions, late, dead letters)."""

    def df(records, schema):
        return pa.Table.from_pylist([r.to_row() for r in records], schema=schema)

    class Frames:
        def revisions(self, rows):
            return df(rows, REVISION_SCHEMA)

        def late(self, rows=()):
            return df(rows, LATE_SCHEMA)

        def dead(self, rows=()):
            return df(rows, DEAD_LETTER_SCHEMA)

    return Frames()


def _snapshot(spark, tables: DeltaTables):
    """Sorted rows and Delta version of every table."""
    out = {}
    for t in TABLE_NAMES:
        rows = spark.read.format("delta").load(tables.table_path(t)).collect()
        out[t] = (tables.version(t), sorted(tuple(r) for r in rows))
    return out


def _latest(spark, tables):
    return {(r.key, r.window_start_ms, r.window_end_ms): r.revision
            for r in spark.read.format("delta").load(tables.table_path("latest")).collect()}


def test_ensure_creates_the_tables_once(spark, delta_path):
    tables = DeltaTables(str(delta_path)).ensure()
    tables.ensure()  # idempotent
    for t in TABLE_NAMES:
        assert _detail(spark, tables.table_path(t))["format"] == "delta"
        assert spark.read.format("delta").load(tables.table_path(t)).schema == table_schema(t)
        # latest: created, then given deletion vectors (sinks.latest_merge).
        assert tables.version(t) == (1 if t == "latest" else 0)
    props = _detail(spark, tables.table_path("revisions"))["properties"]
    assert props["delta.appendOnly"] == "true"
    assert table_schema("late").names[0] == table_schema("dead_letter").names[0] == "query_id"


def test_write_batch_then_read_back(spark, delta_path, frames, make_revision, make_late,
                                    make_dead):
    tables = DeltaTables(str(delta_path)).ensure()
    revs = [make_revision("a", 0, 10_000, 0), make_revision("b", 0, 10_000, 0, timing="FINAL")]
    tables.write_batch("q", 0, frames.revisions(revs), frames.late([make_late("a", 3)]),
                       frames.dead([make_dead("{x", offset=7)]))
    got = spark.read.format("delta").load(tables.table_path("revisions")).collect()
    from revise.records import Revision

    assert sorted((Revision.from_row(r.asDict()) for r in got), key=lambda r: r.key) == revs
    assert _latest(spark, tables) == {("a", 0, 10_000): 0, ("b", 0, 10_000): 0}
    (late,) = spark.read.format("delta").load(tables.table_path("late")).collect()
    assert (late.query_id, late.key, late.ts_ms, late.lateness_ms) == ("q", "a", 3, 19_997)
    (dead,) = spark.read.format("delta").load(tables.table_path("dead_letter")).collect()
    assert (dead.query_id, dead.raw_value, dead.offset) == ("q", "{x", 7)
    assert tables.last_timings is not None and tables.last_timings.total > 0


def test_replaying_a_batch_changes_nothing(spark, delta_path, frames, make_revision, make_late,
                                           make_dead):
    tables = DeltaTables(str(delta_path)).ensure()

    def batch(b):
        return (frames.revisions([make_revision(k, 0, 10_000, b, batch_id=b) for k in "abc"]),
                frames.late([make_late("a", b, batch_id=b)]),
                frames.dead([make_dead(f"bad{b}", batch_id=b)]))

    tables.write_batch("q", 0, *batch(0))
    tables.write_batch("q", 1, *batch(1))
    before = _snapshot(spark, tables)
    tables.write_batch("q", 1, *batch(1))  # crash after the Delta writes, replay
    tables.write_batch("q", 0, *batch(0))  # and an even older one
    assert _snapshot(spark, tables) == before  # same rows, no new Delta versions
    assert len(before["revisions"][1]) == 6 and len(before["late"][1]) == 2
    # Another query writing into the same tables is not mistaken for a replay.
    tables.write_batch("other", 1, *batch(1))
    assert len(spark.read.format("delta").load(tables.table_path("revisions")).collect()) == 9


def test_the_latest_merge_is_skipped_on_replay_even_with_other_content(
    spark, delta_path, frames, make_revision,
):
    """The MERGE is skipped by its app transaction, not only by the revision condition."""
    tables = DeltaTables(str(delta_path)).ensure()
    tables.write_batch("q", 5, frames.revisions([make_revision("a", rev=0)]), frames.late(),
                       frames.dead())
    v = tables.version("latest")
    # Same batch id, a higher revision: the condition alone would accept it; the txn does not.
    tables.write_batch("q", 5, frames.revisions([make_revision("a", rev=1)]), frames.late(),
                       frames.dead())
    assert _latest(spark, tables) == {("a", 0, 10_000): 0}
    assert tables.version("latest") == v
    tables.write_batch("q", 6, frames.revisions([make_revision("a", rev=1)]), frames.late(),
                       frames.dead())
    assert _latest(spark, tables) == {("a", 0, 10_000): 1}


def test_a_concurrent_writer_of_the_same_batch_loses_cleanly(
    spark, delta_path, frames, make_revision, make_late, make_dead, monkeypatch,
):
    """A zombie and its successor both write batch 0: the loser's commit conflicts, re-reads
    the log, finds the batch done and writes nothing."""
    from deltalake import DeltaTable as RustDeltaTable

    zombie = DeltaTables(str(delta_path)).ensure()
    successor = DeltaTables(str(delta_path))
    # The zombie read the tables before the successor wrote (its snapshots are stale).
    stale = {t: RustDeltaTable(zombie.table_path(t)) for t in TABLE_NAMES}
    revs = frames.revisions([make_revision(k, 0, 10_000, 0) for k in "ab"])
    late, dead = frames.late([make_late("a", 3)]), frames.dead([make_dead("{x")])
    successor.write_batch("q", 0, revs, late, dead)
    handed: set[str] = set()
    fresh = zombie._root.table

    def stale_once(table: str):
        if table not in handed:
            handed.add(table)
            return stale[table]
        return fresh(table)

    monkeypatch.setattr(zombie._root, "table", stale_once)
    zombie.write_batch("q", 0, revs, late, dead)
    assert handed == {"revisions", "late", "dead_letter", "latest"}  # each began stale
    for t, n in (("revisions", 2), ("latest", 2), ("late", 1), ("dead_letter", 1)):
        assert spark.read.format("delta").load(zombie.table_path(t)).count() == n, t
        # Created (latest: and given deletion vectors), then one commit: the successor's.
        assert successor.version(t) == (2 if t == "latest" else 1), t


def test_latest_keeps_the_highest_revision_and_drops_retracted_bounds(
    spark, delta_path, frames, make_revision,
):
    tables = DeltaTables(str(delta_path)).ensure()
    r = make_revision
    tables.write_batch("q", 0, frames.revisions([
        r("a", 0, 10_000, 0), r("s", 0, 3_000, 0),
    ]), frames.late(), frames.dead())
    # Batch 1: a gets two revisions (the higher wins); session s grows: its old bounds are
    # retracted and the lineage continues with the new bounds; a retracted window that was never
    # in latest stays out.
    tables.write_batch("q", 1, frames.revisions([
        r("a", 0, 10_000, 2), r("a", 0, 10_000, 1),
        r("s", 0, 3_000, 1, retracted=True), r("s", 0, 5_000, 2),
        r("x", 0, 1_000, 0, retracted=True),
    ]), frames.late(), frames.dead())
    assert _latest(spark, tables) == {("a", 0, 10_000): 2, ("s", 0, 5_000): 2}
    # Batch 2 carries a lower (stale) revision of a: ignored.
    tables.write_batch("q", 2, frames.revisions([r("a", 0, 10_000, 1)]), frames.late(),
                       frames.dead())
    assert _latest(spark, tables) == {("a", 0, 10_000): 2, ("s", 0, 5_000): 2}
    # The history keeps everything, retracted revisions included.
    assert spark.read.format("delta").load(tables.table_path("revisions")).count() == 8


def test_views_and_time_travel(spark, delta_path, frames, make_revision, make_late, make_dead):
    tables = DeltaTables(str(delta_path)).ensure()
    r = make_revision
    # Batch 0's MERGE into latest after its history commits, as a job runs it (deferred): a
    # foreground MERGE runs beside them, and then latest's version of the batch may be the
    # older commit, whose moment would not include the batch's history.
    tables.write_batch("q", 0, frames.revisions([r("a", 0, 10_000, 0), r("b", 0, 10_000, 0)]),
                       frames.late(), frames.dead([make_dead()]), defer_latest=True)
    tables.flush()
    v0 = tables.version("latest")
    tables.write_batch("q", 1, frames.revisions([r("a", 0, 10_000, 1, timing="FINAL")]),
                       frames.late([make_late("a")]), frames.dead())

    assert register_views(spark, str(delta_path)) == list(REGISTERED_VIEWS)

    def rows(sql):
        return sorted(tuple(x) for x in spark.sql(sql).collect())

    assert rows("SELECT key, revision FROM final_windows") == [("a", 1)]
    assert rows("SELECT key, revision FROM provisional_windows") == [("b", 0)]
    assert rows("SELECT key, revision FROM revision_history") == [("a", 0), ("a", 1), ("b", 0)]
    assert rows("SELECT key FROM late_records") == [("a",)]
    assert rows("SELECT reason FROM dead_letters") == [("invalid JSON",)]
    assert spark.sql("SELECT count(*) FROM latest").first()[0] == 2

    # As of latest's version after batch 0: nothing final yet, and the other views show the
    # same moment (history without batch 1, no late record yet).
    register_views(spark, str(delta_path), version=v0)
    assert rows("SELECT key FROM final_windows") == []
    assert rows("SELECT key, revision FROM provisional_windows") == [("a", 0), ("b", 0)]
    assert rows("SELECT key, revision FROM revision_history") == [("a", 0), ("b", 0)]
    assert rows("SELECT key FROM late_records") == []
    assert "VERSION AS OF 3" in view_sql("final_windows", "/x", version=3)
    assert view_sql("provisional_windows", "/x").endswith("WHERE NOT is_final")


def test_spark_writes_merges_reads_and_time_travels_delta(spark, delta_path):
    """Issue 3: the generic Delta capability the sinks rely on."""
    path = str(delta_path / "plain")
    spark.createDataFrame([(1, "a"), (2, "b")], "id long, v string").write.format("delta").save(
        path)
    upd = spark.createDataFrame([(2, "B"), (3, "c")], "id long, v string")
    upd.createOrReplaceTempView("upd")
    spark.sql(f"MERGE INTO delta.`{path}` t USING upd s ON t.id = s.id "
              "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    now = sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())
    assert now == [(1, "a"), (2, "B"), (3, "c")]
    old = spark.read.format("delta").option("versionAsOf", 0).load(path).collect()
    assert sorted(tuple(r) for r in old) == [(1, "a"), (2, "b")]
    assert _history(spark, path).count() == 2


def test_tables_reopened_from_the_log_keep_replays_skipped_and_rows_whole(
    spark, delta_path, frames, make_revision, make_late, monkeypatch,
):
    import sinks.delta_txn as delta_txn

    monkeypatch.setattr(delta_txn, "RELOAD_EVERY", 2)  # re-open after 2 incremental updates
    tables = DeltaTables(str(delta_path)).ensure()
    opened: list[object] = []  # held, so that no two share an id()
    for b in range(7):
        tables.write_batch("q", b, frames.revisions([make_revision(k, 0, 10_000, b, batch_id=b)
                                                     for k in "ab"]),
                           frames.late([make_late("a", b, batch_id=b)]), frames.dead())
        if not any(t is tables._root._tables["revisions"] for t in opened):
            opened.append(tables._root._tables["revisions"])
    assert len(opened) >= 3  # the cached table object was replaced, not only updated
    before = _snapshot(spark, tables)
    for b in (6, 5, 2):  # replays after re-opens are still recognised
        tables.write_batch("q", b, frames.revisions([make_revision("a", 0, 10_000, 99)]),
                           frames.late([make_late("z", b)]), frames.dead())
    assert _snapshot(spark, tables) == before
    assert len(before["revisions"][1]) == 14 and len(before["late"][1]) == 7
    assert _latest(spark, tables) == {("a", 0, 10_000): 6, ("b", 0, 10_000): 6}


def test_highest_per_window_keeps_one_row_per_window(make_revision):
    from sinks.latest_merge import highest_per_window

    revision = make_revision
    rows = [revision("a", 0, 10, 1), revision("b", 0, 10, 0), revision("a", 0, 10, 3),
            revision("a", 0, 20, 2), revision("a", 0, 10, 2)]
    got = highest_per_window(pa.Table.from_pylist([r.to_row() for r in rows],
                                                  schema=REVISION_SCHEMA))
    assert sorted(zip(got.column("key").to_pylist(), got.column("window_end_ms").to_pylist(),
                      got.column("revision").to_pylist(), strict=True)) == [
        ("a", 10, 3), ("a", 20, 2), ("b", 10, 0)]


_WINDOW_ROWS = st.lists(
    st.tuples(st.sampled_from(["q", "q2"]), st.sampled_from(["a", "a\0", "a\0b", "b", "é", ""]),
              st.integers(0, 2), st.integers(0, 3)),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(_WINDOW_ROWS)
def test_highest_per_window_matches_a_plain_reference(rows):
    """(query_id, key, window start, revision) rows; the window ends 10 after it starts."""
    from sinks.latest_merge import highest_per_window

    n = len(rows)
    table = pa.table({
        "query_id": [r[0] for r in rows], "key": [r[1] for r in rows],
        "window_start_ms": pa.array([r[2] for r in rows], pa.int64()),
        "window_end_ms": pa.array([r[2] + 10 for r in rows], pa.int64()),
        "revision": pa.array([r[3] for r in rows], pa.int32()),
        "emitted_at_ms": pa.array(range(n), pa.int64()),  # which row won
    })
    best: dict[tuple[str, str, int, int], tuple[int, int]] = {}
    for i, (q, k, start, rev) in enumerate(rows):
        window = (q, k, start, start + 10)
        if window not in best or rev > best[window][0]:  # first on ties
            best[window] = (rev, i)
    want = [(*w, *best[w]) for w in sorted(best)]  # Python's str order: code points, as UTF-8
    got = highest_per_window(table)
    assert sorted(zip(*(got.column(c).to_pylist() for c in (
        "query_id", "key", "window_start_ms", "window_end_ms", "revision", "emitted_at_ms")),
        strict=True)) == want


def _latest_version(tables: DeltaTables, query_id: str = "q") -> int | None:
    from deltalake import DeltaTable as RustDeltaTable

    return RustDeltaTable(tables.table_path("latest")).transaction_version(f"revise-{query_id}")


def test_deferred_latest_merges_coalesce_batches_and_end_as_synchronous_ones(
    spark, delta_path, frames, make_revision,
):
    """The job's step 3d: batches that arrive while the merger rests after a MERGE go into
    one MERGE, tagged with the last batch id; after flush() latest holds the same rows as
    with one synchronous MERGE per batch, retracted session bounds included, and a replay of
    a coalesced batch changes nothing."""
    r = make_revision
    batches = [
        [r("a", 0, 10_000, 0, batch_id=0), r("s", 0, 3_000, 0, batch_id=0)],
        [r("a", 0, 10_000, 1, batch_id=1), r("s", 0, 3_000, 1, retracted=True, batch_id=1),
         r("s", 0, 5_000, 2, batch_id=1)],
        [r("a", 0, 10_000, 2, timing="FINAL", batch_id=2), r("b", 0, 10_000, 0, batch_id=2)],
        [r("b", 0, 10_000, 1, batch_id=3), r("s", 0, 5_000, 3, retracted=True, batch_id=3),
         r("s", 0, 9_000, 4, batch_id=3)],
    ]
    deferred = DeltaTables(str(delta_path / "deferred"), latest_rest_ratio=1e9).ensure()
    plain = DeltaTables(str(delta_path / "plain")).ensure()
    for b, rows in enumerate(batches):
        deferred.write_batch("q", b, frames.revisions(rows), frames.late(), frames.dead(),
                             defer_latest=True)
        plain.write_batch("q", b, frames.revisions(rows), frames.late(), frames.dead())
        if b == 0:
            assert deferred.flush() > 0  # batch 0's MERGE ran, and took time
            merged_once = deferred.version("latest")
    assert _latest_version(deferred) == 0  # 1-3 wait while the merger rests
    assert deferred.flush() > 0
    assert _latest_version(deferred) == 3
    assert deferred.version("latest") == merged_once + 1  # one commit for batches 1-3
    assert deferred.latest_merges == 2
    assert deferred.flush() == 0.0  # nothing pending any more
    want = {("a", 0, 10_000): 2, ("s", 0, 9_000): 4, ("b", 0, 10_000): 1}
    assert _latest(spark, deferred) == _latest(spark, plain) == want
    deferred.write_batch("q", 2, frames.revisions(batches[2]), frames.late(), frames.dead(),
                         defer_latest=True)  # a replay of a coalesced batch
    deferred.flush()
    assert deferred.version("latest") == merged_once + 1
    assert _latest(spark, deferred) == want


def test_a_lost_latest_merge_is_redone_from_revisions_at_start(
    spark, delta_path, frames, make_revision, monkeypatch,
):
    """A crash (here: a failure) after Spark recorded batch b but before its deferred MERGE
    committed leaves latest behind revisions; catch_up_latest, run by every job start, merges
    the revisions of the batches after latest's version, of this query only, once."""
    r = make_revision
    tables = DeltaTables(str(delta_path)).ensure()
    tables.write_batch("q", 0, frames.revisions([r("a", 0, 10_000, 0), r("s", 0, 3_000, 0)]),
                       frames.late(), frames.dead(), defer_latest=True)
    assert tables.flush() > 0
    real_merge = merge_on_read.merge

    def lost(*_args):
        raise OSError("disk gone")

    monkeypatch.setattr(merge_on_read, "merge", lost)  # every MERGE of latest fails
    tables.write_batch("q", 1, frames.revisions([
        r("a", 0, 10_000, 1, batch_id=1), r("s", 0, 3_000, 1, retracted=True, batch_id=1),
        r("s", 0, 5_000, 2, batch_id=1), r("n", 0, 10_000, 0, batch_id=1),
    ]), frames.late(), frames.dead(), defer_latest=True)
    with pytest.raises(DeltaWriteError, match="Delta MERGE into latest of batch 1 under"):
        tables.flush()
    with pytest.raises(DeltaWriteError, match="bringing Delta latest under .* failed .*disk gone"):
        tables.catch_up_latest("q")  # a start that cannot write latest fails clearly
    monkeypatch.setattr(merge_on_read, "merge", real_merge)
    # another query's later revisions in the same root are not this query's to merge
    tables.write_batch("other", 7, frames.revisions([r("z", 0, 10_000, 0, query_id="other",
                                                        batch_id=7)]),
                       frames.late(), frames.dead())
    assert _latest_version(tables) == 0
    assert _latest(spark, tables) == {("a", 0, 10_000): 0, ("s", 0, 3_000): 0,
                                      ("z", 0, 10_000): 0}

    restarted = DeltaTables(str(delta_path)).ensure()
    assert restarted.catch_up_latest("q") == 4
    assert _latest_version(restarted) == 1
    assert _latest(spark, restarted) == {("a", 0, 10_000): 1, ("s", 0, 5_000): 2,
                                         ("n", 0, 10_000): 0, ("z", 0, 10_000): 0}
    v = restarted.version("latest")
    assert restarted.catch_up_latest("q") == 0  # up to date: no commit
    assert restarted.version("latest") == v
    # the next batch's MERGE follows on from there
    restarted.write_batch("q", 2, frames.revisions([r("a", 0, 10_000, 2, batch_id=2)]),
                          frames.late(), frames.dead(), defer_latest=True)
    restarted.flush()
    assert _latest(spark, restarted)[("a", 0, 10_000)] == 2


def test_a_failed_deferred_merge_fails_the_next_batch(
    delta_path, frames, make_revision, monkeypatch,
):
    tables = DeltaTables(str(delta_path)).ensure()

    def lost(_job):
        raise OSError("disk gone")

    tables.run_latest_merges(lost)  # where the MERGE runs (an executor, in the job), it fails
    tables.write_batch("q", 0, frames.revisions([make_revision("a")]), frames.late(),
                       frames.dead(), defer_latest=True)
    with pytest.raises(DeltaWriteError, match="batch 0 .*disk gone.*redoes it from revisions"):
        tables.write_batch("q", 1, frames.revisions([make_revision("a", rev=1, batch_id=1)]),
                           frames.late(), frames.dead(), defer_latest=True)


def _detail(spark, path):
    """``DESCRIBE DETAIL`` of the Delta table at ``path`` as a dict (Spark's reading of it)."""
    return spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first().asDict()


def _history(spark, path):
    return spark.sql(f"DESCRIBE HISTORY delta.`{path}`")
