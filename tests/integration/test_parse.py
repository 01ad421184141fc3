"""``revise.spark.parse.classify`` on a real Spark session: exact reasons and parsed fields.

The rows are shaped like Spark's Kafka source (``value`` binary, ``topic``, ``partition``,
``offset``). The expected reasons were recorded from the implementation before its fast path
was added and are frozen here, so the fast path cannot change any output. The exceptions are
field names with a single quote or a backslash, which that implementation could not look up
(a Spark error, resp. always "missing field"); their expectations follow the same rules.

Each frozen case runs twice: with the accepted path in Java (``revise_fast_parse``) and
without it. A generated corpus of well-formed, odd and broken records then pins that the Java
path gives exactly what the SQL path alone gives.
"""

from __future__ import annotations

import json
import random
from typing import TYPE_CHECKING, Any

import pytest
from pyspark.sql import functions as F

from revise.spark.parse import (
    FAST_PARSE_UDF,
    classify,
    java_fields,
    json_number,
    json_string,
    json_string_column,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark]

SCHEMA = "value BINARY, topic STRING, partition INT, offset BIGINT"
COLUMNS = ["raw_value", "topic", "partition", "offset", "reason", "key", "ts_ms", "value"]

Expected = tuple[str | None, str | None, int | None, float | None]


def _rec(key: Any = "a", ts: Any = 1, value: Any = 1.5, **extra: Any) -> bytes:
    """A JSON object with the default field names; ``...`` leaves a field out."""
    fields = {"key": key, "ts": ts, "value": value, **extra}
    return json.dumps({k: v for k, v in fields.items() if v is not ...}).encode()


def _ok(key: str, ts: int, value: float) -> Expected:
    return (None, key, ts, value)


def _bad(reason: str) -> Expected:
    return (reason, None, None, None)


TS_INT = "field 'ts' must be an integer (epoch ms), got "
TS_RANGE = "field 'ts' is out of range [0, 2^53): "

DEFAULT_CASES: dict[str, tuple[bytes | None, Expected]] = {
    "good": (b'{"key":"user-000123","ts":1700000000123,"value":12.5}',
             _ok("user-000123", 1700000000123, 12.5)),
    "good ts 12.0": (b'{"key":"a","ts":12.0,"value":1}', _ok("a", 12, 1.0)),
    "good ts 0": (_rec(ts=0, value=-3.25), _ok("a", 0, -3.25)),
    "good ts 2^53-1": (_rec(ts=2**53 - 1), _ok("a", 2**53 - 1, 1.5)),
    "good negative value": (_rec(value=-7), _ok("a", 1, -7.0)),
    "good huge integer value": (b'{"key":"a","ts":1,"value":123456789012345678901234567890}',
                                _ok("a", 1, 1.2345678901234568e29)),
    "good value underflows to 0": (b'{"key":"a","ts":1,"value":1e-400}', _ok("a", 1, 0.0)),
    "good extra fields, spaces": (b' {"x":[1,{"y":null}],"key":"","ts":5,"value":2} ',
                                  _ok("", 5, 2.0)),
    "good non-ascii key": ('{"key":"h\\u00e9 \u20ac","ts":1,"value":1}'.encode(),
                           _ok("h\u00e9 \u20ac", 1, 1.0)),
    "invalid JSON": (b'{"key":"a",', _bad("invalid JSON")),
    "not JSON": (b"not json", _bad("invalid JSON")),
    "NaN literal": (b'{"key":"a","ts":1,"value":NaN}', _bad("invalid JSON")),
    "duplicate key": (b'{"key":"a","key":"b","ts":1,"value":1}', _bad("invalid JSON")),
    "empty value": (b"", _bad("empty value")),
    "spaces only": (b"   ", _bad("empty value")),
    # trim() strips spaces only, so other whitespace reaches the JSON parser.
    "tab/newline only": (b" \t\n ", _bad("invalid JSON")),
    "null value": (None, _bad("empty value")),
    "array": (b"[1,2]", _bad("value is a JSON array, expected an object")),
    "array of objects": (b'[{"key":"a","ts":1,"value":1}]',
                         _bad("value is a JSON array, expected an object")),
    "string": (b'"hello"', _bad("value is a JSON string, expected an object")),
    "integer": (b"12", _bad("value is a JSON bigint, expected an object")),
    "decimal": (b"12.5", _bad("value is a JSON decimal, expected an object")),
    "boolean": (b"true", _bad("value is a JSON boolean, expected an object")),
    "JSON null": (b"null", _bad("value is a JSON void, expected an object")),
    "empty object": (b"{}", _bad("missing field 'key'")),
    "missing key": (_rec(key=...), _bad("missing field 'key'")),
    "null key": (_rec(key=None), _bad("field 'key' is null")),
    "numeric key": (_rec(key=123), _bad("field 'key' must be a string, got BIGINT")),
    "decimal key": (_rec(key=1.5), _bad("field 'key' must be a string, got DECIMAL(2,1)")),
    "boolean key": (_rec(key=True), _bad("field 'key' must be a string, got BOOLEAN")),
    "object key": (_rec(key={"a": 1}),
                   _bad("field 'key' must be a string, got OBJECT<a: BIGINT>")),
    "missing ts": (_rec(ts=...), _bad("missing field 'ts'")),
    "null ts": (_rec(ts=None), _bad("field 'ts' is null")),
    "string ts": (_rec(ts="12"), _bad(TS_INT + "STRING")),
    "boolean ts": (_rec(ts=False), _bad(TS_INT + "BOOLEAN")),
    "array ts": (_rec(ts=[1]), _bad(TS_INT + "ARRAY<BIGINT>")),
    "fractional ts": (_rec(ts=12.5), _bad(TS_INT + "DECIMAL(3,1)")),
    "exponent ts 1e3": (b'{"key":"a","ts":1e3,"value":1}', _bad(TS_INT + "DOUBLE")),
    "huge ts 1e30": (b'{"key":"a","ts":1e30,"value":1}', _bad(TS_INT + "DOUBLE")),
    "negative ts": (_rec(ts=-5), _bad(TS_RANGE + "-5")),
    "negative ts -5.0": (b'{"key":"a","ts":-5.0,"value":1}', _bad(TS_RANGE + "-5")),
    "ts 2^53": (_rec(ts=2**53), _bad(TS_RANGE + "9007199254740992")),
    "ts 2^63": (_rec(ts=2**63), _bad(TS_RANGE + "9223372036854775808")),
    "ts 10^30 integer": (_rec(ts=10**30), _bad(TS_RANGE + "1" + "0" * 30)),
    "missing value": (_rec(value=...), _bad("missing field 'value'")),
    "null value field": (_rec(value=None), _bad("field 'value' is null")),
    "string value": (_rec(value="12.5"), _bad("field 'value' must be a number, got STRING")),
    "boolean value": (_rec(value=True), _bad("field 'value' must be a number, got BOOLEAN")),
    "array value": (_rec(value=[]), _bad("field 'value' must be a number, got ARRAY<VOID>")),
    "value 1e400": (b'{"key":"a","ts":1,"value":1e400}',
                    _bad("field 'value' is not a finite number")),
    "value -1e400": (b'{"key":"a","ts":1,"value":-1e400}',
                     _bad("field 'value' is not a finite number")),
    # The fast path tests the fields' JSON texts: texts that read as numbers but are not
    # accepted ones must take the slow path and get its reason.
    "ts 50e-1 (a DOUBLE, text 5.0)": (b'{"key":"a","ts":50e-1,"value":1}', _bad(TS_INT + "DOUBLE")),
    "ts -0": (b'{"key":"a","ts":-0,"value":1}', _ok("a", 0, 1.0)),
    "ts 2^63-1": (_rec(ts=2**63 - 1), _bad(TS_RANGE + "9223372036854775807")),
    "string value NaN": (_rec(value="NaN"), _bad("field 'value' must be a number, got STRING")),
    "string value Infinity": (_rec(value="Infinity"),
                              _bad("field 'value' must be a number, got STRING")),
    "good key with a quote": (_rec(key='a"b'), _ok('a"b', 1, 1.5)),
    "first failing field wins": (_rec(key=1, ts="x", value=...),
                                 _bad("field 'key' must be a string, got BIGINT")),
}

# With value_required=False the value field is ignored: missing, null or non-numeric is 0.0.
NO_VALUE_CASES: dict[str, tuple[bytes | None, Expected]] = {
    "missing value": (_rec(value=...), _ok("a", 1, 0.0)),
    "null value field": (_rec(value=None), _ok("a", 1, 0.0)),
    "string value": (_rec(value="x"), _ok("a", 1, 0.0)),
    "number value": (_rec(value=2.5), _ok("a", 1, 2.5)),
    "value 1e400": (b'{"key":"a","ts":1,"value":1e400}', _ok("a", 1, float("inf"))),
    "string ts": (_rec(ts="1", value=...), _bad(TS_INT + "STRING")),
}

CUSTOM = {"key_field": "user.id", "ts_field": "$t", "value_field": "v[0]"}
CUSTOM_CASES: dict[str, tuple[bytes | None, Expected]] = {
    "good": (b'{"user.id":"u","$t":5,"v[0]":1.5}', _ok("u", 5, 1.5)),
    "default names are not used": (b'{"key":"u","ts":5,"value":1.5}',
                                   _bad("missing field 'user.id'")),
    "a dot is not a nested path": (b'{"user":{"id":"u"},"$t":5,"v[0]":1.5}',
                                   _bad("missing field 'user.id'")),
    "bad ts": (b'{"user.id":"u","$t":-1,"v[0]":1.5}',
               _bad("field '$t' is out of range [0, 2^53): -1")),
    "bad value": (b'{"user.id":"u","$t":5,"v[0]":null}', _bad("field 'v[0]' is null")),
}

QUOTED = {"key_field": "k'ey", "ts_field": 'ts"x', "value_field": "v\\al.ue"}
QUOTED_CASES: dict[str, tuple[bytes | None, Expected]] = {
    "good": (json.dumps({"k'ey": "a", 'ts"x': 5, "v\\al.ue": 1.5}).encode(), _ok("a", 5, 1.5)),
    "missing key": (json.dumps({'ts"x': 5, "v\\al.ue": 1.5}).encode(),
                    _bad("missing field 'k'ey'")),
    "null key": (json.dumps({"k'ey": None, 'ts"x': 5, "v\\al.ue": 1.5}).encode(),
                 _bad("field 'k'ey' is null")),
    "missing ts": (json.dumps({"k'ey": "a", "v\\al.ue": 1.5}).encode(),
                   _bad("missing field 'ts\"x'")),
    "string value": (json.dumps({"k'ey": "a", 'ts"x': 5, "v\\al.ue": "z"}).encode(),
                     _bad("field 'v\\al.ue' must be a number, got STRING")),
}

BOTH_QUOTES = {"key_field": "x'y\"z"}
BOTH_QUOTES_CASES: dict[str, tuple[bytes | None, Expected]] = {
    "good": (json.dumps({"x'y\"z": "a", "ts": 1, "value": 1}).encode(), _ok("a", 1, 1.0)),
    "missing key": (_rec(key=...), _bad("missing field 'x'y\"z'")),
}

GROUPS = {
    "defaults": ({}, DEFAULT_CASES),
    "value not required": ({"value_required": False}, NO_VALUE_CASES),
    "custom field names": (CUSTOM, CUSTOM_CASES),
    "quotes and backslash in field names": (QUOTED, QUOTED_CASES),
    "both quotes in a field name": (BOTH_QUOTES, BOTH_QUOTES_CASES),
}


def _uses_java_path(df: Any) -> bool:
    return FAST_PARSE_UDF in df._jdf.queryExecution().analyzed().toString()


@pytest.mark.parametrize("fast", [True, False], ids=["java path", "sql only"])
@pytest.mark.parametrize("group", list(GROUPS))
def test_classify_reasons_and_fields(spark: SparkSession, group: str, fast: bool) -> None:
    options, cases = GROUPS[group]
    names = list(cases)
    raw = spark.createDataFrame(
        [(value, "in", i % 3, i) for i, (value, _) in enumerate(cases.values())], SCHEMA
    )
    out = classify(raw, **options, fast=fast)
    # The session revise starts has revise's jar: the Java path is really taken (or not).
    assert _uses_java_path(out) == fast
    assert out.columns == COLUMNS
    assert [(f.name, f.dataType.simpleString()) for f in out.schema.fields] == [
        ("raw_value", "string"), ("topic", "string"), ("partition", "int"),
        ("offset", "bigint"), ("reason", "string"), ("key", "string"), ("ts_ms", "bigint"),
        ("value", "double"),
    ]
    rows = {r["offset"]: r for r in out.collect()}
    assert sorted(rows) == list(range(len(names)))
    got = {names[i]: (r["reason"], r["key"], r["ts_ms"], r["value"]) for i, r in rows.items()}
    want = {name: expected for name, (_, expected) in cases.items()}
    wrong = [n for n in names if got[n] != want[n]]
    assert {n: got[n] for n in wrong} == {n: want[n] for n in wrong}
    for i, (value, _) in enumerate(cases.values()):
        row = rows[i]
        assert (row["raw_value"], row["topic"], row["partition"]) == (
            None if value is None else value.decode(), "in", i % 3,
        )


def test_unaddressable_field_name_is_rejected(spark: SparkSession) -> None:
    raw = spark.createDataFrame([], SCHEMA)
    with pytest.raises(ValueError, match="variant path"):
        classify(raw, key_field="a'b\".c")


def _json_values() -> list[str]:
    """JSON texts of many kinds: numbers of every form and size, strings with and without
    escapes, and other types (the helpers must give the typed read's answer for them too)."""
    rng = random.Random(7)
    texts = ["0", "-0", "-0.0", "1", "12.0", "1e0", "1E+2", "2.5e-7", "1e-400", "1e400", "-1e400",
             "9007199254740993", "123456789012345678901234567890", "99999999999999999999.5",
             "0.1", "0.30000000000000004", "1.2345678901234567", "5e-324", "1.7976931348623157e308",
             "true", "false", '"3"', '"12.5"', '"abc"', '""', '"a\\"b"', '"a\\\\b"', '"tab\\t"',
             '"\\u0000x"', '"h\\u00e9"', '"a/b"', '"\u00e9\u20ac\U0001f600"', "[1]", '{"a":1}']
    for _ in range(300):
        texts.append(repr(rng.uniform(-1e6, 1e6)))
        texts.append(f"{rng.gauss(0, 1) * 10.0 ** rng.randint(-30, 30):.{rng.randint(0, 17)}e}")
        texts.append(f"{rng.randint(-10**25, 10**25)}.{rng.randint(0, 10**rng.randint(1, 18))}")
        texts.append(str(rng.randint(-2**63, 2**63 - 1)))
    return texts


def test_reads_through_json_text_equal_typed_variant_reads(spark: SparkSession) -> None:
    """``json_number`` / ``json_string`` (the fast path's reads) give exactly what
    ``try_variant_get`` gives, for every kind of JSON value."""
    texts = _json_values()
    df = spark.createDataFrame([(i, f'{{"f":{t}}}') for i, t in enumerate(texts)],
                               "i INT, raw STRING").selectExpr(
        "i", "raw", "try_parse_json(raw) AS _v").selectExpr(
        "i", "raw", "_v", "variant_get(_v, '$.f') AS sub").selectExpr(
        "i", "raw", "to_json(sub) AS text", "sub", "_v")
    reads = {
        "double": (json_number("sub", "'$.f'", "double"),
                   "try_variant_get(_v, '$.f', 'double')"),
        "bigint": (json_number("sub", "'$.f'", "bigint"),
                   "try_variant_get(_v, '$.f', 'bigint')"),
        "string": (json_string("text", "'$.f'"),
                   "try_variant_get(_v, '$.f', 'string')"),
    }
    cols = [f"{sql} AS {name}_{side}" for name, pair in reads.items()
            for side, sql in zip(("fast", "typed"), pair, strict=True)]
    rows = df.select("raw", F.expr("try_cast(text AS double)").alias("text_double"),
                     *(F.expr(c) for c in cols),
                     json_string_column(F.col("text"), "$.f").alias("string_column")).collect()
    assert len(rows) == len(texts)
    # The column form the plain parse builds reads exactly what the SQL form reads.
    assert [r["string_column"] for r in rows] == [r["string_fast"] for r in rows]
    for name in reads:
        differ = [(r["raw"], r[f"{name}_fast"], r[f"{name}_typed"]) for r in rows
                  if r[f"{name}_fast"] != r[f"{name}_typed"]]
        assert differ == [], name
    # Most numbers were read from their text, not by the typed read.
    assert sum(r["text_double"] is not None for r in rows) > 1000
    by_raw = {r["raw"]: r["string_fast"] for r in rows}
    assert (by_raw['{"f":"abc"}'], by_raw['{"f":"a\\"b"}']) == ("abc", 'a"b')


# Bytes the Java path must leave to the SQL path: each where Jackson reading bytes and Spark
# reading the text decoded from them (malformed UTF-8 as U+FFFD) would part ways.
REFUSED_CASES = [
    b'\xef\xbb\xbf{"key":"a","ts":1,"value":1}',  # byte-order mark: Jackson skips it
    '{"key":"a","ts":1,"value":1}'.encode("utf-16-le"),  # Jackson detects UTF-16
    '{"key":"a","ts":1,"value":1}'.encode("utf-32-be"),
    b'{"key":"a\xed\xa0\x80","ts":1,"value":1}',  # an encoded surrogate
    b'{"\xc1\xab\xc1\xa5y":"a","key":"b","ts":1,"value":1}',  # overlong "ke"
    b'{"key":"a\xc3","ts":1,"value":1}',  # a truncated sequence before a quote
    b'{"key":"\\ud800","ts":1,"value":1}',  # a lone escaped surrogate (Spark refuses it)
    b'{"key":"a","ts":1,"value":1,"z":"\\udc00"}',  # ... in a field the Java path skips
    b'{"key":"a","ts":1,"value":1,"\\ud800":0}',  # ... in a name
    b'{"key":"a","ts":1,"value":1,"z":"\\ud83d\\ude00"}',  # a pair: left to Spark as well
    b'{"key":"a","ts":1,"value":1,"x":{"y":1,"y":2}}',  # a nested duplicate
]
# Odd records the two paths must agree on, whichever takes them.
ODD_CASES = [
    b'{"key":"a","ts":1,"value":1} trailing',  # Spark reads the first value only
    b'{"key":"a","ts":1,"value":-0.0}', b'{"key":"a","ts":1,"value":-0e0}',
    b'{"key":"a","ts":1,"value":0.' + b"0" * 40 + b'1}',  # more than 38 digits: a DOUBLE
    b'{"key":"a","ts":1,"value":1,"deep":' + b"[" * 600 + b"]" * 600 + b"}",
    b'{"key":"a","ts":1,"value":1,"n":1' + b"0" * 1200 + b"}",  # beyond Jackson's number length
]
_EDIT_BYTES = (b'{}[]",:\\ u0dD8e-.+019\x00\t\n\xef\xbb\xbf\xc3\xa9\xed\xa0\x80\xc1\xf0\x9f'
               b"\x98\x80\xff")


def corpus(names: dict[str, str], count: int, seed: int,
           more_values: tuple[str, ...] = ()) -> list[bytes]:
    """Records with ``names``' fields (and ``more_values``, numbers like the value field):
    every kind of key, ts and value text, extra fields, shuffled order and spacing, and a
    third of them edited byte by byte. The first ones are :data:`REFUSED_CASES`."""
    rng = random.Random(seed)
    values = _json_values()
    keys = ['"k1"', '""', '"caf\u00e9"', '"\\u00e9\\n\\"q\\""', '"\U0001f600 x"',
            '"\\ud83d\\ude00"', "1", "null", "true", '{"a":1}', '["x"]']
    stamps = ["0", "1", "-0", "1700000000123", str(2**53 - 1), str(2**53), "-1", "12.0",
              "1e3", '"5"', "null", str(2**63), "5.5"]
    extras = ['"x":[1,{"y":null}]', '"n":-1.5e-3', '"s":"a,b}"', '"o":{}', '"t":true']
    out = [*REFUSED_CASES, *ODD_CASES]
    while len(out) < count:
        fields = []
        if rng.random() < 0.95:
            fields.append((names["key_field"], rng.choice(keys) if rng.random() < 0.3
                           else f'"k{rng.randint(0, 99)}"'))
        if rng.random() < 0.95:
            fields.append((names["ts_field"], rng.choice(stamps) if rng.random() < 0.3
                           else str(rng.randint(0, 2**41))))
        for name in (names["value_field"], *more_values):
            if rng.random() < 0.9:
                fields.append((name, rng.choice(values)))
        fields += [tuple(e.split(":", 1)) for e in rng.sample(extras, rng.randint(0, 2))]
        rng.shuffle(fields)
        sep = rng.choice([",", ", ", " ,\n"])
        body = sep.join(f"{json.dumps(n) if not n.startswith(chr(34)) else n}:{v}"
                        for n, v in fields)
        record = ("{" + body + "}").encode()
        if rng.random() < 0.33:
            edited = bytearray(record)
            for _ in range(rng.randint(1, 3)):
                at = rng.randrange(len(edited) + 1)
                roll = rng.random()
                if roll < 0.4:
                    edited.insert(at, rng.choice(_EDIT_BYTES))
                elif roll < 0.7 and at < len(edited):
                    edited[at] = rng.choice(_EDIT_BYTES)
                elif at < len(edited):
                    del edited[at]
            record = bytes(edited)
        out.append(record)
    return out


JAVA_PATH_GROUPS = {
    "defaults": {},
    "value not required": {"value_required": False},
    "custom field names": CUSTOM,
}


@pytest.mark.parametrize("group", list(JAVA_PATH_GROUPS))
def test_java_path_gives_what_the_sql_path_gives(spark: SparkSession, group: str) -> None:
    """Every row (reason, key, ts, value, raw text) is the same with and without the Java
    path, over a corpus where it takes most good records and must refuse the odd ones."""
    options: dict[str, Any] = JAVA_PATH_GROUPS[group]
    names = {"key_field": "key", "ts_field": "ts", "value_field": "value",
             **{k: v for k, v in options.items() if k.endswith("_field")}}
    records = corpus(names, 6000, seed=len(group))
    raw = spark.createDataFrame([(v, "in", i % 3, i) for i, v in enumerate(records)], SCHEMA)
    fast, sql = classify(raw, **options), classify(raw, **options, fast=False)
    assert _uses_java_path(fast)
    took = raw.select("offset", java_fields(
        spark, FAST_PARSE_UDF, names["key_field"], names["ts_field"], names["value_field"],
        options.get("value_required", True)).isNotNull().alias("took"))

    def rows(df: Any) -> dict[int, tuple[Any, ...]]:
        return {r["offset"]: (r["raw_value"], r["reason"], r["key"], r["ts_ms"],
                              None if r["value"] is None else repr(r["value"]))
                for r in df.collect()}

    got, want = rows(fast), rows(sql)
    assert len(want) == len(records)
    differ = {i: (records[i], got[i], want[i]) for i in want if got[i] != want[i]}
    assert differ == {}
    taken = {r["offset"] for r in took.collect() if r["took"]}
    accepted = {i for i, row in want.items() if row[1] is None}
    assert taken <= accepted
    # Not a vacuous comparison: the Java path took most accepted records, the SQL path saw
    # hundreds of rejected ones, and it refused the cases it must refuse.
    assert len(taken) > 0.6 * len(accepted) and len(want) - len(accepted) > 500
    assert not taken & set(range(len(REFUSED_CASES)))


def test_without_the_class_every_record_takes_the_sql_path(
        spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session without revise's jar (one revise did not start) parses all the same."""
    from revise.spark import parse

    missing = "revise_fast_parse_missing"
    monkeypatch.setattr(parse, "FAST_PARSE_UDF", missing)
    monkeypatch.setitem(parse._JAVA_UDFS, missing,
                        ("revise.jvm.NoSuchClass", parse._JAVA_UDFS[FAST_PARSE_UDF][1]))
    assert not parse.java_udf(spark, missing)
    raw = spark.createDataFrame([(v, "in", 0, i) for i, (v, _) in
                                 enumerate(DEFAULT_CASES.values())], SCHEMA)
    out = classify(raw)
    assert "revise_fast_parse" not in out._jdf.queryExecution().analyzed().toString()
    got = [(r["reason"], r["key"], r["ts_ms"], r["value"]) for r in out.orderBy("offset").collect()]
    assert got == [expected for _, expected in DEFAULT_CASES.values()]
