"""The changelog's encoding in chunks on helper threads: every chunk, in the table's order."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest

from sinks.kafka import TransactionalChangelog, decode_revision, read_committed
from sinks.kafka import writer as kafka_writer
from tests.sinks.test_kafka_changelog import _cfg


def test_chunks_come_in_table_order_while_several_encode_at_once(monkeypatch):
    monkeypatch.setattr(kafka_writer, "_ENCODE_CHUNK_ROWS", 3)
    monkeypatch.setattr(kafka_writer, "_ENCODE_THREADS", 3)
    table = pa.table({"i": list(range(20))})
    running, most = 0, 0
    lock = threading.Lock()

    def encode(chunk: pa.Table) -> tuple[list[bytes], list[bytes]]:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        first = chunk.column("i")[0].as_py()
        time.sleep(0.01 * (20 - first) / 3)  # later chunks finish first
        with lock:
            running -= 1
        return [b"k"] * chunk.num_rows, [str(v).encode() for v in chunk.column("i").to_pylist()]

    with ThreadPoolExecutor(3) as pool:
        chunks = list(kafka_writer._encoded_chunks(pool, table, encode))
    assert [len(values) for _keys, values in chunks] == [3, 3, 3, 3, 3, 3, 2]
    assert [int(v) for _keys, values in chunks for v in values] == list(range(20))
    assert most >= 2  # the chunks after the one being produced encode meanwhile


@pytest.mark.kafka
def test_a_windows_revisions_stay_in_order_across_chunks(
    monkeypatch, kafka_bootstrap, new_topic, unique_id, make_revision, rev_table, late_table,
    dead_table,
):
    # 60 revisions of 3 windows, interleaved, in chunks of 7 encoded 2 at a time: a chunk
    # produced before the one ahead of it would put a window's revisions out of order.
    monkeypatch.setattr(kafka_writer, "_ENCODE_CHUNK_ROWS", 7)
    monkeypatch.setattr(kafka_writer, "_ENCODE_THREADS", 2)
    cfg = _cfg(kafka_bootstrap, new_topic, unique_id, partitions=2)
    revs = [make_revision(f"w{i % 3}", 0, 10_000, i // 3, query_id=cfg.query_id)
            for i in range(60)]
    with TransactionalChangelog(cfg) as log:
        res = log.commit_batch(0, rev_table(revs), late_table([]), dead_table([]))
    assert res.messages == 60 + 1
    seen = [decode_revision(m.value())
            for m in read_committed(kafka_bootstrap, cfg.changelog_topic, timeout_s=30)]
    for w in ("w0", "w1", "w2"):
        assert [r.revision for r in seen if r.key == w] == list(range(20))
