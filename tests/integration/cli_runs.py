"""``python -m revise …`` in its own process group, for the end-to-end tests that run the CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


class CliRun:
    """``python -m revise <args>`` (or another ``module``) in its own process group (so the JVM
    dies with it)."""

    def __init__(self, args: list[str], *, cwd: Path, env: dict[str, str] | None = None,
                 log: Path, module: str = "revise") -> None:
        full_env = {k: v for k, v in os.environ.items() if k != "REVISE_CRASH_AT"}
        full_env.update(env or {})
        self.log_path = log
        self._log = open(log, "wb")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args], cwd=cwd, env=full_env,
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
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def wait(self, timeout_s: float) -> int:
        """Wait for the process; then SIGKILL what is left of its group (the JVM)."""
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.signal_group(signal.SIGKILL)
            self.proc.wait(30)
            msg = f"revise did not exit within {timeout_s}s:\n{self.tail()}"
            raise AssertionError(msg) from None
        finally:
            self._log.close()
        self.signal_group(signal.SIGKILL)
        _wait_group_gone(self.proc.pid)
        return rc

    def tail(self, n: int = 40) -> str:
        lines = [ln for ln in self.log().splitlines() if not ln.lstrip().startswith("at ")]
        return "\n".join(lines[-n:])


def _wait_group_gone(pgid: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
