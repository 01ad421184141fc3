"""Clear, redacted one-line Kafka errors, and a bounded reachability / authorization probe.

:func:`explain_kafka_error` turns a confluent-kafka ``KafkaError`` / ``KafkaException`` (or the
text of a Java Kafka exception that Spark reports) into one line saying what failed and how to
fix it: authentication (SASL), authorization (which ACL to grant), TLS handshake, unreachable
bootstrap. :func:`probe_kafka` connects with the settings and fetches metadata within a timeout,
raising :class:`KafkaAccessError` (an :class:`~revise.errors.InfraError`, exit 1) instead of
hanging; call it at the start of run, generate, compare and demo.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from revise.errors import InfraError
from revise.kafka.redact import Redactor
from revise.kafka.settings import KafkaSettings

__all__ = ["ClusterInfo", "KafkaAccessError", "explain_kafka_error", "probe_kafka"]

#: (error-code name or Java exception name, kind, what to do). First match wins.
_RULES: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("SASL_AUTHENTICATION_FAILED", "_AUTHENTICATION", "SaslAuthenticationException",
      "Authentication failed", "AuthenticationException"),
     "authentication failed",
     "check sasl.username / sasl.password and sasl.mechanism in --kafka-config"),
    (("TOPIC_AUTHORIZATION_FAILED", "TopicAuthorizationException"),
     "not authorized on topic",
     "grant the principal Read (input topics), Write (output topics) and Describe on the topic, "
     "e.g. kafka-acls --add --allow-principal User:NAME --operation Write --topic T"),
    (("GROUP_AUTHORIZATION_FAILED", "GroupAuthorizationException"),
     "not authorized on consumer group",
     "grant Read on the group (kafka-acls --add --allow-principal User:NAME --operation Read "
     "--group G --resource-pattern-type prefixed)"),
    (("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "TransactionalIdAuthorizationException"),
     "not authorized on transactional id",
     "grant Write and Describe on transactional id prefix revise- (kafka-acls --add "
     "--allow-principal User:NAME --operation Write --operation Describe --transactional-id "
     "revise- --resource-pattern-type prefixed)"),
    (("CLUSTER_AUTHORIZATION_FAILED", "ClusterAuthorizationException"),
     "not authorized on the cluster",
     "grant IdempotentWrite (and Create where revise creates topics) on the cluster "
     "(kafka-acls --add --allow-principal User:NAME --operation IdempotentWrite --cluster)"),
    (("_SSL", "SslAuthenticationException", "SSLHandshakeException", "SSL handshake failed"),
     "TLS handshake failed",
     "check security.protocol (SSL / SASL_SSL against a TLS listener), ssl.ca.location (the CA "
     "that signed the broker certificate) and ssl.endpoint.identification.algorithm"),
    (("JAAS config", "Failed to create new KafkaAdminClient", "Failed to construct kafka",
      "_INVALID_ARG", "Invalid value for configuration"),
     "Kafka client settings rejected",
     "check the Kafka client settings (--kafka-config / --kafka-option): sasl.jaas.config, "
     "ssl.* files and values; revise run --print-config shows what each client gets"),
    (("_ALL_BROKERS_DOWN", "_TRANSPORT", "_RESOLVE", "_TIMED_OUT", "_MSG_TIMED_OUT",
      "_DESTROY", "TimeoutException", "Timed out waiting", "Connection refused",
      "UnknownHostException", "Failed to resolve", "Disconnected while requesting"),
     "Kafka unreachable",
     "check --bootstrap-servers (host:port of a running broker's client listener), the network, "
     "and security.protocol (a TLS or SASL listener drops plaintext clients)"),
)
_RESOURCE_RE = re.compile(r"(?:topics?|group|transactional id|Topic|Group)[:\s]+(\[[^\]]*\]|\S+)")


class KafkaAccessError(InfraError):
    """Kafka cannot be used with the given settings (unreachable, TLS, authentication, ACLs).

    Attributes:
        kind: ``authentication failed``, ``not authorized on topic``, ``TLS handshake failed``,
            ``Kafka unreachable``, ... (``Kafka error`` when nothing more is known).
    """

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def _code_name(err: Any) -> str:
    """The code name of a confluent_kafka.KafkaError (or the wrapped one of a KafkaException)."""
    inner = err.args[0] if getattr(err, "args", None) else None
    if inner is not None and hasattr(inner, "name") and callable(inner.name):
        err = inner
    if hasattr(err, "name") and callable(err.name):
        try:
            return str(err.name())
        except Exception:  # noqa: BLE001 - only for describing an error
            return ""
    return ""


def _classify(code: str, text: str) -> tuple[str, str] | None:
    for needles, kind, fix in _RULES:
        if code in needles or any(n in text for n in needles if not n.startswith("_")):
            return kind, fix
    return None


def explain_kafka_error(
    error: BaseException | str | Any, *, redactor: Redactor | None = None, context: str = ""
) -> tuple[str, str]:
    """One redacted line for a Kafka error, and its kind.

    Args:
        error: A confluent_kafka ``KafkaError`` or ``KafkaException``, any exception (e.g. a
            Spark ``StreamingQueryException`` carrying a Java Kafka exception), or its text.
        redactor: Masks the secrets of the settings in use (default: generic rules only).
        context: What revise was doing (``"probing localhost:9092"``), put in front.

    Returns:
        ``(message, kind)``; ``kind`` is one of the kinds of :class:`KafkaAccessError`.
    """
    red = redactor or Redactor()
    code = _code_name(error)
    text = error if isinstance(error, str) else (
        str(error.str()) if hasattr(error, "str") and callable(error.str) else str(error))
    found = _classify(code, text)
    kind, fix = found if found else ("Kafka error", "see the broker and client logs")
    detail = " ".join(text.split())[:300]
    resource = _RESOURCE_RE.search(text)
    where = f" ({resource.group(0)})" if resource and kind.startswith("not authorized") else ""
    prefix = f"{context}: " if context else ""
    label = f"{code}: " if code else ""
    message = f"{prefix}{kind}{where}: {label}{detail}; {fix}"
    return red.text(message), kind


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """What the probe saw: broker ids and the topics it was asked about that exist."""

    broker_ids: tuple[int, ...]
    topics_found: tuple[str, ...]
    elapsed_s: float


def probe_kafka(
    settings: KafkaSettings, *, topics: Sequence[str] = (), timeout_s: float = 25.0
) -> ClusterInfo:
    """Connect with ``settings`` and fetch cluster (and topic) metadata within ``timeout_s``.

    Errors the client reports while connecting (authentication, TLS) are remembered, so a
    failure says why rather than only "timed out". A topic that exists but is not authorized is
    an error; a topic that does not exist is not (revise may create it).

    Raises:
        KafkaAccessError: unreachable, TLS or SASL failure, or a topic not authorized.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    seen: list[Any] = []
    lock = threading.Lock()

    def on_error(err: Any) -> None:
        with lock:
            seen.append(err)

    conf: dict[str, Any] = {**settings.admin_conf(), "error_cb": on_error, "log_level": 0,
                            "socket.connection.setup.timeout.ms": int(max(timeout_s, 1) * 1000)}
    context = f"Kafka at {settings.bootstrap_servers}"
    start = time.monotonic()
    admin = AdminClient(conf)
    try:
        md = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        admin.poll(0.5)  # serve the queued error callbacks (they say why: SASL, TLS)
        with lock:
            best = _most_telling(seen) or exc
        message, kind = explain_kafka_error(best, redactor=settings.redactor, context=context)
        raise KafkaAccessError(message, kind) from None
    for name in topics:
        if name in md.topics and md.topics[name].error is None:
            continue
        # A full listing omits topics the principal may not describe: ask for this one with
        # DescribeTopics, which (unlike a per-topic Metadata request) never auto-creates it.
        error = _describe_error(admin, name, timeout_s)
        if error is None or error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            continue  # there, or missing and not refused: revise creates its output topics
        message, kind = explain_kafka_error(
            error, redactor=settings.redactor, context=f"{context}, topic {name!r}")
        raise KafkaAccessError(message, kind)
    return ClusterInfo(
        broker_ids=tuple(sorted(md.brokers)),
        topics_found=tuple(t for t in topics if t in md.topics),
        elapsed_s=time.monotonic() - start,
    )


def _describe_error(admin: Any, name: str, timeout_s: float) -> Any:
    """The KafkaError of describing topic ``name`` (None: described fine)."""
    from confluent_kafka import KafkaException, TopicCollection

    future = admin.describe_topics(TopicCollection([name]), request_timeout=timeout_s)[name]
    try:
        future.result(timeout_s)
    except KafkaException as exc:
        return exc.args[0] if exc.args else None
    return None


def _most_telling(errors: list[Any]) -> Any:
    """Prefer an authentication or TLS error over a later generic transport error."""
    for want in ("authentication failed", "TLS handshake failed"):
        for err in errors:
            found = _classify(_code_name(err), str(err))
            if found and found[0] == want:
                return err
    return errors[-1] if errors else None
