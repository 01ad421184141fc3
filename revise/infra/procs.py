"""Local processes and ports of the embedded services (Kafka broker, Spark standalone cluster).

Whether a pid is alive (a zombie counts as dead), whether a loopback port is free, a free port,
the ``java`` executable, and terminating a process (SIGTERM, wait, SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import time
from pathlib import Path

from revise.errors import SetupError

__all__ = ["free_port", "java", "pid_alive", "port_free", "terminate"]


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie not yet reaped counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by us) counts as dead.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def port_free(port: int) -> bool:
    """Whether ``port`` can be bound on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port of 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def java() -> str:
    """The ``java`` executable: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        msg = (
            "Java is not installed or not on PATH; the embedded Kafka broker and Spark need "
            "Java 17. Install it (apt-get install openjdk-17-jdk-headless) or set JAVA_HOME."
        )
        raise SetupError(msg)
    return found


def terminate(pid: int, *, timeout_s: float) -> None:
    """SIGTERM ``pid``, wait up to ``timeout_s`` seconds, then SIGKILL; reap it if ours."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and pid_alive(pid):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
