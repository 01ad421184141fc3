"""revise's columnar reader of transformWithStateInPandas' input against PySpark's own.

Both read the same Arrow stream — grouping-key runs inside a batch and across batches, nulls,
a record limit that cuts runs — and must hand the handler the same keys and rows.
"""

from __future__ import annotations

import io

import pandas as pd
import pyarrow as pa
import pytest

from revise.spark import tws_input


def serializer(max_records: int):
    from pyspark.sql.pandas.serializers import TransformWithStateInPandasSerializer

    ser = TransformWithStateInPandasSerializer(
        timezone="UTC", safecheck=False, assign_cols_by_name=True, prefer_int_ext_dtype=False,
        arrow_max_records_per_batch=max_records, arrow_max_bytes_per_batch=2**31 - 1,
        int_to_decimal_coercion_enabled=False)
    ser.key_offsets = [0]
    return ser


def stream(batches: list[pa.RecordBatch]) -> io.BytesIO:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, batches[0].schema) as writer:
        for b in batches:
            writer.write_batch(b)
    sink.seek(0)
    return sink


def batch(shards: list[int], start: int) -> pa.RecordBatch:
    n = len(shards)
    return pa.RecordBatch.from_pydict({
        "shard": pa.array(shards, pa.int32()),
        "key": pa.array([f"k{start + i}" if i % 4 else None for i in range(n)], pa.string()),
        "ts_ms": pa.array([start + i if i % 3 else None for i in range(n)], pa.int64()),
        "value": pa.array([float(start + i) for i in range(n)], pa.float64()),
    })


def read(load, ser, data: io.BytesIO) -> list[tuple[int, object, list[tuple]]]:
    """(mode, key, [(chunk key, chunk rows)]) of everything ``load`` yields."""
    out = []
    for mode, key, chunks in load(ser, data):
        got = [] if chunks is None else [(k, len(df), df) for k, df in chunks]
        out.append((mode, key, got))
    return out


@pytest.mark.parametrize("max_records", [3, 10_000])
def test_columnar_reader_gives_pysparks_keys_and_rows(max_records):
    from pyspark.sql.pandas.serializers import TransformWithStateInPandasSerializer as Ser

    assert tws_input.install() and tws_input.installed()
    original = getattr(Ser, tws_input._ORIGINAL)
    # Shard 1's run spans the two batches; shard 0 comes back after shard 2 (another run).
    batches = [batch([0, 0, 0, 0, 0, 1, 1], 0), batch([1, 1, 2, 2, 2, 2, 0], 100)]
    theirs = read(original, serializer(max_records), stream(batches))
    ours = read(tws_input.load_stream, serializer(max_records), stream(batches))
    assert [(m, k) for m, k, _ in ours] == [(m, k) for m, k, _ in theirs]
    assert [k for m, k, _ in ours if k is not None] == [(0,), (1,), (2,), (0,)]
    for (_, key, a), (_, _, b) in zip(ours, theirs, strict=True):
        if not a and not b:
            continue
        assert all(k == key for k, _n, _df in a)
        assert all(n <= max_records for _k, n, _df in a)
        mine = pd.concat([df for _k, _n, df in a], ignore_index=True)
        pysparks = pd.concat([df for _k, _n, df in b], ignore_index=True)
        pd.testing.assert_frame_equal(mine, pysparks, check_dtype=False)
        assert type(a[0][0][0]) is type(b[0][0][0])  # a Python int, as PySpark gives
