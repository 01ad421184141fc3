"""The secure embedded broker: SASL_SSL (SCRAM-SHA-512 over TLS), ACLs, users, no plaintext way in.

One secure broker per module (real Apache Kafka, KRaft, StandardAuthorizer) in a temporary home,
stopped at the end. Every refusal is asserted by its Kafka error code and a time bound.
"""

from __future__ import annotations

import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from revise.infra import broker, secure
from revise.infra.procs import pid_alive
from sinks.kafka.partitions import adopt, read_progress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.kafka]

_BOUND_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[broker.BrokerCluster]:
    # revise's home; the broker lives in HOME/broker, where `revise broker --home HOME` looks.
    home = tmp_path_factory.mktemp("revise-home") / "broker"
    try:
        yield broker.start(home, secure=True)
    finally:
        broker.stop(home)


def _conf(cluster: broker.BrokerCluster, user: str, **extra: Any) -> dict[str, Any]:
    return {**cluster.client_config(user), **extra}


def _topics(cluster: broker.BrokerCluster, *prefixes: str, partitions: int = 2) -> list[str]:
    admin = AdminClient(_conf(cluster, "admin"))
    names = [f"{p}-{uuid.uuid4().hex[:10]}" for p in prefixes]
    futures = admin.create_topics([NewTopic(n, num_partitions=partitions) for n in names])
    for f in futures.values():
        f.result(30)
    return names


def _end_offsets(cluster: broker.BrokerCluster, topic: str) -> int:
    """Sum of the high watermarks (read_uncommitted: every record ever written, as admin)."""
    c = Consumer(_conf(cluster, "admin", **{"group.id": f"revise-probe-{uuid.uuid4().hex[:8]}"}))
    try:
        parts = c.list_topics(topic, timeout=30).topics[topic].partitions
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in parts)
    finally:
        c.close()


def _consume(conf: dict[str, Any], topic: str, n: int, timeout_s: float = 30) -> list[bytes]:
    c = Consumer({**conf, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            got.append(m.value())
    finally:
        c.close()
    return got


def _produce_plain(conf: dict[str, Any], topic: str, values: list[bytes]) -> list[KafkaError]:
    """Produce ``values`` and return the delivery errors (empty when all were written)."""
    errors: list[KafkaError] = []
    p = Producer({**conf, "message.timeout.ms": 20000})
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, _m: errors.append(err) if err else None)
    p.flush(45)
    return errors


def _produce_txn(conf: dict[str, Any], topic: str, values: list[bytes], txn_id: str) -> None:
    p = Producer({**conf, "transactional.id": txn_id, "retry.backoff.ms": 20})
    p.init_transactions(30)
    p.begin_transaction()
    for v in values:
        p.produce(topic, v)
    p.commit_transaction(30)


# --------------------------------------------------------------------------- start and files


def test_prints_bootstrap_and_one_private_config_per_user(cluster: broker.BrokerCluster) -> None:
    lines = cluster.describe_lines()
    assert lines[0] == f"bootstrap={cluster.bootstrap_servers}"
    for user in secure.USERS:
        (path,) = [ln.split("=", 1)[1] for ln in lines if ln.startswith(f"config.{user}=")]
        f = Path(path)
        assert f.suffix == ".properties" and user in f.name
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
        text = f.read_text()
        assert "security.protocol=SASL_SSL" in text and f"sasl.username={user}" in text
        assert "sasl.mechanism=SCRAM-SHA-512" in text and "ssl.ca.location=" in text
    assert broker.status(Path(cluster.home)) == cluster and cluster.secure
    props = (Path(cluster.home) / "node-1" / "server.properties").read_text()
    proto_map = next(ln for ln in props.splitlines()
                     if ln.startswith("listener.security.protocol.map="))
    assert set(v.split(":")[1] for v in proto_map.split("=", 1)[1].split(",")) == {"SASL_SSL"}


def test_cli_status_prints_the_same_lines(cluster: broker.BrokerCluster) -> None:
    home = Path(cluster.home)
    out = subprocess.run(
        [sys.executable, "-m", "revise", "broker", "status", "--home", str(home.parent)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert out.returncode == 0, out.stderr
    nodes = [f"node.{n.node_id}=up port={n.port} pid={n.pid}" for n in cluster.nodes]
    assert out.stdout.splitlines() == [*cluster.describe_lines(), *nodes]


# --------------------------------------------------------------------------- users and ACLs


def test_revise_reads_input_and_writes_transactionally(cluster: broker.BrokerCluster) -> None:
    inp, out = _topics(cluster, "in", "out")
    values = [f"v{i}".encode() for i in range(20)]
    assert _produce_plain(_conf(cluster, "admin"), inp, values) == []
    revise = _conf(cluster, "revise")
    got = _consume({**revise, "group.id": f"revise-test-{uuid.uuid4().hex[:8]}"}, inp, 20)
    assert sorted(got) == sorted(values)
    _produce_txn(revise, out, got, f"revise-{uuid.uuid4().hex[:8]}")
    reader = _conf(cluster, "reader", **{"group.id": f"reader-{uuid.uuid4().hex[:8]}",
                                         "isolation.level": "read_committed"})
    assert sorted(_consume(reader, out, 20)) == sorted(values)


def test_reader_reads_read_committed_and_is_refused_writing(
    cluster: broker.BrokerCluster,
) -> None:
    (out,) = _topics(cluster, "changelog")
    _produce_txn(_conf(cluster, "revise"), out, [b"a", b"b"], f"revise-{uuid.uuid4().hex[:8]}")
    reader = _conf(cluster, "reader")
    got = _consume({**reader, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                    "isolation.level": "read_committed"}, out, 2)
    assert sorted(got) == [b"a", b"b"]
    before = _end_offsets(cluster, out)
    t0 = time.monotonic()
    errors = _produce_plain(reader, out, [b"forbidden"])
    assert time.monotonic() - t0 < _BOUND_S
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert _end_offsets(cluster, out) == before, "the refused record must not be in the log"


def test_intruder_is_refused_naming_the_topic_and_writes_nothing(
    cluster: broker.BrokerCluster,
) -> None:
    (topic,) = _topics(cluster, "secret")
    intruder = _conf(cluster, "intruder")
    refused: list[tuple[str | None, KafkaError]] = []
    p = Producer({**intruder, "message.timeout.ms": 20000})
    t0 = time.monotonic()
    for v in (b"x", b"y"):
        p.produce(topic, v, on_delivery=lambda e, m: refused.append((m.topic(), e)) if e else None)
    p.flush(45)
    c = Consumer({**intruder, "group.id": f"intruder-{uuid.uuid4().hex[:8]}"})
    try:
        md = c.list_topics(topic, timeout=30).topics[topic]
    finally:
        c.close()
    assert time.monotonic() - t0 < _BOUND_S
    assert [(t, e.code()) for t, e in refused] == [
        (topic, KafkaError.TOPIC_AUTHORIZATION_FAILED)] * 2
    assert md.error is not None and md.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert md.partitions == {}, "the intruder must learn nothing of the topic's partitions"
    assert _end_offsets(cluster, topic) == 0


def test_wrong_password_is_an_authentication_error(cluster: broker.BrokerCluster) -> None:
    seen: list[KafkaError] = []
    conf = _conf(cluster, "revise", **{"sasl.password": "wrong", "error_cb": seen.append})
    admin = AdminClient(conf)
    t0 = time.monotonic()
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=20)
    while not seen and time.monotonic() - t0 < _BOUND_S:
        admin.poll(0.5)  # error_cb is served from poll()
    assert time.monotonic() - t0 < _BOUND_S
    auth = [e for e in seen if e.code() == KafkaError._AUTHENTICATION]
    assert auth, f"expected a SASL authentication error, got {seen}"
    assert "authentication failed" in auth[0].str().lower()


def test_plaintext_client_gets_no_metadata(cluster: broker.BrokerCluster) -> None:
    seen: list[KafkaError] = []
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers,
                         "security.protocol": "PLAINTEXT", "error_cb": seen.append})
    t0 = time.monotonic()
    with pytest.raises(KafkaException) as info:
        admin.list_topics(timeout=15)
    while not seen and time.monotonic() - t0 < _BOUND_S:
        admin.poll(0.5)
    assert time.monotonic() - t0 < _BOUND_S
    assert info.value.args[0].code() == KafkaError._TRANSPORT
    assert seen, "librdkafka reported no error for the plaintext connection"


@pytest.mark.parametrize("listener", ["internal_port", "controller_port"])
def test_internal_and_controller_listeners_refuse_clients(
    cluster: broker.BrokerCluster, listener: str
) -> None:
    """Neither a plaintext client nor a valid SCRAM user gets metadata from the broker ports."""
    port = getattr(cluster.nodes[0], listener)
    assert port > 0
    for conf in ({"security.protocol": "PLAINTEXT"}, cluster.client_config("admin")):
        admin = AdminClient({**conf, "bootstrap.servers": f"127.0.0.1:{port}"})
        t0 = time.monotonic()
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=10)
        assert time.monotonic() - t0 < _BOUND_S


def test_job_acls_are_enough_and_no_more(cluster: broker.BrokerCluster) -> None:
    """A fresh user with only job_acls() runs a job's Kafka traffic and nothing beyond it."""
    inp, out, progress, other = _topics(cluster, "in", "out", "progress", "other")
    assert _produce_plain(_conf(cluster, "admin"), inp, [b"1", b"2", b"3"]) == []
    user, password = f"job-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    admin = AdminClient(_conf(cluster, "admin"))
    cred = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    for f in admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, cred, password.encode())]).values():
        f.result(30)
    material = secure.load_material(Path(cluster.home))
    conf = {"bootstrap.servers": cluster.bootstrap_servers,
            **secure.client_config(material, "admin"),
            "sasl.username": user, "sasl.password": password}
    before = _produce_plain(conf, out, [b"early"])
    assert [e.code() for e in before] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    query_id = uuid.uuid4().hex[:8]
    secure.grant(_conf(cluster, "admin"), secure.job_acls(
        user, input_topics=[inp], output_topics=[out], progress_topic=progress,
        query_id=query_id))
    deadline = time.monotonic() + 30  # ACLs reach the authorizer through the metadata log
    while _produce_plain(conf, progress, [b"probe"]) and time.monotonic() < deadline:
        time.sleep(0.5)
    got = _consume({**conf, "group.id": f"revise-{uuid.uuid4().hex[:8]}"}, inp, 3)
    assert sorted(got) == [b"1", b"2", b"3"]
    _produce_txn(conf, out, got, f"revise-{query_id}-p0")
    marker = _consume({**conf, "group.id": f"revise-{uuid.uuid4().hex[:8]}",
                       "isolation.level": "read_committed"}, progress, 1)
    assert marker == [b"probe"]
    # the job's start: the progress topic grown to its state partitions, each partition's id
    # initialized and its progress committed for the group revise-<query_id>, then read back
    client = {k: v for k, v in conf.items() if k != "bootstrap.servers"}
    assert adopt(cluster.bootstrap_servers, progress, query_id, 3, producer_config=client,
                 consumer_config=client) == 0
    assert [p.epoch for p in read_progress(cluster.bootstrap_servers, progress, query_id,
                                           client_config=client)] == [0, 0, 0]
    assert [e.code() for e in _produce_plain(conf, inp, [b"no"])] == [
        KafkaError.TOPIC_AUTHORIZATION_FAILED], "the input topic must not be writable"
    assert [e.code() for e in _produce_plain(conf, other, [b"no"])] == [
        KafkaError.TOPIC_AUTHORIZATION_FAILED]
    with pytest.raises(KafkaException) as info:
        _produce_txn(conf, out, [b"no"], f"revise-other-{query_id}")
    assert info.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


@pytest.mark.spark
def test_spark_kafka_source_reads_as_revise_over_sasl_ssl(
    cluster: broker.BrokerCluster, spark: SparkSession
) -> None:
    (topic,) = _topics(cluster, "spark-in")
    values = [f"s{i}".encode() for i in range(10)]
    assert _produce_plain(_conf(cluster, "admin"), topic, values) == []
    material = secure.load_material(Path(cluster.home))
    jaas = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="revise" password="{material.passwords["revise"]}";')
    df = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
        .option("kafka.security.protocol", "SASL_SSL")
        .option("kafka.sasl.mechanism", "SCRAM-SHA-512")
        .option("kafka.sasl.jaas.config", jaas)
        .option("kafka.ssl.truststore.type", "PEM")
        .option("kafka.ssl.truststore.location", str(material.ca_pem))
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    got = sorted(bytes(r.value) for r in df.select("value").collect())
    assert got == sorted(values)


# --------------------------------------------------------------------------- three nodes


@pytest.mark.slow
def _cli_broker(action: str, root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "revise", "broker", action, "--home", str(root), *extra],
        capture_output=True, text=True, timeout=240, check=False,
    )


def test_three_secure_nodes_start_serve_and_stop(tmp_path: Path) -> None:
    """``revise broker start --secure --nodes 3``, every node serves SASL_SSL, ``stop`` ends it."""
    root = tmp_path / "home3"
    home = root / "broker"
    try:
        out = _cli_broker("start", root, "--secure", "--nodes", "3")
        assert out.returncode == 0, out.stderr[-3000:]
        c3 = broker.status(home)
        assert c3 is not None and len(c3.nodes) == 3 and c3.secure
        nodes = [f"node.{n.node_id}=up port={n.port} pid={n.pid}" for n in c3.nodes]
        assert out.stdout.splitlines() == [*c3.describe_lines(), *nodes]
        assert out.stdout.startswith(f"bootstrap={c3.bootstrap_servers}\n")
        assert len(c3.bootstrap_servers.split(",")) == 3
        admin = AdminClient(c3.client_config("admin"))
        topic = f"rf3-{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[
            topic].result(60)
        md = admin.list_topics(topic, timeout=30)
        assert sorted(md.brokers) == [1, 2, 3]
        assert {p.leader for p in md.topics[topic].partitions.values()} <= {1, 2, 3}
        for node in c3.nodes:  # every node answers SASL_SSL clients on its own port
            one = AdminClient({**c3.client_config("revise"),
                               "bootstrap.servers": f"127.0.0.1:{node.port}"})
            assert len(one.list_topics(timeout=30).brokers) == 3
        _produce_txn(c3.client_config("revise"), topic, [b"a", b"b", b"c"],
                     f"revise-{uuid.uuid4().hex[:8]}")
        reader = {**c3.client_config("reader"), "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                  "isolation.level": "read_committed"}
        assert sorted(_consume(reader, topic, 3)) == [b"a", b"b", b"c"]
        stopped = _cli_broker("stop", root)
        assert stopped.returncode == 0 and stopped.stdout.strip() == "stopped", stopped.stderr
        assert broker.status(home) is None
        assert not any(pid_alive(n.pid) for n in c3.nodes)
    finally:
        broker.stop(home)  # in case an assertion failed before the CLI stopped it
