"""Engines handed between the Python workers of one executor, through shared memory.

Spark gives a stateful task whichever of the executor's idle Python workers comes first, so
a shard's engine, kept in the memory of the worker that last ran it
(:class:`~revise.spark.shard_state.EngineCache`), is in the wrong worker as often as not
when an executor has several cores: on this machine's two (``local[*]``), 41 % of the daily
workload's shard calls found their worker's engine behind (27 % by 2.3 stored steps on
average, 9 % after another worker's new base), 12-15 % of the workers' CPU. With ``C``
workers an executor's steps would be applied up to ``C`` times.

So a worker that ran a shard also leaves its engine here, as an uncompressed snapshot
(:meth:`~revise.engine.Engine.snapshot`, a few ms for 50k windows, against ~20 ms to replay
one step of 12,500 records), in a folder of files in ``/dev/shm`` shared by the executor's
workers; the next worker that finds its own cached engine behind builds the shard from the
freshest of the two and replays only the steps after it. A snapshot is left only when the
step was large against the state (:data:`WINDOWS_PER_RECORD`), so its cost follows the
records, and only while another worker of the executor is alive to use it.

Each file carries the :class:`~revise.spark.shard_state.Stamp` of the stored state it is:
it is used under the same rule as a cached engine (the store's base and log name it), so a
snapshot left by a failed attempt or by a batch that was never committed is never taken for
the stored state. The files are a cache: any error reading or writing them (no
``/dev/shm``, a full one) turns the hand-off off in that worker and the shard is read from
the store as before.

Layout: ``<root>/<executor>/`` (``root`` is ``/dev/shm/revise-<uid>``; ``executor`` the pid of
the workers' parent, Spark's Python daemon), holding ``w-<pid>`` for each worker that used it
and ``<token hash>-<shard>`` for each shard: a JSON line of the stamp, then the snapshot.
revise's daemon (``revise.spark.pydaemon``, local masters) removes its folder when it exits
(:func:`remove_executor_folder`); a worker that creates an executor's folder removes those of
daemons no longer running (killed ones, and PySpark's own daemon's on a cluster).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Final

from revise.infra.procs import pid_alive
from revise.spark.shard_state import Stamp

if TYPE_CHECKING:
    from revise.engine import Engine

__all__ = ["SHM_ROOT", "WINDOWS_PER_RECORD", "EngineHandoff", "remove_executor_folder"]

log = logging.getLogger("revise.handoff")

SHM_ROOT: Final = Path("/dev/shm")
"""Where the executors' folders go (memory-backed on Linux); without it, no hand-off."""

WINDOWS_PER_RECORD: Final = 10
"""A snapshot is left after a step of ``n`` records only when the shard has at most
``WINDOWS_PER_RECORD × n`` open windows: writing a snapshot costs ~0.13 µs a window, replaying
a step ~1.6 µs a record (50k windows; 12,500 records a step), so the snapshot costs at most
about as much as the step it saves replaying."""


class EngineHandoff:
    """The shared folder of one executor's Python workers (see the module).

    Args:
        root: The folder holding the executors' folders; None: no hand-off.
        executor: Names this executor's folder (default: the parent process, Spark's Python
            daemon, read at each use: the module is imported before the daemon forks).
        worker: This worker's pid (default: this process's, read at each use).
    """

    def __init__(self, root: Path | None, *, executor: int | None = None,
                 worker: int | None = None) -> None:
        self._root = root
        self._executor = executor
        self._worker = worker
        self._ready: tuple[int, Path] | None = None  # (worker pid, folder) once set up
        self._off = root is None

    @classmethod
    def for_executor(cls) -> EngineHandoff:
        """The hand-off of the executor this process runs in (``/dev/shm``, if writable)."""
        root = SHM_ROOT / f"revise-{os.getuid()}" if SHM_ROOT.is_dir() else None
        return cls(root)

    def leave(self, token: str, shard: int, stamp: Stamp, engine: Engine) -> None:
        """Leave the shard's engine, as the stored state ``stamp``, for the other workers.

        Nothing is written while no other worker of the executor is alive to take it.
        """
        folder = self._folder()
        if folder is None or not self._otherspid_alive(folder):
            return
        final = folder / _name(token, shard)
        tmp = folder / f".{final.name}.{self._pid()}.tmp"
        try:
            with tmp.open("wb") as f:
                f.write(json.dumps(list(stamp)).encode() + b"\n")
                f.write(engine.snapshot(compress=False))
            os.replace(tmp, final)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            self._turn_off(e)

    def find(self, token: str, shard: int, base_id: str) -> tuple[Stamp, bytes] | None:
        """The engine another worker left for the shard on base ``base_id`` (None: none).

        The caller checks the stamp against the stored state, as it would a cached engine's.
        """
        folder = self._folder()
        if folder is None:
            return None
        try:
            data = (folder / _name(token, shard)).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            self._turn_off(e)
            return None
        head, _, snapshot = data.partition(b"\n")
        stamp = Stamp(*json.loads(head))
        return (stamp, snapshot) if stamp.base_id == base_id else None

    def _pid(self) -> int:
        return self._worker if self._worker is not None else os.getpid()

    def _folder(self) -> Path | None:
        """The executor's folder, with this worker registered in it (None: hand-off off).

        The root must be this user's own folder (another user's, or a link to one, turns
        the hand-off off: the files are read back as engines).
        """
        if self._off or self._root is None:
            return None
        pid = self._pid()
        if self._ready is not None and self._ready[0] == pid:
            return self._ready[1]
        executor = self._executor if self._executor is not None else os.getppid()
        if executor <= 1:  # no parent left to share with
            return None
        folder = self._root / str(executor)
        try:
            if not folder.is_dir():
                self._root.mkdir(mode=0o700, exist_ok=True)
                st = self._root.lstat()
                if st.st_uid != os.getuid() or not stat.S_ISDIR(st.st_mode):
                    msg = f"{self._root} is not a folder of this user's"
                    raise PermissionError(msg)
                _remove_dead(self._root)
                folder.mkdir(mode=0o700, exist_ok=True)
            (folder / f"w-{pid}").touch()
        except OSError as e:
            self._turn_off(e)
            return None
        self._ready = (pid, folder)
        return folder

    def _otherspid_alive(self, folder: Path) -> bool:
        """Whether another worker that used the folder still runs (dead ones are forgotten)."""
        me = self._pid()
        for entry in os.scandir(folder):
            if not entry.name.startswith("w-"):
                continue
            pid = int(entry.name[2:])
            if pid == me:
                continue
            if pid_alive(pid):
                return True
            Path(entry.path).unlink(missing_ok=True)
        return False

    def _turn_off(self, e: OSError) -> None:
        log.info("engine hand-off turned off in worker %d: %s", self._pid(), e)
        self._off = True


def _name(token: str, shard: int) -> str:
    return f"{hashlib.sha256(token.encode()).hexdigest()[:16]}-{shard}"


def _remove_dead(root: Path) -> None:
    """Remove the folders of executors (daemons) that no longer run."""
    for entry in os.scandir(root):
        if entry.name.isdigit() and not pid_alive(int(entry.name)):
            shutil.rmtree(entry.path, ignore_errors=True)


def remove_executor_folder(executor: int, root: Path | None = None) -> None:
    """Remove the folder of executor ``executor`` (its daemon's pid), when its daemon exits."""
    root = root or SHM_ROOT / f"revise-{os.getuid()}"
    shutil.rmtree(root / str(executor), ignore_errors=True)
