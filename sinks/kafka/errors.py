"""The Kafka side's errors, and how a librdkafka error is classified (fenced or not)."""

from __future__ import annotations

from typing import Final

from confluent_kafka import KafkaError, KafkaException

from revise.errors import ReviseError

__all__ = [
    "FENCED_CODES",
    "ChangelogCommitError",
    "ChangelogEncodeError",
    "ChangelogError",
    "ProducerFencedError",
    "is_fenced",
    "kafka_error",
]

FENCED_CODES: Final = frozenset(
    {
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)
"""librdkafka error codes that mean another producer with our transactional.id took over."""


class ChangelogError(ReviseError):
    """A changelog write or read failed."""


class ChangelogCommitError(ChangelogError, RuntimeError):
    """A micro-batch's transaction failed and was aborted: nothing of it is visible."""


class ProducerFencedError(ChangelogError, RuntimeError):
    """Another instance with the same query id took over; this one must stop."""


class ChangelogEncodeError(ChangelogError, ValueError):
    """A batch table lacks fields the changelog must carry."""


def kafka_error(exc: BaseException) -> KafkaError | None:
    """The librdkafka error a confluent-kafka exception carries (None: not one)."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def is_fenced(err: KafkaError | None) -> bool:
    """Whether ``err`` means this producer was fenced (or is otherwise fatally unusable)."""
    return err is not None and (err.code() in FENCED_CODES or err.fatal())
