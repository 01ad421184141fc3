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
    from revise.spark import operator

    monkeypatch.setattr(operator, "CHUNK_ROWS", 3)
    first, second = _late(7), _late(2, offset0=100)
    # A shard's outputs as the operator gathers them: kinds without rows, or with no tables
    # at all, give no chunk.
    frame = operator.encode_output(revisions=[REVISION_SCHEMA.empty_table()],
                                   late=[first, _late(0), second], dead=[])
    assert frame is not None
    assert frame["kind"].tolist() == ["late"] * 3 and frame["rows"].tolist() == [3, 3, 3]
    out = operator.decode_output(pa.Table.from_pandas(frame, preserve_index=False))
    assert out.late.equals(pa.concat_tables([first, second]))  # rows and order kept
    assert out.revisions.schema == REVISION_SCHEMA and out.revisions.num_rows == 0
    assert out.dead.schema == DEAD_LETTER_SCHEMA and out.dead.num_rows == 0


def test_a_shard_without_output_yields_nothing():
    from revise.spark import operator

    assert operator.encode_output(revisions=[REVISION_SCHEMA.empty_table()], late=[],
                                  dead=[]) is None
