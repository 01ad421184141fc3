"""The stateful tasks write the changelog: the driver's side of ``revise.jvm.TaskChangelog``.

Each micro-batch, the committer (:mod:`revise.spark.committer`) takes the batch's
``emitted_at_ms`` from Spark's offset log (``batchTimestampMs``, recorded before the batch runs
and reused by a replay: :func:`~revise.spark.spark_log.batch_timestamp`), hands it to the
tasks as a job property (:func:`set_batch`, read by the operator through :func:`batch_stamp`),
and runs the batch through :func:`write`: Spark's stateful stage and, in the same tasks, the
JVM writer that commits each partition's messages and progress in one Kafka transaction; only
the tasks' Arrow chunks and reports come back. :func:`settings` is what every task is told:
the query, the batch, the job's epoch (``sinks.kafka.partitions.adopt``) and the Java
clients' settings.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa

from revise.spark.output import MESSAGE_KINDS
from sinks.kafka import ProducerFencedError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sinks.delta_files import DataFile
    from sinks.latest_merge import MergeJob, MergeRunner

__all__ = ["BATCH_PROPERTY", "PRODUCER_DEFAULTS", "PRODUCER_IDLE_MS", "TASK_CRASH_POINTS",
           "ZOMBIE", "HistoryTarget", "TaskWriter", "batch_stamp",
           "merge_on_executor", "set_batch", "settings", "task_crash_from_env", "write",
           "zombie_error"]

BATCH_PROPERTY: Final = "revise.emittedAt"
"""The job property holding the running micro-batch's ``emitted_at_ms``."""

PRODUCER_DEFAULTS: Final[Mapping[str, str]] = {
    "enable.idempotence": "true",
    "acks": "all",
    "linger.ms": "5",
    "batch.size": "1000000",
    "compression.type": "lz4",
    "transaction.timeout.ms": "60000",
    "delivery.timeout.ms": "55000",
    "request.timeout.ms": "30000",
    "max.block.ms": "60000",
}
"""revise's tuning of the tasks' Java producers (the user's settings win)."""

PRODUCER_IDLE_MS: Final = 300_000
"""An executor closes a kept producer or progress reader unused for this long (the driver
closes its own JVM's when the query stops: :meth:`TaskWriter.close`)."""


def set_batch(spark: SparkSession, emitted_at_ms: int) -> None:
    """Hand the micro-batch's ``emitted_at_ms`` to the tasks the calling thread submits next."""
    spark.sparkContext.setLocalProperty(BATCH_PROPERTY, str(emitted_at_ms))


def batch_stamp() -> int | None:
    """In a task: the running micro-batch's ``emitted_at_ms`` (None outside a job's task)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    raw = ctx.getLocalProperty(BATCH_PROPERTY) if ctx else None
    return int(raw) if raw else None


def settings(*, query_id: str, batch_id: int, epoch: int, emitted_at_ms: int,
             progress_topic: str, topics: Mapping[str, str | None],
             java_conf: Mapping[str, str], transactional: bool = True,
             crash: str | None = None, idle_ms: int = PRODUCER_IDLE_MS) -> str:
    """The JSON every task of the batch is given (``TaskChangelog.write``'s ``settings``).

    ``topics``: the topic of each of :data:`~revise.spark.output.MESSAGE_KINDS` (None: not
    written); ``java_conf``: the user's Java client settings, with the bootstrap address;
    ``crash``: a test's crash point in the tasks (``point:batch:partition``); ``idle_ms``: how
    long the executors keep an unused producer.
    """
    producer = {**PRODUCER_DEFAULTS, **java_conf}
    return json.dumps({
        "query_id": query_id, "batch_id": batch_id, "epoch": epoch,
        "emitted_at_ms": emitted_at_ms, "progress_topic": progress_topic,
        "topics": [topics.get(k) for k in MESSAGE_KINDS], "transactional": transactional,
        "producer": producer, "consumer": dict(java_conf), "crash": crash, "idle_ms": idle_ms,
    })


def merge_on_executor(spark: SparkSession) -> MergeRunner:
    """Run each MERGE into ``latest`` as a Spark job of one task: on an executor.

    The task reads the batches' ``revisions`` data files and MERGEs them with delta-rs
    (:func:`sinks.latest_merge.run_merge`), where the history tables' files were written; the
    driver hands it the files' records and gets the MERGE's seconds back. Its thread's job
    has no micro-batch's properties, so Spark does not cancel it with a stopping query.
    """
    from sinks.latest_merge import run_merge

    sc = spark.sparkContext

    def run(job: MergeJob) -> float:
        sc.setJobDescription(f"revise: MERGE into latest up to batch {job.batch_id}")
        took: float = sc.parallelize([job], 1).map(run_merge).collect()[0]
        return took

    return run


def write(df: DataFrame, task_settings: str) -> pa.Table:
    """Run the micro-batch with its messages written by the tasks; the rows that come back."""
    from pyspark.sql import DataFrame as PyDataFrame

    spark = df.sparkSession
    jvm: Any = spark._jvm
    written = jvm.revise.jvm.TaskChangelog.write(df._jdf, task_settings)
    return PyDataFrame(written, spark).toArrow()


TASK_CRASH_POINTS: Final = ("before_kafka_commit", "after_partition_commit")
"""Crash points inside a task's Kafka transaction: before its commit, after it (the other
partitions of the batch committed or not)."""


def task_crash_from_env() -> str | None:
    """``REVISE_CRASH_AT=<task point>:<batch>[:<partition>]`` as the tasks' crash spec (tests).

    Without a partition, the first task of the batch to reach the point crashes (``*``).
    """
    import os

    spec = os.environ.get("REVISE_CRASH_AT") or ""
    point, _, rest = spec.partition(":")
    if point not in TASK_CRASH_POINTS:
        return None
    batch, _, partition = rest.partition(":")
    return f"{point}:{int(batch or 0)}:{int(partition) if partition else '*'}"


ZOMBIE: Final = "revise.jvm.TaskChangelog$ZombieException"
"""The Java error of a task whose partition a newer instance of the query has taken over."""


def zombie_error(exc: BaseException) -> ProducerFencedError | None:
    """The job-level error for a task that found its partition taken over (else None)."""
    text = str(exc)
    i = text.find(ZOMBIE)
    if i < 0:
        return None
    detail = text[i + len(ZOMBIE):].lstrip(": ").splitlines()[0]
    return ProducerFencedError(f"this instance was fenced: {detail}")


@dataclass(frozen=True, slots=True)
class HistoryTarget:
    """Where a stateful task writes its history rows' data files (pickled into the operator).

    Attributes:
        path: The Delta root (``--delta-path``).
        storage_options: delta-rs storage options (None: from the environment).
        query_id: The job's query id (the ``late`` and ``dead_letter`` rows carry it).
        revision_schema: The job's revision schema (the tables' schemas follow from it).
    """

    path: str
    storage_options: Mapping[str, str] | None
    query_id: str
    revision_schema: pa.Schema

    def write(self, batch_id: int, partition: int, revisions: pa.Table, late: pa.Table,
              dead: pa.Table) -> dict[str, list[DataFile]]:
        """Write one task's rows as one data file per history table that has rows."""
        from sinks.delta_history import history_rows, write_rows
        from sinks.delta_schema import arrow_schema
        from sinks.delta_txn import DeltaRoot

        root = DeltaRoot(self.path, dict(self.storage_options) if self.storage_options else None)
        return write_rows(root, lambda t: arrow_schema(t, self.revision_schema),
                          history_rows(self.query_id, revisions, late, dead),
                          prefix=f"b{batch_id}-p{partition}")


class TaskWriter:
    """What the driver keeps of the tasks' changelog: the job's epoch and the tasks' settings.

    Args:
        query_id: The job's query id.
        progress_topic: The topic whose partitions' committed offsets hold the progress.
        topics: The topic of each message kind (None: not written).
        partitions: The state partitions to take over (at least the job's).
        java_conf: The user's Java client settings, with the bootstrap address.
        transactional: Exactly once (transactions and progress), or a plain producer.
    """

    def __init__(self, *, query_id: str, progress_topic: str, topics: Mapping[str, str | None],
                 partitions: int, java_conf: Mapping[str, str], transactional: bool = True,
                 crash: str | None = None) -> None:
        self.query_id = query_id
        self.progress_topic = progress_topic
        self.topics = dict(topics)
        self.partitions = partitions
        self.java_conf = dict(java_conf)
        self.transactional = transactional
        self.crash = crash
        self.epoch = -1

    def open(self, bootstrap_servers: str, producer_conf: Mapping[str, Any],
             consumer_conf: Mapping[str, Any]) -> TaskWriter:
        """Take every state partition over under a new epoch (fences older instances).

        Raises:
            ChangelogError: a partition could not be taken over.
        """
        if self.transactional:
            from sinks.kafka.partitions import adopt

            self.epoch = adopt(bootstrap_servers, self.progress_topic, self.query_id,
                               self.partitions, producer_config=producer_conf,
                               consumer_config=consumer_conf)
        return self

    def close(self, spark: SparkSession) -> None:
        """Close the query's producers and progress readers kept in the driver's JVM.

        In local mode that is where the tasks ran; a cluster's executors close theirs once
        unused for :data:`PRODUCER_IDLE_MS` (or when the application ends).
        """
        jvm: Any = spark._jvm
        jvm.revise.jvm.TaskChangelog.release(self.query_id)

    def settings(self, batch_id: int, emitted_at_ms: int) -> str:
        """The JSON the batch's tasks get."""
        return settings(query_id=self.query_id, batch_id=batch_id, epoch=self.epoch,
                        emitted_at_ms=emitted_at_ms, progress_topic=self.progress_topic,
                        topics=self.topics, java_conf=self.java_conf,
                        transactional=self.transactional, crash=self.crash)
