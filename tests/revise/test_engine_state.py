"""The engine's state tables: the key table's incremental ranks and the snapshot's bytes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from revise.config import EngineConfig, WindowSpec
from revise.engine import Engine, InputBatch
from revise.engine.state import COMPRESS_ABOVE_BYTES, KeyTable

_KEYS = st.lists(st.text(alphabet="abcdé\u00e9Z0", max_size=4), max_size=30)


@settings(max_examples=300, deadline=None)
@given(st.lists(_KEYS, max_size=6))
def test_key_table_ranks_match_a_full_sort(batches):
    """After every batch the table is the sorted union of all keys so far, each batch key's
    rank points at its own text, and the old→new map carries every earlier rank to its key."""
    table = KeyTable()
    seen: set[str] = set()
    for batch in batches:
        before = table.keys.copy()
        ranks, remap = table.encode(np.array(batch, dtype=object))
        seen |= set(batch)
        assert list(table.keys) == sorted(seen)
        assert ranks.dtype == np.int64
        assert [table.keys[r] for r in ranks] == batch
        if remap is None:  # no earlier rank moved (or there was none)
            assert len(before) == 0 or list(table.keys) == list(before)
        else:
            assert [table.keys[r] for r in remap] == list(before)


def test_key_table_compact_keeps_live_ranks_in_order():
    table = KeyTable()
    table.encode(np.array(["d", "b", "a", "c"], dtype=object))
    remap = table.compact(np.array([1, 3]))
    assert list(table.keys) == ["b", "d"]
    assert remap.tolist() == [-1, 0, -1, 1]


def _engine_with(n_keys: int) -> Engine:
    eng = Engine(EngineConfig(WindowSpec.parse("tumbling:1h"), 0))
    keys = np.array([f"key-{i:06d}" for i in range(n_keys)], dtype=object)
    eng.process(InputBatch.from_arrays(keys, np.arange(n_keys) % 1000, np.ones(n_keys)),
                watermark_ms=0, batch_id=0, now_ms=0)
    return eng


def _plain(blob: bytes) -> bytes:
    """The same snapshot re-written without compression (what revise wrote before zstd)."""
    table = pa.ipc.open_stream(pa.py_buffer(blob)).read_all()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def test_snapshot_is_compressed_and_an_uncompressed_one_still_reads():
    eng = _engine_with(5_000)
    blob = eng.snapshot()
    plain = _plain(blob)
    assert len(blob) * 2 < len(plain)
    restored = Engine.build(eng.config, plain)
    assert restored.open_windows == 5_000
    assert restored.snapshot() == blob


def test_a_small_snapshot_is_left_uncompressed():
    """Below COMPRESS_ABOVE_BYTES zstd's fixed cost would outweigh the bytes it saves."""
    blob = _engine_with(20).snapshot()
    assert len(blob) < COMPRESS_ABOVE_BYTES
    assert blob == _plain(blob)
