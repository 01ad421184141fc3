"""The engine's state tables: the key table's incremental ranks and the snapshot's bytes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from revise.config import EngineConfig, WindowSpec
from revise.engine import Engine, InputBatch
from revise.engine.snapshot import COMPRESS_ABOVE_BYTES
from revise.engine.state import INDEX_MAX_BYTES, KeyTable

_KEYS = st.lists(st.text(alphabet="abcdé\u00e9Z0", max_size=4), max_size=30)
# Keys the table cannot hold as fixed-width bytes too: NUL at the end ("a" and "a\0" differ),
# longer than INDEX_MAX_BYTES in UTF-8, and characters beyond the BMP (4 UTF-8 bytes).
_ODD_KEYS = st.lists(
    st.one_of(st.text(alphabet="ab\x00\U0001f600\uffff", max_size=4),
              st.builds(lambda c, n: c * n, st.sampled_from("ab\u00e9"),
                        st.integers(INDEX_MAX_BYTES - 2, INDEX_MAX_BYTES + 2))),
    max_size=20)


@settings(max_examples=300, deadline=None)
@given(st.lists(_KEYS, max_size=6))
def test_key_table_ranks_match_a_full_sort(batches):
    """After every batch the table is the sorted union of all keys so far, each batch key's
    rank points at its own text, and the old→new map carries every earlier rank to its key."""
    _check_ranks(KeyTable(), batches)


@settings(max_examples=300, deadline=None)
@given(st.lists(_ODD_KEYS, max_size=6), st.integers(0, 2))
def test_key_table_ranks_hold_for_keys_bytes_cannot_hold(batches, restore_after):
    """The same with NUL-ended, long and non-BMP keys, mixed into batches of plain ones;
    also from a table restored from its keys (as a snapshot does) part way."""
    plain = [[f"k{i % 7}" for i in range(j, j + 5)] for j in range(len(batches))]
    mixed = [b for pair in zip(plain, batches, strict=True) for b in pair]
    table = _check_ranks(KeyTable(), mixed[:restore_after])
    _check_ranks(KeyTable(table.keys.copy()), mixed[restore_after:], set(table.keys))


def test_key_table_searches_bytes_until_a_key_they_cannot_hold():
    table = KeyTable()
    table.encode(np.array(["b", "a\u00e9"], dtype=object))
    assert table._index is not None and table._index.tolist() == ["a\u00e9".encode(), b"b"]
    ranks, _ = table.encode(np.array(["a", "a\x00", "b"], dtype=object))
    assert table._index is None  # "a" and "a\0" would be the same bytes
    assert list(table.keys) == ["a", "a\x00", "a\u00e9", "b"] and ranks.tolist() == [0, 1, 3]


def _check_ranks(table: KeyTable, batches: list[list[str]],
                 seen: set[str] | None = None) -> KeyTable:
    seen = set() if seen is None else seen
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
    return table


def test_key_table_compact_keeps_live_ranks_in_order():
    table = KeyTable()
    table.encode(np.array(["d", "b", "a", "c"], dtype=object))
    remap = table.compact(np.array([1, 3]))
    assert list(table.keys) == ["b", "d"]
    assert table._index is not None and table._index.tolist() == [b"b", b"d"]  # kept in step
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


def test_keys_that_differ_after_a_nul_are_separate_windows():
    """Regression: pandas' hashing stopped at a NUL, so these three keys were one window."""
    eng = Engine(EngineConfig(WindowSpec.parse("tumbling:1h"), 0))
    keys = np.array(["a", "a\x00b", "a\x00", "a"], dtype=object)
    out = eng.process(InputBatch.from_arrays(keys, np.zeros(4, np.int64), np.ones(4)),
                      watermark_ms=0, batch_id=0, now_ms=0)
    counts = dict(zip(out.revisions.to_arrow().column("key").to_pylist(),
                      out.revisions.to_arrow().column("count").to_pylist(), strict=True))
    assert counts == {"a": 2, "a\x00": 1, "a\x00b": 1}
