"""``revise.spark.fields.classify_fields`` on a real Spark session: exact reasons and outputs.

For today's options it must agree with ``revise.spark.parse.classify`` on every frozen case of
``test_parse.py``, with and without its accepted path in Java (``revise_fast_fields``); the new
rules (nested paths, grouped keys, time formats, Kafka timestamps, several numeric fields,
distinct canonical text) are pinned case by case below. Over ``test_parse.py``'s generated
corpus the Java path gives exactly what the SQL path alone gives.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING, Any

import pytest
from test_parse import DEFAULT_CASES, NO_VALUE_CASES, REFUSED_CASES, corpus

from revise.aggspec import AggList
from revise.errors import ConfigError
from revise.spark.fields import InputSpec, _java_path, classify_fields, parse_key_fields
from revise.spark.parse import FAST_FIELDS_UDF, java_fields

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark]

SCHEMA = "value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP"
KAFKA_TS = dt.datetime(2026, 11, 23, 20, 15, 0, 123000, tzinfo=dt.UTC)
KAFKA_TS_MS = 1795464900123

Out = tuple[Any, ...]


def _uses_java_path(df: Any) -> bool:
    return FAST_FIELDS_UDF in df._jdf.queryExecution().analyzed().toString()


def _run(spark: SparkSession, spec: InputSpec, values: list[bytes | None],
         stamps: list[dt.datetime | None] | None = None, *, fast: bool = True) -> list[Out]:
    """Rows of ``classify_fields`` in input order, without the raw columns."""
    stamps = stamps or [KAFKA_TS] * len(values)
    raw = spark.createDataFrame(
        [(v, "in", 0, i, s) for i, (v, s) in enumerate(zip(values, stamps, strict=True))], SCHEMA)
    out = classify_fields(raw, spec, fast=fast)
    assert _uses_java_path(out) == (fast and _java_path(spec))
    assert tuple(out.columns) == spec.columns
    rows = sorted(out.collect(), key=lambda r: r["offset"])
    assert [r["offset"] for r in rows] == list(range(len(values)))
    return [tuple(r[c] for c in spec.columns[5:]) for r in rows]


def _check(spark: SparkSession, spec: InputSpec, cases: dict[str, tuple[Any, Out]],
           *, fast: bool = True) -> None:
    values = [v if v is None or isinstance(v, bytes) else json.dumps(v).encode()
              for v, _ in cases.values()]
    got = dict(zip(cases, _run(spark, spec, values, fast=fast), strict=True))
    want = {name: expected for name, (_, expected) in cases.items()}
    wrong = [n for n in cases if got[n] != want[n]]
    assert {n: got[n] for n in wrong} == {n: want[n] for n in wrong}


def _bad(reason: str, n_out: int = 2) -> Out:
    return (reason, *([None] * n_out))


@pytest.mark.parametrize("fast", [True, False], ids=["java path", "sql only"])
def test_todays_options_agree_with_classify(spark: SparkSession, fast: bool) -> None:
    spec = InputSpec(numeric_fields=("value",))
    assert spec.columns[5:] == ("reason", "key", "ts_ms", "num_value")
    cases = {n: (v, e) for n, (v, e) in DEFAULT_CASES.items()}
    _check(spark, spec, cases, fast=fast)
    count_only = InputSpec()
    _check(spark, count_only, {n: (v, e[:3]) for n, (v, e) in NO_VALUE_CASES.items()},
           fast=fast)


def test_java_path_only_for_top_level_fields_and_epoch_ms() -> None:
    assert _java_path(InputSpec(numeric_fields=("value", "b")))
    assert _java_path(InputSpec())
    assert not _java_path(NESTED)
    assert not _java_path(InputSpec(("store", "region")))
    assert not _java_path(InputSpec(ts_format="epoch_s"))
    assert not _java_path(InputSpec(ts_field="@timestamp"))
    assert not _java_path(InputSpec(distinct_fields=("user",)))
    assert not _java_path(InputSpec(numeric_fields=("ts",)))  # a field read twice


JAVA_PATH_SPECS = {
    "two numeric fields": InputSpec(numeric_fields=("value", "v2")),
    "count only": InputSpec(),
    "custom names": InputSpec(("user id",), "$t", "epoch_ms", ("v[0]", "value")),
}


@pytest.mark.parametrize("name", list(JAVA_PATH_SPECS))
def test_java_path_gives_what_the_sql_path_gives(spark: SparkSession, name: str) -> None:
    spec = JAVA_PATH_SPECS[name]
    value = spec.numeric_fields[0] if spec.numeric_fields else "value"
    names = {"key_field": spec.key_fields[0], "ts_field": spec.ts_field, "value_field": value}
    records = corpus(names, 6000, seed=len(name), more_values=spec.numeric_fields[1:])
    fast = _run(spark, spec, list(records))
    sql = _run(spark, spec, list(records), fast=False)

    def exact(row: Out) -> Out:  # -0.0 and 0.0 apart
        return tuple(repr(x) if isinstance(x, float) else x for x in row)

    differ = {i: (records[i], fast[i], sql[i]) for i in range(len(records))
              if exact(fast[i]) != exact(sql[i])}
    assert differ == {}
    # Not a vacuous comparison: the Java path took most accepted records, the SQL path saw
    # hundreds of rejected ones, and the Java path refused the cases it must refuse.
    raw = spark.createDataFrame([(v, "in", 0, i, KAFKA_TS) for i, v in enumerate(records)],
                                SCHEMA)
    udf = java_fields(spark, FAST_FIELDS_UDF, spec.key_fields[0], spec.ts_field,
                      chr(0).join(spec.numeric_fields))
    taken = {r["offset"] for r in raw.where(udf.isNotNull()).select("offset").collect()}
    accepted = {i for i, row in enumerate(sql) if row[0] is None}
    assert taken <= accepted
    assert len(taken) > 0.6 * len(accepted) and len(records) - len(accepted) > 500
    assert not taken & set(range(len(REFUSED_CASES)))


NESTED = InputSpec(("payload.user.id",), "meta.t", "epoch_ms", ("m.latency_ms", "amount"),
                   ("ev.user",))
NESTED_CASES: dict[str, tuple[Any, Out]] = {
    "good": ({"payload": {"user": {"id": "u1"}}, "meta": {"t": 7}, "m": {"latency_ms": 12.5},
              "amount": 3, "ev": {"user": "bob"}}, (None, "u1", 7, 12.5, 3.0, '"bob"')),
    "missing nested key": ({"payload": {"user": {}}, "meta": {"t": 7}},
                           _bad("missing field 'payload.user.id'", 5)),
    "parent not an object": ({"payload": "x", "meta": {"t": 7}},
                             _bad("missing field 'payload.user.id'", 5)),
    "nested ts not integer": ({"payload": {"user": {"id": "u"}}, "meta": {"t": "7"}},
                              _bad("field 'meta.t' must be an integer (epoch ms), got STRING", 5)),
    "missing numeric field": ({"payload": {"user": {"id": "u"}}, "meta": {"t": 7},
                               "amount": 1, "ev": {"user": "b"}},
                              _bad("missing field 'm.latency_ms'", 5)),
    "non-numeric field": ({"payload": {"user": {"id": "u"}}, "meta": {"t": 7},
                           "m": {"latency_ms": 1}, "amount": "3", "ev": {"user": "b"}},
                          _bad("field 'amount' must be a number, got STRING", 5)),
    "null numeric field": ({"payload": {"user": {"id": "u"}}, "meta": {"t": 7},
                            "m": {"latency_ms": None}, "amount": 1, "ev": {"user": "b"}},
                           _bad("field 'm.latency_ms' is null", 5)),
    "missing distinct field": ({"payload": {"user": {"id": "u"}}, "meta": {"t": 7},
                                "m": {"latency_ms": 1}, "amount": 1, "ev": {}},
                               _bad("missing field 'ev.user'", 5)),
    "object distinct field": ({"payload": {"user": {"id": "u"}}, "meta": {"t": 7},
                               "m": {"latency_ms": 1}, "amount": 1, "ev": {"user": {"a": 1}}},
                              _bad("field 'ev.user' must be a string, number or boolean, got "
                                   "OBJECT<a: BIGINT>", 5)),
    "not an object": ([1], _bad("value is a JSON array, expected an object", 5)),
}


def test_nested_paths_and_several_fields(spark: SparkSession) -> None:
    _check(spark, NESTED, NESTED_CASES)


def test_spec_from_aggs_and_options() -> None:
    aggs = AggList.parse("count,sum(amount),p99(http.latency_ms),max(amount),distinct(ev.user)")
    spec = InputSpec.build(key_field="store, region", ts_field="@timestamp", ts_format="ISO8601",
                           aggs=aggs)
    assert spec == InputSpec(("store", "region"), "@timestamp", "iso8601",
                             ("amount", "http.latency_ms"), ("ev.user",))
    assert spec.columns == ("raw_value", "topic", "partition", "offset", "timestamp", "reason",
                            "key", "ts_ms", "num_amount", "num_http_latency_ms", "dst_ev_user")
    assert parse_key_fields("a") == ("a",)
    for text, message in [("a,,b", "has an empty field"), ("a,a", "repeats a field"),
                          ("", "has an empty field")]:
        with pytest.raises(ConfigError, match=message):
            parse_key_fields(text)
    with pytest.raises(ConfigError, match='--ts-format must be one of epoch_ms, epoch_s'):
        InputSpec(ts_format="rfc2822")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match='--key-field "a..b" has an empty path segment'):
        InputSpec(("a..b",))
    with pytest.raises(ConfigError, match="cannot be addressed in a Spark variant path"):
        InputSpec(("x.a'b\"[c",))


GROUPED = InputSpec(("store", "n"), "ts")
GROUPED_CASES: dict[str, tuple[Any, Out]] = {
    "string and integer": ({"store": "s-1", "n": 42, "ts": 1}, (None, '["s-1",42]', 1)),
    "1.0 is 1": (b'{"store":"s-1","n":1.0,"ts":1}', (None, '["s-1",1]', 1)),
    "1e0 is 1": (b'{"store":"s-1","n":1e0,"ts":1}', (None, '["s-1",1]', 1)),
    "decimal": (b'{"store":"s","n":1.50,"ts":1}', (None, '["s",1.5]', 1)),
    "exponent": (b'{"store":"s","n":2.5e-7,"ts":1}', (None, '["s",2.5E-7]', 1)),
    "big integer": (b'{"store":"s","n":12345678901234567890,"ts":1}',
                    (None, '["s",12345678901234567890]', 1)),
    "string number": ({"store": "s", "n": "42", "ts": 1}, (None, '["s","42"]', 1)),
    "boolean, escapes": ({"store": 'a"b\\c', "n": True, "ts": 1},
                         (None, '["a\\"b\\\\c",true]', 1)),
    "missing member": ({"store": "s", "ts": 1}, _bad("missing field 'n'")),
    "null member": ({"store": "s", "n": None, "ts": 1}, _bad("field 'n' is null")),
    "object member": ({"store": {"a": 1}, "n": 1, "ts": 1},
                      _bad("field 'store' must be a string, number or boolean, got "
                           "OBJECT<a: BIGINT>")),
    "array member": ({"store": "s", "n": [1], "ts": 1},
                     _bad("field 'n' must be a string, number or boolean, got ARRAY<BIGINT>")),
    "infinite member": (b'{"store":"s","n":1e400,"ts":1}',
                        _bad("field 'n' is not a finite number")),
    "missing first member, object": ({"n": 1, "ts": 1}, _bad("missing field 'store'")),
    "not an object": (b'"s"', _bad("value is a JSON string, expected an object")),
}


def test_grouped_keys_are_json_arrays(spark: SparkSession) -> None:
    _check(spark, GROUPED, GROUPED_CASES)
    rows = _run(spark, GROUPED, [b'{"store":"s","n":7,"ts":1}'])
    assert json.loads(rows[0][1]) == ["s", 7]


EPOCH_S: dict[str, tuple[Any, Out]] = {
    "integer": ({"key": "a", "ts": 1700000000}, (None, "a", 1700000000000)),
    "fraction": ({"key": "a", "ts": 1700000000.1234}, (None, "a", 1700000000123)),
    "sub-ms fraction floors": (b'{"key":"a","ts":0.0009}', (None, "a", 0)),
    "exponent": (b'{"key":"a","ts":1.7e9}', (None, "a", 1700000000000)),
    "largest": (b'{"key":"a","ts":9007199254740.991}', (None, "a", 2**53 - 1)),
    "2^53 ms": (b'{"key":"a","ts":9007199254740.992}',
                _bad("field 'ts' is out of range [0, 2^53) ms: 9007199254740.992")),
    "negative": ({"key": "a", "ts": -1}, _bad("field 'ts' is out of range [0, 2^53) ms: -1")),
    "huge": (b'{"key":"a","ts":1e30}', _bad("field 'ts' is out of range [0, 2^53) ms: 1.0E30")),
    "string": ({"key": "a", "ts": "1"}, _bad("field 'ts' must be a number (epoch s), got STRING")),
    "missing": ({"key": "a"}, _bad("missing field 'ts'")),
}
EPOCH_US: dict[str, tuple[Any, Out]] = {
    "integer": ({"key": "a", "ts": 1700000000123999}, (None, "a", 1700000000123)),
    "largest": ({"key": "a", "ts": 2**53 * 1000 - 1}, (None, "a", 2**53 - 1)),
    "2^53 ms": ({"key": "a", "ts": 2**53 * 1000},
                _bad("field 'ts' is out of range [0, 2^53) ms: 9007199254740992000")),
    "fraction": ({"key": "a", "ts": 1.5},
                 _bad("field 'ts' must be an integer (epoch us), got DECIMAL(2,1)")),
    "negative": ({"key": "a", "ts": -1}, _bad("field 'ts' is out of range [0, 2^53) ms: -1")),
}
ISO = "field 'ts' is not an ISO-8601 time (YYYY-MM-DDThh:mm:ss[.fff]Z or +hh:mm): "
ISO8601: dict[str, tuple[Any, Out]] = {
    "Z": ({"key": "a", "ts": "2026-11-23T20:15:00Z"}, (None, "a", 1795464900000)),
    "offset": ({"key": "a", "ts": "2026-11-23T21:15:00.123+01:00"}, (None, "a", 1795464900123)),
    "offset without colon, sub-ms": ({"key": "a", "ts": "2026-11-23T21:15:00.1239+0100"},
                                     (None, "a", 1795464900123)),
    "space, hour offset": ({"key": "a", "ts": "2026-11-23 15:15:00-05"},
                           (None, "a", 1795464900000)),
    "epoch 0": ({"key": "a", "ts": "1970-01-01T00:00:00Z"}, (None, "a", 0)),
    "no zone": ({"key": "a", "ts": "2026-11-23T20:15:00"},
                _bad("field 'ts' has no time zone: 2026-11-23T20:15:00; end it with Z or an "
                     "offset such as +01:00")),
    "no zone, fraction": ({"key": "a", "ts": "2026-11-23T20:15:00.5"},
                          _bad("field 'ts' has no time zone: 2026-11-23T20:15:00.5; end it with "
                               "Z or an offset such as +01:00")),
    "no seconds": ({"key": "a", "ts": "2026-11-23T20:15Z"}, _bad(ISO + "2026-11-23T20:15Z")),
    "invalid date": ({"key": "a", "ts": "2026-02-30T00:00:00Z"},
                     _bad(ISO + "2026-02-30T00:00:00Z")),
    "garbage": ({"key": "a", "ts": "yesterday"}, _bad(ISO + "yesterday")),
    "before 1970": ({"key": "a", "ts": "1969-12-31T23:59:59.999Z"},
                    _bad("field 'ts' is out of range [0, 2^53) ms: 1969-12-31T23:59:59.999Z")),
    "number": ({"key": "a", "ts": 5}, _bad(
        "field 'ts' must be an ISO-8601 text with a zone (e.g. 2026-11-23T20:15:00Z), got BIGINT")),
    "null": ({"key": "a", "ts": None}, _bad("field 'ts' is null")),
}
TS_FORMATS = {"epoch_s": EPOCH_S, "epoch_us": EPOCH_US, "iso8601": ISO8601}


@pytest.mark.parametrize("fmt", list(TS_FORMATS))
def test_time_formats(spark: SparkSession, fmt: str) -> None:
    _check(spark, InputSpec(ts_format=fmt), TS_FORMATS[fmt])  # type: ignore[arg-type]


def test_kafka_record_timestamp(spark: SparkSession) -> None:
    spec = InputSpec(ts_field="@timestamp")
    before = dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC)
    rows = _run(spark, spec, [b'{"key":"a"}', b'{"key":"a","ts":"ignored"}', b'{"key":"a"}',
                              b'{"key":"a"}', b'{"key":1}'],
                [KAFKA_TS, KAFKA_TS, before, None, KAFKA_TS])
    assert rows == [
        (None, "a", KAFKA_TS_MS), (None, "a", KAFKA_TS_MS),
        _bad("the Kafka record timestamp is out of range [0, 2^53) ms: -1"),
        _bad("the Kafka record has no timestamp (--ts-field @timestamp)"),
        _bad("field 'key' must be a string, got BIGINT"),
    ]


def test_distinct_canonical_text(spark: SparkSession) -> None:
    spec = InputSpec(distinct_fields=("u",))
    values = [b'{"key":"a","ts":1,"u":1}', b'{"key":"a","ts":1,"u":1.0}',
              b'{"key":"a","ts":1,"u":1e0}', b'{"key":"a","ts":1,"u":"1"}',
              b'{"key":"a","ts":1,"u":true}', b'{"key":"a","ts":1,"u":"h\\u00e9"}',
              b'{"key":"a","ts":1,"u":0.1}', b'{"key":"a","ts":1,"u":1e-1}',
              b'{"key":"a","ts":1}', b'{"key":"a","ts":1,"u":null}', b'{"key":"a","ts":1,"u":[]}']
    rows = _run(spark, spec, values)
    assert [r[3] for r in rows[:8]] == ["1", "1", "1", '"1"', "true", '"h\u00e9"', "0.1", "0.1"]
    assert [r[0] for r in rows] == [None] * 8 + [
        "missing field 'u'", "field 'u' is null",
        "field 'u' must be a string, number or boolean, got ARRAY<VOID>"]
    assert all(r[1:] == (None, None, None) for r in rows[8:])
