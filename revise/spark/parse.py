"""Parse and validate input records inside Spark (JVM side), classifying bad input with a reason.

Each Kafka record value is parsed once with Spark's ``try_parse_json`` into a VARIANT; each
field is read once, as its JSON text (``to_json``). A record is **accepted-format** when:

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

Cost, in three tiers:

1. A Java UDF (``revise_fast_parse``, ``revise/infra/java/revise/jvm/FastParse.java``) reads
   the value's bytes with one streaming Jackson parser and returns key, ts and value for a
   record these rules surely accept, with the very fields the SQL below would give; for
   anything else it returns NULL, never a verdict. Most records stop here: no variant is
   built for them at all (``_v`` is computed only where the UDF gave NULL). ``classify`` as a
   whole is 2.5x faster on generated records (docs/BENCHMARKS.md, *The parse's accepted path
   in Java, built in*).
2. A record the UDF was not sure of is parsed into a variant; one that passes a cheap test on
   the fields' JSON texts (string key, integer ts in range, finite numeric value, one lookup
   per field) is accepted without building its reason.
3. Only records that fail both pay for the full diagnosis (``schema_of_variant`` of each field
   and of the whole value, decimal range checks), which alone names the reason.

Without revise's jar on the session's classpath (a session revise did not start, or no
``javac`` at install) the first tier is skipped; the results are the same.
"""

from __future__ import annotations

import weakref

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from revise.inputspec import spark_path as _path

__all__ = ["FAST_FIELDS_UDF", "FAST_PARSE_UDF", "INTEGER_TYPES", "LAZY_VARIANT", "classify",
           "java_fields", "java_udf", "json_number", "json_string"]

INTEGER_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_MAX_TS = 2**53
FAST_PARSE_UDF = "revise_fast_parse"
"""The SQL name of this module's accepted path in Java (``revise.jvm.FastParse``)."""
FAST_FIELDS_UDF = "revise_fast_fields"
"""The SQL name of :mod:`revise.spark.fields`' accepted path in Java (``revise.jvm.FastFields``)."""
_JAVA_UDFS = {
    FAST_PARSE_UDF: ("revise.jvm.FastParse", "struct<key:string,ts:bigint,value:double>"),
    FAST_FIELDS_UDF: ("revise.jvm.FastFields",
                      "struct<key:string,ts:bigint,values:array<double>>"),
}


_REGISTERED: weakref.WeakKeyDictionary[SparkSession, set[str]] = weakref.WeakKeyDictionary()


def java_udf(spark: SparkSession, name: str) -> bool:
    """Register the Java UDF ``name`` in ``spark`` (once); False when its class is not there.

    The classes come from revise's jar (:func:`revise.infra.jars.revise_jar`), which
    :func:`revise.spark.session.spark_session` puts in ``spark.jars``: a session started
    otherwise may lack it, and the parse then takes its SQL path for every record. (Asking
    the catalog whether the function exists would load the session catalog's plugin, Delta's,
    which such a session may lack too.)
    """
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import AnalysisException

    done = _REGISTERED.setdefault(spark, set())
    if name in done:
        return True
    cls, returns = _JAVA_UDFS[name]
    try:
        spark.udf.registerJavaFunction(name, cls, returns)
    except (AnalysisException, Py4JJavaError):
        return False
    done.add(name)
    return True


def java_fields(spark: SparkSession, name: str, *args: str | bool, use: bool = True) -> Column:
    """Column ``_f``: the Java UDF ``name`` on the Kafka ``value`` with literal ``args``.

    A NULL of its type instead when ``use`` is False or ``spark`` lacks the class
    (:func:`java_udf`): then every record takes the SQL path (:data:`LAZY_VARIANT`).
    """
    if use and java_udf(spark, name):
        literals = ", ".join(("true" if a else "false") if isinstance(a, bool) else _sql_str(a)
                             for a in args)
        return F.expr(f"{name}(value, {literals})").alias("_f")
    return F.expr(f"CAST(NULL AS {_JAVA_UDFS[name][1]})").alias("_f")


LAZY_VARIANT = "CASE WHEN _f IS NULL THEN try_parse_json(raw_value) END"
"""SQL of ``_v``: the value as a variant, built only where the Java UDF was not sure."""


def _sql_str(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def json_number(sub: str, path: str, sql_type: str) -> str:
    """SQL reading variant column ``sub`` (the field at ``path`` of ``_v``) as ``sql_type``.

    The result is ``try_variant_get(_v, path, sql_type)``'s, read more cheaply:
    ``try_variant_get`` builds and evaluates a Catalyst ``Cast`` expression for every value it
    reads (Spark 4.2's ``VariantGet.cast``); in a profile of the job that was 28 % of the
    executor threads' samples. A number's JSON text (``to_json``) cast by the query's own
    compiled cast gives the same value: integers exactly, other numbers correctly rounded from
    their decimal digits. Anything else (a string, a boolean, a number beyond the type's range)
    falls back to ``try_variant_get`` itself. ``path`` is a SQL string literal.
    """
    return (f"coalesce(try_cast(to_json({sub}) AS {sql_type}), "
            f"try_variant_get(_v, {path}, '{sql_type}'))")


def json_string(text: str, path: str) -> str:
    """SQL reading the field at ``path`` of ``_v`` as a string, given its JSON text column.

    The result is ``variant_get(_v, path, 'string')``'s. A JSON string without escapes is the
    string itself in quotes (see :func:`json_number` for why this beats a typed read); anything
    else (a string with an escape, which has a backslash, or another type) falls back to that
    typed read. ``text`` appears four times: make it a column (``to_json`` of a string is not
    cheap).
    """
    return (f"CASE WHEN startswith({text}, '\"') AND instr({text}, '\\\\') = 0 "
            f"THEN substr({text}, 2, length({text}) - 2) "
            f"ELSE variant_get(_v, {path}, 'string') END")


# Longer than ~60 lines: one Spark expression per rejection reason, in the order they are
# checked (the first failing check names the reason); the chain reads best in one place.
def classify(
    raw: DataFrame,
    *,
    key_field: str = "key",
    ts_field: str = "ts",
    value_field: str = "value",
    value_required: bool = True,
    fast: bool = True,
) -> DataFrame:
    """Parse the Kafka source rows and add the typed fields and a ``reason`` for bad input.

    Args:
        raw: Rows of Spark's Kafka source (``value`` binary, ``topic``, ``partition``,
            ``offset``).
        key_field: JSON field holding the key (a string).
        ts_field: JSON field holding the event time (integer epoch milliseconds).
        value_field: JSON field holding the number to aggregate.
        value_required: whether a missing or non-numeric value makes the record bad.
        fast: try the Java UDF first (when the session has it and the three fields are
            distinct); False parses every record through the SQL path (benchmarks, tests).

    Returns:
        Columns ``raw_value`` (string), ``topic``, ``partition``, ``offset``, ``key``,
        ``ts_ms`` (long), ``value`` (double), ``reason`` (null when accepted-format).

    Raises:
        ValueError: a field name contains both quote characters and a ``.`` or ``[``, which
            Spark's variant path syntax cannot express.
    """
    kp, tp, vp = (_sql_str(_path(f)) for f in (key_field, ts_field, value_field))
    kq, tq, vq = (_sql_str(f"'{f}'") for f in (key_field, ts_field, value_field))
    # _f: the UDF's fields, or NULL when it is not sure; only then is the variant _v built.
    df = raw.select(
        F.col("value").cast("string").alias("raw_value"),
        F.col("topic"),
        F.col("partition"),
        F.col("offset"),
        java_fields(raw.sparkSession, FAST_PARSE_UDF, key_field, ts_field, value_field,
                    value_required, use=fast and len({key_field, ts_field, value_field}) == 3),
    ).withColumn("_v", F.expr(LAZY_VARIANT))
    # Each field looked up once; its JSON text (``to_json``) computed once per row, from which
    # the cheap test reads and tests everything: typed reads go through the text
    # (:func:`json_number`, :func:`json_string`), not a typed variant_get (a Cast per value),
    # and the type tests are tests on the text, not ``schema_of_variant`` (which builds a
    # DataType and its SQL name per value): only rejected records pay for those.
    df = df.select("*", *(F.expr(f"variant_get(_v, {path})").alias(sub)
                          for sub, path in (("_kv", kp), ("_tv_", tp), ("_vv", vp))))
    df = df.select("*", *(F.expr(f"to_json({sub})").alias(text)
                          for sub, text in (("_kv", "_kj"), ("_tv_", "_tj"), ("_vv", "_vj"))))
    df = df.select("*", F.expr("try_cast(_tj AS bigint)").alias("_tq"),
                   F.expr("try_cast(_vj AS double)").alias("_vq"))
    df = df.select(
        "*",
        F.expr(f"coalesce(_tq, try_variant_get(_v, {tp}, 'bigint'))").alias("_ts"),
        F.expr(f"coalesce(_vq, try_variant_get(_v, {vp}, 'double'))").alias("_val"),
    )
    tk, tt, tv = (f"schema_of_variant({sub})" for sub in ("_kv", "_tv_", "_vv"))
    ints = ", ".join(_sql_str(t) for t in INTEGER_TYPES)
    ts_dec = f"try_variant_get(_v, {tp}, 'decimal(38,0)')"
    is_int = f"({tt} IN ({ints}) OR ({tt} LIKE 'DECIMAL(%,0)'))"
    is_num = f"({tv} IN ({ints}, 'FLOAT', 'DOUBLE') OR {tv} LIKE 'DECIMAL(%')"
    finite = "(NOT isnan({x}) AND abs({x}) <> double('infinity'))"
    # The cheap test on the texts: only a JSON string's text starts with a quote, and a key
    # lookup on anything but an object is NULL, so that proves the value is a JSON object too.
    # Only an integer's text reads as a bigint (a LONG, or a DECIMAL of scale 0 like ``12.0``,
    # which the slow path accepts as well, with the same bigint; a DOUBLE's text always has a
    # point, which the read refuses). Any JSON number's text reads as a double (one beyond its
    # range as an infinity, which the finite test sends on) and no other text does (a string's
    # is in quotes; ``true`` and ``null`` do not read): a NULL fails the test.
    cheap = f"startswith(_kj, '\"') AND _tq >= 0 AND _tq < {_MAX_TS}"
    value_checks = ""
    if value_required:
        cheap += f" AND {finite.format(x='_vq')}"
        value_checks = f"""
        WHEN _vv IS NULL THEN concat('missing field ', {vq})
        WHEN {tv} = 'VOID' THEN concat('field ', {vq}, ' is null')
        WHEN NOT {is_num} THEN concat('field ', {vq}, ' must be a number, got ', {tv})
        WHEN _val IS NULL OR NOT {finite.format(x='_val')}
          THEN concat('field ', {vq}, ' is not a finite number')"""
    # CASE evaluates a branch only when the earlier ones failed: the schemas, the whole-value
    # schema and the decimal range check below run for rejected (and rare odd-but-valid)
    # records only.
    reason = f"""CASE
        WHEN _f IS NOT NULL OR ({cheap}) THEN NULL
        WHEN raw_value IS NULL OR trim(raw_value) = '' THEN 'empty value'
        WHEN _v IS NULL THEN 'invalid JSON'
        WHEN _kv IS NULL AND schema_of_variant(_v) NOT LIKE 'OBJECT%' THEN concat(
             'value is a JSON ', lower(regexp_extract(schema_of_variant(_v), '^([A-Z]+)', 1)),
             ', expected an object')
        WHEN _kv IS NULL THEN concat('missing field ', {kq})
        WHEN {tk} = 'VOID' THEN concat('field ', {kq}, ' is null')
        WHEN {tk} <> 'STRING' THEN concat('field ', {kq}, ' must be a string, got ', {tk})
        WHEN _tv_ IS NULL THEN concat('missing field ', {tq})
        WHEN {tt} = 'VOID' THEN concat('field ', {tq}, ' is null')
        WHEN NOT {is_int} THEN concat('field ', {tq}, ' must be an integer (epoch ms), got ', {tt})
        WHEN {ts_dec} IS NULL OR {ts_dec} < 0 OR {ts_dec} >= {_MAX_TS}
          THEN concat('field ', {tq}, ' is out of range [0, 2^53): ',
                      variant_get(_v, {tp}, 'string'))
        {value_checks}
        ELSE NULL END"""
    ok = F.col("reason").isNull()
    took = F.col("_f").isNotNull()
    return df.select(
        "raw_value", "topic", "partition", "offset", F.expr(reason).alias("reason"),
        "_f", "_v", "_kj", "_ts", "_val",
    ).select(
        "raw_value",
        "topic",
        "partition",
        "offset",
        "reason",
        F.when(took, F.col("_f.key")).when(ok, F.expr(json_string("_kj", kp))).alias("key"),
        # An accepted ts is an integer in [0, 2**53), which the bigint read gives exactly.
        F.when(took, F.col("_f.ts")).when(ok, F.col("_ts")).alias("ts_ms"),
        F.when(took, F.col("_f.value"))
        .when(ok, F.coalesce(F.col("_val"), F.lit(0.0))).alias("value"),
    )
