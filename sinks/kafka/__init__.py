"""The Kafka side of revise's outputs (confluent-kafka).

- :mod:`sinks.kafka.writer` — :class:`TransactionalChangelog`: one transaction per micro-batch
  (revisions, too-late records, dead letters and a progress marker); the guarantee is stated
  there; its settings and progress markers are :mod:`sinks.kafka.changelog_config`.
- :mod:`sinks.kafka.codec` — the JSON of keys and values (SPEC §4, §6), encode and decode.
- :mod:`sinks.kafka.reader` — reading a topic to its end as ``read_committed``.
- :mod:`sinks.kafka.admin` — creating output topics, end offsets of the input.
- :mod:`sinks.kafka.errors`, :mod:`sinks.kafka.logs` — errors, librdkafka logging.
"""

from __future__ import annotations

from sinks.kafka.admin import create_topics, end_offsets, ensure_compacted_topic, ensure_topics
from sinks.kafka.changelog_config import (
    DEFAULT_PRODUCER_CONFIG,
    PROGRESS_TOPIC,
    ChangelogConfig,
    CommitResult,
    Progress,
)
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
from sinks.kafka.errors import (
    ChangelogCommitError,
    ChangelogEncodeError,
    ChangelogError,
    ProducerFencedError,
)
from sinks.kafka.logs import client_logging
from sinks.kafka.reader import read_committed
from sinks.kafka.writer import TransactionalChangelog, read_last_progress

__all__ = [
    "DEFAULT_PRODUCER_CONFIG",
    "PROGRESS_TOPIC",
    "ChangelogCommitError",
    "ChangelogConfig",
    "ChangelogEncodeError",
    "ChangelogError",
    "CommitResult",
    "Progress",
    "ProducerFencedError",
    "TransactionalChangelog",
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
    "read_committed",
    "read_last_progress",
    "revision_key",
]
