"""The changelog the stateful tasks write (``revise.jvm.TaskChangelog``), on real Spark and Kafka.

Each partition of a micro-batch's output commits its messages and its progress in one Kafka
transaction of its own producer (``revise-<query>-p<partition>``). Here the operator's output
is stood in for by rows of framed messages in two partitions; the rest is the real writer: its
replays, a duplicate task attempt fencing it, a newer job instance stopping it, its
at-least-once mode. The job's own chains (crashes at every point, zombies, chaos) are in the
other integration tests.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from revise.spark.task_output import (
    PRODUCER_IDLE_MS,
    ZOMBIE,
    TaskWriter,
    settings,
    write,
    zombie_error,
)
from sinks.kafka import PROGRESS_TOPIC, partitions, read_committed
from sinks.kafka.partitions import adopt, frame_parts, group_id, read_progress, transactional_id

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

PARTITIONS = 2


@pytest.fixture()
def job(spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str],
        unique_id: Callable[[str], str]) -> Iterator[dict[str, Any]]:
    out = new_topic("task-out", partitions=3)
    query = unique_id("tq")
    epoch = adopt(kafka_bootstrap, PROGRESS_TOPIC, query, PARTITIONS)
    yield {"spark": spark, "bootstrap": kafka_bootstrap, "topic": out, "query": query,
           "epoch": epoch}
    spark._jvm.revise.jvm.TaskChangelog.release(query)


def _batch(job: dict[str, Any], batch_id: int, keys: list[str]) -> Any:
    """A micro-batch's operator output: one row of messages per key, over two partitions."""
    from pyspark.sql.types import BinaryType, LongType, StringType, StructType

    schema = (StructType().add("kind", StringType()).add("rows", LongType())
              .add("payload", BinaryType()))
    rows = [("msg:0", 1, b"".join(frame_parts(pa.array([k.encode()], pa.binary()),
                                               pa.array([f"{k}@{batch_id}".encode()],
                                                        pa.binary()))))
            for k in keys]
    rows.append(("open", 3, b"0"))  # passed through to the driver
    return job["spark"].createDataFrame(rows, schema).repartition(PARTITIONS)


def _write(job: dict[str, Any], batch_id: int, keys: list[str], *, epoch: int | None = None,
           transactional: bool = True, client: dict[str, str] | None = None,
           idle_ms: int = PRODUCER_IDLE_MS) -> list[dict]:
    """Run one batch through the writer; the tasks' reports, by partition."""
    task_settings = settings(
        query_id=job["query"], batch_id=batch_id,
        epoch=job["epoch"] if epoch is None else epoch, emitted_at_ms=1000 + batch_id,
        progress_topic=PROGRESS_TOPIC, topics={"revision": job["topic"]},
        java_conf={"bootstrap.servers": job["bootstrap"], **(client or {})},
        transactional=transactional, idle_ms=idle_ms)
    table = write(_batch(job, batch_id, keys), task_settings)
    kinds = table.column("kind").to_pylist()
    assert "open" in kinds and not any(k.startswith("msg:") for k in kinds)
    reports = [json.loads(p) for k, p in zip(kinds, table.column("payload").to_pylist(),
                                              strict=True) if k == "kafka"]
    return sorted(reports, key=lambda r: r["partition"])


def _values(job: dict[str, Any]) -> Counter[str]:
    return Counter(m.value().decode() for m in read_committed(job["bootstrap"], job["topic"]))


def test_each_partition_commits_its_messages_with_its_progress_and_a_replay_writes_nothing(job):
    keys = [f"k{i}" for i in range(20)]
    reports = _write(job, 0, keys)
    assert [r["partition"] for r in reports] == [0, 1]
    assert not any(r["skipped"] for r in reports) and sum(r["messages"] for r in reports) == 20
    assert _values(job) == Counter(f"{k}@0" for k in keys)
    progress = read_progress(job["bootstrap"], PROGRESS_TOPIC, job["query"], PARTITIONS)
    assert [(p.batch, p.epoch, p.emitted_at_ms) for p in progress] == [(0, job["epoch"], 1000)] * 2
    # the same batch again (a task retried after its commit): every partition skips it
    assert all(r["skipped"] for r in _write(job, 0, keys))
    # and so does a producer that never saw it (another executor): it reads the progress
    fresh = {"client.id": "another-executor"}
    assert all(r["skipped"] for r in _write(job, 0, keys, client=fresh))
    assert _values(job) == Counter(f"{k}@0" for k in keys)  # once each
    _write(job, 1, keys)
    assert _values(job) == Counter([*(f"{k}@0" for k in keys), *(f"{k}@1" for k in keys)])


def test_a_duplicate_attempt_fences_the_partitions_producer_and_the_batch_lands_once(job):
    keys = [f"k{i}" for i in range(10)]
    _write(job, 0, keys)
    # A duplicate attempt of partition 0's task elsewhere takes its producer id and commits
    # batch 1 there first, with its progress, as the task would.
    other = Producer({"bootstrap.servers": job["bootstrap"],
                      "transactional.id": transactional_id(job["query"], 0)})
    other.init_transactions(30)
    other.begin_transaction()
    other.produce(job["topic"], b"from-the-duplicate", b"dup")
    meta = Consumer({"bootstrap.servers": job["bootstrap"],
                     "group.id": group_id(job["query"])}).consumer_group_metadata()
    other.send_offsets_to_transaction(
        [TopicPartition(PROGRESS_TOPIC, 0, 2, json.dumps({"epoch": job["epoch"], "batch": 1,
                                                          "emitted_at_ms": 1001}))], meta, 30)
    other.commit_transaction(30)
    # The cached producer of partition 0 is fenced: it is replaced, reads the progress, skips.
    reports = _write(job, 1, keys)
    assert [r["skipped"] for r in reports] == [True, False]
    values = _values(job)
    assert values["from-the-duplicate"] == 1
    on_1 = [k for k in keys if values[f"{k}@1"]]
    assert all(values[f"{k}@1"] == 1 for k in on_1)  # partition 1's, once; partition 0's: none


def test_a_producer_fenced_before_its_batch_sends_the_batch_again_with_a_new_one(job):
    """Another attempt took partition 0's id without committing anything: the kept producer
    learns it from its batch's first messages, which the task held; a new producer sends them
    again with the rest, and every message lands once."""
    keys = [f"k{i}" for i in range(40)]  # about 20 rows of messages per partition
    _write(job, 0, keys)
    Producer({"bootstrap.servers": job["bootstrap"],
              "transactional.id": transactional_id(job["query"], 0)}).init_transactions(30)
    reports = _write(job, 1, keys)
    assert not any(r["skipped"] for r in reports) and sum(r["messages"] for r in reports) == 40
    assert _values(job) == Counter([*(f"{k}@0" for k in keys), *(f"{k}@1" for k in keys)])
    progress = read_progress(job["bootstrap"], PROGRESS_TOPIC, job["query"], PARTITIONS)
    assert [p.batch for p in progress] == [1, 1]


def test_a_task_failing_after_some_of_its_messages_aborts_them(job):
    """The writer sends each row's messages as it reads it: a task whose output fails after
    some rows aborts its open transaction (a read_committed reader is not held up by it and
    never sees its messages), and the partition's next batch commits as usual."""
    from pyspark.sql import functions as F

    keys = [f"k{i}" for i in range(10)]
    rows = _batch(job, 0, keys).coalesce(1).union(
        job["spark"].createDataFrame([("boom", 0, b"")], "kind string, rows long, payload binary"))
    failing = rows.withColumn("payload", F.when(F.col("kind") == "boom", F.raise_error(
        F.lit("the operator failed"))).otherwise(F.col("payload"))).coalesce(1)
    task_settings = settings(
        query_id=job["query"], batch_id=0, epoch=job["epoch"], emitted_at_ms=1000,
        progress_topic=PROGRESS_TOPIC, topics={"revision": job["topic"]},
        java_conf={"bootstrap.servers": job["bootstrap"]})
    with pytest.raises(Exception, match="the operator failed"):
        write(failing, task_settings)
    reader = Consumer({"bootstrap.servers": job["bootstrap"], "group.id": "unused"})
    ends = [reader.get_watermark_offsets(TopicPartition(job["topic"], p), 10)[1]
            for p in range(3)]
    reader.close()
    assert sum(ends) > 10  # the rows read before the failure were sent, then aborted (markers)
    assert not read_committed(job["bootstrap"], job["topic"], timeout_s=10)  # none, not held
    reports = _write(job, 0, keys)
    assert not any(r["skipped"] for r in reports)
    assert _values(job) == Counter(f"{k}@0" for k in keys)


def test_a_newer_instance_stops_the_older_ones_tasks(job):
    keys = [f"k{i}" for i in range(10)]
    _write(job, 0, keys)
    newer = adopt(job["bootstrap"], PROGRESS_TOPIC, job["query"], PARTITIONS)
    assert newer == job["epoch"] + 1
    with pytest.raises(Exception, match="ZombieException") as stopped:
        _write(job, 1, keys)  # the older instance's next batch
    fenced = zombie_error(stopped.value)
    assert fenced is not None and "has taken over state partition" in str(fenced)
    assert ZOMBIE in str(stopped.value)
    assert not any(v.endswith("@1") for v in _values(job))  # nothing of it visible
    # the newer instance goes on
    reports = _write(job, 1, keys, epoch=newer)
    assert not any(r["skipped"] for r in reports)
    assert sum(1 for v in _values(job).elements() if v.endswith("@1")) == 10


def test_at_least_once_writes_without_progress(job):
    keys = [f"k{i}" for i in range(6)]
    _write(job, 0, keys, transactional=False)
    _write(job, 0, keys, transactional=False)  # a replay is written again
    assert _values(job) == Counter({f"{k}@0": 2 for k in keys})
    progress = read_progress(job["bootstrap"], PROGRESS_TOPIC, job["query"], PARTITIONS)
    assert [p.batch for p in progress] == [-1, -1]


def _kept(job: dict[str, Any]) -> int:
    """The producers and progress readers of the job's query that the JVM keeps."""
    return int(job["spark"]._jvm.revise.jvm.TaskChangelog.kept(job["query"]))


def test_a_stopped_query_and_an_idle_one_keep_no_producer(job):
    keys = [f"k{i}" for i in range(10)]
    _write(job, 0, keys)
    assert _kept(job) == PARTITIONS + 1  # a producer per partition, the progress reader
    writer = TaskWriter(query_id=job["query"], progress_topic=PROGRESS_TOPIC,
                        topics={"revision": job["topic"]}, partitions=PARTITIONS,
                        java_conf={"bootstrap.servers": job["bootstrap"]})
    writer.close(job["spark"])  # what the driver does when the query stops
    assert _kept(job) == 0
    # Unused for longer than idle_ms, the executors close them themselves.
    _write(job, 1, keys, idle_ms=500)
    assert _kept(job) == PARTITIONS + 1
    deadline = time.monotonic() + 15
    while _kept(job) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _kept(job) == 0
    # A new producer reads the progress: a replay is skipped, the next batch lands once.
    assert all(r["skipped"] for r in _write(job, 1, keys))
    _write(job, 2, keys)
    assert _values(job) == Counter(f"{k}@{b}" for b in range(3) for k in keys)


def test_adopt_fences_again_a_zombie_that_retried_and_keeps_what_it_committed(job, monkeypatch):
    keys = [f"k{i}" for i in range(10)]
    _write(job, 0, keys)
    real_read = partitions.read_progress
    zombie_acted = []

    def read_then_zombie(*args: Any, **kwargs: Any) -> Any:
        got = real_read(*args, **kwargs)
        if not zombie_acted:
            # A task of the older instance, fenced by adopt, retries: its init_transactions
            # fences adopt's producer of partition 0, and it commits batch 1 there first.
            zombie_acted.append(True)
            zombie = Producer({"bootstrap.servers": job["bootstrap"],
                               "transactional.id": transactional_id(job["query"], 0)})
            zombie.init_transactions(30)
            zombie.begin_transaction()
            meta = Consumer({"bootstrap.servers": job["bootstrap"],
                             "group.id": group_id(job["query"])}).consumer_group_metadata()
            zombie.send_offsets_to_transaction(
                [TopicPartition(PROGRESS_TOPIC, 0, 2, json.dumps(
                    {"epoch": job["epoch"], "batch": 1, "emitted_at_ms": 1001}))], meta, 30)
            zombie.commit_transaction(30)
        return got

    monkeypatch.setattr(partitions, "read_progress", read_then_zombie)
    newer = adopt(job["bootstrap"], PROGRESS_TOPIC, job["query"], PARTITIONS)

    assert zombie_acted and newer == job["epoch"] + 1
    progress = real_read(job["bootstrap"], PROGRESS_TOPIC, job["query"], PARTITIONS)
    # partition 0 keeps the zombie's batch 1 (read again after the second fence), both newer
    assert [(p.batch, p.epoch) for p in progress] == [(1, newer), (0, newer)]
