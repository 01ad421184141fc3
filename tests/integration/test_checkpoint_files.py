"""How a revise session's streaming queries write their checkpoints (``revise.spark.session``).

Through Hadoop's ``FileSystem`` API, not ``FileContext``, which spawns a child process per
``chmod`` and ``readlink`` (docs/BENCHMARKS.md, *An empty micro-batch and Hadoop's local file
system*); and still atomically: each file under a temporary name, then renamed into place.
"""

from __future__ import annotations

import pytest

from revise.spark.session import FILE_SYSTEM_CHECKPOINTS

pytestmark = [pytest.mark.spark]


def test_a_stateful_query_writes_its_checkpoint_through_the_file_system_api(spark, tmp_path):
    from pyspark.sql import functions as F

    checkpoint = tmp_path / "checkpoint"
    counts = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
              .groupBy((F.col("value") % 3).alias("k")).count())
    query = (counts.writeStream.outputMode("update").format("memory").queryName("cp_files")
             .option("checkpointLocation", str(checkpoint)).start())
    try:
        for _ in range(3):  # a few micro-batches, each with rows: state written and read back
            query.processAllAvailable()
        execution = query._jsq.streamingQuery()  # noqa: SLF001 - no public handle on the logs
        # The state store takes its file manager from the same settings (the query's Hadoop
        # configuration), so the logs stand for it.
        for log in (execution.offsetLog(), execution.commitLog()):
            assert log.fileManager().getClass().getName() == FILE_SYSTEM_CHECKPOINTS
        assert query.exception() is None
    finally:
        query.stop()
    assert sorted(p.name for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    assert any((checkpoint / "state").rglob("*.changelog"))  # RocksDB's changelog was written
    # the atomic write leaves no temporary file behind
    assert not [p for p in checkpoint.rglob("*.tmp")]
    rows = {r["k"]: r["count"] for r in spark.sql("SELECT k, max(count) AS count FROM cp_files "
                                                  "GROUP BY k").collect()}
    assert set(rows) <= {0, 1, 2} and sum(rows.values()) > 0
