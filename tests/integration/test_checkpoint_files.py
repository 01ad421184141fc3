"""How a revise session's streaming queries write their checkpoints (``revise.spark.session``).

Through Hadoop's ``FileSystem`` API, not ``FileContext``, which spawns a child process per
``chmod`` and ``readlink`` (docs/lab/benchmarks-diary.md, *An empty micro-batch and Hadoop's local
file system*), on ``revise.jvm.LocalFiles``, which sets a new file's mode without a ``chmod``
process; and still atomically: each file under a temporary name, then renamed into place.
"""

from __future__ import annotations

import os
import stat

import pytest

from revise.checkpoint import OFFSETS_LOG, STATE_DIR
from revise.spark.session import FILE_SYSTEM_CHECKPOINTS, LOCAL_FILE_SYSTEM

pytestmark = [pytest.mark.spark]


def test_a_stateful_query_writes_its_checkpoint_through_the_file_system_api(spark, tmp_path):
    from pyspark.sql import functions as F

    inbox, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    inbox.mkdir()
    counts = (spark.readStream.schema("v LONG").json(str(inbox))
              .groupBy((F.col("v") % 3).alias("k")).count())
    query = (counts.writeStream.outputMode("update").format("memory").queryName("cp_files")
             .option("checkpointLocation", str(checkpoint)).start())
    try:
        # Two micro-batches with rows: the second reads the state the first wrote.
        for part, values in enumerate((range(0, 30), range(30, 60))):
            (inbox / f"part-{part}.json").write_text("".join(f'{{"v": {v}}}\n' for v in values))
            query.processAllAvailable()
        execution = query._jsq.streamingQuery()
        # The state store takes its file manager from the same settings (the query's Hadoop
        # configuration), so the logs stand for it.
        for log in (execution.offsetLog(), execution.commitLog()):
            assert log.fileManager().getClass().getName() == FILE_SYSTEM_CHECKPOINTS
        assert query.exception() is None
    finally:
        query.stop()
    assert {p.name for p in (checkpoint / OFFSETS_LOG).iterdir()} >= {"0", "1"}
    assert any((checkpoint / STATE_DIR).rglob("*.changelog"))  # RocksDB's changelog was written
    # the atomic write leaves no temporary file behind
    assert not list(checkpoint.rglob("*.tmp"))
    totals = {r["k"]: r["count"] for r in spark.sql("SELECT k, max(count) AS count FROM cp_files "
                                                    "GROUP BY k").collect()}
    assert totals == {0: 20, 1: 20, 2: 20}  # counts carried across the two micro-batches


def _local_file_system(spark):  # type: ignore[no-untyped-def]
    jvm = spark.sparkContext._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    return jvm, jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), conf)


def test_a_local_session_writes_files_through_revises_local_file_system(spark, tmp_path):
    """The checkpoints' file system is LocalFiles, and its files get Hadoop's modes."""
    assert spark.sparkContext.getConf().get(LOCAL_FILE_SYSTEM) == "revise.jvm.LocalFiles"
    jvm, fs = _local_file_system(spark)
    assert fs.getClass().getName() == "revise.jvm.LocalFiles"
    assert fs.getRaw().getClass().getName() == "revise.jvm.LocalFiles$Raw"
    # What Spark's logs do: create (the default mode, under Hadoop's umask) and rename.
    target = tmp_path / "0"
    out = fs.create(jvm.org.apache.hadoop.fs.Path(f"file:{tmp_path}/.0.tmp"), False)
    out.write(bytearray(b"v1"))
    out.close()
    fs.rename(jvm.org.apache.hadoop.fs.Path(f"file:{tmp_path}/.0.tmp"),
              jvm.org.apache.hadoop.fs.Path(f"file:{target}"))
    assert target.read_bytes() == b"v1"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # 0666 under the default umask 022
    assert stat.S_IMODE((tmp_path / ".0.crc").stat().st_mode) == 0o644  # renamed with it


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o755, 0o777, 0o000, 0o1777])
def test_local_files_sets_each_mode_as_chmod_would(spark, tmp_path, mode):
    """Every permission bit lands where chmod puts it; the sticky bit goes to Hadoop's path."""
    jvm, fs = _local_file_system(spark)
    path = tmp_path / "d" if mode & 0o1000 else tmp_path / "f"
    path.mkdir() if mode & 0o1000 else path.write_bytes(b"x")
    os.chmod(path, 0o421)  # something else first
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission(f"{mode:03o}")
    fs.getRaw().setPermission(jvm.org.apache.hadoop.fs.Path(f"file:{path}"), permission)
    assert stat.S_IMODE(path.stat().st_mode) == mode
