"""``python -m revise …`` in its own process group, for the end-to-end tests that run the CLI."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

GROUP_EXIT_S = 15.0
"""How long :meth:`CliRun.wait` lets the rest of the group (the JVM) end by itself, and then
after SIGTERM, before it sends SIGKILL."""


class CliRun:
    """``python -m revise <args>`` (or another ``module``, or ``command`` such as
    ``spark-submit …``) in its own process group (so the JVM dies with it); ``env`` adds to
    this process's environment (a None value removes the variable)."""

    def __init__(self, args: list[str], *, cwd: Path, env: dict[str, str | None] | None = None,
                 log: Path, module: str = "revise", command: list[str] | None = None) -> None:
        full_env = {k: v for k, v in os.environ.items() if k != "REVISE_CRASH_AT"}
        for key, value in (env or {}).items():  # None: not in the process's environment
            if value is None:
                full_env.pop(key, None)
            else:
                full_env[key] = value
        self.log_path = log
        self._log = open(log, "wb")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [*(command or [sys.executable, "-m", module]), *args], cwd=cwd, env=full_env,
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, text: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in self.log():
                return True
            if self.proc.poll() is not None:
                return text in self.log()
            time.sleep(0.1)
        return False

    def signal_group(self, sig: int) -> None:
        """Signal what is left of the run's process group, and never another process's group.

        Once the run's process is reaped and its group empty, its id is free, and with a small
        ``pid_max`` (32,768 here) a process started by another test can get it as a new
        session, and so a group, of its own: signalling that id then killed a Spark worker or a
        broker node of another test as it started (empty log, "exited during start-up").
        """
        if not _ours(self.proc):
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def wait(self, timeout_s: float) -> int:
        """Wait for the process; then for what is left of its group (the JVM) to end.

        The JVM ends by itself once its Python parent is gone (PySpark's gateway exits at the
        end of its stdin) and then runs its shutdown hooks, which delete Spark's temporary
        directories and the native libraries RocksDB and lz4 unpacked into ``/tmp`` (~50 MB a
        run). A SIGKILL at once skipped them: every run of the suite left gigabytes behind.
        So the group gets :data:`GROUP_EXIT_S` seconds, then SIGTERM (hooks still run), and
        only then SIGKILL.
        """
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.signal_group(signal.SIGKILL)
            self.proc.wait(30)
            msg = f"revise did not exit within {timeout_s}s:\n{self.tail()}"
            raise AssertionError(msg) from None
        finally:
            self._log.close()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if _wait_group_gone(self.proc, GROUP_EXIT_S):
                break
            self.signal_group(sig)
        _wait_group_gone(self.proc)
        return rc

    def tail(self, n: int = 40) -> str:
        lines = [ln for ln in self.log().splitlines() if not ln.lstrip().startswith("at ")]
        return "\n".join(lines[-n:])


def _ours(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the group led by ``proc``'s id is still the run's.

    While the leader runs, it is. Once the leader is reaped its id stays taken as long as the
    group has members (the kernel keeps a process group's id), so a live process holding that
    id as its own pid is another one, which got the id after the group emptied.
    """
    if proc.poll() is None:
        return True
    try:
        os.kill(proc.pid, 0)
    except ProcessLookupError:
        return True  # no process has the id: only the group's members can be left
    except PermissionError:
        return False
    return False


def _wait_group_gone(proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> bool:
    """Whether ``proc``'s process group was gone within ``timeout_s`` seconds."""
    pgid = proc.pid
    deadline = time.monotonic() + timeout_s
    while True:
        if not _ours(proc):
            return True  # emptied, and its id already reused by another process
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
