"""The Kafka side of revise's outputs (confluent-kafka on the driver).

The changelog itself is written by the job's stateful tasks, one transaction per (micro-batch,
state partition), by ``revise.jvm.TaskChangelog`` in the executors; the driver's side of it is
here:

- :mod:`sinks.kafka.partitions` — the partitions' progress (committed offsets of the group
  ``revise-<query_id>``): taking them over at a job's start (fencing older writers), reading
  them, and the messages' wire form from the Python worker to the JVM writer; the guarantee is
  stated there and in docs/SEMANTICS.md.
- :mod:`sinks.kafka.changelog_config` — revise's producer tuning, the progress topic's name.
- :mod:`sinks.kafka.codec` — the JSON of keys and values (SPEC §4, §6), encode and decode.
- :mod:`sinks.kafka.reader` — reading a topic to its end as ``read_committed``.
- :mod:`sinks.kafka.admin` — creating output topics, end offsets of the input.
- :mod:`sinks.kafka.errors`, :mod:`sinks.kafka.logs` — errors, librdkafka logging.
"""

from __future__ import annotations

from sinks.kafka.admin import create_topics, end_offsets, ensure_compacted_topic, ensure_topics
from sinks.kafka.changelog_config import DEFAULT_PRODUCER_CONFIG, PROGRESS_TOPIC
from sinks.kafka.codec import (
    decode_dead_letter,
    decode_late,
    decode_revision,
    decode_revision_row,
    encode_dead_letters,
    encode_late,
    encode_revisions,
    revision_key,
)
from sinks.kafka.errors import ChangelogEncodeError, ChangelogError, ProducerFencedError
from sinks.kafka.logs import client_logging
from sinks.kafka.partitions import PartitionProgress, adopt, last_committed, read_progress
from sinks.kafka.reader import read_committed

__all__ = [
    "DEFAULT_PRODUCER_CONFIG",
    "PROGRESS_TOPIC",
    "ChangelogEncodeError",
    "ChangelogError",
    "PartitionProgress",
    "ProducerFencedError",
    "adopt",
    "client_logging",
    "create_topics",
    "decode_dead_letter",
    "decode_late",
    "decode_revision",
    "decode_revision_row",
    "encode_dead_letters",
    "encode_late",
    "encode_revisions",
    "end_offsets",
    "ensure_compacted_topic",
    "ensure_topics",
    "last_committed",
    "read_committed",
    "read_progress",
    "revision_key",
]
