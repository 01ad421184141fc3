"""The error hierarchy of revise: one root, narrow subclasses where they are raised."""

from __future__ import annotations

__all__ = ["ConfigError", "InfraError", "ReviseError", "SetupError", "StateSchemaMismatch"]


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


class SetupError(InfraError):
    """The machine lacks something the user must provide (Java, Maven, a port, a folder).

    Java or Maven missing, a port in use, a folder not writable: the CLI maps it to exit code
    2 (a usage problem), other InfraErrors to 1.
    """
