"""Parse and validate input records inside Spark (JVM side), classifying bad input with a reason.

Each Kafka record value is parsed once with Spark's ``try_parse_json`` into a VARIANT; the
type of each field is read with ``schema_of_variant``. A record is **accepted-format** when:

- the value is a JSON object;
- the key field is a JSON string;
- the ts field is an integral JSON number (``12``, and ``12.0`` which JSON cannot tell apart)
  in ``[0, 2**53)``;
- the value field is a finite JSON number — required only when an aggregate other than
  ``count`` is requested; with ``--aggs count`` the value is ignored.

Anything else gets a ``reason`` (e.g. ``invalid JSON``, ``missing field 'ts'``,
``field 'ts' must be an integer (epoch ms), got STRING``) and becomes a dead letter; it never
touches the watermark (its event time is set to 0, below any watermark) nor any aggregate.
Doing this in the JVM keeps Python off the per-record path and lets Spark compute the
watermark from accepted records only.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

__all__ = ["INTEGER_TYPES", "classify"]

INTEGER_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_MAX_TS = 2**53


def _path(field: str) -> str:
    escaped = field.replace("\\", "\\\\").replace("'", "\\'")
    return f"$['{escaped}']"


def _sql_str(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def classify(
    raw: DataFrame,
    *,
    key_field: str = "key",
    ts_field: str = "ts",
    value_field: str = "value",
    value_required: bool = True,
) -> DataFrame:
    """Parse the Kafka source rows and add the typed fields and a ``reason`` for bad input.

    Args:
        raw: Rows of Spark's Kafka source (``value`` binary, ``topic``, ``partition``,
            ``offset``).
        key_field: JSON field holding the key (a string).
        ts_field: JSON field holding the event time (integer epoch milliseconds).
        value_field: JSON field holding the number to aggregate.
        value_required: whether a missing or non-numeric value makes the record bad.

    Returns:
        Columns ``raw_value`` (string), ``topic``, ``partition``, ``offset``, ``key``,
        ``ts_ms`` (long), ``value`` (double), ``reason`` (null when accepted-format).
    """
    df = raw.select(
        F.col("value").cast("string").alias("raw_value"),
        F.col("topic"),
        F.col("partition"),
        F.col("offset"),
    ).withColumn("_v", F.expr("try_parse_json(raw_value)"))

    def vtype(field: str) -> Column:
        return F.expr(f"schema_of_variant(variant_get(_v, {_sql_str(_path(field))}))")

    df = df.select(
        "*",
        F.expr("schema_of_variant(_v)").alias("_t"),
        vtype(key_field).alias("_tk"),
        vtype(ts_field).alias("_tt"),
        vtype(value_field).alias("_tv"),
    )
    kq, tq, vq = (_sql_str(f"'{f}'") for f in (key_field, ts_field, value_field))
    ints = ", ".join(_sql_str(t) for t in INTEGER_TYPES)
    ts_dec = f"try_variant_get(_v, {_sql_str(_path(ts_field))}, 'decimal(38,0)')"
    is_int = f"(_tt IN ({ints}) OR (_tt LIKE 'DECIMAL(%,0)'))"
    is_num = f"(_tv IN ({ints}, 'FLOAT', 'DOUBLE') OR _tv LIKE 'DECIMAL(%')"
    val = f"try_variant_get(_v, {_sql_str(_path(value_field))}, 'double')"
    value_checks = (
        f"""
        WHEN _tv IS NULL THEN concat('missing field ', {vq})
        WHEN _tv = 'VOID' THEN concat('field ', {vq}, ' is null')
        WHEN NOT {is_num} THEN concat('field ', {vq}, ' must be a number, got ', _tv)
        WHEN {val} IS NULL OR isnan({val}) OR abs({val}) = double('infinity')
          THEN concat('field ', {vq}, ' is not a finite number')"""
        if value_required
        else ""
    )
    reason = f"""CASE
        WHEN raw_value IS NULL OR trim(raw_value) = '' THEN 'empty value'
        WHEN _v IS NULL THEN 'invalid JSON'
        WHEN _t NOT LIKE 'OBJECT%' THEN concat('value is a JSON ',
             lower(regexp_extract(_t, '^([A-Z]+)', 1)), ', expected an object')
        WHEN _tk IS NULL THEN concat('missing field ', {kq})
        WHEN _tk = 'VOID' THEN concat('field ', {kq}, ' is null')
        WHEN _tk <> 'STRING' THEN concat('field ', {kq}, ' must be a string, got ', _tk)
        WHEN _tt IS NULL THEN concat('missing field ', {tq})
        WHEN _tt = 'VOID' THEN concat('field ', {tq}, ' is null')
        WHEN NOT {is_int} THEN concat('field ', {tq}, ' must be an integer (epoch ms), got ', _tt)
        WHEN {ts_dec} IS NULL OR {ts_dec} < 0 OR {ts_dec} >= {_MAX_TS}
          THEN concat('field ', {tq}, ' is out of range [0, 2^53): ',
                      variant_get(_v, {_sql_str(_path(ts_field))}, 'string'))
        {value_checks}
        ELSE NULL END"""
    ok = "reason IS NULL"
    return df.select(
        "raw_value",
        "topic",
        "partition",
        "offset",
        F.expr(reason).alias("reason"),
        "_v",
    ).select(
        "raw_value",
        "topic",
        "partition",
        "offset",
        "reason",
        F.expr(
            f"CASE WHEN {ok} THEN variant_get(_v, {_sql_str(_path(key_field))}, 'string') END"
        ).alias("key"),
        F.expr(
            f"CASE WHEN {ok} THEN variant_get(_v, {_sql_str(_path(ts_field))}, 'bigint') END"
        ).alias("ts_ms"),
        F.expr(
            f"CASE WHEN {ok} THEN coalesce("
            f"try_variant_get(_v, {_sql_str(_path(value_field))}, 'double'), 0D) END"
        ).alias("value"),
    )
