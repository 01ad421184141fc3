"""The run file: ``<checkpoint>/revise-run.json``, what ``revise status`` learns a job from.

The job (:func:`revise.spark.driver.run_job`) writes it when its query starts and rewrites it
every :data:`HEARTBEAT_S` seconds from a thread of its own (``heartbeat_ms``), and once more
when it stops (``state = "stopped"``). Every write goes through
:func:`revise.checkpoint.write_atomic`, so a reader sees the old file or the new one, never half
of one.

It holds where the job reads and writes (bootstrap servers, topics, the Delta path; never a
Kafka client setting, which may hold secrets), the driver's pid and host, and the job's
metrics port. A job is *running* when its file says so, its heartbeat is younger than
:data:`STALE_S`, and, on the same host, its pid is alive: a job killed with SIGKILL leaves
``state = "running"`` behind with a dead pid (or, seen from another host, a heartbeat that
stops moving), and is stopped. Standard library only.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Final

from revise.checkpoint import RUN_FILE, write_atomic

log = logging.getLogger(__name__)

__all__ = ["HEARTBEAT_S", "STALE_S", "Liveness", "RunFile", "RunInfo", "liveness",
           "read_run_file"]

HEARTBEAT_S: Final = 5.0
"""Seconds between two heartbeats of a running job."""
STALE_S: Final = 60.0
"""A heartbeat older than this (s) means the job is not running (killed elsewhere, or frozen)."""


@dataclass(frozen=True, slots=True)
class RunInfo:
    """The content of the run file (all times epoch ms).

    Attributes:
        query_id: The job's id.
        state: ``running`` or ``stopped`` (what the job last wrote).
        pid: The driver's process id.
        host: The driver's host name.
        started_ms: When the run started.
        heartbeat_ms: The last heartbeat (or the stop).
        bootstrap_servers: The Kafka bootstrap servers of the job.
        input_topic: Its input topic.
        changelog_topic: Its changelog topic.
        progress_topic: The compacted topic of its progress markers.
        delta_path: The root of its Delta tables.
        metrics_port: The port of its ``/metrics`` (None: not served).
        once: A bounded run (``--once``).
    """

    query_id: str
    state: str
    pid: int
    host: str
    started_ms: int
    heartbeat_ms: int
    bootstrap_servers: str
    input_topic: str
    changelog_topic: str
    progress_topic: str
    delta_path: str
    metrics_port: int | None = None
    once: bool = False

    def to_json(self) -> str:
        """The file's text."""
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> RunInfo:
        """Parse :meth:`to_json`'s text (unknown keys are ignored).

        Raises:
            ValueError: not JSON, or a field is missing.
        """
        raw = json.loads(text)
        names = set(cls.__dataclass_fields__)
        try:
            return cls(**{k: v for k, v in raw.items() if k in names})
        except TypeError as exc:
            raise ValueError(str(exc)) from exc


def read_run_file(checkpoint: str) -> RunInfo | None:
    """The run file of ``checkpoint``; None when there is none (or it cannot be read)."""
    try:
        return RunInfo.from_json((Path(checkpoint) / RUN_FILE).read_text())
    except (OSError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class Liveness:
    """Whether a job runs, and why it is judged so.

    Attributes:
        running: The job runs.
        reason: A few words: ``heartbeat 2 s ago``, ``stopped cleanly``, ``pid 42 is gone`` …
        heartbeat_age_s: Seconds since the last heartbeat (None: no run file).
    """

    running: bool
    reason: str
    heartbeat_age_s: float | None


def liveness(info: RunInfo | None, *, now_ms: int) -> Liveness:
    """Judge a run file: running, or stopped (see the module)."""
    if info is None:
        return Liveness(False, "no run file: the job never ran with this revise", None)
    age = max(0.0, (now_ms - info.heartbeat_ms) / 1000)
    if info.state != "running":
        return Liveness(False, "stopped cleanly", age)
    if info.host == socket.gethostname() and not _alive(info.pid):
        return Liveness(False, f"pid {info.pid} is gone (killed or crashed)", age)
    if age > STALE_S:
        return Liveness(False, f"no heartbeat for {age:.0f} s (killed or frozen)", age)
    return Liveness(True, f"pid {info.pid} on {info.host}, heartbeat {age:.0f} s ago", age)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


class RunFile:
    """The job's side: write the run file, beat, mark the stop.

    Args:
        checkpoint: The job's checkpoint folder (it exists).
        info: What to write; ``state``, ``pid``, ``host`` and the times are set here.
        heartbeat_s: Seconds between two heartbeats.
    """

    def __init__(self, checkpoint: str, info: RunInfo, *, heartbeat_s: float = HEARTBEAT_S):
        self.path = Path(checkpoint) / RUN_FILE
        now = _now_ms()
        self.info = replace(info, state="running", pid=os.getpid(), host=socket.gethostname(),
                            started_ms=now, heartbeat_ms=now)
        self._heartbeat_s = heartbeat_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> RunFile:
        """Write the file and start the heartbeat thread."""
        self._write(self.info)
        self._thread = threading.Thread(target=self._beat, name="revise-heartbeat", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the heartbeat and write ``state = "stopped"``.

        Unless another instance of the job has written the file since (it took over this
        checkpoint and runs on): its file is left as it is. A write that fails (a full disk, the
        very error the job may be stopping on) is logged, not raised: the job's own error is
        the one its caller must see, and ``revise status`` tells a file left at ``running`` by
        its pid, which is gone once the job has exited.
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        now = read_run_file(str(self.path.parent))
        if now is not None and (now.pid, now.host, now.started_ms) != (
                self.info.pid, self.info.host, self.info.started_ms):
            return
        try:
            self._write(replace(self.info, state="stopped", heartbeat_ms=_now_ms()))
        except OSError as exc:
            log.warning("revise could not mark %s stopped: %s", self.path, exc)

    def _beat(self) -> None:
        while not self._stop.wait(self._heartbeat_s):
            try:
                self._write(replace(self.info, heartbeat_ms=_now_ms()))
            except OSError:  # a full disk fails the job elsewhere; the heartbeat just skips
                continue

    def _write(self, info: RunInfo) -> None:
        write_atomic(self.path, info.to_json())


def _now_ms() -> int:
    return int(time.time() * 1000)
