"""revise's tuning of its confluent-kafka producers, and the progress topic's name.

The producers are the driver's (``sinks.kafka.partitions.adopt``: taking the state partitions
over at a job's start) and the test-input generator's; the stateful tasks' Java producers have
their own defaults (``revise.spark.task_output.PRODUCER_DEFAULTS``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["DEFAULT_PRODUCER_CONFIG", "PROGRESS_TOPIC"]

PROGRESS_TOPIC: Final = "_revise_progress"
"""Default progress topic: its partition ``p``'s committed offset for the group
``revise-<query_id>`` is state partition ``p``'s progress (``sinks.kafka.partitions``)."""

DEFAULT_PRODUCER_CONFIG: Final[Mapping[str, Any]] = {
    "enable.idempotence": True,
    "acks": "all",
    # librdkafka retries CONCURRENT_TRANSACTIONS (the broker still writing the previous
    # transaction's markers) after retry.backoff.ms; the default 100 ms puts ~100 ms on every
    # back-to-back commit (confluent-kafka-python #967). Measured on the embedded Kafka 4 broker
    # (2 busy cores), median back-to-back commit of an empty batch (marker only): 10.3 ms at
    # 100 ms, 7.5 ms at 10 ms, 4.4 ms at 1 ms; 10 ms keeps most of the gain and polite retries.
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 200,
    # Throughput: a micro-batch is produced in one burst, then flushed by the commit.
    "linger.ms": 20,
    "batch.size": 1_000_000,
    "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "compression.type": "lz4",
    # Same partition for the same key bytes as Kafka's Java clients (Kafka Streams, Connect).
    "partitioner": "murmur2_random",
    # Failures surface through commit_transaction / flush; no Python callback per message.
    "delivery.report.only.error": True,
    "transaction.timeout.ms": 60_000,
    "message.timeout.ms": 55_000,
}
