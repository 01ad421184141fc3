"""Why a run failed, said so that the user can act: the messages of ``JobError``.

Spark reports a failure inside ``foreachBatch`` as a Py4J-wrapped Python traceback and a lost
input topic only as ``UnknownTopicOrPartitionException``. The driver
(:mod:`revise.spark.driver`) turns both into one line that names what failed, where, and the
fix; the committed micro-batches are intact in every case (the failed one is redone on
restart, see the commit sequence in :mod:`revise.spark.committer`).
"""

from __future__ import annotations

import contextlib
import re
import shutil

from revise.errors import ReviseError
from revise.jobconfig import JobConfig
from revise.kafka import explain_kafka_error
from sinks.kafka import ProducerFencedError
from sinks.kafka.admin import topic_exists

__all__ = [
    "JobError",
    "checkpoint_taken_over",
    "commit_failure",
    "failure_message",
    "root_cause",
]

_LOW_SPACE_BYTES = 16 * 1024 * 1024
_ACCESS_KINDS = ("authentication failed", "not authorized", "TLS handshake failed")
"""Kinds of :func:`~revise.kafka.errors.explain_kafka_error` that name an access problem."""


class JobError(ReviseError, RuntimeError):
    """The streaming query failed; the message carries the reason and the fix."""


def commit_failure(cfg: JobConfig, error: BaseException | None) -> ReviseError | None:
    """The committer's own error, clearer than Spark's wrapped copy of it (None: none).

    The committer keeps the original exception, whose message (a ``DeltaWriteError``, a Kafka
    ``ChangelogError``, an ``OSError`` such as a full disk) says what failed and where.
    """
    if error is None or isinstance(error, ProducerFencedError):
        return None
    if isinstance(error, ReviseError):
        return error
    reason = root_cause(str(error)) or type(error).__name__
    msg = f"committing a micro-batch failed ({reason}); fix the cause and restart to replay it"
    return JobError(_disk_full_hint(cfg, str(error)) or msg)


def checkpoint_taken_over(text: str) -> bool:
    """Whether Spark refused this query's checkpoint write because another query wrote it first.

    Two instances of one query on one ``--checkpoint`` race for each micro-batch's offset-log
    entry; the loser's rename fails (``FileAlreadyExistsException``) and Spark stops it with
    ``SparkConcurrentModificationException``. That is fencing by the checkpoint, the twin of
    fencing by the transactional producer: whichever check a woken zombie meets first stops it.
    A zombie that wakes after its micro-batch's sink ran but before Spark recorded it loses the
    same race on the commit log instead (``CONCURRENT_STREAM_LOG_UPDATE``: "Multiple streaming
    jobs detected for N").
    """
    return any(sign in text for sign in _TAKEN_OVER)


_TAKEN_OVER = (
    "SparkConcurrentModificationException",
    "Multiple streaming queries are concurrently using",  # the offset log
    "CONCURRENT_STREAM_LOG_UPDATE",  # the commit log (Spark's error class) ...
    "Multiple streaming jobs detected for",  # ... and its message
)


def root_cause(text: str) -> str:
    """What failed, from a Java/Py4J or Python worker error text.

    The exception line that ends the last Python traceback in it (a stateful task's Python
    worker: its data files, its engine), else the innermost ``Caused by:``, else the first line.
    """
    lines = text.strip().splitlines()
    python = _python_exception(lines)
    if python is not None:
        return python
    causes = [ln.split("Caused by:", 1)[1].strip() for ln in lines
              if ln.lstrip().startswith("Caused by:")]
    if causes:
        return causes[-1]
    return lines[0].strip() if lines else ""


def _python_exception(lines: list[str]) -> str | None:
    """The ``Type: message`` line ending the last Python traceback among ``lines`` (None)."""
    starts = [i for i, ln in enumerate(lines) if "Traceback (most recent call last):" in ln]
    for start in reversed(starts):  # a later copy of the traceback may be cut short
        for ln in lines[start + 1:]:
            if ln and not ln[0].isspace() and _EXCEPTION_LINE.match(ln):
                return ln.strip()
    return None


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b")


def _disk_full_hint(cfg: JobConfig, text: str) -> str | None:
    """Name the folder whose filesystem is full when the error says a device has no space."""
    if "No space left on device" not in text:
        return None
    full = []
    for flag, path in (("--checkpoint", cfg.checkpoint), ("--delta-path", cfg.delta.path)):
        with contextlib.suppress(OSError):
            if shutil.disk_usage(path).free < _LOW_SPACE_BYTES:
                full.append(f"{flag} {path}")
    where = " and ".join(full) or f"--checkpoint {cfg.checkpoint} or --delta-path {cfg.delta.path}"
    return (
        f"no space left on the filesystem of {where} (< 16 MiB free); the running micro-batch "
        "was not committed: free space there and restart, the batch is redone"
    )


def failure_message(cfg: JobConfig, text: str) -> str:
    """What to tell the user about a failed query, given Spark's exception text.

    A deleted input topic shows up in Spark only as ``UnknownTopicOrPartitionException`` (or
    as lost partitions): say which topic, that committed batches are safe, and the fix.
    """
    first = root_cause(text)
    hint = _disk_full_hint(cfg, text)
    if hint is not None:
        return hint
    access = _kafka_access_failure(cfg, first)
    if access is not None:
        return access
    gone = "UnknownTopicOrPartition" in text or topic_exists(
        cfg.kafka.bootstrap_servers, cfg.kafka.input_topic,
        client_config=cfg.kafka_settings.admin_conf()) is False
    if gone:
        return (
            f"--input-topic {cfg.kafka.input_topic!r} was deleted (or lost partitions) while the "
            f"job ran ({first}); every committed micro-batch is intact and the uncommitted one is "
            "redone on restart: restore the topic with its records (same partitions and "
            "offsets) and restart, or start over with a new --checkpoint and --query-id"
        )
    return f"the streaming query failed: {first}"


def _kafka_access_failure(cfg: JobConfig, cause: str) -> str | None:
    """The Kafka access problem (credentials, ACLs, TLS) that stopped the query, if one did.

    The preflight probe catches these before Spark starts; this is for access lost while the
    job runs (a rotated password, a revoked ACL, an expired certificate), which Spark's Kafka
    source reports as a Java exception deep in its stack.
    """
    message, kind = explain_kafka_error(
        cause, redactor=cfg.kafka_settings.redactor, context="the job's Kafka source")
    if not kind.startswith(_ACCESS_KINDS):
        return None
    return (f"{message}; every committed micro-batch is intact: fix the access and restart, "
            "the uncommitted one is redone")
