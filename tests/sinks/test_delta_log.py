"""revise's own replay and commit of a Delta log (``sinks.delta_log``).

Real tables under ``tmp_path``: written by delta-rs (copy-on-write deletes, app transactions,
its checkpoints) and by Spark with Delta (deletion vectors, its checkpoints, V2 checkpoints);
every snapshot is checked against what delta-rs and Spark themselves read.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import CommitProperties, Transaction

from sinks import delta_log
from sinks.delta_commit import CommitConflict, commit_actions
from sinks.delta_files import PARQUET_OPTIONS, delta_stats
from sinks.delta_log import ActiveFile, DeltaLogError, LogSnapshot, read_snapshot

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.delta]

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string())])


def rows(ids: range, s: str | None = "v") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "s": pa.array([s] * len(ids))},
                    schema=SCHEMA)


def rs_paths(dt: DeltaTable) -> set[str]:
    """The ``add.path`` strings of delta-rs's active files (as written: URI-encoded)."""
    return set(pa.table(dt.get_add_actions()).column("path").to_pylist())


def key(f: ActiveFile) -> tuple[Any, ...]:
    """What two reads of one file must agree on (stats compared parsed, by record count)."""
    return (f.path, f.size, f.modification_time_ms, f.num_records,
            sorted(f.partition_values.items(), key=str), sorted((f.deletion_vector or {}).items()))


def same_state(a: LogSnapshot, b: LogSnapshot) -> bool:
    return (a.version == b.version and a.app_versions == b.app_versions
            and sorted(map(key, a.files)) == sorted(map(key, b.files)))


def cardinality(f: ActiveFile) -> int:
    assert f.deletion_vector is not None, f
    return int(f.deletion_vector["cardinality"])


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def log_names(path: Path) -> list[str]:
    return sorted(os.listdir(path / "_delta_log"))


# --- delta-rs tables ------------------------------------------------------------------------

def test_delta_rs_table_replays_like_delta_rs(tmp_path: Path) -> None:
    """Appends (partitioned, with values that need escaping), a copy-on-write delete, an app
    transaction, a checkpoint in the middle, appends after it: every version as delta-rs."""
    p = str(tmp_path / "t")
    write_deltalake(p, rows(range(0, 10), "a b%"), partition_by=["s"])
    write_deltalake(p, rows(range(10, 20), "x/y"), mode="append")
    write_deltalake(p, rows(range(20, 30), None), mode="append",
                    commit_properties=CommitProperties(app_transactions=[Transaction("app", 7)]))
    DeltaTable(p).delete("id < 5 OR id = 25")  # rewrites two files
    DeltaTable(p).create_checkpoint()
    checkpointed = DeltaTable(p).version()
    write_deltalake(p, rows(range(30, 40), "a b%"), mode="append")
    DeltaTable(p).delete("id = 12")
    write_deltalake(p, rows(range(40, 45)), mode="append",
                    commit_properties=CommitProperties(app_transactions=[Transaction("app", 9),
                                                                         Transaction("b", 1)]))
    assert any(n.endswith(".checkpoint.parquet") for n in log_names(Path(p)))

    dt = DeltaTable(p)
    snap = read_snapshot(p)
    assert snap.version == dt.version() == checkpointed + 3
    assert [f.path for f in snap.files] and len({f.path for f in snap.files}) == len(snap.files)
    assert {f.path for f in snap.files} == rs_paths(dt)
    assert {f"{p}/{_decoded(f.path)}" for f in snap.files} == set(dt.file_uris())
    assert all(Path(p, _decoded(f.path)).is_file() for f in snap.files)
    assert snap.app_versions == {"app": 9, "b": 1} == {
        a: dt.transaction_version(a) for a in ("app", "b")}
    actions = pa.table(dt.get_add_actions()).to_pylist()
    by_path = {a["path"]: a for a in actions}
    for f in snap.files:
        assert (f.size, f.modification_time_ms, f.num_records) == (
            by_path[f.path]["size_bytes"], by_path[f.path]["modification_time"],
            by_path[f.path]["num_records"])
        assert f.partition_values == by_path[f.path]["partition"]
        assert f.deletion_vector is None
    assert sum(f.num_records or 0 for f in snap.files) == dt.count() == 45 - 7

    for v in range(dt.version() + 1):  # before the checkpoint (from v0), at it, after it
        old = read_snapshot(p, version=v)
        assert old.version == v
        assert {f.path for f in old.files} == rs_paths(DeltaTable(p, version=v)), v
    assert read_snapshot(p, version=2).app_versions == {"app": 7}
    assert read_snapshot(p, version=checkpointed).app_versions == {"app": 7}  # the checkpoint's
    assert read_snapshot(p, version=1).app_versions == {}


def test_read_snapshot_through_the_object_store(tmp_path: Path) -> None:
    """The reader of remote tables (delta-rs's object store), run on a ``file://`` table: the
    same snapshot as the local reader's."""
    p = tmp_path / "t"
    for i in range(3):
        write_deltalake(str(p), rows(range(i * 10, i * 10 + 10)), mode="append")
    DeltaTable(str(p)).create_checkpoint()
    write_deltalake(str(p), rows(range(30, 35)), mode="append",
                    commit_properties=CommitProperties(app_transactions=[Transaction("a", 2)]))
    uri = p.as_uri()
    remote = delta_log._replay(delta_log._Log(None, uri, None), uri, None)
    assert remote.version == 3 and remote.app_versions == {"a": 2}
    assert remote == read_snapshot(str(p)) == read_snapshot(uri)
    assert delta_log._replay(delta_log._Log(None, uri, None), uri, 1) == read_snapshot(
        str(p), version=1)


def test_a_gap_in_the_log_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "t"
    for i in range(4):
        write_deltalake(str(p), rows(range(i, i + 1)), mode="append")
    (p / "_delta_log" / f"{2:020d}.json").unlink()
    with pytest.raises(DeltaLogError, match=r"lacks the commits 2 after that"):
        read_snapshot(str(p))
    with pytest.raises(DeltaLogError, match=r"lacks the commits 2 "):
        read_snapshot(str(p), version=2)
    assert read_snapshot(str(p), version=1).version == 1

    # A checkpoint covers a lost commit: versions from it on replay, older ones do not.
    q = tmp_path / "q"
    for i in range(4):
        write_deltalake(str(q), rows(range(i, i + 1)), mode="append")
    DeltaTable(str(q)).create_checkpoint()
    write_deltalake(str(q), rows(range(9, 10)), mode="append")
    for v in (0, 1):
        (q / "_delta_log" / f"{v:020d}.json").unlink()
    assert {f.path for f in read_snapshot(str(q)).files} == rs_paths(DeltaTable(str(q)))
    assert read_snapshot(str(q), version=3).version == 3
    with pytest.raises(DeltaLogError, match=r"no checkpoint at or below it and lacks the "
                                            r"commits 0-1"):
        read_snapshot(str(q), version=2)


def test_missing_tables_and_versions_are_errors(tmp_path: Path) -> None:
    with pytest.raises(DeltaLogError, match="no Delta table at"):
        read_snapshot(str(tmp_path / "none"))
    p = tmp_path / "t"
    write_deltalake(str(p), rows(range(3)))
    with pytest.raises(DeltaLogError, match="version 5 .* does not exist: the newest is 0"):
        read_snapshot(str(p), version=5)
    with pytest.raises(DeltaLogError, match="negative"):
        read_snapshot(str(p), version=-1)
    (p / "_delta_log" / f"{0:020d}.json").write_bytes(b'{"add": {"path": "x"}}\n')
    with pytest.raises(DeltaLogError, match=r"line 1 of .*00000000000000000000\.json is not a "
                                            r"valid Delta action \(KeyError"):
        read_snapshot(str(p))


def test_replay_of_a_hundred_commits_after_a_checkpoint(tmp_path: Path) -> None:
    """100 files in a checkpoint, then 100 commits each giving a file a new deletion vector
    (remove the old identity, add the new one): the newest DV per file."""
    p = tmp_path / "t"
    write_deltalake(str(p), rows(range(1)))
    base = read_snapshot(str(p))
    stats = delta_stats(rows(range(1000)))
    for i in range(100):
        commit_actions(str(p), base.version + 1 + i, [
            {"commitInfo": {"timestamp": now_ms(), "operation": "WRITE"}},
            {"add": {"path": f"part-{i:03d}.parquet", "partitionValues": {}, "size": 1000 + i,
                     "modificationTime": now_ms(), "dataChange": True, "stats": stats}}])
    DeltaTable(str(p)).create_checkpoint()  # delta-rs writes it; the files need not exist
    cp = read_snapshot(str(p)).version

    def dv(i: int, n: int) -> dict[str, Any]:
        return {"storageType": "u", "pathOrInlineDv": f"dv{i:03d}{n:015d}", "offset": 1 + n,
                "sizeInBytes": 40, "cardinality": n + 1}

    for n in range(100):
        i = n % 10  # ten files, ten DV updates each
        old = {"deletionVector": dv(i, n - 10)} if n >= 10 else {}
        f = {"path": f"part-{i:03d}.parquet", "partitionValues": {}, "size": 1000 + i}
        commit_actions(str(p), cp + 1 + n, [
            {"commitInfo": {"timestamp": now_ms(), "operation": "DELETE"}},
            {"remove": {**f, "deletionTimestamp": now_ms(), "dataChange": True, **old}},
            {"add": {**f, "modificationTime": now_ms(), "dataChange": True, "stats": stats,
                     "deletionVector": dv(i, n)}}])
    snap = read_snapshot(str(p))
    assert snap.version == cp + 100 and len(snap.files) == 101
    dvs = {f.path: f.deletion_vector for f in snap.files}
    assert all(dvs[f"part-{i:03d}.parquet"] == dv(i, 90 + i) for i in range(10))
    assert all(dvs[f"part-{i:03d}.parquet"] is None for i in range(10, 100))


# --- commits --------------------------------------------------------------------------------

def write_parquet(table: Path, data: pa.Table) -> dict[str, Any]:
    """A new data file in the table's folder and its ``add`` action."""
    name = f"part-raw-{uuid.uuid4().hex}.snappy.parquet"
    pq.write_table(data, table / name, **PARQUET_OPTIONS)
    st = (table / name).stat()
    return {"path": name, "partitionValues": {}, "size": st.st_size,
            "modificationTime": st.st_mtime_ns // 1_000_000, "dataChange": True,
            "stats": delta_stats(data)}


@pytest.mark.spark
def test_commit_round_trip(tmp_path: Path, spark: SparkSession) -> None:
    p = tmp_path / "t"
    write_deltalake(str(p), rows(range(0, 10)))
    write_deltalake(str(p), rows(range(10, 20)), mode="append")
    before = read_snapshot(str(p))
    gone = next(f for f in before.files if f.num_records == 10 and _ids(p, f) == set(range(10)))
    add = write_parquet(p, rows(range(100, 105), "new"))
    version = before.version + 1
    commit_actions(str(p), version, [
        {"commitInfo": {"timestamp": now_ms(), "operation": "WRITE",
                        "operationParameters": {"mode": "Append"}, "engineInfo": "revise"}},
        {"txn": {"appId": "revise-q", "version": 3, "lastUpdated": now_ms()}},
        {"remove": {"path": gone.path, "deletionTimestamp": now_ms(), "dataChange": True,
                    "extendedFileMetadata": True, "partitionValues": {}, "size": gone.size}},
        {"add": add}])
    want = set(range(10, 20)) | set(range(100, 105))

    dt = DeltaTable(str(p))
    assert dt.version() == version and dt.transaction_version("revise-q") == 3
    assert rs_paths(dt) == {f.path for f in before.files if f != gone} | {add["path"]}
    assert set(pa.table(dt.scan()).column("id").to_pylist()) == want
    assert dt.count() == len(want)
    spark_ids = spark.read.format("delta").load(str(p)).select("id").collect()
    assert sorted(r.id for r in spark_ids) == sorted(want)
    snap = read_snapshot(str(p))
    assert snap.version == version and snap.app_versions == {"revise-q": 3}
    assert {f.path for f in snap.files} == rs_paths(dt)
    assert snap.files[-1] == ActiveFile(add["path"], add["size"], add["modificationTime"],
                                        add["stats"], {}, None)
    assert snap.files[-1].num_records == 5

    # The version is taken: a second writer loses, and the first commit stays as it was.
    commit = p / "_delta_log" / f"{version:020d}.json"
    written = commit.read_bytes()
    assert written.count(b"\n") == 4 and written.endswith(b"\n")
    with pytest.raises(CommitConflict, match=f"version {version} .* was committed by another"):
        commit_actions(str(p), version, [
            {"commitInfo": {"timestamp": now_ms(), "operation": "WRITE"}},
            {"txn": {"appId": "revise-q", "version": 4}}])
    assert commit.read_bytes() == written
    assert not [n for n in log_names(p) if n.startswith(".") or n.endswith(".tmp")]
    assert DeltaTable(str(p)).transaction_version("revise-q") == 3

    # A file: URI is the same folder; delta-rs checkpoints what was committed.
    commit_actions(p.as_uri(), version + 1, [
        {"commitInfo": {"timestamp": now_ms(), "operation": "WRITE"}},
        {"txn": {"appId": "revise-q", "version": 4}}])
    assert DeltaTable(str(p)).transaction_version("revise-q") == 4
    before_checkpoint = read_snapshot(str(p))
    DeltaTable(str(p)).create_checkpoint()
    assert f"{version + 1:020d}.checkpoint.parquet" in log_names(p)
    after = read_snapshot(str(p))
    assert same_state(after, before_checkpoint)
    assert after.app_versions == {"revise-q": 4}
    assert {f.path for f in after.files} == rs_paths(DeltaTable(str(p)))


def test_commit_refuses_what_it_cannot_do_safely(tmp_path: Path) -> None:
    p = tmp_path / "t"
    write_deltalake(str(p), rows(range(3)))
    info = {"commitInfo": {"timestamp": 1}}
    with pytest.raises(DeltaLogError, match="atomic put-if-absent .* only local or shared"):
        commit_actions("s3://bucket/t", 1, [info])
    with pytest.raises(DeltaLogError, match=r"would leave a gap: .*00000000000000000001\.json"):
        commit_actions(str(p), 2, [info])
    with pytest.raises(DeltaLogError, match="no Delta table at"):
        commit_actions(str(tmp_path / "none"), 1, [info])
    with pytest.raises(DeltaLogError, match="has no actions"):
        commit_actions(str(p), 1, [])
    with pytest.raises(DeltaLogError, match="action 1 .* is a mapping with one key"):
        commit_actions(str(p), 1, [info, {"add": {}, "remove": {}}])
    with pytest.raises(DeltaLogError, match="action 0 .* is a mapping with one key"):
        commit_actions(str(p), 1, [{"addFile": {}}])
    with pytest.raises(DeltaLogError, match=r"action 0 \(commitInfo\) .* not JSON-serialisable"):
        commit_actions(str(p), 1, [{"commitInfo": {"t": object()}}])
    with pytest.raises(DeltaLogError, match="not an integer >= 0"):
        commit_actions(str(p), -1, [info])
    assert log_names(p) == [f"{0:020d}.json"]
    assert DeltaTable(str(p)).version() == 0


# --- Spark tables with deletion vectors -----------------------------------------------------

@pytest.mark.spark
def test_spark_deletion_vectors(tmp_path: Path, spark: SparkSession) -> None:
    """Spark DELETEs with DVs (new, then updated twice), a Spark checkpoint between them: the
    snapshot's DVs are the ones Spark and delta-rs read, from the checkpoint and from JSON."""
    p = str(tmp_path / "dv")
    (spark.range(0, 1000).coalesce(2).write.format("delta")
     .option("delta.enableDeletionVectors", "true").option("delta.checkpointInterval", "2")
     .save(p))
    for m in (3, 5, 7):  # v1: new DVs; v2 (checkpointed), v3: DVs updated
        spark.sql(f"DELETE FROM delta.`{p}` WHERE id % {m} = 0")
    assert f"{2:020d}.checkpoint.parquet" in log_names(Path(p))

    snap = read_snapshot(p)
    assert snap.version == 3 and len(snap.files) == 2
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{p}`").collect()[0]
    assert detail.numFiles == 2
    per_file = {r.file_name: r["count"] for r in spark.read.format("delta").load(p)
                .groupBy("_metadata.file_name").count().collect()}
    rs_deleted = {Path(r["filepath"]).name: r["selection_vector"].count(False)
                  for r in pa.RecordBatchReader.from_stream(DeltaTable(p).deletion_vectors())
                  .read_all().to_pylist()}
    survivors = sum(1 for i in range(1000) if i % 3 and i % 5 and i % 7)
    assert sum(per_file.values()) == survivors
    for f in snap.files:
        dv = f.deletion_vector
        assert dv is not None and dv["storageType"] == "u" and "offset" in dv
        assert set(dv) == {"storageType", "pathOrInlineDv", "offset", "sizeInBytes",
                           "cardinality"}
        assert f.num_records == 500
        assert dv["cardinality"] == 500 - per_file[f.path] == rs_deleted[f.path]
    assert sum(map(cardinality, snap.files)) == 1000 - survivors

    first = read_snapshot(p, version=1)  # from JSON: the first DVs
    assert sum(map(cardinality, first.files)) == sum(1 for i in range(1000) if i % 3 == 0)
    assert read_snapshot(p, version=0).files[0].deletion_vector is None

    # The same log without its checkpoints replays to the same state from JSON alone.
    json_only = tmp_path / "json_only"
    (json_only / "_delta_log").mkdir(parents=True)
    for name in log_names(Path(p)):
        if name.endswith(".json") and not name.startswith(".") and ".checkpoint." not in name:
            shutil.copy(Path(p, "_delta_log", name), json_only / "_delta_log" / name)
    for v in (2, 3):
        from_json, from_checkpoint = read_snapshot(str(json_only), version=v), read_snapshot(
            p, version=v)
        assert same_state(from_json, from_checkpoint)
        assert sorted(f.stats or "" for f in from_json.files) == sorted(
            f.stats or "" for f in from_checkpoint.files)

    # A raw remove of a file with its DV: Spark and delta-rs no longer read it.
    gone, kept = snap.files
    commit_actions(p, 4, [
        {"commitInfo": {"timestamp": now_ms(), "operation": "DELETE"}},
        {"remove": {"path": gone.path, "deletionTimestamp": now_ms(), "dataChange": True,
                    "extendedFileMetadata": True, "partitionValues": {}, "size": gone.size,
                    "deletionVector": gone.deletion_vector}}])
    assert spark.read.format("delta").load(p).count() == per_file[kept.path]
    assert pa.table(DeltaTable(p).scan()).num_rows == per_file[kept.path]
    assert read_snapshot(p).files == (kept,)


@pytest.mark.spark
def test_spark_v2_checkpoint_with_sidecars_is_refused(tmp_path: Path,
                                                      spark: SparkSession) -> None:
    p = str(tmp_path / "v2")
    (spark.range(0, 100).coalesce(2).write.format("delta")
     .option("delta.enableDeletionVectors", "true").option("delta.checkpointPolicy", "v2")
     .option("delta.checkpointInterval", "1").save(p))
    spark.sql(f"DELETE FROM delta.`{p}` WHERE id % 3 = 0")
    assert any(".checkpoint." in n and n.endswith(".json") for n in log_names(Path(p)))
    with pytest.raises(DeltaLogError, match="V2 checkpoint with sidecar files"):
        read_snapshot(p)
    assert len(read_snapshot(p, version=0).files) == 2
    # The fix the message gives: classic checkpoints from then on.
    spark.sql(f"ALTER TABLE delta.`{p}` SET TBLPROPERTIES ('delta.checkpointPolicy'='classic')")
    snap = read_snapshot(p)
    assert snap.version == 2
    assert sum(map(cardinality, snap.files)) == 34


@pytest.mark.spark
def test_spark_multi_part_checkpoint(tmp_path: Path, spark: SparkSession) -> None:
    """A checkpoint in several parts is read whole; one with a part missing is skipped."""
    p = tmp_path / "parts"
    spark.conf.set("spark.databricks.delta.checkpoint.partSize", "2")  # actions per part
    try:
        (spark.range(0, 1000).repartition(4).write.format("delta")
         .option("delta.enableDeletionVectors", "true").option("delta.checkpointInterval", "2")
         .save(str(p)))
        spark.sql(f"DELETE FROM delta.`{p}` WHERE id % 3 = 0")
        spark.sql(f"DELETE FROM delta.`{p}` WHERE id % 5 = 0")
    finally:
        spark.conf.unset("spark.databricks.delta.checkpoint.partSize")
    parts = [n for n in log_names(p) if n.startswith(f"{2:020d}.checkpoint.0")]
    assert len(parts) > 1
    snap = read_snapshot(str(p))
    assert snap.version == 2 and len(snap.files) == 4
    assert 1000 - sum(map(cardinality, snap.files)) == spark.read.format("delta").load(
        str(p)).count() == sum(1 for i in range(1000) if i % 3 and i % 5)
    (p / "_delta_log" / parts[-1]).unlink()  # incomplete: the replay starts from v0
    assert same_state(read_snapshot(str(p)), snap)


def _decoded(path: str) -> str:
    from urllib.parse import unquote

    return unquote(path)


def _ids(table: Path, f: ActiveFile) -> set[int]:
    return set(pq.read_table(table / _decoded(f.path), columns=["id"]).column("id").to_pylist())
