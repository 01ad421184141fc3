"""The whole pipeline against the secure embedded broker (SASL_SSL, SCRAM-SHA-512 over TLS, ACLs).

One secure broker per module (real Apache Kafka, KRaft, StandardAuthorizer) in a temporary home,
stopped at the end. The pipeline runs once, through the CLI as the ``revise`` user; the other
tests reuse its outputs (``reader``) or start refused runs (``intruder``, a wrong password, a
plaintext client, an unreachable address), each bounded by 60 s and checked to write nothing.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from integration_support import REPO, CliRun, JobSetup, check_run

from revise.infra import broker, secure
from sinks.kafka import read_committed

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.delta, pytest.mark.slow]

_BOUND_S = 60.0


@dataclass(frozen=True)
class Secure:
    """The running secure cluster, its users' client files and passwords."""

    cluster: broker.BrokerCluster
    material: secure.SecureMaterial

    def file(self, user: str) -> str:
        return str(self.material.client_file(user))

    def conf(self, user: str, **extra: Any) -> dict[str, Any]:
        return {**self.cluster.client_config(user), **extra}


@pytest.fixture(scope="module")
def sec(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    home = tmp_path_factory.mktemp("revise-home") / "broker"
    try:
        cluster = broker.start(home, secure=True)
        yield Secure(cluster, secure.load_material(Path(cluster.home)))
    finally:
        broker.stop(home)


def _setup(sec: Secure, root: Path, make_topic: Callable[..., str], name: str) -> JobSetup:
    return JobSetup(
        bootstrap=sec.cluster.bootstrap_servers,
        input_topic=make_topic(f"{name}-in"), changelog_topic=make_topic(f"{name}-changelog"),
        late_topic=make_topic(f"{name}-late"), dead_letter_topic=make_topic(f"{name}-dead"),
        query_id=f"{name}-{time.monotonic_ns()}", delta_path=str(root / "delta"),
        checkpoint=str(root / "checkpoint"), workdir=root, window="tumbling:1s",
        grace_ms=1_000, client_config=sec.conf("revise"),
    )


@dataclass(frozen=True)
class PipelineRun:
    setup: JobSetup
    printed: str  # everything generate and run printed (stdout + stderr, -v)


@pytest.fixture(scope="module")
def pipeline(sec: Secure, tmp_path_factory: pytest.TempPathFactory,
             topic_maker: Callable[..., Callable[..., str]]) -> PipelineRun:
    """Input via ``revise generate``, then ``revise -v run --once``, both as ``revise``."""
    root = tmp_path_factory.mktemp("secure-pipeline")
    setup = _setup(sec, root, topic_maker(sec.conf("admin")), "sp")
    kafka = ["--bootstrap-servers", setup.bootstrap, "--kafka-config", sec.file("revise")]
    gen = CliRun(["-v", "generate", "--topic", setup.input_topic, "--events", "600", "--keys",
                  "6", "--seed", "11", "--disorder", "1s", "--late-fraction", "0.05",
                  "--late-by", "3s", "--bad-fraction", "0.02", *kafka],
                 cwd=REPO, log=root / "generate.log")
    assert gen.wait(120) == 0, gen.tail()
    run = CliRun(["-v", *setup.cli_args(), "--kafka-config", sec.file("revise")],
                 cwd=REPO, log=root / "run.log")
    assert run.wait(300) == 0, run.tail()
    return PipelineRun(setup, gen.log() + run.log())


def test_pipeline_over_sasl_ssl_is_exactly_once(pipeline: PipelineRun) -> None:
    report = check_run(pipeline.setup)
    assert report.windows > 0 and report.revisions >= report.windows
    assert report.too_late > 0 and report.dead > 0, report


def test_secrets_never_shown(pipeline: PipelineRun, sec: Secure, tmp_path: Path) -> None:
    passwords = dict(sec.material.passwords)
    assert passwords["revise"] and "sasl" in pipeline.printed  # -v printed the client settings
    files = [p for p in Path(pipeline.setup.workdir).rglob("*") if p.is_file()]
    assert any("checkpoint" in str(p) for p in files)
    for user, pw in passwords.items():
        assert pw not in pipeline.printed, f"{user}'s password printed"
        for f in files:
            assert pw.encode() not in f.read_bytes(), f"{user}'s password in {f}"
    out = CliRun([*pipeline.setup.cli_args(), "--kafka-config", sec.file("revise"),
                  "--print-config"], cwd=REPO, log=tmp_path / "print.log")
    assert out.wait(60) == 0, out.tail()
    text = out.log()
    assert "sasl.password=***" in text and "kafka.sasl.jaas.config=***" in text, text
    assert "[topic admin (confluent-kafka)]" in text and "transactional.id=" in text
    assert all(pw not in text for pw in passwords.values())


def _end(sec: Secure, topic: str) -> int:
    """Every record ever written to ``topic`` (as admin, read_uncommitted high watermarks)."""
    c = Consumer(sec.conf("admin", **{"group.id": f"probe-{time.monotonic_ns()}"}))
    try:
        parts = c.list_topics(topic, timeout=30).topics[topic].partitions
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in parts)
    finally:
        c.close()


def _refused_run(sec: Secure, tmp_path: Path, topic_maker: Callable[..., Callable[..., str]],
                 extra: list[str]) -> tuple[JobSetup, str, float]:
    """A job on fresh topics with input in them, started with ``extra``; must exit 1 in 60 s."""
    setup = _setup(sec, tmp_path, topic_maker(sec.conf("admin")), "refused")
    setup.produce([b'{"key":"a","ts":1000,"value":1}', b'{"key":"b","ts":2500,"value":2}'])
    t0 = time.monotonic()
    run = CliRun([*setup.cli_args(), *extra], cwd=REPO, log=tmp_path / "run.log")
    rc = run.wait(_BOUND_S + 30)
    took = time.monotonic() - t0
    assert rc == 1, run.tail()
    assert took < _BOUND_S, f"took {took:.0f}s"
    for topic in (setup.changelog_topic, setup.late_topic, setup.dead_letter_topic):
        assert _end(sec, topic) == 0, f"something was written to {topic}"
    assert not Path(setup.delta_path).exists(), "Delta tables were written"
    return setup, run.log(), took


def test_intruder_is_refused_naming_the_permission(
        sec: Secure, tmp_path: Path, topic_maker: Callable[..., Callable[..., str]]) -> None:
    _setup_, log, _ = _refused_run(sec, tmp_path, topic_maker,
                                   ["--kafka-config", sec.file("intruder")])
    assert "not authorized on topic" in log and "TOPIC_AUTHORIZATION_FAILED" in log, log
    assert "kafka-acls --add" in log
    assert sec.material.passwords["intruder"] not in log


def test_wrong_password_is_an_authentication_error(
        sec: Secure, tmp_path: Path, topic_maker: Callable[..., Callable[..., str]]) -> None:
    _setup_, log, _ = _refused_run(sec, tmp_path, topic_maker, [
        "--kafka-config", sec.file("revise"), "--kafka-option", "sasl.password=not-the-one-42"])
    assert "authentication failed" in log, log
    assert "not-the-one-42" not in log


def test_plaintext_client_against_the_secure_listener(
        sec: Secure, tmp_path: Path, topic_maker: Callable[..., Callable[..., str]]) -> None:
    _setup_, log, _ = _refused_run(sec, tmp_path, topic_maker, [])
    assert "security.protocol" in log and "revise run: error: Kafka at" in log, log


def test_reader_reads_read_committed_and_cannot_write(pipeline: PipelineRun, sec: Secure) -> None:
    setup = pipeline.setup
    as_revise = read_committed(setup.bootstrap, setup.changelog_topic, timeout_s=60,
                               client_config=sec.conf("revise"))
    as_reader = read_committed(setup.bootstrap, setup.changelog_topic, timeout_s=60,
                               client_config=sec.conf("reader"))
    assert len(as_reader) == len(as_revise) > 0

    def in_log_order(messages: list[Any]) -> list[tuple[int, int, bytes]]:
        # read_committed keeps each partition's offset order; how the partitions interleave
        # depends on the fetches (this compared unsorted lists once and failed on order alone)
        return sorted((m.partition(), m.offset(), m.value()) for m in messages)

    assert in_log_order(as_reader) == in_log_order(as_revise)
    before = _end(sec, setup.changelog_topic)
    errors: list[KafkaError] = []
    p = Producer(sec.conf("reader", **{"message.timeout.ms": 20_000}))
    p.produce(setup.changelog_topic, value=b"{}",
              on_delivery=lambda err, _m: errors.append(err) if err else None)
    p.flush(40)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], errors
    assert _end(sec, setup.changelog_topic) == before


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_bootstrap_fails_fast_on_every_command(tmp_path: Path) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    commands = {
        "run": ["run", "--bootstrap-servers", address, "--input-topic", "in", "--changelog-topic",
                "out", "--delta-path", str(tmp_path / "d"), "--checkpoint", str(tmp_path / "c"),
                "--query-id", "q", "--window", "tumbling:1s", "--grace", "1s", "--once"],
        "generate": ["generate", "--bootstrap-servers", address, "--topic", "t", "--events", "10",
                     "--keys", "2", "--seed", "1"],
        "compare": ["compare", "--bootstrap-servers", address, "--events", "50", "--keys", "2",
                    "--seed", "1", "--window", "tumbling:1s", "--grace", "1s",
                    "--output", str(tmp_path / "cmp")],
        "demo": ["demo", "--kafka-option", f"bootstrap.servers={address}", "--events", "50",
                 "--out", str(tmp_path / "demo")],
    }
    t0 = time.monotonic()
    runs = {name: CliRun(args, cwd=REPO, log=tmp_path / f"{name}.log")
            for name, args in commands.items()}  # in parallel: each waits on its own probe
    for name, run in runs.items():
        assert run.wait(_BOUND_S + 30) == 1, f"{name}: {run.tail()}"
        assert f"revise {name}: error: Kafka at {address}: Kafka unreachable" in run.log(), name
    assert time.monotonic() - t0 < _BOUND_S
    assert not (tmp_path / "d").exists() and not (tmp_path / "demo").exists()
