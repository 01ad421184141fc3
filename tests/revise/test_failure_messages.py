"""The failure classifier of the Spark driver, on texts Spark and the JVM really print."""

from __future__ import annotations

from pathlib import Path

from revise.config import EngineConfig, WindowSpec
from revise.jobconfig import DeltaOutput, JobConfig, KafkaIO
from revise.kafka.redact import Redactor
from revise.kafka.settings import KafkaSettings
from revise.spark.failures import (
    checkpoint_taken_over,
    failure_message,
    root_cause,
)

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


# Spark's error when the commit log's entry for the batch was written by another instance.
_COMMIT_RACE = """org.apache.spark.SparkException: [CONCURRENT_STREAM_LOG_UPDATE] Concurrent \
update to the log. Multiple streaming jobs detected for 3.
Please make sure only one streaming job runs on a specific checkpoint location at a time. \
SQLSTATE: 40000"""


def test_a_lost_checkpoint_race_is_recognised_as_another_instance_taking_over():
    assert checkpoint_taken_over(_RACE)
    assert checkpoint_taken_over(_COMMIT_RACE)
    assert not checkpoint_taken_over(_LOST_TOPIC)
    assert not checkpoint_taken_over("java.io.IOException: No space left on device")


# A stateful task's Python worker failed (its data files under a read-only --delta-path), as
# pyspark raises it from the collect of the micro-batch.
_WORKER = """
  An exception was thrown from the Python worker. Please see the stack trace below.
Traceback (most recent call last):
  File "/work/revise/spark/operator.py", line 160, in handleInputRows
    chunks = self._call(int(key[0]), rows, timerValues)
  File "/work/sinks/delta_history.py", line 52, in write_rows
    raise DeltaWriteError(msg) from e
sinks.delta_txn.DeltaWriteError: writing b4-s1 under '/d/revisions' failed (OSError: read-only)

	at org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(\
PythonRunner.scala:512)
Caused by: org.apache.spark.api.python.PythonException: Traceback (most recent call last):"""


def test_a_python_workers_failure_is_its_exception_line():
    assert root_cause(_WORKER) == (
        "sinks.delta_txn.DeltaWriteError: writing b4-s1 under '/d/revisions' failed "
        "(OSError: read-only)")


def test_root_cause_is_the_innermost_cause_else_the_first_line():
    assert root_cause(_RACE).startswith("org.apache.hadoop.fs.FileAlreadyExistsException")
    assert root_cause(_LOST_TOPIC).startswith("org.apache.kafka.common.errors.Unknown")
    assert root_cause("first line\nsecond") == "first line"
    assert root_cause("") == ""



def _cfg(tmp_path: Path, secret: str) -> JobConfig:
    kafka = KafkaSettings(None, redactor=Redactor.of([secret]))
    return JobConfig(kafka=KafkaIO(bootstrap_servers="127.0.0.1:1", input_topic="in",
                                   changelog_topic="out", settings=kafka),
                     delta=DeltaOutput(path=str(tmp_path / "d")), checkpoint=str(tmp_path / "c"),
                     engine=EngineConfig(window=WindowSpec.parse("tumbling:10s"), grace_ms=0,
                                         query_id="q"))


def test_kafka_access_lost_mid_run_is_explained_with_the_fix(tmp_path: Path):
    secret = "s3cret-Passw0rd"
    text = (
        "org.apache.spark.SparkException: Job aborted.\n"
        "Caused by: org.apache.kafka.common.errors.SaslAuthenticationException: Authentication "
        f"failed during authentication due to invalid credentials with SASL mechanism "
        f"SCRAM-SHA-512 (password {secret})"
    )
    msg = failure_message(_cfg(tmp_path, secret), text)
    assert msg.startswith("the job's Kafka source: authentication failed")
    assert "sasl.username / sasl.password" in msg and "restart" in msg
    assert secret not in msg and "***" in msg


def test_an_acl_revoked_mid_run_names_the_topic_and_the_grant(tmp_path: Path):
    text = ("Caused by: org.apache.kafka.common.errors.TopicAuthorizationException: Not "
            "authorized to access topics: [events]")
    msg = failure_message(_cfg(tmp_path, "unused-secret"), text)
    assert "not authorized on topic" in msg and "kafka-acls" in msg and "events" in msg
