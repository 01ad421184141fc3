"""The streaming query up to the sink: source, parse, watermark, shard, stateful operator.

::

    Kafka source (read_committed, maxOffsetsPerTrigger)   control files (close-all commands)
            │ parse + validate in the JVM (revise.spark.parse, .fields) │
            └──────────────── union ─────────────────────────────────┘
                      │ event_time = ts (0 for bad input and commands)
                      │ withWatermark(event_time, watermark_delay)  → Spark's global watermark
                      │ event_time dropped: the operator filters nothing by it
                      │ shard = pmod(xxhash64(key), shards)
                      │ grouped by the shard's key, one that Spark places on
                      │ partition shard mod partitions (revise.spark.shard_keys)
                      ▼
      groupBy(shard).transformWithStateInPandas(EventTime timers)  — revise.spark.operator

Bad input is sharded by offset (it has no usable key) and goes through the operator too, so
the dead letters leave in the same micro-batch output as the revisions. The control source
carries the close-all command of a bounded run (:mod:`revise.spark.close_all`); it is part of
the checkpointed input, so a crash and restart replays it exactly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from revise.jobconfig import JobConfig
from revise.spark.fields import classify_input
from revise.spark.operator import (
    InputColumns,
    ShardProcessor,
)
from revise.spark.output import NO_MESSAGES, MessageKinds, output_type
from revise.spark.shard_keys import shard_keys
from revise.spark.task_output import HistoryTarget

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameReader, SparkSession
    from pyspark.sql.streaming import DataStreamReader

Reader = TypeVar("Reader", "DataFrameReader", "DataStreamReader")

__all__ = ["build_stream", "input_columns", "kafka_input", "parsed_input"]


def kafka_input(reader: Reader, cfg: JobConfig) -> Reader:
    """``reader`` (``spark.readStream`` or ``spark.read``) set to read the job's input topic.

    As the job reads it: the user's client settings, committed records only.
    """
    return (
        reader.format("kafka")
        .options(**cfg.kafka_settings.spark_source_options())
        .option("subscribe", cfg.kafka.input_topic)
        .option("kafka.isolation.level", "read_committed")
    )


# Longer than ~60 lines: the query's stages, top to bottom, as the module diagram draws them.
def build_stream(spark: SparkSession, cfg: JobConfig, control_dir: str,
                 partitions: int) -> DataFrame:
    """The streaming DataFrame of the whole job up to (not including) the sink.

    Args:
        spark: The session.
        cfg: The job's configuration.
        control_dir: The directory of the control source (close-all command files).
        partitions: The stateful operator's partition count (``spark.sql.shuffle.partitions``
            the query runs with), over which the shards' grouping keys spread them.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    reader = (
        kafka_input(spark.readStream, cfg)
        .option("startingOffsets", cfg.kafka.starting_offsets)
        .option("failOnDataLoss", "true")
        .option("includeHeaders", "false")
    )
    if cfg.spark.max_records_per_batch:
        reader = reader.option("maxOffsetsPerTrigger", str(cfg.spark.max_records_per_batch))
    fields = input_columns(cfg)
    data = parsed_input(reader.load(), cfg).select(
        "key", "ts_ms", *fields.names, "partition", "offset", "reason",
        F.when(F.col("reason").isNotNull(), F.col("raw_value")).alias("raw_value"),
        F.lit(None).cast(T.StringType()).alias("command"),
        F.when(F.col("reason").isNull(), F.pmod(F.xxhash64(F.col("key")), F.lit(cfg.spark.shards)))
        .otherwise(F.pmod(F.col("offset"), F.lit(cfg.spark.shards)))
        .cast(T.IntegerType()).alias("shard"),
    )
    control = (
        spark.readStream.schema(T.StructType().add("command", T.StringType())
                                .add("shard", T.IntegerType()))
        .json(control_dir)
        .select(
            F.lit(None).cast(T.StringType()).alias("key"),
            F.lit(None).cast(T.LongType()).alias("ts_ms"),
            *(F.lit(None).cast(t).alias(n) for n, t in fields.items()),
            F.lit(None).cast(T.IntegerType()).alias("partition"),
            F.lit(None).cast(T.LongType()).alias("offset"),
            F.lit(None).cast(T.StringType()).alias("reason"),
            F.lit(None).cast(T.StringType()).alias("raw_value"),
            "command",
            "shard",
        )
    )
    events = (
        data.unionByName(control)
        .withColumn(
            "event_time",
            F.timestamp_millis(F.when(F.col("reason").isNull() & F.col("command").isNull(),
                                      F.col("ts_ms")).otherwise(F.lit(0))),
        )
        .withWatermark("event_time", f"{cfg.engine.watermark_delay_ms} milliseconds")
    )
    keys = F.array(*(F.lit(k) for k in shard_keys(cfg.spark.shards, partitions)))
    # The watermark is tracked above; the operator's input carries no watermarked column, or
    # transformWithStateInPandas (EventTime) would drop the rows behind the watermark before
    # the processor sees them (LATE revisions, too-late records), and would compile a new
    # filter for each micro-batch's watermark.
    shards = (events.drop("event_time")
              .withColumn("shard", F.element_at(keys, F.col("shard") + 1))
              .groupBy("shard"))
    messages = NO_MESSAGES if cfg.dry_run else MessageKinds(
        late=cfg.kafka.late_topic is not None, dead=cfg.kafka.dead_letter_topic is not None)
    history = None if cfg.dry_run else HistoryTarget(cfg.delta.path, None, cfg.query_id,
                                                      cfg.revision_schema)
    processor = ShardProcessor(cfg.engine, cfg.kafka.input_topic, fields,
                               shards=cfg.spark.shards, token=f"{cfg.query_id}@{cfg.checkpoint}",
                               messages=messages, history=history)
    return shards.transformWithStateInPandas(
        statefulProcessor=processor, outputStructType=output_type(), outputMode="Update",
        timeMode="EventTime",
    )


def input_columns(cfg: JobConfig) -> InputColumns:
    """The aggregated input columns of ``cfg`` (see :class:`InputColumns`)."""
    spec = cfg.input_spec
    if spec.value_field is not None:
        return InputColumns((("value", spec.value_field),), ())
    return InputColumns(tuple((spec.numeric_column(f), f) for f in spec.numeric_fields),
                        tuple((spec.distinct_column(f), f) for f in spec.distinct_fields))


def parsed_input(raw: DataFrame, cfg: JobConfig) -> DataFrame:
    """The Kafka source rows classified (``reason``) and typed for ``cfg``.

    :func:`revise.spark.fields.classify_input`: ``key``, ``ts_ms``, the
    :func:`input_columns`, ``partition``, ``offset``, ``reason`` and ``raw_value``.
    """
    return classify_input(raw, cfg.input_spec)
