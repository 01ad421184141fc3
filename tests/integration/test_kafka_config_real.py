"""The Kafka client configuration against real systems: Spark plans, Java client, a broker."""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from revise.kafka.errors import KafkaAccessError, explain_kafka_error, probe_kafka
from revise.kafka.redact import spark_redaction_conf
from revise.kafka.settings import KafkaSettings, load_kafka_settings

PASSWORD = "Zq9-hunter-77"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def client_pem(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("client-pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=revise-client", "-keyout", str(d / "key.pem"),
                    "-out", str(d / "cert.pem")], check=True, capture_output=True)
    return {"cert": d / "cert.pem", "key": d / "key.pem"}


def _secure_settings(pem: dict[str, Path], port: int, password: str = PASSWORD) -> KafkaSettings:
    return load_kafka_settings(
        bootstrap_servers=f"127.0.0.1:{port}",
        options=["security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-512",
                 "sasl.username=revise", f"sasl.password={password}",
                 f"ssl.ca.location={pem['cert']}", f"ssl.certificate.location={pem['cert']}",
                 f"ssl.key.location={pem['key']}"],
        environ={})


@pytest.mark.spark
def test_spark_plan_string_redacted(spark: Any, client_pem: dict[str, Path]) -> None:
    settings = _secure_settings(client_pem, _closed_port())
    key_line = client_pem["key"].read_text().splitlines()[5]

    def plan() -> str:
        df = (spark.readStream.format("kafka").options(**settings.spark_source_options())
              .option("subscribe", "t").load().selectExpr("CAST(value AS STRING) AS v"))
        return str(df._jdf.queryExecution().analyzed().toString())

    key = "spark.sql.redaction.options.regex"
    before = spark.conf.get(key)
    # revise's session is built with spark.redaction.regex extended (it cannot be changed on a
    # running session), so secrets are hidden even with the SQL option regex at Spark's
    # default; with revise's SQL regex too.
    assert spark.sparkContext.getConf().get("spark.redaction.regex") == \
        spark_redaction_conf()["spark.redaction.regex"]
    try:
        spark.conf.set(key, "(?i)url")  # Spark's default
        shown_default = plan()
        spark.conf.set(key, spark_redaction_conf()[key])
        shown = plan()
    finally:
        spark.conf.set(key, before)
    for text in (shown_default, shown):
        assert "kafka.security.protocol=SASL_SSL" in text  # the plan is there, not all hidden
        assert PASSWORD not in text and "ScramLoginModule" not in text and key_line not in text
        assert "kafka.sasl.jaas.config=*********(redacted)" in text
        assert "kafka.ssl.keystore.key=*********(redacted)" in text


def _java_admin(spark: Any, settings: KafkaSettings, extra: dict[str, str]) -> Any:
    jvm = spark._jvm
    props = jvm.java.util.Properties()
    for k, v in {**settings.spark_source_options(), **extra}.items():
        props.setProperty(k.removeprefix("kafka."), v)
    return jvm.org.apache.kafka.clients.admin.AdminClient.create(props)


@pytest.mark.spark
def test_generated_settings_load_in_the_java_client(
    spark: Any, client_pem: dict[str, Path]
) -> None:
    """The jaas line, PEM truststore and PEM key+chain are accepted by Spark's kafka-clients.

    Building the admin client parses sasl.jaas.config and loads the PEM key store and trust store
    (a bad one fails right there); the call then fails only because nothing listens.
    """
    from py4j.protocol import Py4JJavaError

    settings = _secure_settings(client_pem, _closed_port(), password='we"ird\\pass')
    fast = {"default.api.timeout.ms": "3000", "request.timeout.ms": "2000"}
    admin = _java_admin(spark, settings, fast)
    try:
        seconds = spark._jvm.java.util.concurrent.TimeUnit.SECONDS
        with pytest.raises(Py4JJavaError) as ei:
            admin.listTopics().names().get(20, seconds)
        text = str(ei.value.java_exception.toString())
        assert "Timeout" in text, text
    finally:
        admin.close()
    broken = {**fast, "sasl.jaas.config":
              "org.apache.kafka.common.security.scram.ScramLoginModule required password=\"x\""}
    with pytest.raises(Py4JJavaError) as ei:
        _java_admin(spark, settings, broken)
    assert "jaas" in str(ei.value).lower()


@pytest.mark.spark
@pytest.mark.parametrize("jaas_ok", [True, False])
def test_spark_source_with_sasl_options_fails_on_connection_not_jaas(
    spark: Any, tmp_path: Path, jaas_ok: bool
) -> None:
    """A Spark Kafka source with the generated SASL_PLAINTEXT options, nothing listening.

    With the generated jaas line the query ends in a connection timeout (Kafka unreachable);
    with a broken one (control) Spark's Kafka client refuses to start instead.
    """
    from pyspark.errors import StreamingQueryException

    settings = load_kafka_settings(
        bootstrap_servers=f"127.0.0.1:{_closed_port()}",
        options=["security.protocol=SASL_PLAINTEXT", "sasl.mechanism=SCRAM-SHA-512",
                 "sasl.username=revise", f"sasl.password={PASSWORD}\\x\"y",
                 "default.api.timeout.ms=3000", "request.timeout.ms=2000"],
        environ={})
    options = settings.spark_source_options()
    if not jaas_ok:
        options["kafka.sasl.jaas.config"] = options["kafka.sasl.jaas.config"].rstrip(";")
    df = (spark.readStream.format("kafka").options(**options).option("subscribe", "t")
          .option("fetchOffset.numRetries", "1").load())
    query = (df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
             .start())
    start = time.monotonic()
    try:
        with pytest.raises(StreamingQueryException) as ei:
            query.awaitTermination(90)
    finally:
        query.stop()
    assert time.monotonic() - start < 60
    message, kind = explain_kafka_error(ei.value, redactor=settings.redactor)
    assert PASSWORD not in message
    if jaas_ok:
        assert kind == "Kafka unreachable" and "Timed out waiting" in message
    else:
        assert kind == "Kafka client settings rejected" and "Timed out" not in message


@pytest.mark.kafka
def test_probe_unreachable_fails_fast_and_clearly() -> None:
    settings = load_kafka_settings(bootstrap_servers=f"127.0.0.1:{_closed_port()}",
                                   options=["security.protocol=SASL_PLAINTEXT",
                                            "sasl.mechanism=PLAIN", "sasl.username=u",
                                            f"sasl.password={PASSWORD}"], environ={})
    start = time.monotonic()
    with pytest.raises(KafkaAccessError) as ei:
        probe_kafka(settings, timeout_s=10)
    elapsed = time.monotonic() - start
    assert elapsed < 60
    assert ei.value.kind == "Kafka unreachable"
    message = str(ei.value)
    assert settings.bootstrap_servers in message and "check --bootstrap-servers" in message
    assert PASSWORD not in message and "\n" not in message


@pytest.mark.kafka
def test_clients_built_from_settings_work(kafka_bootstrap: str,
                                          new_topic: Callable[..., str]) -> None:
    from confluent_kafka import Consumer, Producer

    topic = new_topic("kcfg", partitions=1)
    settings = load_kafka_settings(
        bootstrap_servers=kafka_bootstrap,
        options=["client.id=revise-kcfg-test", "linger.ms=1", "fetch.wait.max.ms=50",
                 "security.protocol=PLAINTEXT"], environ={})
    info = probe_kafka(settings, topics=[topic, "no-such-topic-" + uuid.uuid4().hex[:6]])
    assert info.topics_found == (topic,) and info.broker_ids and info.elapsed_s < 30
    producer = Producer({**settings.producer_conf(), "enable.idempotence": True})
    for i in range(5):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**settings.consumer_conf(), "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    got: list[str] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg.value().decode())
    finally:
        consumer.close()
    assert got == [f"m{i}" for i in range(5)]


def test_every_embedded_librdkafka_name_is_accepted() -> None:
    """The static librdkafka name sets match the installed library (no unknown property)."""
    from confluent_kafka import KafkaException, Producer

    from revise.kafka import keys as kafka_keys

    refused = []
    names = (kafka_keys.RDKAFKA_ALL_ROLES | kafka_keys.RDKAFKA_PRODUCER_ONLY
             | kafka_keys.RDKAFKA_CONSUMER_ONLY)
    for name in sorted(names):
        try:
            Producer({"bootstrap.servers": "127.0.0.1:1", name: "x"})
        except (KafkaException, ValueError, TypeError) as e:
            if "No such configuration property" in str(e):
                refused.append(name)
    assert refused == []
    with pytest.raises(KafkaException, match="No such configuration property"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "sasl.mechansim": "x"})


def test_generated_settings_load_in_librdkafka(client_pem: dict[str, Path],
                                               tmp_path: Path) -> None:
    """librdkafka loads the translated CA, certificate and key (a bad PEM fails at creation)."""
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient

    keystore = tmp_path / "keystore.pem"
    keystore.write_text(client_pem["key"].read_text() + client_pem["cert"].read_text())
    port = _closed_port()
    from_files = _secure_settings(client_pem, port)
    from_java_pem = load_kafka_settings(
        bootstrap_servers=f"127.0.0.1:{port}",
        options=["security.protocol=SSL", "ssl.truststore.type=PEM",
                 f"ssl.truststore.location={client_pem['cert']}", "ssl.keystore.type=PEM",
                 f"ssl.keystore.location={keystore}"], environ={})
    for settings in (from_files, from_java_pem):
        Producer(settings.producer_conf()).flush(0)
        AdminClient(settings.admin_conf())
    bad = dict(from_java_pem.producer_conf(), **{"ssl.key.pem": "-----BEGIN PRIVATE KEY-----\nAA"})
    with pytest.raises(KafkaException):
        Producer(bad)
