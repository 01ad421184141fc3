"""The stateful operator's Arrow IPC chunk output and its decoding on the driver."""

from __future__ import annotations

import pyarrow as pa
import pytest

from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA, REVISION_SCHEMA


def _late(n: int, offset0: int = 0) -> pa.Table:
    return pa.Table.from_pylist(
        [{"key": f"k{i}", "ts_ms": i, "value": 0.5, "window_start_ms": 0, "window_end_ms": 10,
          "watermark_ms": 20, "lateness_ms": 20 - i, "reason": "too late", "batch_id": 1,
          "topic": "t", "partition": 0, "offset": offset0 + i} for i in range(n)],
        schema=LATE_SCHEMA)


def test_chunks_decode_back_to_one_table_per_kind_in_order(monkeypatch: pytest.MonkeyPatch):
    from revise.spark import output

    monkeypatch.setattr(output, "CHUNK_ROWS", 3)
    first, second = _late(7), _late(2, offset0=100)
    # A shard's outputs as the operator gathers them: kinds without rows, or with no tables
    # at all, give no chunk.
    frame = output.encode_output(revisions=[REVISION_SCHEMA.empty_table()],
                                   late=[first, _late(0), second], dead=[])
    assert frame is not None
    assert frame["kind"].tolist() == ["late"] * 3 and frame["rows"].tolist() == [3, 3, 3]
    out = output.decode_output(pa.Table.from_pandas(frame, preserve_index=False))
    assert out.late.equals(pa.concat_tables([first, second]))  # rows and order kept
    assert out.revisions.schema == REVISION_SCHEMA and out.revisions.num_rows == 0
    assert out.dead.schema == DEAD_LETTER_SCHEMA and out.dead.num_rows == 0


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
"""The first bytes of a zstd frame (RFC 8878)."""


def test_chunks_are_compressed_and_decode_to_the_same_rows():
    # Many rows of a few values: the chunk is far smaller than the same stream uncompressed,
    # and each of its record batches carries zstd body compression.
    from revise.spark import output

    late = _late(20_000)
    frame = output.encode_output(revisions=[], late=[late], dead=[])
    assert frame is not None
    (payload,) = frame["payload"].tolist()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, late.schema) as writer:
        writer.write_table(late)
    assert len(payload) < sink.getvalue().size / 2
    reader = pa.ipc.open_stream(payload)
    assert reader.read_all().equals(late)
    stream = pa.BufferReader(payload)
    pa.ipc.read_message(stream)  # the schema
    message = pa.ipc.read_message(stream)  # the first record batch
    assert message.type == "record batch"
    assert _ZSTD_MAGIC in message.body.to_pybytes()  # each buffer a zstd frame
    out = output.decode_output(pa.Table.from_pandas(frame, preserve_index=False))
    assert out.late.equals(late)


def test_a_shard_without_output_yields_nothing():
    from revise.spark import output

    assert output.encode_output(revisions=[REVISION_SCHEMA.empty_table()], late=[],
                                  dead=[]) is None


def test_fn_field_columns_feed_the_engine_and_the_revision_schema():
    """A shard's rows with ``num_*`` / ``dst_*`` columns (issue 13) → the engine's numeric and
    distinct inputs; bad rows → dead letters; revisions in the AggList's schema both ways."""
    import pandas as pd

    from revise.aggspec import AggList
    from revise.config import EngineConfig, WindowSpec
    from revise.engine import Engine
    from revise.records import revision_schema
    from revise.spark import operator, output

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
    rows = output.encode_output(revisions=[out.revisions.to_arrow()], late=[], dead=dead,
                                  revision_schema=schema)
    back = output.decode_output(pa.Table.from_pandas(rows, preserve_index=False), schema)
    (rev,) = back.revisions.to_pylist()
    assert back.revisions.schema == schema and back.dead.num_rows == 1
    assert (rev["count"], rev["max_a_b"], rev["distinct_u"]) == (2, 4.0, 2)


def test_a_shards_open_windows_ride_with_its_output_and_decode_per_shard():
    from revise.spark import output

    late = _late(2)
    a = output.encode_output(revisions=[], late=[late], dead=[], open_windows=(3, 41))
    b = output.encode_output(revisions=[], late=[], dead=[], open_windows=(5, 0))
    assert a is not None and b is not None  # a shard with nothing else still reports its count
    assert b["kind"].tolist() == [output.OPEN_KIND]
    collected = pa.Table.from_pandas(__import__("pandas").concat([a, b]), preserve_index=False)
    out = output.decode_output(collected)
    assert out.open_windows == {3: 41, 5: 0}
    assert out.late.equals(late) and out.revisions.num_rows == 0
    only_count = output.decode_output(pa.Table.from_pandas(b, preserve_index=False))
    assert only_count.empty and only_count.open_windows == {5: 0}  # no output to commit
