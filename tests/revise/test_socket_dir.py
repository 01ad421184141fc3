"""Spark's Unix domain socket files in a folder per process (``session.socket_dir``)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from revise.spark.session import SOCKET_FOLDER_MAX, socket_dir


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_process_folder_is_made_and_the_folders_of_gone_processes_are_removed(
        tmp_path: Path) -> None:
    gone = tmp_path / str(_dead_pid())
    gone.mkdir()
    (gone / ".left-by-a-killed-job.sock").write_text("")
    living = tmp_path / str(os.getppid())  # pytest's parent: alive throughout
    living.mkdir()
    other = tmp_path / "not-a-pid"
    other.mkdir()

    own = socket_dir(tmp_path)

    assert own == tmp_path / str(os.getpid())
    assert own.is_dir()
    assert not gone.exists()
    assert living.is_dir()
    assert other.is_dir()
    assert socket_dir(tmp_path) == own  # a second session of the process shares it


_OWNER = """
import os, sys
from pathlib import Path
from revise.spark.session import socket_dir
own = socket_dir(Path(sys.argv[1]))
(own / ".a.sock").write_text("")
child = os.fork()
if child == 0:
    sys.exit(0)  # a forked child's exit runs the atexit handlers it inherited
os.waitpid(child, 0)
print(own, own.is_dir())
"""


def test_the_process_folder_goes_when_the_process_exits_not_when_its_fork_does(
        tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", _OWNER, str(tmp_path)], check=True,
                         capture_output=True, text=True).stdout.split()
    own, after_child = Path(out[0]), out[1]
    assert own.parent == tmp_path
    assert after_child == "True"
    assert not own.exists()
    assert tmp_path.is_dir()


def test_a_temporary_folder_too_long_for_a_socket_path_gives_way_to_tmp(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    long_tmp = tmp_path / ("t" * 80)  # a notebook kernel's or a test's TMPDIR, say
    long_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long_tmp))
    own = socket_dir()
    assert own.parent == Path("/tmp") / f"revise-sockets-{os.getuid()}"
    assert len(str(own)) <= SOCKET_FOLDER_MAX
    assert own.is_dir()
