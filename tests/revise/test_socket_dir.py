"""Spark's Unix domain socket files in a folder per process (``session.socket_dir``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from revise.spark.session import socket_dir


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


def test_the_process_folder_goes_when_the_process_exits(tmp_path: Path) -> None:
    code = ("import sys; from pathlib import Path; from revise.spark.session import socket_dir; "
            "own = socket_dir(Path(sys.argv[1])); (own / '.a.sock').write_text(''); print(own)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True,
                         capture_output=True, text=True).stdout.strip()
    assert Path(out).parent == tmp_path
    assert not Path(out).exists()
    assert tmp_path.is_dir()
