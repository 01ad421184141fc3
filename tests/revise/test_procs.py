"""Stopping local processes (``revise.infra.procs``), as ``revise broker stop`` does."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from revise.infra.procs import (
    MALLOC_ARENAS_ENV,
    cap_malloc_arenas,
    pid_alive,
    runs_command,
    terminate_all,
)

# Ignores SIGTERM and holds 1 GiB of touched memory, whose unmapping makes a SIGKILLed process
# linger for a moment, as a broker JVM's heap does.
_STUBBORN = (
    "import signal, sys, time, pathlib;"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    "ballast = bytearray(1 << 30);"
    "pathlib.Path(sys.argv[1]).write_text('ready');"
    "time.sleep(600)"
)


def _orphan(tmp_path: Path) -> int:
    """Start the stubborn process through a shell that exits: not our child, as a broker isn't."""
    ready = tmp_path / "ready"
    shell = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" -c "{_STUBBORN}" "{ready}" >/dev/null 2>&1 & echo $!'],
        capture_output=True, text=True, check=True, timeout=30,
    )
    pid = int(shell.stdout.strip())
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert time.monotonic() < deadline, "the stubborn process never got ready"
        time.sleep(0.05)
    return pid


def test_terminate_returns_only_once_a_process_that_ignores_sigterm_is_gone(
    tmp_path: Path,
) -> None:
    pid = _orphan(tmp_path)
    try:
        assert pid_alive(pid)
        started = time.monotonic()
        terminate_all([(pid, None)], timeout_s=0.3)
        # Checked at once: a SIGKILLed process that is still being torn down counts as alive.
        assert not pid_alive(pid)
        assert time.monotonic() - started >= 0.3  # SIGTERM was ignored, so it waited first
    finally:
        if pid_alive(pid):
            subprocess.run(["kill", "-9", str(pid)], check=False)


def test_terminate_of_a_process_already_gone_returns_at_once() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(30)
    started = time.monotonic()
    terminate_all([(child.pid, None)], timeout_s=10)
    assert time.monotonic() - started < 5
    assert not pid_alive(child.pid)


# The main thread ends (pthread_exit, which never returns, so ctypes keeps the GIL released)
# while another thread still runs: the main thread is then a zombie, as a JVM's is while its
# shutdown threads run.
_HEADLESS = (
    "import ctypes, threading, time;"
    "threading.Thread(target=time.sleep, args=(600,)).start();"
    "ctypes.CDLL(None).pthread_exit(None)"
)


def _main_thread_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_process_whose_main_thread_is_a_zombie_is_alive_while_another_thread_runs() -> None:
    child = subprocess.Popen([sys.executable, "-c", _HEADLESS])
    try:
        deadline = time.monotonic() + 30
        while _main_thread_state(child.pid) != "Z":
            assert time.monotonic() < deadline, "the main thread never ended"
            time.sleep(0.05)
        assert pid_alive(child.pid)  # its sleeping thread still runs
        # its command line is still read (from the live thread's /proc entry)
        assert runs_command(child.pid, ["-c", _HEADLESS])
        terminate_all([(child.pid, None)], timeout_s=5)  # SIGTERM's default action ends it
        assert not pid_alive(child.pid)
        assert child.poll() is not None  # terminate reaped our child
    finally:
        child.kill()
        child.wait(30)


def test_runs_command_tells_the_recorded_process_from_another_with_its_pid() -> None:
    """A recorded pid counts as up only while it runs the arguments revise started it with."""
    args = ["-c", "import time; time.sleep(600)", "node-7/server.properties"]
    child = subprocess.Popen([sys.executable, *args])
    try:
        assert runs_command(child.pid, args)
        assert runs_command(child.pid, args[-1:])  # a whole argument
        assert not runs_command(child.pid, ["server.properties"])  # not a part of one
        assert not runs_command(child.pid, [args[-1], args[0]])  # not in that order
        assert not runs_command(child.pid, ["node-8/server.properties"])  # another node's
    finally:
        child.kill()
        child.wait(30)
    assert not runs_command(child.pid, args)  # gone


def test_terminate_leaves_alone_a_pid_that_runs_another_command() -> None:
    """A recorded pid now running something else (the kernel reused it) gets no signal."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        terminate_all([(child.pid, ["kafka.Kafka", "node-1/server.properties"])], timeout_s=0.2)
        assert child.poll() is None and pid_alive(child.pid)
        terminate_all([(child.pid, ["-c", "import time; time.sleep(600)"])], timeout_s=5)
        assert child.poll() is not None  # its own arguments: SIGTERMed, and reaped here
    finally:
        child.kill()
        child.wait(30)


def test_the_malloc_arena_cap_is_two_unless_the_environment_has_one() -> None:
    env = {"PATH": "/bin"}
    assert cap_malloc_arenas(env) == "2"
    assert env == {"PATH": "/bin", MALLOC_ARENAS_ENV: "2"}
    users = {MALLOC_ARENAS_ENV: "8"}
    assert cap_malloc_arenas(users) == "8"
    assert users == {MALLOC_ARENAS_ENV: "8"}
