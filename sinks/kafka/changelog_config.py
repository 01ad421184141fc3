"""What the transactional changelog is told and what it records.

:class:`ChangelogConfig` (topics, query id → ``transactional.id``, the user's client settings
over :data:`DEFAULT_PRODUCER_CONFIG`), :class:`CommitResult` (what one ``commit_batch`` did) and
:class:`Progress` (the marker each committed transaction carries to the compacted progress
topic, read back on open so that a replayed batch is skipped). The writer is
:mod:`sinks.kafka.writer`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
import pyarrow as pa

from revise.errors import ConfigError
from revise.records import REVISION_SCHEMA

__all__ = [
    "DEFAULT_PRODUCER_CONFIG",
    "PROGRESS_TOPIC",
    "ChangelogConfig",
    "CommitResult",
    "Progress",
]

PROGRESS_TOPIC: Final = "_revise_progress"
"""Default compacted topic holding one progress marker per query id (key = query id)."""

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

@dataclass(frozen=True, slots=True)
class ChangelogConfig:
    """Where and how the changelog writes.

    Attributes:
        bootstrap_servers: Kafka bootstrap servers.
        query_id: The job's stable id; ``transactional.id`` = ``revise-<query_id>``.
        changelog_topic: Topic of the revisions.
        late_topic: Topic of too-late records, or None to not write them to Kafka.
        dead_letter_topic: Topic of bad input, or None to not write it to Kafka.
        progress_topic: Compacted topic of progress markers (created if missing).
        transactional: True: exactly-once (transactions + progress check). False: a plain
            idempotent producer, at-least-once (a replayed batch is written again).
        producer_config: librdkafka settings overriding :data:`DEFAULT_PRODUCER_CONFIG` (the
            user's client settings: SASL, TLS …).
        consumer_config: The user's librdkafka settings for the progress reader.
        admin_config: The user's librdkafka settings for creating the progress topic.
        revision_schema: The revisions' fields, in the order the JSON values carry them:
            ``revise.records.revision_schema`` of the job's aggregates (the SPEC §4
            fields by default).
    """

    bootstrap_servers: str
    query_id: str
    changelog_topic: str
    late_topic: str | None = None
    dead_letter_topic: str | None = None
    progress_topic: str = PROGRESS_TOPIC
    transactional: bool = True
    producer_config: Mapping[str, Any] = field(default_factory=dict)
    consumer_config: Mapping[str, Any] = field(default_factory=dict)
    admin_config: Mapping[str, Any] = field(default_factory=dict)
    revision_schema: pa.Schema = REVISION_SCHEMA

    def __post_init__(self) -> None:
        for name in ("bootstrap_servers", "query_id", "changelog_topic", "progress_topic"):
            if not getattr(self, name):
                msg = f"ChangelogConfig.{name} is empty; give a non-empty value"
                raise ConfigError(msg)

    @property
    def transactional_id(self) -> str:
        """``revise-<query_id>``: one id per query, so a second instance fences the first."""
        return f"revise-{self.query_id}"


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What :meth:`TransactionalChangelog.commit_batch` did.

    Attributes:
        batch_id: The micro-batch id.
        skipped: True when the batch was already committed (a replay) and nothing was written.
        messages: Messages produced, progress marker included (0 when skipped).
        seconds: Wall time of the whole call.
        emitted_at_ms: The ``emitted_at_ms`` the committed batch carries: the one given, or,
            when skipped, the one the earlier commit recorded in its marker (None if unknown).
    """

    batch_id: int
    skipped: bool
    messages: int
    seconds: float
    emitted_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Progress:
    """A committed progress marker (value of the progress topic, key = query id)."""

    query_id: str
    batch_id: int
    revisions: int
    late: int
    dead_letters: int
    committed_at_ms: int
    emitted_at_ms: int | None = None

    def to_json(self) -> bytes:
        """The marker's JSON bytes."""
        return orjson.dumps(
            {
                "query_id": self.query_id,
                "batch_id": self.batch_id,
                "revisions": self.revisions,
                "late": self.late,
                "dead_letters": self.dead_letters,
                "committed_at_ms": self.committed_at_ms,
                "emitted_at_ms": self.emitted_at_ms,
            }
        )

    @classmethod
    def from_json(cls, value: bytes) -> Progress:
        """Parse a marker written by :meth:`to_json`."""
        o = orjson.loads(value)
        return cls(
            query_id=str(o["query_id"]),
            batch_id=int(o["batch_id"]),
            revisions=int(o.get("revisions", 0)),
            late=int(o.get("late", 0)),
            dead_letters=int(o.get("dead_letters", 0)),
            committed_at_ms=int(o.get("committed_at_ms", 0)),
            emitted_at_ms=None if o.get("emitted_at_ms") is None else int(o["emitted_at_ms"]),
        )
