"""Classify input records for any input spec: nested paths, grouped keys, time formats (SPEC §7).

:func:`classify_input` is the job's one parse. For the plain shape (:attr:`InputSpec.plain`:
one top-level key, a top-level epoch-ms time and the bare form's top-level value field) it
runs :func:`revise.spark.parse.classify`, whose Java UDF ``revise_fast_parse`` is the
benchmarked path; for every other spec :func:`classify_fields`, which has the same structure
and reason wording: one ``try_parse_json`` into a VARIANT per record, a
cheap all-good test read with one lookup per field, and the full diagnosis (``reason``) built
only for records that fail it. Bad input becomes a dead letter whose reason names the field.
For specs of top-level fields with an epoch-ms time and no distinct fields, a Java UDF
(``revise_fast_fields``, ``revise/infra/java/revise/jvm/FastFields.java``) takes the records it
surely accepts first, as ``parse``'s own Java path does; the variant is built for the others.

Rules (a "field" is a dotted path into nested objects: ``payload.user.id``):

- **Key.** One key field: a JSON string, the key as is (as the plain parse). Several key fields
  (``--key-field store,region``): each a string, number or boolean, and the key is the JSON
  array of their canonical texts, e.g. ``["store-1",42]``. Missing, null, object or array
  members make a dead letter naming the member.
- **Canonical text** (grouped keys and ``distinct``): strings as JSON strings (``"1"``, with
  quotes, backslashes and control characters escaped, other characters verbatim), booleans
  ``true`` / ``false``, numbers by value: integers as their digits, other numbers whose
  float64 value is a whole number below 2**53 as those digits (``1``, ``1.0`` and ``1e0`` are
  all ``1``), else float64 in Java's ``Double.toString`` form (``1.5``, ``2.5E-7``). A string
  never equals a number (``"1"`` vs ``1``). Non-finite numbers are dead letters.
- **Event time** (``ts_ms``, int64 epoch ms, accepted in ``[0, 2**53)``): ``epoch_ms`` an
  integer (the plain parse's rule); ``epoch_s`` any finite number of seconds, fractions allowed,
  ``ms = floor(s * 1000)`` (to 1e-9 s); ``epoch_us`` an integer, ``ms = floor(us / 1000)``;
  ``iso8601`` a text ``YYYY-MM-DD[T or space]hh:mm:ss[.fraction]`` with ``Z`` or an offset
  (``+01:00``, ``+0100``, ``-05``), sub-ms digits truncated; a text without zone is a dead letter.
  ``@timestamp``: the Kafka record timestamp (the source's ``timestamp`` column).
- **Numeric aggregated fields**: a finite JSON number, read as float64 (as the plain parse).
- **Distinct fields**: a string, number or boolean, as canonical text.

Checks run in this order and the first failing one is the reason: empty value, invalid JSON,
not an object, key fields, event time, numeric fields, distinct fields (each in option order).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from revise.inputspec import KAFKA_TIMESTAMP, InputSpec, TsFormat, parse_key_fields, variant_path
from revise.spark.parse import (
    _MAX_TS,
    FAST_FIELDS_UDF,
    INTEGER_TYPES,
    _sql_str,
    classify,
    java_fields,
    json_number,
    json_string,
    lazy_variant,
)

__all__ = ["KAFKA_TIMESTAMP", "InputSpec", "TsFormat", "classify_fields", "classify_input",
           "parse_key_fields"]

_INTS = ", ".join(_sql_str(t) for t in INTEGER_TYPES)
_NUMBERS = f"({{t}} IN ({_INTS}, 'FLOAT', 'DOUBLE') OR {{t}} LIKE 'DECIMAL(%')"
_ISO_BODY = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,9})?"
_ISO_ZONE = r"(Z|[+-][0-9]{2}(:?[0-9]{2})?)$"


@dataclass(frozen=True, slots=True)
class _Check:
    """The SQL of one field: precomputed columns, cheap test, diagnosis branches, output.

    ``subs`` (the field's value looked up once, as a variant) are computed before ``pre``,
    which may read them.
    """

    pre: tuple[Column, ...]
    fast: str
    whens: str
    out: str
    subs: tuple[Column, ...] = ()


def _sub(p: str, name: str) -> Column:
    """The value at path ``p`` of ``_v`` as a variant column ``name`` (one lookup per row)."""
    return F.expr(f"variant_get(_v, {p})").alias(name)


def _quoted(field: str) -> str:
    return _sql_str(f"'{field}'")


def _double(sub: str, p: str) -> str:
    """SQL of the value of variant column ``sub`` (path ``p``) as a double, or NULL."""
    return json_number(sub, p, "double")


def _canonical(t: str, p: str, sub: str) -> str:
    """SQL of the canonical text of a value whose variant type is column ``t``.

    The value is at path ``p`` of ``_v``, and in variant column ``sub``.
    """
    d = _double(sub, p)
    return f"""CASE WHEN {t} IN ('STRING', 'BOOLEAN', {_INTS}) OR {t} LIKE 'DECIMAL(%,0)'
        THEN to_json({sub})
        WHEN {d} % 1 = 0 AND abs({d}) < {_MAX_TS} THEN cast(cast({d} AS bigint) AS string)
        ELSE cast({d} AS string) END"""


def _presence_whens(t: str, q: str) -> str:
    return f"""
        WHEN {t} IS NULL THEN concat('missing field ', {q})
        WHEN {t} = 'VOID' THEN concat('field ', {q}, ' is null')"""


def _scalar_check(i: int, field: str, role: str, *, string_only: bool) -> _Check:
    """A key member (``role`` ``k``) or distinct field (``d``): string, or string/number/bool."""
    p, q, t = _sql_str(variant_path(field, "field")), _quoted(field), f"_{role}{i}"
    sub, text = f"{t}v", f"{t}j"
    subs = (_sub(p, sub),)
    pre = (F.expr(f"schema_of_variant({sub})").alias(t),)
    if string_only:
        return _Check(pre + (F.expr(f"to_json({sub})").alias(text),), f"{t} = 'STRING'",
                      _presence_whens(t, q) + f"""
        WHEN {t} <> 'STRING' THEN concat('field ', {q}, ' must be a string, got ', {t})""",
                      json_string(text, p), subs)
    d = _double(sub, p)
    is_num = _NUMBERS.format(t=t)
    whens = _presence_whens(t, q) + f"""
        WHEN NOT ({t} IN ('STRING', 'BOOLEAN') OR {is_num}) THEN concat('field ', {q},
             ' must be a string, number or boolean, got ', {t})
        WHEN {is_num} AND (isnan({d}) OR abs({d}) = double('infinity'))
          THEN concat('field ', {q}, ' is not a finite number')"""
    return _Check(pre, f"{t} IN ('STRING', 'BOOLEAN', {_INTS})", whens, _canonical(t, p, sub),
                  subs)


def _numeric_check(i: int, field: str) -> _Check:
    """A numeric aggregated field: a finite JSON number, as float64, as the plain parse reads it."""
    p, q, t, val = _sql_str(variant_path(field, "field")), _quoted(field), f"_n{i}", f"_nv{i}"
    sub = f"{t}v"
    pre = (F.expr(f"schema_of_variant({sub})").alias(t), F.expr(_double(sub, p)).alias(val))
    is_num = _NUMBERS.format(t=t)
    finite = f"(NOT isnan({val}) AND abs({val}) <> double('infinity'))"
    whens = _presence_whens(t, q) + f"""
        WHEN NOT {is_num} THEN concat('field ', {q}, ' must be a number, got ', {t})
        WHEN {val} IS NULL OR NOT {finite} THEN concat('field ', {q}, ' is not a finite number')"""
    return _Check(pre, f"{is_num} AND {finite}", whens, val, (_sub(p, sub),))


def _epoch_check(spec: InputSpec) -> _Check:
    """Event time in one of the epoch formats, as ``_tms`` (int64 ms)."""
    p, q = _sql_str(variant_path(spec.ts_field, "--ts-field")), _quoted(spec.ts_field)
    fmt = spec.ts_format
    pre = (F.expr("schema_of_variant(_ttv)").alias("_tt"),
           F.expr(json_number("_ttv", p, "bigint")).alias("_ts"))
    is_int = f"(_tt IN ({_INTS}) OR (_tt LIKE 'DECIMAL(%,0)'))"
    unit = {"epoch_ms": "ms", "epoch_s": "s", "epoch_us": "us"}[fmt]
    scale = {"epoch_ms": 1, "epoch_s": 1000, "epoch_us": 1}[fmt]
    hi = _MAX_TS * 1000 if fmt == "epoch_us" else -(-_MAX_TS // scale)
    fast = f"_tt IN ({_INTS}) AND _ts >= 0 AND _ts < {hi}"
    raw = f"variant_get(_v, {p}, 'string')"
    if fmt == "epoch_s":
        dec = f"try_variant_get(_v, {p}, 'decimal(38,9)')"
        ms = f"CAST(floor({dec} * 1000) AS bigint)"
        kind = f"""WHEN NOT {_NUMBERS.format(t='_tt')} THEN concat('field ', {q},
             ' must be a number (epoch s), got ', _tt)
        WHEN {dec} IS NULL OR {dec} < 0 OR {dec} >= {_MAX_TS / 1000!r}"""
        out = f"CASE WHEN _tt IN ({_INTS}) THEN _ts * 1000 ELSE {ms} END"
    else:
        dec = f"try_variant_get(_v, {p}, 'decimal(38,0)')"
        kind = f"""WHEN NOT {is_int} THEN concat('field ', {q},
             ' must be an integer (epoch {unit}), got ', _tt)
        WHEN {dec} IS NULL OR {dec} < 0 OR {dec} >= {hi}"""
        out = "_ts" if fmt == "epoch_ms" else "_ts div 1000"
    suffix = "" if fmt == "epoch_ms" else " ms"
    whens = _presence_whens("_tt", q) + f"""
        {kind}
          THEN concat('field ', {q}, ' is out of range [0, 2^53){suffix}: ', {raw})"""
    return _Check(pre, fast, whens, out, (_sub(p, "_ttv"),))


def _iso_check(spec: InputSpec) -> _Check:
    """Event time as ISO-8601 text with a zone, as ``_tms`` (int64 ms, sub-ms truncated)."""
    p, q = _sql_str(variant_path(spec.ts_field, "--ts-field")), _quoted(spec.ts_field)
    zoned = f"_tstr RLIKE '{_ISO_BODY}{_ISO_ZONE}'"
    # The typed read: json_string would need the text as a column of an earlier stage.
    pre = (F.expr("schema_of_variant(_ttv)").alias("_tt"),
           F.expr(f"try_variant_get(_v, {p}, 'string')").alias("_tstr"))
    ms = f"(CASE WHEN {zoned} THEN unix_millis(try_cast(_tstr AS timestamp)) END)"
    fast = f"_tt = 'STRING' AND {zoned} AND {ms} >= 0 AND {ms} < {_MAX_TS}"
    whens = _presence_whens("_tt", q) + f"""
        WHEN _tt <> 'STRING' THEN concat('field ', {q},
             ' must be an ISO-8601 text with a zone (e.g. 2026-11-23T20:15:00Z), got ', _tt)
        WHEN _tstr RLIKE '{_ISO_BODY}$' THEN concat('field ', {q}, ' has no time zone: ',
             _tstr, '; end it with Z or an offset such as +01:00')
        WHEN NOT {zoned} OR {ms} IS NULL THEN concat('field ', {q},
             ' is not an ISO-8601 time (YYYY-MM-DDThh:mm:ss[.fff]Z or +hh:mm): ', _tstr)
        WHEN {ms} < 0 OR {ms} >= {_MAX_TS}
          THEN concat('field ', {q}, ' is out of range [0, 2^53) ms: ', _tstr)"""
    return _Check(pre, fast, whens, ms, (_sub(p, "_ttv"),))


def _kafka_ts_check() -> _Check:
    """Event time from the Kafka record timestamp (Spark's ``timestamp`` column)."""
    ms = "unix_millis(timestamp)"
    whens = f"""
        WHEN timestamp IS NULL THEN 'the Kafka record has no timestamp (--ts-field @timestamp)'
        WHEN {ms} < 0 OR {ms} >= {_MAX_TS} THEN concat(
             'the Kafka record timestamp is out of range [0, 2^53) ms: ', cast({ms} AS string))"""
    return _Check((), f"{ms} >= 0 AND {ms} < {_MAX_TS}", whens, ms)


def _ts_check(spec: InputSpec) -> _Check:
    if spec.ts_field == KAFKA_TIMESTAMP:
        return _kafka_ts_check()
    return _iso_check(spec) if spec.ts_format == "iso8601" else _epoch_check(spec)


def _java_path(spec: InputSpec) -> bool:
    """Whether ``revise_fast_fields`` can read ``spec``'s fields (``revise.jvm.FastFields``).

    One key field, an epoch-ms event time, numeric fields, all top-level (no dot), distinct
    names (no NUL: the UDF gets the numeric names joined by NULs); no distinct fields.
    """
    names = [*spec.key_fields, spec.ts_field, *spec.numeric_fields]
    return (len(spec.key_fields) == 1 and not spec.distinct_fields
            and spec.ts_format == "epoch_ms" and spec.ts_field != KAFKA_TIMESTAMP
            and len(set(names)) == len(names)
            and not any("." in f or "\0" in f for f in names))


def classify_input(raw: DataFrame, spec: InputSpec) -> DataFrame:
    """The Kafka source rows classified (``reason``) and typed for ``spec``.

    The plain shape goes through :func:`revise.spark.parse.classify`, any other through
    :func:`classify_fields`. Either way the result has ``key``, ``ts_ms``, ``partition``,
    ``offset``, ``reason`` and ``raw_value``; with a ``value_field`` (the bare ``--aggs``
    form) a ``value`` column (its number, 0.0 where no aggregate needs it and it is absent or
    not a number), else the numeric and distinct columns of :attr:`InputSpec.columns`.
    """
    if spec.plain:
        assert spec.value_field is not None
        return classify(raw, key_field=spec.key_fields[0], ts_field=spec.ts_field,
                        value_field=spec.value_field, value_required=bool(spec.numeric_fields))
    df = classify_fields(raw, spec)
    if spec.value_field is None:
        return df
    value = (F.col(spec.numeric_column(spec.numeric_fields[0])) if spec.numeric_fields
             else F.lit(None).cast(T.DoubleType()))
    return df.withColumn("value", F.when(F.col("reason").isNull(),
                                         F.coalesce(value, F.lit(0.0))))


def classify_fields(raw: DataFrame, spec: InputSpec, *, fast: bool = True) -> DataFrame:
    """Parse Kafka source rows per ``spec``: typed engine inputs, or a ``reason`` for bad input.

    Records the Java UDF ``revise_fast_fields`` surely accepts take its fields and skip the
    variant (top-level fields and epoch-ms time only, :func:`_java_path`; the rules are those
    of :mod:`revise.spark.parse`'s own Java path); all others, and every record of another
    spec or of a session without revise's jar, take the SQL path below, which alone names
    reasons. The results are the same either way.

    Args:
        raw: Rows of Spark's Kafka source (``value`` binary, ``topic``, ``partition``,
            ``offset``, ``timestamp``).
        spec: Where key, event time and aggregated fields are, and the time format.
        fast: try the Java UDF first (when ``spec`` allows it and the session has it);
            False parses every record through the SQL path (benchmarks, tests).

    Returns:
        :attr:`InputSpec.columns`: ``raw_value`` (string), ``topic``, ``partition``, ``offset``,
        ``timestamp`` (the Kafka record's), ``reason`` (null when accepted), then, null unless
        accepted: ``key`` (string), ``ts_ms`` (bigint, epoch ms), one double column per numeric
        field and one string column per distinct field.
    """
    single = len(spec.key_fields) == 1
    keys = [_scalar_check(i, f, "k", string_only=single) for i, f in enumerate(spec.key_fields)]
    ts = _ts_check(spec)
    nums = [_numeric_check(i, f) for i, f in enumerate(spec.numeric_fields)]
    dsts = [_scalar_check(i, f, "d", string_only=False)
            for i, f in enumerate(spec.distinct_fields)]
    checks = [*keys, ts, *nums, *dsts]
    # _f: the UDF's fields, or NULL when it is not sure; only then is the variant _v built.
    df = raw.select(
        F.col("value").cast("string").alias("raw_value"), "topic", "partition", "offset",
        "timestamp",
        java_fields(raw.sparkSession, FAST_FIELDS_UDF, spec.key_fields[0], spec.ts_field,
                    chr(0).join(spec.numeric_fields), use=fast and _java_path(spec)),
    ).withColumn("_v", lazy_variant())
    df = df.select("*", *(c for check in checks for c in check.subs))
    df = df.select("*", *(c for check in checks for c in check.pre))
    cheap = " AND ".join(f"({c.fast})" for c in checks)
    # A lookup on anything but an object is NULL, so a found first key proves an object; the
    # whole-value schema is computed only for records whose first key is missing.
    reason = f"""CASE
        WHEN _f IS NOT NULL OR ({cheap}) THEN NULL
        WHEN raw_value IS NULL OR trim(raw_value) = '' THEN 'empty value'
        WHEN _v IS NULL THEN 'invalid JSON'
        WHEN _k0 IS NULL AND schema_of_variant(_v) NOT LIKE 'OBJECT%' THEN concat(
             'value is a JSON ', lower(regexp_extract(schema_of_variant(_v), '^([A-Z]+)', 1)),
             ', expected an object')
        {"".join(c.whens for c in checks)}
        ELSE NULL END"""
    df = df.withColumn("reason", F.expr(reason))
    ok = F.col("reason").isNull()
    took = F.col("_f").isNotNull()
    key = keys[0].out if single else (
        "concat('[', concat_ws(',', " + ", ".join(k.out for k in keys) + "), ']')")
    outs = [F.when(took, F.col("_f.key")).when(ok, F.expr(key)).alias("key"),
            F.when(took, F.col("_f.ts")).when(ok, F.expr(ts.out).cast("bigint")).alias("ts_ms"),
            *(F.when(took, F.col("_f.values")[i]).when(ok, F.expr(c.out))
              .alias(spec.numeric_column(f))
              for i, (c, f) in enumerate(zip(nums, spec.numeric_fields, strict=True))),
            *(F.when(ok, F.expr(c.out)).alias(spec.distinct_column(f))
              for c, f in zip(dsts, spec.distinct_fields, strict=True))]
    return df.select("raw_value", "topic", "partition", "offset", "timestamp", "reason", *outs)
