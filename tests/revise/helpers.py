"""Factories and strategies shared by the engine tests."""

from __future__ import annotations

import struct
from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import strategies as st
from oracle import Rec

from revise.aggspec import AggList
from revise.config import EngineConfig, WindowSpec
from revise.engine import BatchOutput, InputBatch
from revise.records import REVISION_SCHEMA, LateRecord, Revision


def make_batch(recs: list[Rec], topic: str = "t") -> InputBatch:
    return InputBatch.from_arrays(
        [r.key for r in recs],
        np.array([r.ts for r in recs], dtype=np.int64),
        np.array([r.value for r in recs], dtype=np.float64),
        partitions=np.zeros(len(recs), dtype=np.int32),
        offsets=np.array([r.rid for r in recs], dtype=np.int64),
        topic=topic,
    )


def batch_of(*recs: tuple[str, int, float], start_rid: int = 0) -> list[Rec]:
    return [Rec(k, t, v, start_rid + i) for i, (k, t, v) in enumerate(recs)]


def revisions(outputs: list[BatchOutput]) -> list[tuple[int, Revision]]:
    """(batch index, revision) in emission order."""
    return [(i, r) for i, o in enumerate(outputs) for r in o.revisions.rows()]


def late_records(outputs: list[BatchOutput]) -> list[LateRecord]:
    return [r for o in outputs for r in o.late.rows()]


def by_window(outputs: list[BatchOutput]) -> dict[tuple[str, int, int], list[tuple[int, Revision]]]:
    d: dict[tuple[str, int, int], list[tuple[int, Revision]]] = defaultdict(list)
    for i, r in revisions(outputs):
        d[(r.key, r.window_start_ms, r.window_end_ms)].append((i, r))
    return d


# -- strategies -------------------------------------------------------------------------

window_specs = st.one_of(
    st.sampled_from([1000, 2000, 5000]).map(lambda s: WindowSpec("tumbling", size_ms=s)),
    st.tuples(st.sampled_from([2000, 3000, 4000]), st.sampled_from([500, 1000, 1500, 2000])).map(
        lambda sa: WindowSpec("hopping", size_ms=sa[0], advance_ms=sa[1])),
    st.sampled_from([500, 1000, 3000]).map(lambda g: WindowSpec("session", gap_ms=g)),
)


@st.composite
def configs(draw: st.DrawFn, mode: str | None = None) -> EngineConfig:
    aggs = AggList.parse(draw(st.sampled_from(["count,sum,min,max,mean", "count", "sum,mean",
                                               "max,count,min"])))
    return EngineConfig(
        window=draw(window_specs),
        grace_ms=draw(st.sampled_from([0, 500, 1000, 5000])),
        watermark_delay_ms=draw(st.sampled_from([0, 0, 1000])),
        aggs=aggs,
        mode=mode or draw(st.sampled_from(["revision", "watermark"])),
        query_id="q",
    )


@st.composite
def streams(draw: st.DrawFn, max_records: int = 60, exact: bool = True) -> list[list[Rec]]:
    """Records (coarse timestamps hit window bounds often) in arrival order, split in batches."""
    n = draw(st.integers(0, max_records))
    keys = draw(st.lists(st.sampled_from(["a", "b", "c", "é", "a b"]), min_size=n, max_size=n))
    ts = draw(st.lists(st.integers(0, 120).map(lambda x: x * 250), min_size=n, max_size=n))
    if exact:
        vals = draw(st.lists(st.integers(-400, 400).map(lambda x: x / 4), min_size=n, max_size=n))
    else:
        vals = draw(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=n, max_size=n))
    if n and draw(st.booleans()):  # mostly in event-time order, with a few swaps
        ts.sort()
        for _ in range(draw(st.integers(0, max(1, n // 5)))):
            i, j = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
            ts[i], ts[j] = ts[j], ts[i]
    recs = [Rec(k, t, v, i) for i, (k, t, v) in enumerate(zip(keys, ts, vals, strict=True))]
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=8)))
    batches = []
    prev = 0
    for c in [*cuts, n]:
        batches.append(recs[prev:c])
        prev = c
    return batches


def unframe(payload: bytes) -> tuple[list[bytes | None], list[bytes]]:
    """The keys and values of a ``msg:<i>`` payload (``sinks.kafka.partitions.frame_parts``)."""
    (n,) = struct.unpack_from(">i", payload, 0)
    key_lengths = struct.unpack_from(f">{n}i", payload, 4)
    value_lengths = struct.unpack_from(f">{n}i", payload, 4 + 4 * n)
    at = 4 + 8 * n
    keys: list[bytes | None] = []
    for length in key_lengths:
        keys.append(None if length < 0 else payload[at:at + length])
        at += max(length, 0)
    values: list[bytes] = []
    for length in value_lengths:
        values.append(payload[at:at + length])
        at += length
    assert at == len(payload), (at, len(payload))
    return keys, values


def message_revisions(rows: pd.DataFrame | None,
                      schema: pa.Schema = REVISION_SCHEMA) -> list[dict[str, Any]]:
    """The revisions an operator's output rows send to the changelog (``msg:0``), decoded."""
    from sinks.kafka import decode_revision_row

    if rows is None:
        return []
    payloads = rows[rows["kind"] == "msg:0"]["payload"].tolist()
    return [decode_revision_row(v, schema) for p in payloads for v in unframe(p)[1]]
