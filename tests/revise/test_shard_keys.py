"""The shards' grouping keys spread them evenly over the state partitions.

The pure part checks the arithmetic; the Spark part checks the claim it rests on: Spark's
hash partitioning of the grouping column (what the stateful operator's shuffle does) places
shard ``i``'s key on partition ``i mod partitions``, where the bare shard numbers pile up.
"""

from __future__ import annotations

from collections import Counter

import pytest

from revise.spark.shard_keys import shard_keys, shard_of, spark_partition

SHAPES = [(8, 2), (8, 4), (8, 8), (2, 2), (3, 2), (16, 5), (4, 8), (1, 1), (64, 64)]


@pytest.mark.parametrize(("shards", "partitions"), SHAPES)
def test_each_partition_holds_its_share_and_each_key_names_its_shard(shards, partitions):
    keys = shard_keys(shards, partitions)
    assert len(set(keys)) == shards
    assert [shard_of(k, shards) for k in keys] == list(range(shards))
    assert [spark_partition(k, partitions) for k in keys] == [
        i % partitions for i in range(shards)]
    per = Counter(spark_partition(k, partitions) for k in keys)
    assert max(per.values()) - min(per.values()) <= 1
    assert all(0 <= k < 2**31 for k in keys)


def test_the_bare_shard_numbers_would_pile_up():
    """Why the keys exist: 8 bare shard numbers leave partitions of 4 and of 8 empty."""
    assert len({spark_partition(i, 4) for i in range(8)}) < 4
    assert len({spark_partition(i, 8) for i in range(8)}) < 8


@pytest.mark.spark
@pytest.mark.parametrize(("shards", "partitions"), [(8, 2), (8, 4), (16, 5)])
def test_spark_places_each_shards_key_on_its_partition(spark, shards, partitions):
    from pyspark.sql import functions as F

    keys = shard_keys(shards, partitions)
    rows = spark.createDataFrame([(i, k) for i, k in enumerate(keys)], "shard int, key int")
    placed = (rows.repartition(partitions, "key")
              .select("shard", "key", F.spark_partition_id().alias("partition"),
                      F.hash("key").alias("hash"))
              .collect())
    assert sorted((r["shard"], r["partition"]) for r in placed) == [
        (i, i % partitions) for i in range(shards)]
    assert all(spark_partition(r["key"], partitions) == r["hash"] % partitions for r in placed)
