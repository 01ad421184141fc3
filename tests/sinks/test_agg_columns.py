"""The sinks with ``FN(FIELD)`` aggregates (SPEC §7): the changelog JSON and the Delta tables carry
``count``, ``FN_FIELD`` and their ``prev_`` columns instead of ``count`` … ``prev_mean``; the
``latest`` MERGE updates them; a Delta root keeps one set of aggregate columns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from revise.aggspec import AggList
from revise.records import (
    AGG_FIELDS,
    ESTIMATE_FIELDS,
    PREV_FIELDS,
    REVISION_SCHEMA,
    Revision,
    revision_schema,
)
from sinks.delta_tables import DeltaSchemaError, DeltaTables
from sinks.kafka import decode_revision_row, encode_revisions

AGGS = AggList.parse("count,sum(amount),p99(http.latency_ms),distinct(user.id)")
SCHEMA = revision_schema(AGGS)


@pytest.fixture()
def row(make_revision: Callable[..., Revision]) -> Callable[..., dict[str, Any]]:
    """``row(key, rev, p99=, users=)``: a revision row with the agg list's columns."""
    def make(key: str, rev: int, *, p99: float, users: int, batch_id: int = 0,
             timing: str = "EARLY") -> dict[str, Any]:
        base = make_revision(key, 0, 10_000, rev, timing=timing, batch_id=batch_id).to_row()
        for name in (*AGG_FIELDS, *PREV_FIELDS, *ESTIMATE_FIELDS):
            del base[name]
        first = rev == 0
        base.update(count=3 + rev, sum_amount=10.0 + rev, p99_http_latency_ms=p99,
                    distinct_user_id=users, prev_count=None if first else 2 + rev,
                    prev_sum_amount=None if first else 9.0 + rev,
                    prev_p99_http_latency_ms=None if first else p99 - 1,
                    prev_distinct_user_id=None if first else users - 1,
                    est_count=(3 + rev) / base["completeness"],
                    est_sum_amount=(10.0 + rev) / base["completeness"])
        return base
    return make


def table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def test_changelog_json_carries_the_agg_list_columns(row):
    rows = [row("a", 0, p99=12.5, users=2), row("a", 1, p99=13.0, users=3, timing="LATE")]
    keys, values = (a.to_pylist() for a in encode_revisions(table(rows), SCHEMA))
    assert [decode_revision_row(v, SCHEMA) for v in values] == rows
    obj = orjson.loads(values[1])
    assert list(obj) == SCHEMA.names
    assert "sum" not in obj and "prev_mean" not in obj and "est_sum" not in obj
    assert obj["completeness"] == 0.8 and obj["est_sum_amount"] == 11.0 / 0.8
    assert obj["p99_http_latency_ms"] == 13.0 and obj["prev_distinct_user_id"] == 2
    assert b'"prev_p99_http_latency_ms":12.0' in values[1]
    assert orjson.loads(keys[0]) == {"key": "a", "window_start_ms": 0, "window_end_ms": 10_000}
    # The default is today's schema: a table of other columns is refused, not half-encoded.
    from sinks.kafka import ChangelogEncodeError

    with pytest.raises(ChangelogEncodeError, match="sum"):
        encode_revisions(table(rows))


def test_delta_tables_and_latest_merge_use_the_agg_list_columns(tmp_path, row):
    tables = DeltaTables(str(tmp_path), revision_schema=SCHEMA).ensure()
    empty_late = tables.schema("late").empty_table().drop_columns(["query_id"])
    empty_dead = tables.schema("dead_letter").empty_table().drop_columns(["query_id"])
    tables.write_batch("q", 0, table([row("a", 0, p99=12.5, users=2)]), empty_late, empty_dead)
    tables.write_batch("q", 1, table([row("a", 1, p99=20.0, users=5, batch_id=1,
                                          timing="FINAL")]), empty_late, empty_dead)
    (latest,) = pa.table(DeltaTable(tables.table_path("latest")).scan()).to_pylist()
    assert (latest["revision"], latest["p99_http_latency_ms"], latest["distinct_user_id"],
            latest["prev_p99_http_latency_ms"]) == (1, 20.0, 5, 19.0)
    history = DeltaTable(tables.table_path("revisions")).to_pyarrow_table()
    assert history.schema.names == SCHEMA.names and history.num_rows == 2
    # One root, one set of columns: today's writer (or another --aggs) is sent elsewhere.
    with pytest.raises(DeltaSchemaError,
                       match=r"missing \['est_sum', 'max', 'mean'.*another --delta-path"):
        DeltaTables(str(tmp_path), revision_schema=REVISION_SCHEMA).ensure()
    other = revision_schema(AggList.parse("count,p50(http.latency_ms)"))
    with pytest.raises(DeltaSchemaError, match=r"extra \['distinct_user_id'"):
        DeltaTables(str(tmp_path), revision_schema=other).ensure()
