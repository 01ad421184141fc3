"""How a revise session's streaming queries write their checkpoints (``revise.spark.session``).

Through Hadoop's ``FileSystem`` API, not ``FileContext``, which spawns a child process per
``chmod`` and ``readlink`` (docs/lab/benchmarks-diary.md, *An empty micro-batch and Hadoop's local
file system*); and still atomically: each file under a temporary name, then renamed into place.
"""

from __future__ import annotations

import pytest

from revise.checkpoint import OFFSETS_LOG, STATE_DIR
from revise.spark.session import FILE_SYSTEM_CHECKPOINTS

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
