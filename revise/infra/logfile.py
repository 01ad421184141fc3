"""Where the lines of Spark, the JVM, py4j and librdkafka go when revise runs from its CLI.

``revise`` prints its own lines only (:func:`revise.cli.setup_logging`); everything else a
command's processes write goes to one file per command,
``$REVISE_HOME/logs/<command>-<UTC time>-<pid>.log`` (``~/.revise/logs/…`` by default), whose path
revise prints once, when the first line goes there (a command that starts neither Spark nor a
Kafka client and logs nothing writes no file):

- the driver JVM's stdout and stderr: Spark's log4j lines, the JVM's own warnings, and what the
  Python workers print (Spark copies their output to its own stderr).
  :func:`revise.spark.session.spark_session` starts the JVM with both on this file
  (:func:`jvm_output`); under ``spark-submit`` the JVM is already running and keeps its own;
- Python's log records: every one (revise's own too, so the file has the whole run in order),
  among them py4j's, librdkafka's (``revise.kafka``) and Python warnings.

``revise -v`` prints all of it on the console instead, and writes no file. Files are not
removed: each run adds one (a bounded run's is a few KB at Spark's default WARN level).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import IO

__all__ = ["LogFile", "current", "jvm_output", "logs_dir", "start", "stop"]


def logs_dir() -> Path:
    """``$REVISE_HOME/logs`` or ``~/.revise/logs``."""
    root = os.environ.get("REVISE_HOME")
    base = Path(root).expanduser() if root else Path.home() / ".revise"
    return (base / "logs").resolve()


class LogFile:
    """One command's log file: created, and its path printed on stderr, on first use."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._opened = False

    @property
    def opened(self) -> bool:
        """Whether anything was written to it (so it exists)."""
        return self._opened

    def _announce(self) -> None:
        with self._lock:
            if self._opened:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._opened = True
        print(f"revise: Spark's, the JVM's and the Kafka clients' lines go to {self.path} "
              "(revise -v prints them here)", file=sys.stderr, flush=True)

    def open(self) -> IO[bytes]:
        """The file, opened for appending (the caller closes it)."""
        self._announce()
        return open(self.path, "ab")

    def handler(self) -> logging.Handler:
        """A logging handler that writes to the file (created on the first record)."""
        return _Handler(self)


class _Handler(logging.FileHandler):
    """A :class:`logging.FileHandler` that opens its file through its :class:`LogFile`."""

    def __init__(self, log_file: LogFile) -> None:
        self._log_file = log_file
        super().__init__(log_file.path, mode="a", encoding="utf-8", delay=True)

    def _open(self) -> IO[str]:  # type: ignore[override]
        self._log_file._announce()
        return super()._open()


_current: LogFile | None = None


def start(command: str) -> LogFile:
    """The log file of this process's ``revise <command>`` (not created yet)."""
    global _current
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    _current = LogFile(logs_dir() / f"{command}-{stamp}-{os.getpid()}.log")
    return _current


def stop() -> None:
    """No log file from now on: output stays on the console (``revise -v``)."""
    global _current
    _current = None


def current() -> LogFile | None:
    """The log file of this process; None: output stays on the console (``-v``, not the CLI)."""
    return _current


def jvm_output() -> IO[bytes] | None:
    """The file for a JVM this process starts (stdout and stderr); None: the console."""
    return None if _current is None else _current.open()
