"""Per-partition progress of the changelog that the stateful tasks write.

Each state partition ``p`` of a query writes its micro-batch's messages in a Kafka transaction
of its own (``revise.jvm.TaskChangelog``, on the executor), with ``transactional.id``
``revise-<query_id>-p<p>``, and commits, in the same transaction, the offset ``batch_id + 1`` of
partition ``p`` of the progress topic for the consumer group ``revise-<query_id>``; the offset's
metadata is the JSON ``{"epoch", "batch", "emitted_at_ms"}``. This module is the driver's side:

- :func:`ensure_progress_partitions`: the progress topic has a partition per state partition
  (Kafka commits offsets only for partitions that exist);
- :func:`adopt`: at a job's start, every partition's producer id is initialized (which fences
  whatever older producer of that partition is alive and aborts its open transaction) and its
  progress recommitted under a new, higher epoch; a task that finds a higher epoch than its
  job's stops (a zombie job);
- :func:`read_progress`: each partition's last committed batch (``revise status``).

:func:`frame_parts` is the messages' wire form from the Python worker to the JVM writer.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import orjson
import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from sinks.kafka.admin import await_topics, ensure_compacted_topic
from sinks.kafka.changelog_config import DEFAULT_PRODUCER_CONFIG
from sinks.kafka.errors import ChangelogError, kafka_error
from sinks.kafka.logs import client_conf, client_logging

__all__ = ["ADOPT_ATTEMPTS", "PartitionProgress", "adopt", "ensure_progress_partitions",
           "frame_parts", "group_id", "last_committed", "read_progress", "transactional_id"]

_TIMEOUT_S: Final = 60.0

ADOPT_ATTEMPTS: Final = 5
"""Times :func:`adopt` takes a partition over while a live zombie's retries fence it."""

_FENCED_CODES: Final = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                  KafkaError.INVALID_PRODUCER_EPOCH})


def _fenced(exc: KafkaException) -> bool:
    """Whether ``exc`` says another producer took this one's ``transactional.id``."""
    err = kafka_error(exc)
    return err is not None and err.code() in _FENCED_CODES
_LEN = struct.Struct(">i")


def transactional_id(query_id: str, partition: int) -> str:
    """``revise-<query_id>-p<partition>``: one producer id per state partition of a query."""
    return f"revise-{query_id}-p{partition}"


def group_id(query_id: str) -> str:
    """The consumer group whose committed offsets hold a query's progress."""
    return f"revise-{query_id}"


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    """What a state partition last committed (``batch`` -1: nothing yet)."""

    partition: int
    batch: int
    epoch: int
    emitted_at_ms: int | None

    def metadata(self) -> str:
        """The committed offset's metadata text.

        confluent-kafka (2.16) reads a committed offset's metadata as a C string, past its
        length unless a NUL ends it. It writes its own with the NUL; the tasks' Java producers
        end theirs with one explicitly, which :meth:`of` strips.
        """
        return orjson.dumps({"epoch": self.epoch, "batch": self.batch,
                             "emitted_at_ms": self.emitted_at_ms}).decode()

    @classmethod
    def of(cls, partition: int, offset: int, metadata: str | None) -> PartitionProgress:
        """From a committed offset (negative: none) and its metadata."""
        if offset < 0:
            return cls(partition, -1, -1, None)
        text = (metadata or "").rstrip("\x00")  # the tasks end theirs with a NUL (see below)
        meta = orjson.loads(text) if text else {}
        emitted = meta.get("emitted_at_ms")
        return cls(partition, offset - 1, int(meta.get("epoch", -1)),
                   None if emitted is None else int(emitted))


def frame_parts(keys: pa.Array, values: pa.Array) -> list[bytes | pa.Buffer]:
    """Messages, column by column: the pieces whose concatenation is one ``msg:<i>`` payload.

    ``[int32 n][int32 key length × n (-1: no key)][int32 value length × n][the keys' bytes]
    [the values' bytes]``, big-endian, which ``TaskChangelog.frames`` reads. Built from the
    Arrow arrays' buffers with numpy, never a Python object per message: a micro-batch of
    the 1M-key workload frames ~100k of them per task. The keys' and values' bytes are slices
    of the arrays' own buffers: the caller joins the pieces of all its payloads once
    (``revise.spark.output.encode_output``).
    """
    if len(keys) != len(values):
        msg = f"{len(keys)} keys for {len(values)} values"
        raise ValueError(msg)
    key_lengths, key_bytes = _column(keys)
    value_lengths, value_bytes = _column(values)
    return [_LEN.pack(len(values)), key_lengths.astype(">i4").tobytes(),
            value_lengths.astype(">i4").tobytes(), key_bytes, value_bytes]


def _column(arr: pa.Array) -> tuple[npt.NDArray[np.int64], pa.Buffer | bytes]:
    """The lengths (-1 for a null) and the bytes, back to back, of a string or binary array.

    The bytes are a slice of the array's own buffer (no copy): the payload's one join copies
    them (:func:`frame_parts`).
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    if pa.types.is_null(arr.type):
        return np.full(len(arr), -1, dtype=np.int64), b""
    _validity, offsets_buf, data = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64 if large else np.int32,
                            count=len(arr) + 1, offset=arr.offset * (8 if large else 4))
    lengths = np.diff(offsets).astype(np.int64)
    if arr.null_count:
        lengths[~arr.is_valid().to_numpy(zero_copy_only=False)] = -1
    used = b"" if data is None else data[int(offsets[0]):int(offsets[-1])]
    return lengths, used


def ensure_progress_partitions(bootstrap_servers: str, topic: str, partitions: int, *,
                               client_config: Mapping[str, Any] | None = None,
                               timeout_s: float = _TIMEOUT_S) -> None:
    """The progress topic exists with at least ``partitions`` partitions.

    Raises:
        ChangelogError: it could not be created or grown.
    """
    ensure_compacted_topic(bootstrap_servers, topic, timeout_s=timeout_s,
                           client_config=client_config)
    admin = AdminClient(client_conf(bootstrap_servers, client_config))
    md = admin.list_topics(topic, timeout=timeout_s)
    have = len(md.topics[topic].partitions)
    if have >= partitions:
        return
    try:
        admin.create_partitions([NewPartitions(topic, partitions)])[topic].result(timeout_s)
    except KafkaException as e:
        err = kafka_error(e)
        if err is None or "INVALID_PARTITIONS" not in err.name():  # grown meanwhile: fine
            msg = f"cannot grow progress topic {topic!r} to {partitions} partitions: {err or e}"
            raise ChangelogError(msg) from e
    await_topics(admin, [topic], timeout_s=timeout_s)


def read_progress(bootstrap_servers: str, topic: str, query_id: str,
                  partitions: int | None = None, *,
                  client_config: Mapping[str, Any] | None = None,
                  timeout_s: float = _TIMEOUT_S) -> list[PartitionProgress]:
    """Each state partition's committed progress (``read_committed``: stable offsets only).

    ``partitions``: how many (None: as many as the progress topic has).

    Raises:
        ChangelogError: the offsets could not be read.
    """
    consumer = Consumer({**client_conf(bootstrap_servers, client_config), **client_logging(),
                         "group.id": group_id(query_id), "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    try:
        if partitions is None:
            md = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
            if md.error is not None:
                raise KafkaException(md.error)
            partitions = len(md.partitions)
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        got = _committed(consumer, tps, timeout_s)
    except KafkaException as e:
        msg = f"cannot read the progress of query {query_id!r}: {kafka_error(e) or e}"
        raise ChangelogError(msg) from e
    finally:
        consumer.close()
    return [PartitionProgress.of(tp.partition, tp.offset, tp.metadata) for tp in got]


_COORDINATOR: Final = frozenset({KafkaError.NOT_COORDINATOR,
                                  KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                  KafkaError.COORDINATOR_NOT_AVAILABLE})
"""The group coordinator moving or loading: librdkafka does not mark these retriable here."""


def _committed(consumer: Consumer, tps: list[TopicPartition],
               timeout_s: float) -> list[TopicPartition]:
    """``consumer.committed(tps)``, retried while the broker answers with a retriable error.

    A broker that has just started answers NOT_COORDINATOR while it loads the offsets topic.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            got: list[TopicPartition] = consumer.committed(
                tps, timeout=max(1.0, deadline - time.monotonic()))
        except KafkaException as e:
            err = kafka_error(e)
            transient = err is not None and (err.retriable() or err.code() in _COORDINATOR)
            if not transient or time.monotonic() >= deadline:
                raise
            time.sleep(0.2)
            continue
        return got


def last_committed(progress: list[PartitionProgress]) -> PartitionProgress | None:
    """The partition that committed the highest micro-batch (None: none committed any)."""
    done = [p for p in progress if p.batch >= 0]
    return max(done, key=lambda p: p.batch) if done else None


def adopt(bootstrap_servers: str, topic: str, query_id: str, partitions: int, *,
          producer_config: Mapping[str, Any] | None = None,
          consumer_config: Mapping[str, Any] | None = None,
          timeout_s: float = _TIMEOUT_S) -> int:
    """Fence every older writer of the query's partitions and take them under a new epoch.

    First ``init_transactions`` with each partition's id: an older producer of it (a zombie
    job's task, a crashed run's) can commit nothing after that, and the transaction it left
    open is aborted, so the partitions' progress is stable. Then the progress is read, and
    each partition recommits it unchanged but for the epoch: one more than the highest
    recorded, which is returned and which the job's tasks carry.

    A zombie task still running retries when it is fenced, and its new ``init_transactions``
    fences this one in turn; the partition is then fenced again and its progress read again
    (the zombie may have committed a batch meanwhile), up to :data:`ADOPT_ATTEMPTS` times:
    a zombie's task gives up after three (``TaskChangelog.ATTEMPTS``), or stops at once once
    it reads the new epoch.

    Raises:
        ChangelogError: a partition could not be taken over (or a newer instance took it).
    """
    ensure_progress_partitions(bootstrap_servers, topic, partitions,
                               client_config=producer_config, timeout_s=timeout_s)
    member = Consumer({**client_conf(bootstrap_servers, consumer_config),
                       "group.id": group_id(query_id)})
    try:
        meta = member.consumer_group_metadata()
    finally:
        member.close()

    def fence(partition: int) -> Producer:
        conf = {**client_conf(bootstrap_servers, producer_config), **DEFAULT_PRODUCER_CONFIG,
                "transactional.id": transactional_id(query_id, partition)}
        producer = Producer(conf)
        try:
            producer.init_transactions(timeout_s)
        except KafkaException as e:
            msg = (f"cannot take over partition {partition} of query {query_id!r}: "
                   f"{kafka_error(e) or e}")
            raise ChangelogError(msg) from e
        return producer

    with ThreadPoolExecutor(min(8, partitions), thread_name_prefix="revise-adopt") as pool:
        producers = list(pool.map(fence, range(partitions)))
        before = read_progress(bootstrap_servers, topic, query_id, partitions,
                               client_config=consumer_config, timeout_s=timeout_s)
        epoch = max((p.epoch for p in before), default=-1) + 1

        def take(progress: PartitionProgress) -> None:
            p = progress.partition
            for attempt in range(1, ADOPT_ATTEMPTS + 1):
                ours = PartitionProgress(p, progress.batch, epoch, progress.emitted_at_ms)
                producer = producers[p]
                try:
                    producer.begin_transaction()
                    producer.send_offsets_to_transaction(
                        [TopicPartition(topic, p, ours.batch + 1, ours.metadata())], meta,
                        timeout_s)
                    producer.commit_transaction(timeout_s)
                    return
                except KafkaException as e:
                    if not _fenced(e) or attempt == ADOPT_ATTEMPTS:
                        msg = (f"cannot take over partition {p} of query {query_id!r}: "
                               f"{kafka_error(e) or e}")
                        raise ChangelogError(msg) from e
                producers[p] = fence(p)  # fenced by a zombie's retry: fence it again
                progress = read_progress(bootstrap_servers, topic, query_id, partitions,
                                         client_config=consumer_config, timeout_s=timeout_s)[p]
                if progress.epoch >= epoch:
                    msg = (f"cannot take over partition {p} of query {query_id!r}: another "
                           f"instance took it over under epoch {progress.epoch}; run only one "
                           "job per query id")
                    raise ChangelogError(msg)

        list(pool.map(take, before))
    return epoch
