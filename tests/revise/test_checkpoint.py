"""The checkpoint folder's layout (``revise.checkpoint``) and its atomic writes
(``sinks.atomic``), on files; the crash cases kill a real process with SIGKILL."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from revise.checkpoint import (
    CHECKPOINT_META,
    COMMITS_LOG,
    checkpoint_fingerprint,
    spark_log_dir,
    write_fingerprint,
)
from revise.spark.spark_log import last_committed_batch
from sinks.atomic import write_atomic

ROOT = Path(__file__).resolve().parents[2]
OLD = "old " * 10_000
NEW_WORDS = 250_000
NEW = "new " * NEW_WORDS  # 1 MB: more than one write() of the OS's buffers

# Kills itself at ``point`` of one write_atomic(path, NEW): mid-write (half the bytes written),
# before the rename (the temporary file complete and fsync'd) or after it (before the folder's
# fsync).
_CHILD = """
import os, signal, sys
from pathlib import Path
import sinks.atomic as atomic

point, path, new = sys.argv[1], Path(sys.argv[2]), "new " * int(sys.argv[3])

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

def half_then_die(f):
    f.write(new[: len(new) // 2].encode())
    f.flush()
    die()

if point == "before-rename":
    atomic.os.replace = die
elif point == "after-rename":
    atomic.fsync_dir = die
atomic.write_atomic(path, half_then_die if point == "mid-write" else new)
"""


def test_last_committed_batch_reads_sparks_commit_log(tmp_path: Path) -> None:
    assert last_committed_batch(str(tmp_path)) == -1  # no checkpoint yet
    commits = spark_log_dir(tmp_path, COMMITS_LOG)
    commits.mkdir(parents=True)
    for name in ("0", "1", "12", ".12.crc", "13.tmp"):
        (commits / name).write_text("v1")
    assert last_committed_batch(str(tmp_path)) == 12


def test_the_fingerprint_round_trips_and_a_new_checkpoint_has_none(tmp_path: Path) -> None:
    checkpoint = tmp_path / "new" / "cp"
    assert checkpoint_fingerprint(checkpoint) is None
    write_fingerprint(checkpoint, {"query_id": "q", "shards": 4})
    assert checkpoint_fingerprint(checkpoint) == {"query_id": "q", "shards": 4}
    assert json.loads((checkpoint / CHECKPOINT_META).read_text())["shards"] == 4
    assert sorted(p.name for p in checkpoint.iterdir()) == [CHECKPOINT_META]  # no temp left


def test_write_atomic_replaces_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    write_atomic(path, OLD)
    write_atomic(path, NEW.encode())
    assert path.read_text() == NEW
    write_atomic(path, lambda f: f.write(b"by a writer"))
    assert path.read_text() == "by a writer"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_a_failed_write_keeps_the_old_file_and_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    write_atomic(path, OLD)

    def fails(f: object) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, fails)
    assert path.read_text() == OLD
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


@pytest.mark.parametrize(("point", "expected"), [
    ("mid-write", OLD), ("before-rename", OLD), ("after-rename", NEW)])
def test_a_crash_leaves_the_old_content_or_the_new_never_part(
        tmp_path: Path, point: str, expected: str) -> None:
    path = tmp_path / "revise-run.json"
    write_atomic(path, OLD)
    proc = subprocess.run([sys.executable, "-c", _CHILD, point, str(path), str(NEW_WORDS)],
                          cwd=ROOT, capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert path.read_text() == expected
    # what the crash left beside it is hidden, and a later write still succeeds
    assert all(p.name.startswith(".") for p in tmp_path.iterdir() if p != path)
    write_atomic(path, "after")
    assert path.read_text() == "after"
