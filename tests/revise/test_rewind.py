"""The rewind of Spark's checkpoint past ``sinks-done`` (``revise.spark.rewind``), on files."""

from __future__ import annotations

from pathlib import Path

import pytest

from revise.checkpoint import COMMITS_LOG, OFFSETS_LOG, SparkLog, spark_log_dir
from revise.spark.failures import JobError
from revise.spark.rewind import read_done, record_done, rewind_unfinished


def _checkpoint(tmp_path: Path, commits: int, offsets: int) -> str:
    """A checkpoint whose Spark logs hold commits 0..commits-1 and offsets 0..offsets-1."""
    logs: tuple[tuple[SparkLog, int], ...] = ((COMMITS_LOG, commits), (OFFSETS_LOG, offsets))
    for log, n in logs:
        folder = spark_log_dir(tmp_path, log)
        folder.mkdir(parents=True)
        for i in range(n):
            (folder / str(i)).write_text(f"v1\n{log} {i}")
            (folder / f".{i}.crc").write_bytes(b"crc")
    return str(tmp_path)


def _names(checkpoint: str, log: SparkLog) -> list[str]:
    return sorted(p.name for p in spark_log_dir(checkpoint, log).iterdir())


def test_a_batch_recorded_past_sinks_done_is_removed_with_the_offsets_after_it(tmp_path):
    cp = _checkpoint(tmp_path, commits=4, offsets=5)  # Spark recorded 3 and planned 4
    record_done(cp, 2)
    assert rewind_unfinished(cp) == 3
    assert _names(cp, "commits") == [".0.crc", ".1.crc", ".2.crc", "0", "1", "2"]
    assert _names(cp, "offsets") == [".0.crc", ".1.crc", ".2.crc", ".3.crc", "0", "1", "2", "3"]
    assert read_done(cp) == 2  # the replay of 3 records it
    assert rewind_unfinished(cp) is None  # nothing left past it


def test_a_batch_recorded_and_not_yet_planned_past_it_is_removed(tmp_path):
    cp = _checkpoint(tmp_path, commits=4, offsets=4)
    record_done(cp, 2)
    assert rewind_unfinished(cp) == 3
    assert _names(cp, "offsets") == [".0.crc", ".1.crc", ".2.crc", ".3.crc", "0", "1", "2", "3"]


@pytest.mark.parametrize("done", [3, 4])
def test_nothing_is_removed_when_the_sinks_finished_what_spark_recorded(tmp_path, done):
    cp = _checkpoint(tmp_path, commits=4, offsets=5)
    record_done(cp, done)  # 4: the sinks finished a batch Spark then did not record
    assert rewind_unfinished(cp) is None
    assert len(_names(cp, "commits")) == 8 and len(_names(cp, "offsets")) == 10
    assert read_done(cp) == done


def test_a_checkpoint_without_the_record_starts_it_at_spark_s_last_batch(tmp_path):
    cp = _checkpoint(tmp_path, commits=4, offsets=4)  # an older revise finished each batch
    assert read_done(cp) is None
    assert rewind_unfinished(cp) is None
    assert read_done(cp) == 3
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert rewind_unfinished(str(fresh)) is None
    assert read_done(str(fresh)) == -1


def test_more_than_one_batch_past_sinks_done_is_refused_and_left_alone(tmp_path):
    cp = _checkpoint(tmp_path, commits=4, offsets=5)
    record_done(cp, 1)
    with pytest.raises(JobError, match=r"recorded micro-batch 3 but the sinks finished only 1"):
        rewind_unfinished(cp)
    assert len(_names(cp, "commits")) == 8 and len(_names(cp, "offsets")) == 10


def test_the_record_never_goes_back(tmp_path):
    record_done(str(tmp_path), 5)
    record_done(str(tmp_path), 3)  # a woken, fenced instance finishing an older batch
    assert read_done(str(tmp_path)) == 5
    record_done(str(tmp_path), 6)
    assert read_done(str(tmp_path)) == 6
