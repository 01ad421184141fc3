"""Reading a topic to its end as a ``read_committed`` consumer sees it.

Used to verify the changelog (tests, the demo, compare), and by the writer to find the last
committed progress marker on open.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from sinks.kafka.errors import ChangelogError

__all__ = ["by_partition_offset", "read_committed"]


# Longer than ~60 lines: end offsets, then one poll loop whose exits (end reached, EOF,
# timeout, errors) are easiest to check side by side.
def read_committed(
    bootstrap_servers: str,
    topic: str,
    *,
    timeout_s: float = 30.0,
    partitions: Sequence[int] | None = None,
    client_config: Mapping[str, Any] | None = None,
) -> list[Message]:
    """Read a topic from the beginning to its end as a ``read_committed`` consumer sees it.

    The end is each partition's high watermark when the call starts. Records before it that
    belong to a transaction still in flight (or whose commit markers are still being written —
    ``commit_transaction`` returns before every marker is durable) are waited for, not cut off:
    the call returns once every partition was read up to that end, i.e. once everything written
    before the call is decided. Aborted records are never returned. No group offsets are
    committed. An open transaction that never ends holds the call until ``timeout_s``.

    Args:
        bootstrap_servers: Kafka bootstrap servers.
        topic: The topic to read.
        timeout_s: Give up (raise) after this many seconds.
        partitions: Only these partitions (default: all).
        client_config: The user's confluent-kafka consumer settings (SASL, TLS …), or None.

    Returns:
        The committed data messages, each partition in offset order.

    Raises:
        ChangelogError: the topic does not exist, a fetch error, or the timeout passed.
    """
    base = {**(client_config or {}), "bootstrap.servers": bootstrap_servers,
            "enable.auto.commit": False,
            "group.id": f"revise-reader-{time.monotonic_ns()}"}
    probe = Consumer({**base, "isolation.level": "read_uncommitted"})
    consumer = Consumer(
        {
            **base,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        meta = probe.list_topics(topic, timeout=timeout_s)
        tmeta = meta.topics.get(topic)
        if tmeta is None or tmeta.error is not None:
            msg = f"topic {topic!r} cannot be read: {tmeta.error if tmeta else 'not found'}"
            raise ChangelogError(msg)
        pids = sorted(tmeta.partitions) if partitions is None else list(partitions)
        ends: dict[int, int] = {}
        for p in pids:
            # read_uncommitted: the high watermark (a read_committed probe gives the LSO).
            low, high = probe.get_watermark_offsets(
                TopicPartition(topic, p), timeout=timeout_s, cached=False
            )
            if high > low:
                ends[p] = high
        if not ends:
            return []
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        out: list[Message] = []
        deadline = time.monotonic() + timeout_s
        pending = set(ends)
        while pending:
            if time.monotonic() > deadline:
                msg = (
                    f"reading {topic!r} to its end timed out after {timeout_s}s (partitions "
                    f"{sorted(pending)} held back by an open transaction?)"
                )
                raise ChangelogError(msg)
            for m in consumer.consume(10_000, timeout=0.2):
                err = m.error()
                p = m.partition()
                if p is None:
                    continue
                if err is None:
                    if (m.offset() or 0) < ends[p]:
                        out.append(m)
                    if (m.offset() or 0) + 1 >= ends[p]:
                        pending.discard(p)
                elif err.code() == KafkaError._PARTITION_EOF:
                    # EOF is reported at the last stable offset, again each time it moves.
                    if (m.offset() or 0) >= ends[p]:
                        pending.discard(p)
                else:
                    msg = f"reading {topic!r} failed: {err}"
                    raise ChangelogError(msg)
        return out
    finally:
        consumer.close()
        probe.close()


def by_partition_offset(messages: list[Message]) -> Iterator[Message]:
    """``messages`` in (partition, offset) order: log order within each partition."""
    return iter(sorted(messages, key=lambda m: (m.partition() or 0, m.offset() or 0)))
