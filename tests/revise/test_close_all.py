"""A bounded run's close-all: the conditional command, when it takes effect, and when it is written.

Real Spark runs it in every integration test of a bounded run (``integration_support.replay``
reads the commands each micro-batch read and checks the close against them); here the
decisions themselves, and a shard's output rows (its revisions stamped and framed as messages).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow as pa
from helpers import message_revisions, unframe
from test_job_options import config
from test_overlap_commit import NOTHING_COLLECTED, _Batch, _Changelog, _output, _Tables

from revise.checkpoint import OFFSETS_LOG, spark_log_dir
from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA, REVISION_SCHEMA
from revise.spark import committer as committer_module
from revise.spark.close_all import (
    CLOSE_ALL,
    INPUT_END_PROPERTY,
    BoundedEnd,
    close_all_due,
    input_reached,
    write_close_all,
)
from revise.spark.committer import BatchCommitter, JobResult
from revise.spark.output import MessageKinds, decode_output, encode_output, stamp
from revise.spark.spark_log import (
    batch_offsets,
    batch_timestamp,
    batch_watermark,
    last_entry,
    recorded_shuffle_partitions,
)
from revise.spark.task_output import BATCH_PROPERTY
from sinks.kafka import revision_key


def _commands(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_conditional_command_closes_only_where_the_input_reaches_its_offsets(tmp_path):
    rows = _commands(write_close_all(str(tmp_path), 3, until={0: 10, 1: 0, 2: 7}))
    assert [r["shard"] for r in rows] == [0, 1, 2]
    (command,) = {r["command"] for r in rows}
    assert command == 'close_all_at:{"0":10,"1":0,"2":7}'
    assert close_all_due([command], {0: 10, 2: 7})  # an empty partition needs nothing
    assert close_all_due([command], {0: 12, 1: 3, 2: 9})
    assert not close_all_due([command], {0: 10, 2: 6})
    assert not close_all_due([command], None)  # the batch's input end unknown: no close
    assert close_all_due([command, CLOSE_ALL], None)  # a plain one closes at once
    assert not close_all_due([], {0: 99})
    assert input_reached({}, {0: 0}) and not input_reached({}, {0: 1})


def _offset_log(checkpoint: Path, batch_id: int, kafka: str, control: str,
                watermark_ms: int = 0, timestamp_ms: int = 0) -> None:
    folder = spark_log_dir(checkpoint, OFFSETS_LOG)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(batch_id)).write_text(
        f'v1\n{{"batchWatermarkMs":{watermark_ms},"batchTimestampMs":{timestamp_ms},'
        f'"conf":{{}}}}\n{kafka}\n{control}')


def test_the_offset_log_gives_a_batchs_watermark_and_trigger_time(tmp_path):
    assert batch_timestamp(str(tmp_path), 3) is None
    _offset_log(tmp_path, 3, '{"in":{"0":5}}', "-", watermark_ms=7_000,
                timestamp_ms=1_796_000_000_123)
    assert batch_timestamp(str(tmp_path), 3) == 1_796_000_000_123
    assert batch_watermark(str(tmp_path), 3) == 7_000
    assert recorded_shuffle_partitions(str(tmp_path)) is None  # the entry records none
    folder = spark_log_dir(tmp_path, OFFSETS_LOG)
    (folder / "4").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,'
                              '"conf":{"spark.sql.shuffle.partitions":"3"}}\n-\n-')
    assert recorded_shuffle_partitions(str(tmp_path)) == 3


def test_the_offset_log_gives_a_batchs_input_and_control_offsets(tmp_path):
    assert last_entry(str(tmp_path), "offsets") == -1
    assert batch_offsets(str(tmp_path), 0, "in") == (None, -1)
    _offset_log(tmp_path, 0, '{"in":{"0":5,"1":7}}', "-")
    _offset_log(tmp_path, 1, '{"in":{"0":9,"1":7}}', '{"logOffset":2}')
    assert last_entry(str(tmp_path), "offsets") == 1
    assert batch_offsets(str(tmp_path), 0, "in") == ({0: 5, 1: 7}, -1)
    assert batch_offsets(str(tmp_path), 1, "in") == ({0: 9, 1: 7}, 2)
    assert batch_offsets(str(tmp_path), 1, "other") == (None, 2)


def _progress(read: dict[int, int], control: int | None) -> dict:
    sources = [{"endOffset": json.dumps({"in": {str(p): o for p, o in read.items()}})},
               {"endOffset": None if control is None else json.dumps({"logOffset": control})}]
    return {"sources": sources}


def test_the_command_is_written_once_a_batch_reads_to_the_end_and_closes_the_next(tmp_path):
    end = BoundedEnd("in", {0: 500, 1: 100}, str(tmp_path), 2)
    assert not end.start_batch({0: 100}, -1)  # input left after this batch
    assert not end.start_batch({0: 499, 1: 100}, -1)
    assert not list(tmp_path.iterdir())
    assert end.start_batch({0: 500, 1: 100}, -1)  # this batch reads the rest
    (written,) = tmp_path.glob("close-*.json")
    assert {r["command"] for r in _commands(written)} == {'close_all_at:{"0":500,"1":100}'}
    assert not end.start_batch({0: 500, 1: 100}, -1)  # one command at a time
    end.see(_progress({0: 500, 1: 100}, None))  # the batch that wrote it did not read it
    assert not end.closed
    end.see(_progress({0: 500, 1: 100}, 0))  # the next one read it: a batch of its own
    assert end.closed
    assert not end.start_batch({0: 500, 1: 100}, 0)


def test_an_empty_input_closes_in_the_first_batch(tmp_path):
    end = BoundedEnd("in", {0: 0}, str(tmp_path), 1)
    assert end.start_batch({}, -1)  # before the query starts: batch 0 closes


def _revisions(watermark_ms: int, n: int, key: str) -> pa.Table:
    row = {f.name: None for f in REVISION_SCHEMA}
    row.update(query_id="q", mode="revision", key=key, window_start_ms=0, window_end_ms=10,
               revision=0, timing="FINAL", is_final=True, retracted=False, n_late=0,
               max_lateness_ms=0, watermark_ms=watermark_ms, batch_id=3, emitted_at_ms=0,
               completeness=1.0)
    return pa.Table.from_pylist([{**row, "window_start_ms": i} for i in range(n)],
                                schema=REVISION_SCHEMA)


def test_a_shards_rows_stamp_its_revisions_and_frame_them_as_the_changelogs_messages():
    revisions = stamp(_revisions(100, 3, "a"), 1234)
    late, dead = LATE_SCHEMA.empty_table(), DEAD_LETTER_SCHEMA.empty_table()
    (rows,) = encode_output(revisions=revisions, late=late, dead=dead, messages=MessageKinds())
    assert list(rows["kind"]) == ["counts", "msg:0"]
    out = decode_output(pa.Table.from_pandas(rows, preserve_index=False))
    assert (dict(out.counts.revisions), out.counts.watermark_ms) == ({"FINAL": 3}, 100)
    sent = message_revisions(rows)
    assert sent == revisions.to_pylist()
    assert {r["emitted_at_ms"] for r in sent} == {1234}
    keys, _values = unframe(rows["payload"][1])
    assert keys == [revision_key("a", i, 10) for i in range(3)]
    assert list(encode_output(revisions=REVISION_SCHEMA.empty_table(), late=late, dead=dead)) == []


def test_the_committer_hands_the_batchs_input_end_to_its_tasks_and_writes_the_close(
        tmp_path, monkeypatch):
    out = _output(_revisions(0, 1, "k"))
    monkeypatch.setattr(committer_module, "write", lambda _df, _settings: NOTHING_COLLECTED)
    monkeypatch.setattr(committer_module, "decode_output", lambda _collected: out)
    base = config()
    cfg = dataclasses.replace(base, checkpoint=str(tmp_path / "ckpt"),
                              kafka=dataclasses.replace(base.kafka, input_topic="in"))
    _offset_log(tmp_path / "ckpt", 0, '{"in":{"0":300}}', "-")
    control = tmp_path / "control"
    control.mkdir()
    changelog = _Changelog()
    tables = _Tables()
    ended = []
    tables.end_staging = lambda: ended.append(True)  # type: ignore[attr-defined]
    end = BoundedEnd("in", {0: 300}, str(control), 2)
    committer = BatchCommitter(cfg, changelog, tables, JobResult("q"),  # type: ignore[arg-type]
                               bounded=end)
    batch = _Batch()
    committer(batch, 0)  # type: ignore[arg-type]
    assert batch.sparkSession.sparkContext.properties[INPUT_END_PROPERTY] == '{"0":300}'
    assert BATCH_PROPERTY in batch.sparkSession.sparkContext.properties
    assert len(list(control.glob("close-*.json"))) == 1 and ended == [True]
    batch = _Batch()
    committer(batch, 2)  # type: ignore[arg-type]  # no offset log entry: the property cleared
    assert batch.sparkSession.sparkContext.properties[INPUT_END_PROPERTY] is None

