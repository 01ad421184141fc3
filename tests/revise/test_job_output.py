"""The stateful operator's output rows (messages, data file records, counts, open windows)
and what the driver decodes of them."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pytest
from helpers import message_revisions, unframe

from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA, REVISION_SCHEMA
from revise.spark import output
from sinks.delta_files import DataFile

_NO_LATE = LATE_SCHEMA.empty_table()
_NO_DEAD = DEAD_LETTER_SCHEMA.empty_table()


def _late(n: int, offset0: int = 0) -> pa.Table:
    return pa.Table.from_pylist(
        [{"key": f"k{i}", "ts_ms": i, "value": 0.5, "window_start_ms": 0, "window_end_ms": 10,
          "watermark_ms": 20, "lateness_ms": 20 - i, "reason": "too late", "batch_id": 1,
          "topic": "t", "partition": 0, "offset": offset0 + i} for i in range(n)],
        schema=LATE_SCHEMA)


def _revisions(n: int, timing: str = "EARLY", watermark_ms: int = 5) -> pa.Table:
    row = {f.name: None for f in REVISION_SCHEMA}
    row.update(query_id="q", mode="revision", key="a", window_end_ms=10, revision=0,
               timing=timing, is_final=timing == "FINAL", retracted=False, n_late=0,
               max_lateness_ms=0, watermark_ms=watermark_ms, batch_id=1, emitted_at_ms=7,
               completeness=1.0)
    return pa.Table.from_pylist([{**row, "window_start_ms": -i} for i in range(n)],
                                schema=REVISION_SCHEMA)


def _collect(*frames: object) -> pa.Table:
    import pandas as pd

    return pa.Table.from_pandas(pd.concat(frames, ignore_index=True), preserve_index=False)


def test_only_metadata_comes_back_whatever_the_number_of_revisions():
    """Revisions become Kafka messages (kept by the task's writer) and data files; the rows
    for the driver are one counts row and the files' records, for 10 or 20,000 revisions."""
    a_file = DataFile("part-a.parquet", 10, 1, 20_000, '{"numRecords":20000}')
    for n in (10, 20_000):
        (frame,) = output.encode_output(revisions=_revisions(n), late=_NO_LATE, dead=_NO_DEAD,
                                        files={"revisions": [a_file]})
        rows = -(-n // output.MESSAGES_PER_ROW)
        assert frame["kind"].tolist() == ["counts", "file:revisions", *["msg:0"] * rows]
        to_driver = frame[frame["kind"] != "msg:0"]
        assert sum(len(b) for b in to_driver["payload"]) < 500
        out = output.decode_output(_collect(to_driver))
        assert out.counts.revisions == {"EARLY": n} and out.files == {"revisions": [a_file]}


def test_a_tasks_messages_come_in_rows_of_bounded_size_in_order(monkeypatch):
    """A close of many windows: its messages span several ``msg:`` rows (each at most
    ``MESSAGES_PER_ROW``), which give every revision once, in order."""
    monkeypatch.setattr(output, "MESSAGES_PER_ROW", 3)
    (frame,) = output.encode_output(revisions=_revisions(8), late=_late(4), dead=_NO_DEAD,
                                    messages=output.MessageKinds(late=True))
    assert frame["kind"].tolist() == ["counts", *["msg:0"] * 3, *["msg:1"] * 2]
    assert frame["rows"].tolist()[1:] == [3, 3, 2, 3, 1]
    assert [r["window_start_ms"] for r in message_revisions(frame)] == [-i for i in range(8)]
    late = [json.loads(v) for p in frame[frame["kind"] == "msg:1"]["payload"]
            for v in unframe(p)[1]]
    assert [r["offset"] for r in late] == [0, 1, 2, 3]


def test_a_tasks_output_splits_into_frames_of_bounded_payload_in_order(monkeypatch):
    """Rows whose payloads together pass ``PAYLOAD_BYTES_PER_FRAME`` go out as several frames
    (which the JVM takes one at a time), every row once and in order."""
    monkeypatch.setattr(output, "MESSAGES_PER_ROW", 3)
    (whole,) = output.encode_output(revisions=_revisions(10), late=_NO_LATE, dead=_NO_DEAD)
    sizes = [len(p) for p in whole["payload"]]
    monkeypatch.setattr(output, "PAYLOAD_BYTES_PER_FRAME", max(sizes) + 1)
    frames = list(output.encode_output(revisions=_revisions(10), late=_NO_LATE, dead=_NO_DEAD))
    assert len(frames) > 2
    assert all(sum(len(p) for p in f["payload"]) <= max(sizes) + 1 for f in frames)
    rows = pd.concat(frames, ignore_index=True)
    assert rows["kind"].tolist() == whole["kind"].tolist()
    assert [bytes(p) for p in rows["payload"]] == [bytes(p) for p in whole["payload"]]
    assert [r["window_start_ms"] for r in message_revisions(rows)] == [-i for i in range(10)]


def test_a_tasks_messages_are_encoded_as_its_frames_are_taken(monkeypatch):
    """The frames are made one at a time: taking the first encodes only the rows it holds and
    the one that did not fit, so a worker never holds a close's whole JSON."""
    monkeypatch.setattr(output, "MESSAGES_PER_ROW", 2)
    (whole,) = output.encode_output(revisions=_revisions(20), late=_NO_LATE, dead=_NO_DEAD)
    monkeypatch.setattr(output, "PAYLOAD_BYTES_PER_FRAME", len(whole["payload"][1]) * 2)
    encoded: list[int] = []
    real = output._messages

    def counted(kind: str, table: pa.Table, schema: pa.Schema) -> list[bytes | pa.Buffer]:
        encoded.append(table.num_rows)
        return real(kind, table, schema)

    monkeypatch.setattr(output, "_messages", counted)
    frames = output.encode_output(revisions=_revisions(20), late=_NO_LATE, dead=_NO_DEAD)
    first = next(frames)
    assert first["kind"].tolist() == ["counts", "msg:0"] and len(encoded) == 2
    rest = list(frames)
    assert len(encoded) == 10 and len(rest) == 9
    rows = pd.concat([first, *rest], ignore_index=True)
    assert [bytes(p) for p in rows["payload"]] == [bytes(p) for p in whole["payload"]]


def test_pysparks_conversion_sends_the_frames_payloads_as_they_are():
    """The operator's output goes to the JVM through PySpark's pandas-to-Arrow conversion: it
    takes the Arrow-backed payload column whole (the same bytes, the same buffer)."""
    from pyspark.sql.conversion import PandasToArrowConversion
    from pyspark.sql.types import StructField, StructType

    (frame,) = output.encode_output(revisions=_revisions(5), late=_late(2), dead=_NO_DEAD,
                                    messages=output.MessageKinds(late=True))
    # as PySpark's serializer of the operator's output calls it (one struct column)
    batch = PandasToArrowConversion.convert(
        [frame], StructType([StructField("_0", output.output_type())]), timezone="UTC",
        safecheck=True, arrow_cast=True)
    sent = batch.column(0)
    assert sent.field("kind").to_pylist() == frame["kind"].tolist()
    assert sent.field("rows").to_pylist() == frame["rows"].tolist()
    assert sent.field("payload").to_pylist() == [bytes(p) for p in frame["payload"]]
    ours = pa.array(frame["payload"].array).buffers()[2]
    assert sent.field("payload").buffers()[2].address == ours.address  # not copied


def test_a_shard_without_output_yields_nothing():
    assert list(output.encode_output(revisions=REVISION_SCHEMA.empty_table(), late=_NO_LATE,
                                     dead=_NO_DEAD)) == []


def test_late_records_and_dead_letters_are_messages_only_where_a_topic_takes_them():
    dead = pa.Table.from_pylist([{"raw_value": "x", "reason": "invalid JSON", "topic": "t",
                                  "partition": 0, "offset": 1, "batch_id": 1}],
                                schema=DEAD_LETTER_SCHEMA)
    (none,) = output.encode_output(revisions=REVISION_SCHEMA.empty_table(), late=_late(2),
                                   dead=dead)
    assert none["kind"].tolist() == ["counts"]  # counted, not sent
    (both,) = output.encode_output(revisions=REVISION_SCHEMA.empty_table(), late=_late(2),
                                   dead=dead, messages=output.MessageKinds(late=True, dead=True))
    assert both["kind"].tolist() == ["counts", "msg:1", "msg:2"]
    assert both["rows"].tolist() == [0, 2, 1]


def test_counts_files_and_open_windows_of_every_task_add_up_on_the_driver(tmp_path):
    a_file = DataFile("part-a.parquet", 10, 1, 3, '{"numRecords":3}')
    b_file = DataFile("part-b.parquet", 20, 2, 1, '{"numRecords":1}')
    (a,) = output.encode_output(revisions=_revisions(2, watermark_ms=5), late=_late(3),
                                dead=_NO_DEAD, files={"revisions": [a_file]},
                                open_windows={3: 41, 4: 7})
    (b,) = output.encode_output(revisions=_revisions(1, "FINAL", watermark_ms=9),
                                late=_NO_LATE, dead=_NO_DEAD, files={"revisions": [b_file]},
                                open_windows={5: 0})
    (c,) = output.encode_output(revisions=REVISION_SCHEMA.empty_table(), late=_NO_LATE,
                                dead=_NO_DEAD, open_windows={6: 2})
    assert c["kind"].tolist() == [output.OPEN_KIND]  # still reports its count
    out = output.decode_output(_collect(a, b, c))
    assert out.files == {"revisions": [a_file, b_file]}
    assert (dict(out.counts.revisions), out.counts.late, out.counts.watermark_ms) == (
        {"EARLY": 2, "FINAL": 1}, 3, 9)
    assert out.open_windows == {3: 41, 4: 7, 5: 0, 6: 2}
    only_count = output.decode_output(_collect(c))
    assert only_count.empty and only_count.open_windows == {6: 2}  # no output to commit


def test_fn_field_columns_feed_the_engine_and_the_revision_schema():
    """A shard's rows with ``num_*`` / ``dst_*`` columns → the engine's numeric and distinct
    inputs; bad rows → dead letters; revisions in the AggList's schema both ways."""
    import pandas as pd

    from revise.aggspec import AggList
    from revise.config import EngineConfig, WindowSpec
    from revise.engine import Engine
    from revise.records import revision_schema
    from revise.spark import operator

    aggs = AggList.parse("count,max(a.b),p50(a.b),distinct(u)")
    fields = operator.InputColumns((("num_a_b", "a.b"),), (("dst_u", "u"),))
    frame = pd.DataFrame({
        "key": ["k", "k", None], "ts_ms": [5, 7, None], "num_a_b": [2.0, 4.0, None],
        "dst_u": ['"x"', '"y"', None], "partition": [0, 0, 1], "offset": [1, 2, 3],
        "reason": [None, None, "missing field 'a.b'"], "raw_value": [None, None, "{}"],
        "command": [None, None, None],
    })
    batch, dead, commands = operator._split_input([frame], "t", 4, fields)
    assert not commands and len(batch) == 2 and dead[0].column("reason").to_pylist() == [
        "missing field 'a.b'"]
    assert batch.values.tolist() == [2.0, 4.0]  # the late records' value: the first number
    assert batch.numeric["a.b"].tolist() == [2.0, 4.0] and len(batch.distinct["u"]) == 2
    cfg = EngineConfig(WindowSpec.parse("tumbling:10ms"), 0, aggs=aggs)
    out = Engine.build(cfg, None).process(batch, watermark_ms=0, batch_id=4, now_ms=1)
    schema = revision_schema(aggs)
    (rows,) = output.encode_output(revisions=out.revisions.to_arrow().cast(schema),
                                   late=_NO_LATE, dead=pa.concat_tables(dead),
                                   revision_schema=schema)
    back = output.decode_output(_collect(rows[rows["kind"] != "msg:0"]))
    assert back.counts.dead == {"missing field 'a.b'": 1}
    (rev,) = message_revisions(rows, schema)
    assert (rev["count"], rev["max_a_b"], rev["distinct_u"]) == (2, 4.0, 2)


def test_a_replays_counts_leave_out_the_partitions_that_had_committed_it():
    import pandas as pd

    (a,) = output.encode_output(revisions=_revisions(2), late=_NO_LATE, dead=_NO_DEAD, partition=0)
    (b,) = output.encode_output(revisions=_revisions(3, "FINAL"), late=_late(1), dead=_NO_DEAD,
                             partition=1)
    reports = pd.DataFrame({
        "kind": ["kafka", "kafka"], "rows": [2, 3],
        "payload": [json.dumps({"partition": p, "messages": n, "skipped": p == 0}).encode()
                    for p, n in ((0, 2), (1, 3))]})
    out = output.decode_output(_collect(a, b, reports))
    assert out.counts.total_revisions == 5 and out.counts.late == 1  # what the batch holds
    fresh = out.fresh_counts()  # what this run committed: partition 1 only
    assert (dict(fresh.revisions), fresh.late) == ({"FINAL": 3}, 1)


def test_messages_are_framed_column_by_column_and_read_back_whole():
    """``frame_parts`` reads the arrays' buffers: null keys, empty values and a slice come
    back."""
    from sinks.kafka.partitions import frame_parts

    def frame(keys: pa.Array, values: pa.Array) -> bytes:
        return b"".join(frame_parts(keys, values))

    keys = pa.array([b"k0", None, b"", b"k3", b"k4"], pa.binary())
    values = pa.array(["v0", "", "v2", "v\u00e93", "v4"], pa.string())
    assert unframe(frame(keys, values)) == (
        [b"k0", None, b"", b"k3", b"k4"], [b"v0", b"", b"v2", "v\u00e93".encode(), b"v4"])
    assert unframe(frame(keys.slice(2, 2), values.slice(2, 2))) == (
        [b"", b"k3"], [b"v2", "v\u00e93".encode()])
    assert unframe(frame(pa.nulls(2, pa.binary()), values.slice(0, 2))) == (
        [None, None], [b"v0", b""])
    with pytest.raises(ValueError, match="2 keys for 3 values"):
        frame(keys.slice(0, 2), values.slice(0, 3))
