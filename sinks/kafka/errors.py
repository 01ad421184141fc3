"""The Kafka side's errors, and the librdkafka error a confluent-kafka exception carries."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from revise.errors import ReviseError

__all__ = ["ChangelogEncodeError", "ChangelogError", "ProducerFencedError", "kafka_error"]


class ChangelogError(ReviseError):
    """A changelog write or read failed."""


class ProducerFencedError(ChangelogError, RuntimeError):
    """Another instance with the same query id took over; this one must stop."""


class ChangelogEncodeError(ChangelogError, ValueError):
    """A batch table lacks fields the changelog must carry."""


def kafka_error(exc: BaseException) -> KafkaError | None:
    """The librdkafka error a confluent-kafka exception carries (None: not one)."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None
