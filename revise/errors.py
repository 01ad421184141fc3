"""The error hierarchy of revise: one root, narrow subclasses where they are raised."""

from __future__ import annotations

__all__ = ["ConfigError", "InfraError", "ReviseError", "StateSchemaMismatch"]


class ReviseError(Exception):
    """Root of every error revise raises on purpose."""


class ConfigError(ReviseError, ValueError):
    """A configuration or usage error; the CLI maps it to exit code 2.

    Messages say what is wrong, where, expected vs got, and how to fix it.
    """


class StateSchemaMismatch(ReviseError):
    """Stored engine state was written by an incompatible version or configuration."""


class InfraError(ReviseError, RuntimeError):
    """A real system the job needs (Java, Maven, Kafka broker, Spark) is missing or unusable."""
