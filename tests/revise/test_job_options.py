"""``revise run``'s issue-13 options without Kafka or Spark: ``--aggs`` in both forms, field
paths, grouped keys, ``--ts-format``, ``@timestamp``; which parser a job uses; the checkpoint
fingerprint; bad values exit 2 naming the fix before any client starts."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from revise.cli import build_parser
from revise.cli.run import job_config_from_args
from revise.errors import ConfigError
from revise.inputspec import InputSpec
from revise.jobconfig import OUTPUT_LAYOUT_KEY, STATE_LAYOUT_KEY
from revise.kafka.settings import KafkaSettings
from revise.records import REVISION_SCHEMA

ROOT = Path(__file__).resolve().parents[2]
BASE = ["run", "--bootstrap-servers", "127.0.0.1:1", "--input-topic", "in", "--changelog-topic",
        "out", "--delta-path", "/tmp/revise-d", "--checkpoint", "/tmp/revise-c", "--query-id",
        "q", "--window", "tumbling:1d", "--grace", "1s"]


def config(*extra: str):
    args = build_parser().parse_args([*BASE, *extra])
    return job_config_from_args(args, KafkaSettings(None).with_bootstrap("127.0.0.1:1"))


def test_default_options_are_the_plain_input_spec_with_spec_schema_and_fingerprint():
    cfg = config()
    assert cfg.input_spec == InputSpec(numeric_fields=("value",), value_field="value")
    assert cfg.input_spec.plain and cfg.revision_schema is REVISION_SCHEMA
    assert cfg.fingerprint() == {
        "query_id": "q", "input_topic": "in", "window": "tumbling:1d", "grace_ms": 1000,
        "watermark_delay_ms": 0, "aggs": ["count", "sum", "min", "max", "mean"],
        "mode": "revision", "shards": 8, "fields": ["key", "ts", "value"],
        STATE_LAYOUT_KEY: "log+inline/spread", OUTPUT_LAYOUT_KEY: "tasks"}  # the layouts, recorded
    assert config("--aggs", "count,max", "--value-field", "v").input_spec.plain
    # A nested value field keeps the bare form's columns; its shape is not the plain one.
    nested = config("--value-field", "payload.amount")
    assert not nested.input_spec.plain
    assert nested.input_spec.numeric_fields == ("payload.amount",)
    assert nested.revision_schema is REVISION_SCHEMA
    count = config("--aggs", "count").input_spec
    assert count.numeric_fields == () and count.value_field == "value" and count.plain
    with pytest.raises(ConfigError, match="value_field='v'"):  # one value field, not two
        base = config()
        dataclasses.replace(base, input=dataclasses.replace(base.input, value_field="v"))


def test_fn_field_options_reach_the_spec_schema_and_fingerprint():
    cfg = config("--aggs", "count,sum(amount),p99(http.latency_ms),distinct(user.id)",
                 "--key-field", "store, region", "--ts-field", "@timestamp",
                 "--ts-format", "epoch_s")
    spec = cfg.input_spec
    assert not spec.plain and spec.value_field is None
    assert spec.key_fields == ("store", "region") and spec.ts_field == "@timestamp"
    assert spec.numeric_fields == ("amount", "http.latency_ms")
    assert spec.distinct_fields == ("user.id",)
    names = cfg.revision_schema.names
    assert names[names.index("retracted") + 1:names.index("n_late")] == [
        "count", "sum_amount", "p99_http_latency_ms", "distinct_user_id", "prev_count",
        "prev_sum_amount", "prev_p99_http_latency_ms", "prev_distinct_user_id"]
    fp = cfg.fingerprint()
    assert fp["aggs"] == "count,sum(amount),p99(http.latency_ms),distinct(user.id)"
    assert fp["ts_format"] == "epoch_s"
    # Everything that changes the state's meaning changes the fingerprint.
    assert config("--aggs", "count,sum(amount),p95(http.latency_ms),distinct(user.id)",
                  "--key-field", "store,region", "--ts-field", "@timestamp",
                  "--ts-format", "epoch_s").fingerprint() != fp
    assert config("--ts-format", "epoch_us").fingerprint()["ts_format"] == "epoch_us"


@pytest.mark.parametrize(("extra", "message"), [
    (["--aggs", "p99"], "p99 needs a field; write p99(FIELD)"),
    (["--aggs", "count,sum,p99(x)"], "mixes the bare form"),
    (["--aggs", "p100(x)"], "p1 ... p99"),
    (["--ts-format", "epoch_ns"], "--ts-format must be one of epoch_ms, epoch_s"),
    (["--key-field", "a,,b"], '--key-field "a,,b" has an empty field'),
    (["--key-field", "a,a"], "repeats a field"),
    (["--ts-field", "a..b"], "empty path segment"),
    (["--checkpoint", "s3a://bucket/revise/ck"], "is a URI; .* a shared mount"),
    (["--checkpoint", "file:///tmp/ck"], "is a URI"),
])
def test_bad_values_are_configuration_errors(extra, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace(".", r"\.").replace(r"\.*", ".*")):
        config(*extra)


def test_cli_exits_2_with_the_fix_before_contacting_kafka():
    env_aggs = {"REVISE_AGGS": "count,median(x)"}
    proc = subprocess.run([sys.executable, "-m", "revise", *BASE], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**_env(), **env_aggs})
    assert proc.returncode == 2, proc.stderr
    assert "unknown aggregate 'median'" in proc.stderr and "Kafka" not in proc.stderr


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("REVISE_")}


def test_compare_takes_the_field_options_only_for_an_existing_topic(tmp_path):
    from revise.compare import CompareConfig
    from revise.config import EngineConfig, WindowSpec
    from revise.generate import GeneratorConfig

    engine = EngineConfig(window=WindowSpec.parse("tumbling:1s"), grace_ms=0)
    common = {"bootstrap_servers": "127.0.0.1:1", "output": str(tmp_path),
              "delta_path": str(tmp_path / "d"), "engine": engine}
    nested = {"key_field": "ev.user", "ts_field": "ev.at", "ts_format": "iso8601"}
    on_topic = CompareConfig(**common, input_topic="events", **nested)
    assert not on_topic.default_fields
    assert CompareConfig(**common, input_topic="events").default_fields
    with pytest.raises(ConfigError, match="describe an existing --input-topic"):
        CompareConfig(**common, generator=GeneratorConfig(events=10, keys=2), **nested)


def test_trigger_defaults_to_500ms_unbounded_back_to_back_once_and_the_option_wins():
    assert config().effective_trigger_ms == 500
    assert config("--once").effective_trigger_ms == 0
    assert config("--trigger", "2s").effective_trigger_ms == 2000
    assert config("--once", "--trigger", "250ms").effective_trigger_ms == 250
    # The default is not part of the checkpoint's fingerprint: a restart may change it.
    assert "trigger_ms" not in config("--trigger", "2s").fingerprint()


def test_overlap_commit_is_off_by_default_and_not_tied_to_the_checkpoint():
    assert config().spark.overlap_commit is False
    on = config("--overlap-commit")
    assert on.spark.overlap_commit is True
    # A restart may switch it either way: the start rewinds what an overlapped run left.
    assert on.fingerprint() == config().fingerprint()


def test_delta_commit_interval_defaults_to_5s_and_reads_the_option_and_environment(
        monkeypatch):
    assert config().delta.commit_interval_ms == 5000
    assert config("--delta-commit-interval", "0s").delta.commit_interval_ms == 0
    monkeypatch.setenv("REVISE_DELTA_COMMIT_INTERVAL", "30s")
    assert config().delta.commit_interval_ms == 30_000
    assert config("--delta-commit-interval", "1m").delta.commit_interval_ms == 60_000
    # Not part of the checkpoint's fingerprint: a restart may change it.
    assert "delta_commit_interval_ms" not in config("--delta-commit-interval", "1m").fingerprint()
    import dataclasses

    with pytest.raises(ConfigError, match="--delta-commit-interval must be >= 0ms"):
        dataclasses.replace(config().delta, commit_interval_ms=-1)


def test_delta_log_retention_is_unset_by_default_and_reads_the_option_and_environment(
        monkeypatch):
    assert config().delta.log_retention_ms is None  # each table keeps its own
    assert config("--delta-log-retention", "1d").delta.log_retention_ms == 86_400_000
    monkeypatch.setenv("REVISE_DELTA_LOG_RETENTION", "6h")
    assert config().delta.log_retention_ms == 21_600_000
    assert config("--delta-log-retention", "1m").delta.log_retention_ms == 60_000
    # Not part of the checkpoint's fingerprint: a restart may change it.
    assert config("--delta-log-retention", "2d").fingerprint() == config().fingerprint()
    with pytest.raises(ConfigError, match="--delta-log-retention must be at least 1m"):
        config("--delta-log-retention", "59s")


def test_a_checkpoint_records_its_state_layout_and_restarts(tmp_path):
    import dataclasses

    from revise.spark.driver import _check_checkpoint

    cfg = dataclasses.replace(config(), checkpoint=str(tmp_path / "log"))
    _check_checkpoint(cfg)
    assert json.loads((tmp_path / "log" / "revise-job.json").read_text())[STATE_LAYOUT_KEY] == (
        "log+inline/spread")
    _check_checkpoint(cfg)  # restarts


@pytest.mark.parametrize("recorded", [None, "snapshot", "log", "log/spread"])
def test_a_checkpoint_of_an_older_state_layout_is_refused_before_kafka_with_what_to_do(tmp_path,
                                                                                recorded):
    import dataclasses

    from revise.spark.driver import _check_checkpoint

    fingerprint = {k: v for k, v in config().fingerprint().items() if k != STATE_LAYOUT_KEY}
    if recorded is not None:
        fingerprint[STATE_LAYOUT_KEY] = recorded
    checkpoint = tmp_path / "old"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "revise-job.json").write_text(json.dumps(fingerprint))
    (checkpoint / "offsets" / "0").write_text("v1\n")
    argv = [*BASE, "--checkpoint", str(checkpoint)]
    # The broker address is a closed port: the refusal comes before any Kafka client.
    proc = subprocess.run([sys.executable, "-m", "revise", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False, env=_env())
    assert proc.returncode == 2, proc.stderr
    had = recorded or "snapshot"
    assert f"written by the {had} state layout, which this version no longer reads" in (
        proc.stderr)
    assert "new --checkpoint and --query-id" in proc.stderr
    assert "finish it with the revise version that wrote it" in proc.stderr
    assert "Kafka" not in proc.stderr
    # run_job's preflight refuses it too, and leaves the checkpoint as it was.
    with pytest.raises(ConfigError, match=f"{had} state layout"):
        _check_checkpoint(dataclasses.replace(config(), checkpoint=str(checkpoint)))
    assert json.loads((checkpoint / "revise-job.json").read_text()) == fingerprint


def test_a_checkpoint_whose_driver_wrote_the_changelog_is_refused_with_what_to_do(tmp_path):
    import dataclasses

    from revise.spark.driver import _check_checkpoint

    # The log layout, but one transaction per micro-batch from the driver: its progress marker
    # says nothing of the state partitions' progress, so a replay could write a batch twice.
    fingerprint = {k: v for k, v in config().fingerprint().items() if k != OUTPUT_LAYOUT_KEY}
    checkpoint = tmp_path / "driver-writes"
    checkpoint.mkdir()
    (checkpoint / "revise-job.json").write_text(json.dumps(fingerprint))
    with pytest.raises(ConfigError, match="driver wrote the changelog") as refused:
        _check_checkpoint(dataclasses.replace(config(), checkpoint=str(checkpoint)))
    assert "new --checkpoint and --query-id" in str(refused.value)
    assert json.loads((checkpoint / "revise-job.json").read_text()) == fingerprint


def test_an_unbounded_run_keeping_delta_logs_for_days_is_told_of_the_option():
    from revise.spark.advice import retention_note

    def thirty_days() -> int:
        return 30 * 86_400_000

    def unread() -> int:
        raise AssertionError("the tables were read where the note cannot apply")

    note = retention_note(config(), thirty_days)
    assert note is not None and "30 days" in note and "--delta-log-retention 1d" in note
    assert "for 36 hours;" in (retention_note(config(), lambda: 36 * 3_600_000) or "")
    assert retention_note(config(), lambda: 86_400_000) is None  # a day: short enough
    assert retention_note(config(), lambda: None) is None  # a value revise cannot read
    assert retention_note(config("--once"), unread) is None  # bounded
    assert retention_note(config("--delta-log-retention", "7d"), unread) is None  # chosen
    assert retention_note(config("--delta-path", "file:///tmp/d"), thirty_days) is not None
    assert retention_note(config("--delta-path", "s3://bucket/d"), unread) is None
