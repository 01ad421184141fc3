"""Factories of sink test data: Arrow tables with the SPEC field names and types."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pytest

from revise.records import (
    DEAD_LETTER_SCHEMA,
    LATE_SCHEMA,
    REVISION_SCHEMA,
    DeadLetter,
    LateRecord,
    Revision,
)


def revision(
    key: str = "k1",
    start: int = 0,
    end: int = 10_000,
    rev: int = 0,
    *,
    batch_id: int = 0,
    query_id: str = "q",
    timing: str = "EARLY",
    retracted: bool = False,
    count: int = 1,
    total: float = 1.0,
) -> Revision:
    """One revision with plausible aggregates; prev_* null at revision 0."""
    prev = rev > 0
    done = 1.0 if timing == "FINAL" else 0.8
    return Revision(
        query_id=query_id, mode="revision", key=key, window_start_ms=start, window_end_ms=end,
        revision=rev, timing=timing, is_final=timing == "FINAL", retracted=retracted,
        count=count, sum=total, min=0.5, max=total, mean=total / count,
        prev_count=count - 1 if prev else None, prev_sum=total - 1.0 if prev else None,
        prev_min=0.5 if prev else None, prev_max=total - 1.0 if prev else None,
        prev_mean=None, n_late=0, max_lateness_ms=0, watermark_ms=start + 500,
        batch_id=batch_id, emitted_at_ms=1_700_000_000_000, completeness=done,
        est_count=count / done, est_sum=total / done,
    )


def late_record(key: str = "k1", ts: int = 5, *, batch_id: int = 0, offset: int = 0) -> LateRecord:
    return LateRecord(
        key=key, ts_ms=ts, value=2.5, window_start_ms=0, window_end_ms=10_000,
        watermark_ms=20_000, lateness_ms=20_000 - ts, reason="too late: window closed",
        batch_id=batch_id, topic="in", partition=0, offset=offset,
    )


def dead_letter(raw: str | None = "{not json", *, batch_id: int = 0, offset: int = 0) -> DeadLetter:
    return DeadLetter(raw_value=raw, reason="invalid JSON", topic="in", partition=1,
                      offset=offset, batch_id=batch_id)


def table(records: Sequence[Any], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist([r.to_row() for r in records], schema=schema)


@pytest.fixture()
def rev_table() -> Callable[[Sequence[Revision]], pa.Table]:
    return lambda rows: table(rows, REVISION_SCHEMA)


@pytest.fixture()
def late_table() -> Callable[[Sequence[LateRecord]], pa.Table]:
    return lambda rows=(): table(rows, LATE_SCHEMA)


@pytest.fixture()
def dead_table() -> Callable[[Sequence[DeadLetter]], pa.Table]:
    return lambda rows=(): table(rows, DEAD_LETTER_SCHEMA)


@pytest.fixture()
def make_revision() -> Callable[..., Revision]:
    return revision


@pytest.fixture()
def make_late() -> Callable[..., LateRecord]:
    return late_record


@pytest.fixture()
def make_dead() -> Callable[..., DeadLetter]:
    return dead_letter
