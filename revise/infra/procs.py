"""Local processes and ports of the embedded services (Kafka broker, Spark standalone cluster).

Whether a pid or a process group is alive (a zombie counts as dead), whether a pid still runs
the command revise started under it (a recorded pid may since belong to another process),
whether a loopback port is free, a free port, the ``java`` executable and the extra options of
every JVM revise starts, and terminating a process (SIGTERM, wait, SIGKILL).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import Final

from revise.errors import ConfigError, InfraError, SetupError

__all__ = ["JAVA_FLOOR", "JVM_OPTIONS_ENV", "MALLOC_ARENAS", "MALLOC_ARENAS_ENV",
           "append_options", "cap_malloc_arenas", "free_port", "group_alive", "java",
           "java_feature", "java_home_env", "java_version", "jdk_tool", "jvm_options",
           "pid_alive", "port_free", "runs_command", "selects_collector", "terminate_all"]


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
    when the main thread has ended (a JVM shutting down), whose own reads empty. A process in
    the middle of ``exec`` also reads empty (its new memory has no arguments yet, which under
    load lasts long enough for a check right after ``Popen`` to see it): read again then.
    """
    wanted = b"\0" + b"\0".join(a.encode() for a in args) + b"\0"
    deadline = time.monotonic() + _EXEC_WAIT_S
    while pid_alive(pid):
        found = _cmdline(pid)
        if found or time.monotonic() >= deadline:
            return wanted in b"\0" + found
        time.sleep(0.01)
    return False


_EXEC_WAIT_S = 2.0
"""How long :func:`runs_command` waits for a live process's empty command line to appear."""


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


JAVA_FLOOR: Final = 17
"""The oldest Java release revise runs on (Spark 4.2 runs on 17, 21 and 25)."""


def java() -> str:
    """The ``java`` executable: ``$JAVA_HOME/bin/java``, else the one on PATH.

    Raises:
        SetupError: There is none, or it is older than :data:`JAVA_FLOOR`.
    """
    found = jdk_tool("java")
    if found is None:
        msg = (
            "Java is not installed or not on PATH; the embedded Kafka broker and Spark need "
            "Java 17 or later. Install it (apt-get install openjdk-17-jdk-headless) or set "
            "JAVA_HOME."
        )
        raise SetupError(msg)
    version = java_version(found)
    if version[0] < JAVA_FLOOR:
        msg = (f"{found} is Java {'.'.join(map(str, version))}; the embedded Kafka broker and "
               f"Spark need Java {JAVA_FLOOR} or later (17, 21 or 25): set JAVA_HOME to one")
        raise SetupError(msg)
    return found


def java_home_env(home: str, path: str) -> dict[str, str]:
    """The variables that make a child process (and the JVMs it starts) use the JDK at ``home``.

    ``path``: the ``PATH`` it would have otherwise, behind the JDK's ``bin``.
    """
    return {"JAVA_HOME": home, "PATH": os.pathsep.join([str(Path(home) / "bin"), path])}


def java_feature() -> int:
    """The feature release of :func:`java`: 17, 21 or 25, say."""
    return java_version(java())[0]


def java_version(java_bin: str) -> tuple[int, ...]:
    """The version of ``java_bin``, as numbers (``(25, 0, 3)``; Java 8 is ``(8, 0, 392)``).

    Read from the JDK's ``release`` file, else from ``java -version``.

    Raises:
        SetupError: It cannot be told.
    """
    return _version(str(Path(java_bin).resolve()))


@functools.lru_cache(maxsize=4)
def _version(java_bin: str) -> tuple[int, ...]:
    release = Path(java_bin).parent.parent / "release"
    text = release.read_text(errors="replace") if release.is_file() else ""
    found = re.search(r'^JAVA_VERSION="([^"]+)"', text, re.MULTILINE)
    if found is None:
        proc = subprocess.run([java_bin, "-version"], capture_output=True, text=True,
                              check=False, timeout=60)
        found = re.search(r'version "([^"]+)"', proc.stderr)
    numbers = [int(n) for n in re.findall(r"\d+", found.group(1))] if found else []
    if not numbers:
        msg = f"cannot tell the version of {java_bin}"
        raise SetupError(msg)
    return tuple(numbers[1:] if numbers[0] == 1 else numbers)


JVM_OPTIONS_ENV = "REVISE_JVM_OPTIONS"
"""Environment variable: extra options for every JVM revise starts (Spark's driver and
executors when revise creates the session, the embedded Kafka brokers, the local Spark
standalone Master and Workers), after revise's own so that they win."""


def jvm_options() -> list[str]:
    """The options of ``$REVISE_JVM_OPTIONS``, split as a shell would (none when unset).

    For example ``-XX:TieredStopAtLevel=1`` (only the JVM's quick C1 compiler): a run of
    seconds starts faster and spends less CPU compiling (the test suite runs so); a stream's
    micro-batches are planned about twice as fast with the default, which compiles hot code
    again with C2 (docs/BENCHMARKS.md).

    Raises:
        ConfigError: The value is not valid shell words (an unclosed quote).
    """
    value = os.environ.get(JVM_OPTIONS_ENV, "")
    try:
        return shlex.split(value)
    except ValueError as exc:
        msg = f"${JVM_OPTIONS_ENV}={value!r} is not a list of options: {exc}"
        raise ConfigError(msg) from None


_COLLECTOR = re.compile(r"-XX:\+Use(Serial|Parallel|ParallelOld|G1|Z|Shenandoah|Epsilon)GC")


def selects_collector(options: Sequence[str]) -> bool:
    """Whether ``options`` choose the JVM's garbage collector (``-XX:+UseParallelGC`` …).

    A JVM given two refuses to start ("Multiple garbage collectors selected"), so a JVM whose
    command names its own collector drops it when ``$REVISE_JVM_OPTIONS`` chooses another.
    """
    return any(_COLLECTOR.fullmatch(opt) for opt in options)


MALLOC_ARENAS_ENV: Final = "MALLOC_ARENA_MAX"
MALLOC_ARENAS: Final = "2"
"""glibc's malloc arenas in every JVM revise starts (and in Spark's Python workers),
unless ``$MALLOC_ARENA_MAX`` is set. glibc gives a thread that meets contention an arena of
its own, up to 8 per core, and each arena keeps what was freed in it: over a two-hour run the
driver JVM's memory outside its own accounting (RocksDB's state stores, codecs, the JVM's
``malloc``) rose to ~100 MiB in the first hour with the default and stayed at 25–47 MiB with
2 arenas (docs/RELIABILITY.md, *Soak*). Hadoop caps them the same way."""


def cap_malloc_arenas(env: MutableMapping[str, str]) -> str:
    """Set :data:`MALLOC_ARENAS` in ``env`` (a JVM's environment) unless set; the value it has."""
    return env.setdefault(MALLOC_ARENAS_ENV, MALLOC_ARENAS)


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
"""How long :func:`terminate_all` waits for a SIGKILLed process to be gone."""


def terminate_all(targets: Sequence[tuple[int, Sequence[str] | None]], *,
                  timeout_s: float) -> None:
    """SIGTERM every ``(pid, args)`` in order, then wait for each; SIGKILL what outlives it.

    ``args``: arguments the process must still run (:func:`runs_command`); a pid that no longer
    does is left alone. None when the caller knows the pid is its own unreaped child.
    Each process is held by a pidfd opened before its identity is checked against ``args``,
    so every signal reaches the process that was checked, never one that got its pid since:
    pids are reused fast here (a JVM's threads take them too, and the kernel's counter wraps at
    32768), and a stale SIGKILL lands on whatever started last. A SIGKILLed process is not
    gone at once (a JVM's large heap takes a while to unmap), so this waits until the whole
    process has exited, for at most :data:`KILL_WAIT_S`; a caller that then reports "stopped"
    tells the truth. Our own children are reaped.

    Raises:
        InfraError: a process still ran :data:`KILL_WAIT_S` seconds after SIGKILL.
    """
    held = [(pid, fd) for pid, args in targets if (fd := _hold(pid, args)) is not None]
    try:
        for _, fd in held:
            _signal(fd, signal.SIGTERM)
        for pid, fd in held:
            if _exits_within(pid, fd, timeout_s):
                continue
            _signal(fd, signal.SIGKILL)
            if not _exits_within(pid, fd, KILL_WAIT_S):
                msg = (f"process {pid} still runs {KILL_WAIT_S:.0f} s after SIGKILL; "
                       "look at it with ps")
                raise InfraError(msg)
    finally:
        for _, fd in held:
            os.close(fd)


def _hold(pid: int, args: Sequence[str] | None) -> int | None:
    """A pidfd of ``pid`` when it runs (and runs ``args``), else None."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    if args is None or runs_command(pid, args):
        return fd
    os.close(fd)
    return None


def _signal(fd: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(fd, sig)


def _exits_within(pid: int, fd: int, timeout_s: float) -> bool:
    """Whether the process behind ``fd`` has exited (every thread) within ``timeout_s``.

    A pidfd turns readable once the whole thread group is gone: a JVM shutting down, whose
    main thread is already a zombie while its shutdown threads run, still counts as running.
    """
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    exited = bool(poller.poll(max(0.0, timeout_s) * 1000))
    if exited:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    return exited
