"""Secrets never shown: redaction of mappings, free text, log records and Spark's own output.

What counts as a secret (shown as ``***``):

- an option whose name (any case, with or without Spark's ``kafka.`` prefix) contains
  ``password``, ``secret``, ``token`` or ``jaas``, or names a private key (``ssl.key.pem``,
  ``ssl.keystore.key``, ``ssl.key.location`` is a path and stays visible);
- in free text: every known secret value (the values of such options, registered with a
  :class:`Redactor`), any PEM ``PRIVATE KEY`` block, and ``password="..."`` / ``NAME=VALUE``
  pairs whose NAME is a secret option name.

A one-character secret would star every occurrence of that character in a message: that is
the price of never showing it.

Trace: ``Redactor({"s3cr3t"}).text("login failed for pw s3cr3t")`` -> ``"login failed for pw ***"``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "MASK",
    "Redactor",
    "RedactingFilter",
    "install_redaction",
    "is_secret_key",
    "redact_mapping",
    "spark_redaction_conf",
]

#: What a secret is replaced with.
MASK = "***"

_SECRET_NAME = r"password|secret|token|jaas|ssl[._]key[._]pem|keystore[._]key|private[._]key"
_SECRET_KEY_RE = re.compile(rf"(?i)({_SECRET_NAME})")
_PEM_KEY_RE = re.compile(
    r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?-----END \1PRIVATE KEY-----", re.DOTALL
)
# NAME=VALUE / NAME: VALUE / NAME="VALUE" where NAME is a secret option name (also in jaas lines).
_PAIR_RE = re.compile(
    rf"""(?ix)
    (?P<name>[\w.\-]*(?:{_SECRET_NAME})[\w.\-]*)   # a secret-looking option name
    (?P<sep>\s*[=:]\s*|\s*->\s*)                   # = : or Spark's map arrow
    (?P<value>"(?:[^"\\]|\\.)*"|'[^']*'|[^\s,;)\]}}]+)
    """
)

#: Spark's default ``spark.redaction.regex`` is ``(?i)secret|password|token|access[.]?key`` and
#: ``spark.sql.redaction.options.regex`` is ``(?i)url``; revise extends both.
_SPARK_EXTRA = r"jaas|ssl[.]key|keystore[.]key"


def is_secret_key(name: str) -> bool:
    """Whether an option NAME holds a secret (case-insensitive; ``kafka.`` prefix allowed)."""
    return _SECRET_KEY_RE.search(name) is not None


def redact_mapping(options: Mapping[str, object]) -> dict[str, object]:
    """A copy of ``options`` with the value of every secret option replaced by ``***``."""
    return {k: (MASK if is_secret_key(k) else v) for k, v in options.items()}


@dataclass(frozen=True, slots=True)
class Redactor:
    """Redacts free text, given the secret values it must never show.

    Attributes:
        secrets: The secret values (passwords, jaas lines, private keys); empty ones ignored.
    """

    secrets: frozenset[str] = frozenset()

    @classmethod
    def of(cls, values: Iterable[str]) -> Redactor:
        """A redactor for these secret values (also each line of a multi-line value)."""
        found: set[str] = set()
        for v in values:
            if not v:
                continue
            found.add(v)
            found.update(line.strip() for line in v.splitlines() if len(line.strip()) >= 8)
        return cls(frozenset(found))

    def merged(self, other: Redactor) -> Redactor:
        """A redactor that knows the secrets of both."""
        return Redactor(self.secrets | other.secrets)

    def text(self, text: str) -> str:
        """``text`` with every known secret, PEM private key and secret NAME=VALUE masked."""
        out = _PEM_KEY_RE.sub(MASK, text)
        for value in sorted(self.secrets, key=len, reverse=True):
            out = out.replace(value, MASK)
        return _PAIR_RE.sub(lambda m: f"{m.group('name')}{m.group('sep')}{MASK}", out)


class RedactingFilter(logging.Filter):
    """A logging filter that rewrites every record it sees, at every level, with secrets masked.

    The message (with its arguments merged in), the formatted exception traceback and the stack
    info are redacted; the record is never dropped. Install it on handlers (filters on a logger
    do not see records propagated from its children): :func:`install_redaction` does.
    """

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact ``record`` in place; always keeps it."""
        red = self.redactor.text
        record.msg = red(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = red(record.exc_text)
        if record.stack_info:
            record.stack_info = red(record.stack_info)
        return True


def install_redaction(
    redactor: Redactor,
    loggers: Iterable[str] = ("", "revise", "py4j", "pyspark"),
) -> RedactingFilter:
    """Install one :class:`RedactingFilter` on the named loggers and all their handlers.

    A filter installed earlier by this function is replaced, so calling it again with a redactor
    that knows more secrets is safe. ``""`` is the root logger: its handlers see every record that
    propagates, from any logger.

    Returns:
        The installed filter (its ``redactor`` attribute may be swapped later).
    """
    flt = RedactingFilter(redactor)
    for name in loggers:
        logger = logging.getLogger(name)
        for target in (logger, *logger.handlers):
            for old in [f for f in target.filters if isinstance(f, RedactingFilter)]:
                target.removeFilter(old)
            target.addFilter(flt)
    return flt


def spark_redaction_conf() -> dict[str, str]:
    """Spark conf entries that make Spark redact revise's secret option names itself.

    ``spark.redaction.regex`` (conf keys and environment shown in the UI and event logs) and
    ``spark.sql.redaction.options.regex`` (data source options in plan strings) both get
    ``password|secret|token|jaas|ssl.key|keystore.key``; the SQL one keeps its default ``url``.
    Both can be set on a running session (``spark.conf.set``) or at build time.
    """
    return {
        "spark.redaction.regex": rf"(?i)secret|password|token|access[.]?key|{_SPARK_EXTRA}",
        "spark.sql.redaction.options.regex": rf"(?i)url|password|secret|token|{_SPARK_EXTRA}",
    }
