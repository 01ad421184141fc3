"""The failure classifier of the Spark driver, on texts Spark and the JVM really print."""

from __future__ import annotations

from revise.spark.failures import checkpoint_taken_over, root_cause

# Printed by a woken zombie in CI (2026-11-23): its offset-log write lost the race to the
# instance that had taken over the checkpoint.
_RACE = """org.apache.spark.SparkConcurrentModificationException: Multiple streaming queries are \
concurrently using file:/tmp/x/checkpoint/spark/offsets.
\tat org.apache.spark.sql.execution.streaming.HDFSMetadataLog.addNewBatchByStream
Caused by: org.apache.hadoop.fs.FileAlreadyExistsException: rename destination \
file:/tmp/x/checkpoint/spark/offsets/1 already exists.
\t... 26 more"""

_LOST_TOPIC = """org.apache.spark.SparkException: Job aborted.
Caused by: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: This server does \
not host this topic-partition."""


def test_a_lost_checkpoint_race_is_recognised_as_another_instance_taking_over():
    assert checkpoint_taken_over(_RACE)
    assert not checkpoint_taken_over(_LOST_TOPIC)
    assert not checkpoint_taken_over("java.io.IOException: No space left on device")


def test_root_cause_is_the_innermost_cause_else_the_first_line():
    assert root_cause(_RACE).startswith("org.apache.hadoop.fs.FileAlreadyExistsException")
    assert root_cause(_LOST_TOPIC).startswith("org.apache.kafka.common.errors.Unknown")
    assert root_cause("first line\nsecond") == "first line"
    assert root_cause("") == ""
