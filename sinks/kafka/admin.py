"""Topics: create the job's output topics, read an input topic's end offsets.

The job runs these before Spark starts (preflight): a missing input topic is a usage error
(exit 2) rather than a Spark failure minutes later.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Final

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, TopicMetadata

from revise.errors import ConfigError
from sinks.kafka.errors import ChangelogError, kafka_error
from sinks.kafka.logs import client_conf

__all__ = [
    "await_topics", "create_topics", "end_offsets", "ensure_compacted_topic", "ensure_topics",
    "topic_exists",
]

_READY_POLL_S: Final = 0.1


def _missing_input(topic: str, bootstrap_servers: str) -> ConfigError:
    msg = (
        f"--input-topic {topic!r} does not exist on {bootstrap_servers}; "
        "create it or produce to it first (revise generate)"
    )
    return ConfigError(msg)


def ensure_topics(bootstrap_servers: str, input_topic: str,
                  outputs: Iterable[str | None], *, timeout_s: float = 30.0,
                  client_config: Mapping[str, Any] | None = None) -> None:
    """Check that ``input_topic`` exists; create the missing ``outputs`` (None: skipped).

    Output topics get as many partitions as the input topic. A topic created concurrently by
    someone else is fine. ``client_config`` (here and in every function of this module): the
    user's confluent-kafka settings (SASL, TLS …), merged under revise's own.

    Raises:
        ConfigError: The input topic does not exist.
    """
    admin = AdminClient(client_conf(bootstrap_servers, client_config))
    md = admin.list_topics(timeout=timeout_s)
    if input_topic not in md.topics:
        raise _missing_input(input_topic, bootstrap_servers)
    partitions = max(1, len(md.topics[input_topic].partitions))
    create_topics(bootstrap_servers, [t for t in outputs if t and t not in md.topics],
                  partitions=partitions, timeout_s=timeout_s, admin=admin,
                  client_config=client_config)


def topic_exists(bootstrap_servers: str, topic: str, *, timeout_s: float = 10.0,
                 client_config: Mapping[str, Any] | None = None) -> bool | None:
    """Whether the broker lists ``topic`` (None: the broker could not be asked)."""
    admin = AdminClient(client_conf(bootstrap_servers, client_config))
    try:
        md = admin.list_topics(timeout=timeout_s)
    except KafkaException:
        return None
    found = md.topics.get(topic)
    return found is not None and found.error is None


def create_topics(bootstrap_servers: str, topics: Iterable[str], *, partitions: int,
                  timeout_s: float = 30.0, admin: AdminClient | None = None,
                  client_config: Mapping[str, Any] | None = None) -> None:
    """Create the ``topics`` that do not exist yet with ``partitions`` partitions each.

    A topic created concurrently by someone else is fine. Returns once every created topic is
    ready (:func:`await_topics`).
    """
    admin = admin or AdminClient(client_conf(bootstrap_servers, client_config))
    existing = admin.list_topics(timeout=timeout_s).topics
    want = [t for t in topics if t not in existing]
    if want:
        _create(admin, [NewTopic(t, num_partitions=partitions) for t in want],
                timeout_s=timeout_s)


def _create(admin: AdminClient, topics: list[NewTopic], *, timeout_s: float) -> None:
    """Create ``topics`` (one already there is fine); return once they are ready.

    Raises:
        KafkaException: A topic could not be created.
        ChangelogError: A topic was not ready in ``timeout_s`` (:func:`await_topics`).
    """
    futures = admin.create_topics(topics, operation_timeout=timeout_s)
    for f in futures.values():
        try:
            f.result(timeout_s)
        except KafkaException as exc:
            err = kafka_error(exc)
            if err is None or err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    await_topics(admin, [t.topic for t in topics], timeout_s=timeout_s)


def _ready(meta: TopicMetadata | None) -> bool:
    """Whether metadata lists the topic without error and every partition has a leader.

    A partition with a follower on a broker that is down (``REPLICA_NOT_AVAILABLE``) has a
    leader and serves clients: ready.
    """
    if meta is None or meta.error is not None or not meta.partitions:
        return False
    return all(p.leader >= 0 and (p.error is None
                                  or p.error.code() == KafkaError.REPLICA_NOT_AVAILABLE)
               for p in meta.partitions.values())


def await_topics(admin: AdminClient, topics: Iterable[str], *, timeout_s: float) -> None:
    """Wait until the broker's metadata shows each of ``topics`` ready to read and write.

    ``CreateTopics`` returns once the controller has recorded a topic; the broker that answers
    metadata requests can learn of it a moment later and meanwhile answers
    ``UNKNOWN_TOPIC_OR_PART``. A reader opened in that moment (the progress topic's, at a
    job's first start) would take a topic that was just created for one that does not exist.

    Raises:
        ChangelogError: A topic was still not ready after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    pending = set(topics)
    while pending:
        listed = admin.list_topics(timeout=max(0.1, deadline - time.monotonic())).topics
        pending = {t for t in pending if not _ready(listed.get(t))}
        if not pending:
            return
        if time.monotonic() >= deadline:
            msg = f"topic(s) {sorted(pending)} created but not ready after {timeout_s:g}s"
            raise ChangelogError(msg)
        time.sleep(_READY_POLL_S)


def end_offsets(bootstrap_servers: str, topic: str, *, timeout_s: float = 30.0,
                client_config: Mapping[str, Any] | None = None) -> dict[int, int]:
    """The topic's committed end offset per partition, as a read_committed reader sees.

    Raises:
        ConfigError: The topic does not exist.
    """
    consumer = Consumer({
        **client_conf(bootstrap_servers, client_config),
        "group.id": f"revise-offsets-{uuid.uuid4().hex[:8]}",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
    })
    try:
        md = consumer.list_topics(topic, timeout=timeout_s)
        meta = md.topics.get(topic)
        if meta is None or meta.error is not None:
            raise _missing_input(topic, bootstrap_servers)
        ends = {}
        for p in meta.partitions:
            _lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            ends[p] = hi
        return ends
    finally:
        consumer.close()


def ensure_compacted_topic(bootstrap_servers: str, topic: str, *, timeout_s: float,
                           client_config: Mapping[str, Any] | None = None) -> None:
    """Create ``topic`` (one partition, ``cleanup.policy=compact``) unless it exists.

    Returns once the topic is ready (:func:`await_topics`).

    Raises:
        ChangelogError: The topic could not be created, or was not ready in ``timeout_s``.
    """
    admin = AdminClient(client_conf(bootstrap_servers, client_config))
    md = admin.list_topics(timeout=timeout_s)
    if topic in md.topics and md.topics[topic].error is None:
        return
    compacted = NewTopic(topic, num_partitions=1, replication_factor=-1,
                         config={"cleanup.policy": "compact"})
    try:
        _create(admin, [compacted], timeout_s=timeout_s)
    except KafkaException as e:
        msg = f"cannot create progress topic {topic!r}: {kafka_error(e) or e}"
        raise ChangelogError(msg) from e
