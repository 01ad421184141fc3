"""librdkafka's log lines and errors through Python logging, transient ones demoted to DEBUG.

librdkafka prints some conditions it retries by itself on stderr, e.g. ``Failed to acquire
idempotence PID from broker …: Coordinator load in progress: retrying`` while a fresh broker
loads its transaction log: nothing a user can act on. Every confluent-kafka client revise
creates takes :func:`client_logging` into its config, so those lines go to the
``revise.kafka`` logger at DEBUG (shown with ``-v``) and everything else keeps its level.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["TRANSIENT", "client_conf", "client_logging"]

log = logging.getLogger("revise.kafka")

TRANSIENT: Final = (
    "Coordinator load in progress",
    "COORDINATOR_LOAD_IN_PROGRESS",
    "Failed to acquire idempotence PID",
    "Connection refused",
    "Disconnected",
    "NOT_COORDINATOR",
    "COORDINATOR_NOT_AVAILABLE",
)
"""Fragments of librdkafka messages about conditions it retries on its own."""


class _Demote(logging.Filter):
    """Lower records whose message names a transient, retried condition to DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG and any(t in record.getMessage() for t in TRANSIENT):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return log.isEnabledFor(logging.DEBUG)
        return True


log.addFilter(_Demote())


def _error_cb(err: Any) -> None:
    """Route librdkafka's global errors: retried ones at DEBUG, fatal ones at ERROR."""
    level = logging.ERROR if getattr(err, "fatal", lambda: False)() else logging.WARNING
    text = str(err.str() if hasattr(err, "str") else err)
    if level != logging.ERROR and any(t in text for t in TRANSIENT):
        level = logging.DEBUG
    log.log(level, "kafka: %s", text)


def client_logging() -> dict[str, Any]:
    """Config entries for a confluent-kafka client: its logs and errors through ``revise.kafka``."""
    return {"logger": log, "error_cb": _error_cb}


def client_conf(bootstrap_servers: str, client_config: Mapping[str, Any] | None = None,
                ) -> dict[str, Any]:
    """A confluent-kafka client's base config: address, the user's settings, revise's logging.

    Args:
        bootstrap_servers: Kafka bootstrap servers (``HOST:PORT[,…]``).
        client_config: The user's client settings (security.protocol, SASL, TLS …, as
            ``revise.kafka.settings.KafkaSettings.*_conf`` builds them), or None for none.
    """
    return {"bootstrap.servers": bootstrap_servers, **(client_config or {}), **client_logging()}
