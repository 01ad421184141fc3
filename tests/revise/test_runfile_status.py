"""The run file (revise.ops.runfile) and what ``revise status`` makes of a checkpoint without
Kafka or Delta at hand: liveness, atomic writes, another instance's file, the exit codes of a
missing or foreign checkpoint."""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from revise.checkpoint import RUN_FILE
from revise.errors import ConfigError
from revise.ops import runfile
from revise.ops.runfile import STALE_S, RunFile, RunInfo, liveness, read_run_file
from revise.ops.status import BEHIND, OK, STOPPED, UNREADABLE, JobStatus, job_status

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_795_860_000_000


def info(**kw: object) -> RunInfo:
    base = RunInfo(query_id="q", state="running", pid=os.getpid(), host=socket.gethostname(),
                   started_ms=NOW - 60_000, heartbeat_ms=NOW - 2_000, bootstrap_servers="b:1",
                   input_topic="in", changelog_topic="c", progress_topic="p", delta_path="/d")
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def test_liveness_of_a_run_file():
    assert liveness(info(), now_ms=NOW).running
    assert liveness(None, now_ms=NOW).running is False
    stopped = liveness(info(state="stopped"), now_ms=NOW)
    assert not stopped.running and stopped.reason == "stopped cleanly"
    gone = liveness(info(pid=_dead_pid()), now_ms=NOW)
    assert not gone.running and "is gone" in gone.reason
    stale = liveness(info(heartbeat_ms=NOW - int(STALE_S * 1000) - 1), now_ms=NOW)
    assert not stale.running and "no heartbeat" in stale.reason
    # On another host the pid cannot be checked: a fresh heartbeat is enough.
    assert liveness(info(host="elsewhere", pid=_dead_pid()), now_ms=NOW).running


def test_the_run_file_beats_stops_and_leaves_another_instances_file_be(tmp_path):
    run = RunFile(str(tmp_path), info(state="x", pid=0), heartbeat_s=0.05).start()
    first = read_run_file(str(tmp_path))
    assert first is not None and first.state == "running" and first.pid == os.getpid()
    time.sleep(0.3)
    beat = read_run_file(str(tmp_path))
    assert beat is not None and beat.heartbeat_ms > first.heartbeat_ms
    run.stop()
    done = read_run_file(str(tmp_path))
    assert done is not None and done.state == "stopped"
    assert [p.name for p in tmp_path.iterdir()] == [RUN_FILE]  # no temporary file left
    # A newer instance took the checkpoint over: an older one's stop leaves its file be.
    old = RunFile(str(tmp_path), info(), heartbeat_s=60).start()
    newer = dataclasses.replace(info(), pid=old.info.pid + 1, started_ms=NOW)
    (tmp_path / RUN_FILE).write_text(newer.to_json())
    old.stop()
    assert read_run_file(str(tmp_path)) == newer


def test_a_stop_on_a_full_disk_logs_and_leaves_the_jobs_own_error_to_be_raised(
        tmp_path, monkeypatch, caplog):
    run = RunFile(str(tmp_path), info(), heartbeat_s=60).start()

    def full(path, content):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runfile, "write_atomic", full)
    with caplog.at_level(logging.WARNING, logger=runfile.__name__):
        run.stop()  # raises nothing: the caller is raising the job's own error
    assert "could not mark" in caplog.text and "No space left" in caplog.text
    left = read_run_file(str(tmp_path))
    assert left is not None and left.state == "running"
    # Once the job's process is gone, status sees it stopped all the same.
    gone = dataclasses.replace(left, pid=_dead_pid())
    assert not liveness(gone, now_ms=gone.heartbeat_ms).running


def test_a_missing_or_foreign_checkpoint_is_a_configuration_error(tmp_path):
    with pytest.raises(ConfigError, match="no such folder"):
        job_status(str(tmp_path / "none"))
    with pytest.raises(ConfigError, match="holds no revise job"):
        job_status(str(tmp_path))


def test_a_checkpoint_without_a_run_file_is_stopped_and_says_what_is_unknown(tmp_path):
    (tmp_path / "revise-job.json").write_text(json.dumps({"query_id": "q", "input_topic": "in"}))
    st = job_status(str(tmp_path))
    assert st.exit_code == STOPPED and st.last_batch_id == -1 and st.input_lag is None
    assert "no run file" in st.errors[0]
    assert json.loads(json.dumps(st.to_dict()))["state"] == "stopped"
    assert "stopped" in st.text()


@pytest.mark.parametrize(("running", "errors", "behind", "code"), [
    (False, ("x",), ("y",), STOPPED),
    (True, ("kafka down",), (), UNREADABLE),
    (True, (), ("lag",), BEHIND),
    (True, (), (), OK),
])
def test_exit_codes_in_order(running, errors, behind, code):
    st = JobStatus(checkpoint="c", query_id="q", running=running, state="-", why="-",
                   heartbeat_age_s=None, pid=None, metrics_port=None, last_batch_id=-1,
                   last_batch_at_ms=None, watermark_ms=None, input_topic=None, input_lag=None,
                   kafka_batch_id=None, kafka_committed_at_ms=None, delta=(), staged_batches=0,
                   staged_age_s=None, latest_caught_up=None, behind=behind, errors=errors)
    assert st.exit_code == code


def test_the_cli_exits_2_with_a_message_for_a_missing_checkpoint(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "revise", "status", "--checkpoint",
                           str(tmp_path / "nope")], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 2
    assert "revise status: error: --checkpoint" in proc.stderr and "no such folder" in proc.stderr


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(proc.stdout)
