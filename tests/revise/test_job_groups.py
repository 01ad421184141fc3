"""The job's configuration in groups: each validates itself, and the checkpoint fingerprint is
pinned byte for byte (a change would refuse every existing checkpoint of the same settings).

The expected fingerprints were computed by ``JobConfig(...).fingerprint()`` of the flat
configuration (one field per setting) for the same settings, before it became groups, with the
output layout (``"output": "tasks"``: the stateful tasks write the changelog) added since.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from revise.aggspec import AggList
from revise.config import EngineConfig, WindowSpec
from revise.errors import ConfigError
from revise.jobconfig import (
    DeltaOutput,
    InputFields,
    JobConfig,
    KafkaIO,
    SparkTuning,
    parse_ts_format,
)

_KAFKA = KafkaIO(bootstrap_servers="b:9092", input_topic="in", changelog_topic="out")
_DELTA = DeltaOutput(path="/tmp/d")

CASES: dict[str, tuple[JobConfig, str]] = {
    "defaults": (
        JobConfig(kafka=_KAFKA, delta=_DELTA, checkpoint="/tmp/c",
                  engine=EngineConfig(window=WindowSpec.parse("tumbling:10s"), grace_ms=5000)),
        '{"query_id": "revise", "input_topic": "in", "window": "tumbling:10s", "grace_ms": 5000, '
        '"watermark_delay_ms": 0, "aggs": ["count", "sum", "min", "max", "mean"], '
        '"mode": "revision", "shards": 8, "fields": ["key", "ts", "value"], '
        '"state_layout": "log+inline/spread", "output": "tasks"}',
    ),
    "bare_aggs_value_field": (
        JobConfig(
            kafka=KafkaIO(bootstrap_servers="b:9092", input_topic="in", changelog_topic="out",
                          late_topic="late", transactional=False, starting_offsets="latest"),
            delta=DeltaOutput(path="/tmp/d", commit_interval_ms=0), checkpoint="/tmp/c",
            engine=EngineConfig(window=WindowSpec.parse("hopping:10s:5s"), grace_ms=0,
                                watermark_delay_ms=2000,
                                aggs=AggList.parse("count,sum", value_field="amount"),
                                mode="watermark", query_id="q1"),
            spark=SparkTuning(trigger_ms=100, max_records_per_batch=50, shards=3,
                              overlap_commit=True),
            input=InputFields(key_field="user", ts_field="time", value_field="amount"),
            once=True, metrics_port=9100),
        '{"query_id": "q1", "input_topic": "in", "window": "hopping:10s:5s", "grace_ms": 0, '
        '"watermark_delay_ms": 2000, "aggs": ["count", "sum"], "mode": "watermark", '
        '"shards": 3, "fields": ["user", "time", "amount"], "state_layout": "log+inline/spread", '
        '"output": "tasks"}',
    ),
    "fn_field_iso_emit": (
        JobConfig(
            kafka=KafkaIO(bootstrap_servers="b:9092", input_topic="in", changelog_topic="out",
                          dead_letter_topic="dlq"),
            delta=DeltaOutput(path="/tmp/d", log_retention_ms=3_600_000), checkpoint="/tmp/c",
            engine=EngineConfig(
                window=WindowSpec.parse("session:30s"), grace_ms=1000, query_id="q2",
                aggs=AggList.parse("count,p99(http.latency_ms),distinct(user.id)"),
                emit_min_change=0.1, emit_every_ms=2000),
            spark=SparkTuning(shards=16, shuffle_partitions=4),
            input=InputFields(key_field="http.endpoint,region", ts_field="at",
                              ts_format="iso8601")),
        '{"query_id": "q2", "input_topic": "in", "window": "session:30s", "grace_ms": 1000, '
        '"watermark_delay_ms": 0, "aggs": "count,p99(http.latency_ms),distinct(user.id)", '
        '"mode": "revision", "shards": 16, "fields": ["http.endpoint,region", "at", "value"], '
        '"ts_format": "iso8601", "state_layout": "log+inline/spread", "output": "tasks", '
        '"emit_policy": "on"}',
    ),
    "kafka_timestamp_epoch_s": (
        JobConfig(kafka=_KAFKA, delta=_DELTA, checkpoint="/tmp/c",
                  engine=EngineConfig(window=WindowSpec.parse("tumbling:1m"), grace_ms=0,
                                      aggs=AggList.parse("sum(v),max(v)")),
                  input=InputFields(ts_field="@timestamp", ts_format="epoch_s")),
        '{"query_id": "revise", "input_topic": "in", "window": "tumbling:1m", "grace_ms": 0, '
        '"watermark_delay_ms": 0, "aggs": "sum(v),max(v)", "mode": "revision", "shards": 8, '
        '"fields": ["key", "@timestamp", "value"], "ts_format": "epoch_s", '
        '"state_layout": "log+inline/spread", "output": "tasks"}',
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_fingerprint_is_the_flat_configurations_byte_for_byte(name: str) -> None:
    cfg, flat = CASES[name]
    assert json.dumps(cfg.fingerprint()) == flat


def test_each_group_validates_itself() -> None:
    with pytest.raises(ConfigError, match="--input-topic is required"):
        KafkaIO(bootstrap_servers="b:1", input_topic="", changelog_topic="out")
    with pytest.raises(ConfigError, match="is also an output topic"):
        KafkaIO(bootstrap_servers="b:1", input_topic="t", changelog_topic="c", late_topic="t")
    with pytest.raises(ConfigError, match="starting offsets must be earliest or latest"):
        KafkaIO(bootstrap_servers="b:1", input_topic="in", changelog_topic="out",
                starting_offsets="middle")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="--delta-path is required"):
        DeltaOutput(path="")
    with pytest.raises(ConfigError, match="--shards must be >= 1, got 0"):
        SparkTuning(shards=0)
    with pytest.raises(ConfigError, match="--trigger must be >= 0ms"):
        SparkTuning(trigger_ms=-1)
    with pytest.raises(ConfigError, match="--ts-format must be one of epoch_ms, epoch_s"):
        InputFields(ts_format="epoch_ns")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="--checkpoint is required"):
        JobConfig(kafka=_KAFKA, delta=_DELTA, checkpoint="",
                  engine=EngineConfig(window=WindowSpec.parse("tumbling:1s"), grace_ms=0))


def test_groups_are_frozen_and_slotted() -> None:
    for group in (_KAFKA, _DELTA, SparkTuning(), InputFields()):
        assert not hasattr(group, "__dict__")
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(group, dataclasses.fields(group)[0].name, None)


def test_ts_format_text_is_read_case_and_space_insensitively() -> None:
    assert parse_ts_format(" ISO8601 ") == "iso8601"
    with pytest.raises(ConfigError, match="got 'ms'"):
        parse_ts_format("ms")
