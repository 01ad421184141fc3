"""Local processes and ports of the embedded services (Kafka broker, Spark standalone cluster).

Whether a pid or a process group is alive (a zombie counts as dead), whether a pid still runs
the command revise started under it (a recorded pid may since belong to another process),
whether a loopback port is free, a free port, the ``java`` executable and the extra options of
every JVM revise starts, and terminating a process (SIGTERM, wait, SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import time
from collections.abc import Sequence
from pathlib import Path

from revise.errors import ConfigError, InfraError, SetupError

__all__ = ["JVM_OPTIONS_ENV", "append_options", "free_port", "group_alive", "java",
           "jdk_tool", "jvm_options", "pid_alive", "port_free", "runs_command", "terminate"]


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie not yet reaped counts as dead).

    A process is alive while any of its threads is: a JVM that is shutting down shows its
    main thread as a zombie while its shutdown threads still run (seen on a Kafka broker right
    after SIGTERM), so the main thread's state alone would call it dead too early.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True  # its threads cannot be read, and os.kill found it
    return any(_thread_state(pid, t) not in ("Z", "X") for t in threads)


def _thread_state(pid: int, tid: str) -> str:
    """One thread's state letter from ``/proc`` (``R``, ``S``, ``Z``…).

    ``X`` (dead) when the thread ended since it was listed, ``?`` when it cannot be read.
    """
    try:
        return Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "X"
    except OSError:
        return "?"


def runs_command(pid: int, args: Sequence[str]) -> bool:
    """Whether ``pid`` is alive and its command line holds ``args``, consecutive and whole.

    What tells a process revise started from an unrelated one that got its pid since (the
    kernel reuses pids): the caller passes arguments unique to that process, such as a node's
    own ``server.properties`` path. Read from ``/proc/<pid>/cmdline``, or from a live thread's
    when the main thread has ended (a JVM shutting down), whose own reads empty.
    """
    if not pid_alive(pid):
        return False
    wanted = b"\0" + b"\0".join(a.encode() for a in args) + b"\0"
    return wanted in b"\0" + _cmdline(pid)


def _cmdline(pid: int) -> bytes:
    """The NUL-terminated arguments of ``pid`` (empty when gone or unreadable)."""
    with contextlib.suppress(OSError):
        found = Path(f"/proc/{pid}/cmdline").read_bytes()
        if found:
            return found
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                found = Path(f"/proc/{pid}/task/{tid}/cmdline").read_bytes()
                if found:
                    return found
    return b""


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


def jdk_tool(name: str) -> str | None:
    """A JDK program (``java``, ``javac``): ``$JAVA_HOME/bin/<name>``, else PATH's; None."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / name).is_file():
        return str(Path(home) / "bin" / name)
    return shutil.which(name)


def java() -> str:
    """The ``java`` executable: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    found = jdk_tool("java")
    if found is None:
        msg = (
            "Java is not installed or not on PATH; the embedded Kafka broker and Spark need "
            "Java 17. Install it (apt-get install openjdk-17-jdk-headless) or set JAVA_HOME."
        )
        raise SetupError(msg)
    return found


JVM_OPTIONS_ENV = "REVISE_JVM_OPTIONS"
"""Environment variable: extra options for every JVM revise starts (Spark's driver and
executors when revise creates the session, the embedded Kafka brokers, the local Spark
standalone Master and Workers), after revise's own so that they win."""


def jvm_options() -> list[str]:
    """The options of ``$REVISE_JVM_OPTIONS``, split as a shell would (none when unset).

    For example ``-XX:TieredStopAtLevel=1`` (only the JVM's quick C1 compiler): a run of
    seconds starts faster and spends less CPU compiling (the test suite runs so); a job that
    runs for long is faster with the default, which compiles hot code again with C2.

    Raises:
        ConfigError: The value is not valid shell words (an unclosed quote).
    """
    value = os.environ.get(JVM_OPTIONS_ENV, "")
    try:
        return shlex.split(value)
    except ValueError as exc:
        msg = f"${JVM_OPTIONS_ENV}={value!r} is not a list of options: {exc}"
        raise ConfigError(msg) from None


def append_options(existing: str, options: list[str]) -> str:
    """``existing`` (a JVM options string, maybe empty) followed by ``options``, shell-quoted.

    Later options win over earlier ones, so what is appended overrides what was there.
    """
    return " ".join(filter(None, [existing, shlex.join(options)]))


def group_alive(pgid: int) -> bool:
    """True while any process of group ``pgid`` exists, zombies of ours excepted (reaped).

    A JVM shutting down shows its main thread as a zombie while other threads still run, so
    the leader's state alone does not say the process is gone; the group's existence does.
    """
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pgid, os.WNOHANG)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


KILL_WAIT_S = 30.0
"""How long :func:`terminate` waits for a SIGKILLed process to be gone."""


def terminate(pid: int, *, timeout_s: float) -> None:
    """SIGTERM ``pid``, wait up to ``timeout_s`` seconds, then SIGKILL; return once it is gone.

    A SIGKILLed process is not gone at once: the kernel still tears it down (a JVM's large
    heap takes a while to unmap), and when it is not our child no ``waitpid`` can wait for it.
    So after SIGKILL this polls until the process is dead or a zombie, for at most
    :data:`KILL_WAIT_S`; a caller that then reports "stopped" tells the truth.

    Raises:
        InfraError: ``pid`` still ran :data:`KILL_WAIT_S` seconds after SIGKILL.
    """
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if _gone_within(pid, timeout_s):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if not _gone_within(pid, KILL_WAIT_S):
        msg = f"process {pid} still runs {KILL_WAIT_S:.0f} s after SIGKILL; look at it with ps"
        raise InfraError(msg)


def _gone_within(pid: int, timeout_s: float) -> bool:
    """Whether ``pid`` is dead (reaped here when it is our child) within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not pid_alive(pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
