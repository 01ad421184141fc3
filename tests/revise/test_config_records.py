"""Config parsing/validation and the record types' round trips."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from revise.aggspec import AggList
from revise.config import EngineConfig, WindowSpec, format_duration, parse_duration
from revise.errors import ConfigError
from revise.record_batches import LateBatch, RevisionBatch
from revise.records import (
    DEAD_LETTER_SCHEMA,
    LATE_SCHEMA,
    REVISION_SCHEMA,
    DeadLetter,
    LateRecord,
    Revision,
)


@pytest.mark.parametrize(("text", "ms"), [("500ms", 500), ("10s", 10_000), ("5m", 300_000),
                                          ("1h", 3_600_000), ("0s", 0), (" 7 s ", 7000),
                                          ("1d", 86_400_000), ("2d", 172_800_000)])
def test_parse_duration(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize(("text", "message"), [
    ("10", '--grace "10" has no unit; write 10s or 10000ms'),
    ("1.5s", "is not a duration"),
    ("-1s", "is not a duration"),
    ("10w", "is not a duration; write a whole number with a unit ms, s, m, h or d"),
    ("1.5d", "is not a duration"),
])
def test_parse_duration_errors_say_the_fix(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_duration(text, option="--grace")


@pytest.mark.parametrize("text", ["tumbling:10s", "hopping:10s:5s", "session:30s",
                                  "hopping:1500ms:1s", "tumbling:1h", "session:5m",
                                  "tumbling:1d", "hopping:1d:1h", "session:2d"])
def test_window_spec_round_trip(text):
    spec = WindowSpec.parse(text)
    assert str(spec) == text and WindowSpec.parse(str(spec)) == spec


def test_window_spec_fields():
    assert WindowSpec.parse("hopping:10s:5s") == WindowSpec("hopping", 10_000, 5_000)
    assert WindowSpec("tumbling", size_ms=1000).advance_ms == 1000
    assert WindowSpec.parse("session:30s").gap_ms == 30_000


@pytest.mark.parametrize(("text", "message"), [
    ("tumbling:10", 'write tumbling:10s or tumbling:10000ms'),
    ("hopping:10s:5", "write hopping:10s:5s or hopping:10s:5000ms"),
    ("sliding:10s", "unknown kind"),
    ("hopping:10s", "needs 2 duration"),
    ("hopping:5s:10s", "advance must be > 0 and <= size"),
    ("hopping:5s:0s", "advance must be > 0"),
    ("tumbling:0s", "size must be > 0"),
    ("session:0s", "gap must be > 0"),
])
def test_window_spec_errors(text, message):
    with pytest.raises(ConfigError, match=message):
        WindowSpec.parse(text)


def test_format_duration():
    assert [format_duration(x) for x in (0, 1, 1500, 2000, 120_000, 7_200_000)] == [
        "0ms", "1ms", "1500ms", "2s", "2m", "2h"]
    assert [format_duration(x) for x in (86_400_000, 90_000_000, 172_800_000)] == [
        "1d", "25h", "2d"]


def test_window_spec_accepts_days():
    assert WindowSpec.parse("tumbling:1d") == WindowSpec("tumbling", size_ms=86_400_000)


def test_engine_config_validates_itself():
    w = WindowSpec.parse("tumbling:10s")
    c = EngineConfig(w, grace_ms=0)
    assert c.aggs.columns == ("count", "sum", "min", "max", "mean") and c.mode == "revision"
    assert c.aggs == AggList.parse("count,sum,min,max,mean")
    assert EngineConfig(w, 0, aggs=AggList.parse("count, SUM")).aggs.columns == ("count", "sum")
    for kw, msg in [({"grace_ms": -1}, "grace_ms must be"), ({"aggs": ("count",)}, "AggList"),
                    ({"aggs": "count"}, "AggList.parse"), ({"mode": "x"}, "mode must be"),
                    ({"query_id": ""}, "query_id"), ({"watermark_delay_ms": -5}, "watermark")]:
        args = {"grace_ms": 0} | kw
        with pytest.raises(ConfigError, match=msg):
            EngineConfig(w, **args)
    for text, msg in [("median", "median"), ("sum,sum", "asks twice"), ("", "names no"),
                      ("count,p99", "p99 needs a field")]:
        with pytest.raises(ConfigError, match=msg):
            AggList.parse(text)
    with pytest.raises(ConfigError):
        EngineConfig("tumbling:10s", 0)  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        c.grace_ms = 5  # type: ignore[misc]


opt_int = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))
opt_float = st.one_of(st.none(), st.floats(allow_nan=False))
i64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(max_size=10)

revisions = st.builds(
    Revision, query_id=text, mode=st.sampled_from(["revision", "watermark"]), key=text,
    window_start_ms=i64, window_end_ms=i64, revision=st.integers(0, 2**31 - 1),
    timing=st.sampled_from(["EARLY", "LATE", "FINAL"]), is_final=st.booleans(),
    retracted=st.booleans(), count=opt_int, sum=opt_float, min=opt_float, max=opt_float,
    mean=opt_float, prev_count=opt_int, prev_sum=opt_float, prev_min=opt_float,
    prev_max=opt_float, prev_mean=opt_float, n_late=i64, max_lateness_ms=i64, watermark_ms=i64,
    batch_id=i64, emitted_at_ms=i64, completeness=st.floats(0.0, 1.0), est_count=opt_float,
    est_sum=opt_float)
lates = st.builds(LateRecord, key=text, ts_ms=i64, value=st.floats(allow_nan=False),
                  window_start_ms=i64, window_end_ms=i64, watermark_ms=i64, lateness_ms=i64,
                  reason=text, batch_id=i64, topic=text,
                  partition=st.integers(-(2**31), 2**31 - 1), offset=i64)
deads = st.builds(DeadLetter, raw_value=st.one_of(st.none(), text), reason=text, topic=text,
                  partition=st.integers(-(2**31), 2**31 - 1), offset=i64, batch_id=i64)


@given(revisions)
def test_revision_row_round_trip(r):
    row = r.to_row()
    assert list(row) == [f.name for f in REVISION_SCHEMA]
    assert Revision.from_row(json.loads(json.dumps(row))) == r
    table = pa.Table.from_pylist([row], schema=REVISION_SCHEMA)
    assert Revision.from_row(table.to_pylist()[0]) == r


@given(lates)
def test_late_row_round_trip(r):
    row = r.to_row()
    assert list(row) == [f.name for f in LATE_SCHEMA]
    assert LateRecord.from_row(json.loads(json.dumps(row))) == r
    table = pa.Table.from_pylist([row], schema=LATE_SCHEMA)
    assert LateRecord.from_row(table.to_pylist()[0]) == r
    batch = LateBatch.from_records([r])
    assert batch.to_arrow().equals(table) and list(batch.rows()) == [r]


@given(deads)
def test_dead_letter_row_round_trip(r):
    row = r.to_row()
    assert list(row) == [f.name for f in DEAD_LETTER_SCHEMA]
    assert DeadLetter.from_row(json.loads(json.dumps(row))) == r
    assert DeadLetter.from_row(
        pa.Table.from_pylist([row], schema=DEAD_LETTER_SCHEMA).to_pylist()[0]) == r


def _consistent(r: Revision, aggs: tuple[str, ...], has_prev: bool) -> Revision:
    """A revision obeying the batch null convention (per-batch aggs, prev all-or-nothing)."""
    vals = r.to_row()
    for a in ("count", "sum", "min", "max", "mean"):
        if a not in aggs:
            vals[a] = vals[f"prev_{a}"] = None
        else:
            vals[a] = vals[a] if vals[a] is not None else (1 if a == "count" else 1.5)
            p = vals[f"prev_{a}"]
            vals[f"prev_{a}"] = (p if p is not None else (0 if a == "count" else 0.5)) \
                if has_prev else None
    vals["query_id"], vals["mode"] = "q", "revision"
    c = vals["completeness"]
    for a in ("count", "sum"):  # derived: the aggregate / completeness, null at 0
        vals[f"est_{a}"] = None if vals[a] is None or c == 0 else vals[a] / c
    return Revision.from_row(vals)


@given(st.lists(st.tuples(revisions, st.booleans()), max_size=5),
       st.sampled_from([("count",), ("sum", "max"), ("count", "sum", "min", "max", "mean")]))
def test_revision_batch_round_trip(rows, aggs):
    recs = [_consistent(r, aggs, hp) for r, hp in rows]
    batch = RevisionBatch.from_records(recs, query_id="q", mode="revision", aggs=aggs)
    assert len(batch) == len(recs)
    assert list(batch.rows()) == recs
    table = batch.to_arrow()
    assert table.schema == REVISION_SCHEMA
    assert [Revision.from_row(x) for x in table.to_pylist()] == recs
    both = RevisionBatch.concat([batch, batch])
    assert list(both.rows()) == recs + recs
    assert len(RevisionBatch.concat([RevisionBatch.empty("q", "revision", aggs), batch])) == \
        len(recs)
    assert RevisionBatch.empty().to_arrow().num_rows == 0


def test_revision_batch_null_convention_and_concat_guard():
    r = _consistent(next(iter([Revision("q", "revision", "k", 0, 10, 0, "EARLY", False, False,
                                        3, 1.0, 0.0, 1.0, 0.5, None, None, None, None, None,
                                        0, 0, 0, 0, 0, 0.25, None, None)])),
                    ("count", "max"), False)
    b = RevisionBatch.from_records([r], query_id="q", mode="revision", aggs=("count", "max"))
    assert b.valid("count").tolist() == [True] and b.valid("sum").tolist() == [False]
    assert b.valid("prev_count").tolist() == [False]
    assert b.valid("est_count").tolist() == [True] and b.valid("est_sum").tolist() == [False]
    t = b.to_arrow()
    assert t.column("sum").null_count == 1 and t.column("prev_max").null_count == 1
    assert t.column("est_count").to_pylist() == [12.0] and t.column("est_sum").null_count == 1
    zero = dataclasses.replace(b, completeness=np.zeros(1))  # nothing counted yet: no estimate
    assert zero.to_arrow().column("est_count").null_count == 1
    assert next(zero.rows()).est_count is None
    other = RevisionBatch.empty("other", "revision", ("count", "max"))
    with pytest.raises(ValueError, match="cannot concat"):
        RevisionBatch.concat([b, other])
    assert LateBatch.concat([]).to_arrow().schema == LATE_SCHEMA
    assert isinstance(b.key, np.ndarray) and b.key.dtype == object


def test_shuffle_partitions_come_from_the_command_line_and_must_be_positive():
    import argparse

    from revise.cli.run import add_parser, job_config_from_args

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    base = ["run", "--bootstrap-servers", "127.0.0.1:1", "--input-topic", "in",
            "--changelog-topic", "out", "--delta-path", "/tmp/d", "--checkpoint", "/tmp/c",
            "--query-id", "q1", "--window", "tumbling:10s", "--grace", "1s"]
    assert job_config_from_args(parser.parse_args(base)).spark.shuffle_partitions is None
    got = job_config_from_args(parser.parse_args([*base, "--shuffle-partitions", "3"]))
    assert got.spark.shuffle_partitions == 3
    with pytest.raises(ConfigError, match="--shuffle-partitions must be >= 1, got 0"):
        job_config_from_args(parser.parse_args([*base, "--shuffle-partitions", "0"]))


@pytest.mark.parametrize(
    ("master", "cores", "session", "shards", "given", "expected"),
    [
        ("local[*]", 2, 4, 8, None, 2),  # one stateful task per core of a local master
        ("local[4]", 4, 8, 2, None, 2),  # never more than the shards
        ("local[*]", 16, 4, 8, None, 4),  # nor the session's own setting
        ("spark://h:7077", 2, 64, 8, None, 8),  # a cluster: the shards, capped by the session
        ("local[*]", 2, 4, 8, 6, 6),  # --shuffle-partitions wins
    ],
)
def test_the_jobs_stateful_task_count(master, cores, session, shards, given, expected):
    from types import SimpleNamespace

    from revise.jobconfig import JobConfig, SparkTuning
    from revise.spark.driver import shuffle_partitions

    spark = SimpleNamespace(
        conf=SimpleNamespace(get=lambda _key, _default: str(session)),
        sparkContext=SimpleNamespace(master=master, defaultParallelism=cores),
    )
    cfg = SimpleNamespace(spark=SimpleNamespace(shuffle_partitions=given, shards=shards))
    assert JobConfig.__dataclass_fields__["spark"]  # the fields the function reads exist
    assert SparkTuning.__dataclass_fields__["shards"]
    assert SparkTuning.__dataclass_fields__["shuffle_partitions"]
    assert shuffle_partitions(spark, cfg) == expected  # type: ignore[arg-type]
