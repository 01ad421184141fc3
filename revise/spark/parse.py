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
   whole is 2.5x faster on generated records (docs/lab/benchmarks-diary.md, *The parse's accepted
   path in Java, built in*).
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
from pyspark.sql.types import ArrayType, DataType, DoubleType, LongType, StringType, StructType

from revise.inputspec import spark_path as _path

__all__ = ["FAST_FIELDS_UDF", "FAST_PARSE_UDF", "INTEGER_TYPES", "classify",
           "java_fields", "java_udf", "json_number", "json_string", "json_string_column",
           "lazy_variant"]

INTEGER_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_MAX_TS = 2**53
FAST_PARSE_UDF = "revise_fast_parse"
"""The SQL name of this module's accepted path in Java (``revise.jvm.FastParse``)."""
FAST_FIELDS_UDF = "revise_fast_fields"
"""The SQL name of :mod:`revise.spark.fields`' accepted path in Java (``revise.jvm.FastFields``)."""
_JAVA_UDFS: dict[str, tuple[str, DataType]] = {
    FAST_PARSE_UDF: ("revise.jvm.FastParse", StructType().add("key", StringType())
                     .add("ts", LongType()).add("value", DoubleType())),
    FAST_FIELDS_UDF: ("revise.jvm.FastFields", StructType().add("key", StringType())
                      .add("ts", LongType()).add("values", ArrayType(DoubleType()))),
}
"""Each UDF's class and return type (a type object: a DDL string would be parsed by the cold
JVM's SQL parser at the job's start)."""


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
    (:func:`java_udf`): then every record takes the SQL path (:func:`lazy_variant`).
    """
    if use and java_udf(spark, name):
        return F.call_udf(name, F.col("value"), *(F.lit(a) for a in args)).alias("_f")
    return F.lit(None).cast(_JAVA_UDFS[name][1]).alias("_f")


def lazy_variant() -> Column:
    """Column ``_v``: the value as a variant, built only where the Java UDF was not sure."""
    return F.when(F.col("_f").isNull(), F.try_parse_json(F.col("raw_value")))


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


def json_string_column(text: Column, path: str) -> Column:
    """:func:`json_string` as a column (``path`` the variant path itself, not SQL)."""
    return F.when(text.startswith('"') & (F.instr(text, "\\") == 0),
                  text.substr(F.lit(2), F.length(text) - 2)).otherwise(
        F.variant_get(F.col("_v"), path, "string"))


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
    kp, tp, vp = (_path(f) for f in (key_field, ts_field, value_field))
    kq, tq, vq = (f"'{f}'" for f in (key_field, ts_field, value_field))
    c, v = F.col, F.col("_v")
    # _f: the UDF's fields, or NULL when it is not sure; only then is the variant _v built.
    df = raw.select(
        c("value").cast(StringType()).alias("raw_value"),
        c("topic"),
        c("partition"),
        c("offset"),
        java_fields(raw.sparkSession, FAST_PARSE_UDF, key_field, ts_field, value_field,
                    value_required, use=fast and len({key_field, ts_field, value_field}) == 3),
    ).withColumn("_v", lazy_variant())
    # Each field looked up once; its JSON text (``to_json``) computed once per row, from which
    # the cheap test reads and tests everything: typed reads go through the text
    # (:func:`json_number`, :func:`json_string_column`), not a typed variant_get (a Cast per value),
    # and the type tests are tests on the text, not ``schema_of_variant`` (which builds a
    # DataType and its SQL name per value): only rejected records pay for those.
    df = df.select("*", *(F.variant_get(v, path, "variant").alias(sub)
                          for sub, path in (("_kv", kp), ("_tv_", tp), ("_vv", vp))))
    df = df.select("*", *(F.to_json(c(sub)).alias(text)
                          for sub, text in (("_kv", "_kj"), ("_tv_", "_tj"), ("_vv", "_vj"))))
    df = df.select("*", c("_tj").try_cast(LongType()).alias("_tq"),
                   c("_vj").try_cast(DoubleType()).alias("_vq"))
    df = df.select(
        "*",
        F.coalesce(c("_tq"), F.try_variant_get(v, tp, "bigint")).alias("_ts"),
        F.coalesce(c("_vq"), F.try_variant_get(v, vp, "double")).alias("_val"),
    )
    tk, tt, tv = (F.schema_of_variant(c(sub)) for sub in ("_kv", "_tv_", "_vv"))
    ts_dec = F.try_variant_get(v, tp, "decimal(38,0)")
    is_int = tt.isin(*INTEGER_TYPES) | tt.like("DECIMAL(%,0)")
    is_num = tv.isin(*INTEGER_TYPES, "FLOAT", "DOUBLE") | tv.like("DECIMAL(%")

    def finite(x: Column) -> Column:
        return ~F.isnan(x) & (F.abs(x) != F.lit(float("inf")))

    def says(*parts: str | Column) -> Column:
        return F.concat(*(F.lit(p) if isinstance(p, str) else p for p in parts))

    # The cheap test on the texts: only a JSON string's text starts with a quote, and a key
    # lookup on anything but an object is NULL, so that proves the value is a JSON object too.
    # Only an integer's text reads as a bigint (a LONG, or a DECIMAL of scale 0 like ``12.0``,
    # which the slow path accepts as well, with the same bigint; a DOUBLE's text always has a
    # point, which the read refuses). Any JSON number's text reads as a double (one beyond its
    # range as an infinity, which the finite test sends on) and no other text does (a string's
    # is in quotes; ``true`` and ``null`` do not read): a NULL fails the test.
    cheap = c("_kj").startswith('"') & (c("_tq") >= 0) & (c("_tq") < _MAX_TS)
    if value_required:
        cheap = cheap & finite(c("_vq"))
    # CASE evaluates a branch only when the earlier ones failed: the schemas, the whole-value
    # schema and the decimal range check below run for rejected (and rare odd-but-valid)
    # records only. Columns, not SQL text: the cold JVM's SQL parser took 0.3-0.5 s of the
    # job's start to read this chain.
    checks: list[tuple[Column, Column | None]] = [
        (c("_f").isNotNull() | cheap, None),
        (c("raw_value").isNull() | (F.trim(c("raw_value")) == ""), F.lit("empty value")),
        (v.isNull(), F.lit("invalid JSON")),
        (c("_kv").isNull() & ~F.schema_of_variant(v).like("OBJECT%"), says(
            "value is a JSON ", F.lower(F.regexp_extract(F.schema_of_variant(v), "^([A-Z]+)", 1)),
            ", expected an object")),
        (c("_kv").isNull(), says("missing field ", kq)),
        (tk == "VOID", says("field ", kq, " is null")),
        (tk != "STRING", says("field ", kq, " must be a string, got ", tk)),
        (c("_tv_").isNull(), says("missing field ", tq)),
        (tt == "VOID", says("field ", tq, " is null")),
        (~is_int, says("field ", tq, " must be an integer (epoch ms), got ", tt)),
        (ts_dec.isNull() | (ts_dec < 0) | (ts_dec >= _MAX_TS),
         says("field ", tq, " is out of range [0, 2^53): ", F.variant_get(v, tp, "string"))),
    ]
    if value_required:
        checks += [
            (c("_vv").isNull(), says("missing field ", vq)),
            (tv == "VOID", says("field ", vq, " is null")),
            (~is_num, says("field ", vq, " must be a number, got ", tv)),
            (c("_val").isNull() | ~finite(c("_val")),
             says("field ", vq, " is not a finite number")),
        ]
    reason = F.when(checks[0][0], F.lit(None).cast(StringType()))
    for test, why in checks[1:]:
        reason = reason.when(test, why)
    ok = c("reason").isNull()
    took = c("_f").isNotNull()
    return df.select(
        "raw_value", "topic", "partition", "offset", reason.alias("reason"),
        "_f", "_v", "_kj", "_ts", "_val",
    ).select(
        "raw_value",
        "topic",
        "partition",
        "offset",
        "reason",
        F.when(took, c("_f.key")).when(ok, json_string_column(c("_kj"), kp)).alias("key"),
        # An accepted ts is an integer in [0, 2**53), which the bigint read gives exactly.
        F.when(took, c("_f.ts")).when(ok, c("_ts")).alias("ts_ms"),
        F.when(took, c("_f.value"))
        .when(ok, F.coalesce(c("_val"), F.lit(0.0))).alias("value"),
    )
