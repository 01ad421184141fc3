"""Pure tests of the Kafka client configuration: parsing, precedence, translation, redaction."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from revise.errors import ConfigError
from revise.kafka.errors import explain_kafka_error
from revise.kafka.redact import (
    MASK,
    Redactor,
    install_redaction,
    redact_mapping,
    spark_redaction_conf,
)
from revise.kafka.settings import (
    ENV_KAFKA_CONFIG,
    SPARK_SOURCE_DEFAULTS,
    load_kafka_settings,
    parse_kafka_options,
    parse_properties,
    render_client_configs,
    revise_client_configs,
)
from revise.kafka.translate import build_jaas, parse_jaas

SCRAM = ["security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-512", "sasl.username=alice",
         "sasl.password=s3cr3t-Pw"]


def load(*options: str, **kw: object) -> object:
    return load_kafka_settings(bootstrap_servers="b:9092", options=list(options), environ={},
                               **kw)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- parsing

def test_properties_syntax() -> None:
    text = (
        "# a comment\n! another\n\n  security.protocol = SASL_SSL  \n"
        "sasl.mechanism: SCRAM-SHA-512\nsasl.username alice\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        "    username=\"alice\" \\\n    password=\"pw\";\n"
        "key\\=with\\:seps=v=1\nempty=\n"
    )
    props = parse_properties(text)
    assert props == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="alice" password="pw";',
        "key=with:seps": "v=1",
        "empty": "",
    }


def test_properties_empty_key_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"cfg:2: no key"):
        parse_properties("a=1\n=2\n", source="cfg")


def test_kafka_option_needs_equals_and_hides_secret() -> None:
    assert parse_kafka_options(["a=1", "a=2", "b = x=y"]) == {"a": "2", "b": "x=y"}
    with pytest.raises(ConfigError, match="not KEY=VALUE"):
        parse_kafka_options(["linger.ms"])


# ----------------------------------------------------------------------------- precedence

def test_option_wins_over_file_and_env_names_the_file(tmp_path: Path) -> None:
    f = tmp_path / "client.properties"
    f.write_text("client.id=from-file\nlinger.ms=7\n")
    s = load_kafka_settings(bootstrap_servers="b:1", config_file=f,
                            options=["client.id=from-option"], environ={})
    assert s.admin_conf()["client.id"] == "from-option"
    assert s.producer_conf()["linger.ms"] == "7"
    env_s = load_kafka_settings(bootstrap_servers="b:1", environ={ENV_KAFKA_CONFIG: str(f)})
    assert env_s.admin_conf()["client.id"] == "from-file"
    assert ENV_KAFKA_CONFIG in env_s.origin
    other = tmp_path / "other.properties"
    other.write_text("client.id=explicit\n")
    explicit = load_kafka_settings(bootstrap_servers="b:1", config_file=other,
                                   environ={ENV_KAFKA_CONFIG: str(f)})
    assert explicit.admin_conf()["client.id"] == "explicit"


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--kafka-config .*cannot be read"):
        load_kafka_settings(config_file=tmp_path / "nope", environ={})
    with pytest.raises(ConfigError, match=r"\$REVISE_KAFKA_CONFIG .*cannot be read"):
        load_kafka_settings(environ={ENV_KAFKA_CONFIG: str(tmp_path / "nope")})


def test_bootstrap_option_vs_file() -> None:
    s = load_kafka_settings(options=["bootstrap.servers=x:1,y:2"], environ={})
    assert s.bootstrap_servers == "x:1,y:2"
    same = load_kafka_settings(bootstrap_servers="y:2,x:1", options=["bootstrap.servers=x:1,y:2"],
                               environ={})
    assert same.bootstrap_servers == "y:2,x:1"
    with pytest.raises(ConfigError, match="--bootstrap-servers 'a:1' and bootstrap.servers='x:1'"):
        load_kafka_settings(bootstrap_servers="a:1", options=["bootstrap.servers=x:1"], environ={})
    nothing = load_kafka_settings(environ={})
    assert nothing.bootstrap_servers is None
    with pytest.raises(ConfigError, match="no Kafka bootstrap address"):
        nothing.producer_conf()


@pytest.mark.parametrize("key", ["transactional.id", "isolation.level", "enable.idempotence",
                                 "group.id", "enable.auto.commit", "value.deserializer"])
def test_reserved_keys_are_refused(key: str) -> None:
    with pytest.raises(ConfigError, match=f"{key} are set by revise itself"):
        load(f"{key}=x")


def test_unknown_key_names_it_and_suggests() -> None:
    with pytest.raises(ConfigError, match=r"'sasl.mechansim' is known to neither.*sasl.mechanism"):
        load("sasl.mechansim=PLAIN")
    with pytest.raises(ConfigError, match="'no.such.thing' is known to neither"):
        load("no.such.thing=1")
    with pytest.raises(ConfigError, match="'bogus' is known to neither"):
        load("librdkafka.bogus=1")


def test_keys_go_to_the_library_that_knows_them() -> None:
    s = load("linger.ms=5", "fetch.wait.max.ms=50", "max.poll.records=10",
             "client.id=cid", "default.api.timeout.ms=9000", "librdkafka.debug=security",
             "java.retries=3")
    assert s.producer_conf()["linger.ms"] == "5" and "linger.ms" not in s.consumer_conf()
    assert s.consumer_conf()["fetch.wait.max.ms"] == "50"
    assert "fetch.wait.max.ms" not in s.producer_conf()
    java = s.spark_source_options()
    assert java["kafka.max.poll.records"] == "10" and "max.poll.records" not in s.admin_conf()
    assert SPARK_SOURCE_DEFAULTS["max.poll.records"] != "10"  # the user's value won
    assert java["kafka.client.id"] == "cid" and s.admin_conf()["client.id"] == "cid"
    assert "kafka.linger.ms" not in java and "kafka.fetch.wait.max.ms" not in java
    assert java["kafka.default.api.timeout.ms"] == "9000"
    assert s.admin_conf()["debug"] == "security" and "kafka.debug" not in java
    assert java["kafka.retries"] == "3" and "retries" not in s.producer_conf()
    with pytest.raises(ConfigError, match="ssl.cipher.suites means different things"):
        load("ssl.cipher.suites=X")


def test_spark_source_gets_revise_poll_size_unless_the_user_set_one() -> None:
    java = load().spark_source_options()
    assert java["kafka.max.poll.records"] == SPARK_SOURCE_DEFAULTS["max.poll.records"]
    assert int(java["kafka.max.poll.records"]) > 500  # Kafka's default, which the tuning beats
    assert "max.poll.records" not in load().consumer_conf()  # the Java source's only


# ----------------------------------------------------------------------------- SASL

@pytest.mark.parametrize("mech,module", [
    ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
    ("SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ("scram-sha-512", "org.apache.kafka.common.security.scram.ScramLoginModule"),
])
def test_sasl_to_java_jaas(mech: str, module: str) -> None:
    s = load("security.protocol=sasl_ssl", f"sasl.mechanism={mech}", "sasl.username=alice",
             'sasl.password=p"w\\d')
    java = s.spark_source_options()
    assert java["kafka.security.protocol"] == "SASL_SSL"
    assert java["kafka.sasl.mechanism"] == mech.upper()
    assert java["kafka.sasl.jaas.config"] == (
        f'{module} required username="alice" password="p\\"w\\\\d";')
    rd = s.producer_conf()
    assert rd["sasl.mechanisms"] == mech.upper()
    assert (rd["sasl.username"], rd["sasl.password"]) == ("alice", 'p"w\\d')


@pytest.mark.parametrize("password", ["plain", 'q"uote', "back\\slash", 'both\\"x', "sp ace;=",
                                      "ünï©ødé"])
def test_jaas_escaping_round_trip(password: str) -> None:
    module, opts = parse_jaas(build_jaas("SCRAM-SHA-512", "us\"er", password))
    assert module.endswith("ScramLoginModule")
    assert opts == {"username": 'us"er', "password": password}


def test_jaas_refuses_line_breaks() -> None:
    with pytest.raises(ConfigError, match="line break"):
        build_jaas("PLAIN", "u", "a\nb")


def test_jaas_given_works_for_librdkafka() -> None:
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            'username="bob" password="x\\"y";')
    s = load("security.protocol=SASL_SSL", "sasl.mechanisms=SCRAM-SHA-256",
             f"sasl.jaas.config={jaas}")
    assert s.consumer_conf()["sasl.username"] == "bob"
    assert s.consumer_conf()["sasl.password"] == 'x"y'
    assert s.consumer_conf()["sasl.mechanisms"] == "SCRAM-SHA-256"
    assert "sasl.jaas.config" not in s.consumer_conf()
    assert s.spark_source_options()["kafka.sasl.jaas.config"] == jaas
    plain = load("security.protocol=SASL_PLAINTEXT", "sasl.jaas.config="
                 "org.apache.kafka.common.security.plain.PlainLoginModule required "
                 "username=u password=p;")
    assert plain.admin_conf()["sasl.mechanisms"] == "PLAIN"


def test_jaas_errors() -> None:
    scram = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
             'username="bob" password="pw";')
    with pytest.raises(ConfigError, match="add sasl.mechanism=SCRAM-SHA-512"):
        load("security.protocol=SASL_SSL", f"sasl.jaas.config={scram}")
    oauth = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
             'clientId="c" clientSecret="TOPSECRET";')
    with pytest.raises(ConfigError, match="OAuthBearerLoginModule, which revise cannot") as ei:
        load("security.protocol=SASL_SSL", "sasl.mechanism=OAUTHBEARER",
             f"sasl.jaas.config={oauth}")
    assert "TOPSECRET" not in str(ei.value)
    ok = load("security.protocol=SASL_SSL", "sasl.mechanism=OAUTHBEARER",
              f"sasl.jaas.config={oauth}", "sasl.oauthbearer.method=oidc")
    assert ok.spark_source_options()["kafka.sasl.jaas.config"] == oauth
    with pytest.raises(ConfigError, match="cannot be parsed") as ei:
        load("security.protocol=SASL_SSL", "sasl.mechanism=PLAIN",
             'sasl.jaas.config=PlainLoginModule required password="TOPSECRET"')
    assert "TOPSECRET" not in str(ei.value)


def test_sasl_consistency_errors() -> None:
    with pytest.raises(ConfigError, match="security.protocol=PLAINTEXT; use SASL_SSL"):
        load("sasl.mechanism=PLAIN", "sasl.username=u", "sasl.password=p")
    with pytest.raises(ConfigError, match="needs sasl.mechanism"):
        load("security.protocol=SASL_SSL")
    with pytest.raises(ConfigError, match="needs sasl.username and sasl.password"):
        load("security.protocol=SASL_SSL", "sasl.mechanism=PLAIN")
    with pytest.raises(ConfigError, match="differ; give one of them"):
        load("security.protocol=SASL_SSL", "sasl.mechanism=PLAIN", "sasl.mechanisms=SCRAM-SHA-256",
             "sasl.username=u", "sasl.password=p")
    with pytest.raises(ConfigError, match="expected one of PLAINTEXT, SSL"):
        load("security.protocol=TLS")


# ----------------------------------------------------------------------------- TLS

@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A self-signed CA-like certificate with a PKCS#8 key and a traditional RSA key."""
    d = tmp_path_factory.mktemp("pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=client", "-keyout", str(d / "key.pem"),
                    "-out", str(d / "cert.pem")], check=True, capture_output=True)
    subprocess.run(["openssl", "rsa", "-in", str(d / "key.pem"), "-traditional",
                    "-out", str(d / "rsa.pem")], check=True, capture_output=True)
    (d / "keystore.pem").write_text((d / "key.pem").read_text() + (d / "cert.pem").read_text())
    return {"cert": d / "cert.pem", "key": d / "key.pem", "rsa": d / "rsa.pem",
            "keystore": d / "keystore.pem"}


def test_ca_both_ways() -> None:
    s = load("security.protocol=SSL", "ssl.ca.location=/etc/ca.pem",
             "ssl.endpoint.identification.algorithm=")
    java = s.spark_source_options()
    assert java["kafka.ssl.truststore.type"] == "PEM"
    assert java["kafka.ssl.truststore.location"] == "/etc/ca.pem"
    assert java["kafka.ssl.endpoint.identification.algorithm"] == ""
    assert s.admin_conf()["ssl.endpoint.identification.algorithm"] == "none"
    back = load("security.protocol=SSL", "ssl.truststore.type=PEM",
                "ssl.truststore.location=/etc/ca.pem",
                "ssl.endpoint.identification.algorithm=https")
    assert back.admin_conf()["ssl.ca.location"] == "/etc/ca.pem"
    assert back.admin_conf()["ssl.endpoint.identification.algorithm"] == "https"
    inline = load("security.protocol=SSL", "ssl.truststore.certificates=-----BEGIN CERT")
    assert inline.admin_conf()["ssl.ca.pem"] == "-----BEGIN CERT"
    with pytest.raises(ConfigError, match="ssl.truststore.type=JKS cannot be read"):
        load("security.protocol=SSL", "ssl.truststore.type=JKS", "ssl.truststore.location=t.jks")
    with pytest.raises(ConfigError, match="identification.algorithm='http'"):
        load("ssl.endpoint.identification.algorithm=http")


def test_mtls_from_librdkafka_files(pem: dict[str, Path]) -> None:
    s = load("security.protocol=SSL", f"ssl.certificate.location={pem['cert']}",
             f"ssl.key.location={pem['key']}", "ssl.key.password=kp4ss")
    rd = s.producer_conf()
    assert rd["ssl.certificate.location"] == str(pem["cert"])
    assert rd["ssl.key.password"] == "kp4ss"
    java = s.spark_source_options()
    assert java["kafka.ssl.keystore.type"] == "PEM"
    assert java["kafka.ssl.keystore.certificate.chain"] == pem["cert"].read_text()
    assert java["kafka.ssl.keystore.key"] == pem["key"].read_text()
    assert java["kafka.ssl.key.password"] == "kp4ss"
    key_body = pem["key"].read_text().splitlines()[1]
    assert key_body not in s.redactor.text(f"boom {java['kafka.ssl.keystore.key']}")
    with pytest.raises(ConfigError, match="not a PKCS#8 PEM key.*openssl pkcs8 -topk8"):
        load("security.protocol=SSL", f"ssl.certificate.location={pem['cert']}",
             f"ssl.key.location={pem['rsa']}")
    with pytest.raises(ConfigError, match="needs both ssl.certificate.location"):
        load("security.protocol=SSL", f"ssl.key.location={pem['key']}")


def test_mtls_from_java_pem_keystore(pem: dict[str, Path]) -> None:
    s = load("security.protocol=SSL", "ssl.keystore.type=PEM",
             f"ssl.keystore.location={pem['keystore']}")
    rd = s.consumer_conf()
    assert "BEGIN CERTIFICATE" in rd["ssl.certificate.pem"]
    assert "PRIVATE KEY" not in rd["ssl.certificate.pem"]
    assert rd["ssl.key.pem"].strip() == pem["key"].read_text().strip()
    java = s.spark_source_options()
    assert java["kafka.ssl.keystore.location"] == str(pem["keystore"])
    inline = load("security.protocol=SSL", "ssl.keystore.type=PEM",
                  f"ssl.keystore.certificate.chain={pem['cert'].read_text()}",
                  f"ssl.keystore.key={pem['key'].read_text()}")
    assert inline.admin_conf()["ssl.key.pem"] == pem["key"].read_text().strip()
    with pytest.raises(ConfigError, match="one PRIVATE KEY block and at least one CERTIFICATE"):
        load("security.protocol=SSL", "ssl.keystore.type=PEM",
             f"ssl.keystore.location={pem['cert']}")
    p12 = load("security.protocol=SSL", "ssl.keystore.location=/k.p12",
               "ssl.keystore.password=ksPW")
    assert p12.admin_conf()["ssl.keystore.location"] == "/k.p12"
    assert p12.spark_source_options()["kafka.ssl.keystore.type"] == "PKCS12"
    with pytest.raises(ConfigError, match="ssl.keystore.type=JKS cannot be read"):
        load("security.protocol=SSL", "ssl.keystore.type=JKS", "ssl.keystore.location=/k.jks")


# ----------------------------------------------------------------------------- redaction

def test_redact_mapping_by_name() -> None:
    m = {"sasl.password": "a", "kafka.sasl.jaas.config": "b", "ssl.key.pem": "c",
         "ssl.keystore.key": "d", "ssl.key.password": "e", "my.SECRET.thing": "f",
         "sasl.oauthbearer.token.endpoint.url": "g", "ssl.truststore.password": "h",
         "sasl.username": "alice", "ssl.key.location": "/k.pem"}
    out = redact_mapping(m)
    assert {k for k, v in out.items() if v == MASK} == set(m) - {"sasl.username",
                                                                 "ssl.key.location"}
    assert out["sasl.username"] == "alice"


def test_redact_text() -> None:
    r = Redactor.of(["s3cr3t-Pw"])
    assert r.text("auth as alice with s3cr3t-Pw failed") == "auth as alice with *** failed"
    key = "-----BEGIN PRIVATE KEY-----\nMIIabc\n-----END PRIVATE KEY-----"
    assert Redactor().text(f"x {key} y") == "x *** y"
    plan = 'Map(kafka.sasl.jaas.config -> Plain required username="u" password="zz9";, a -> b)'
    out = Redactor().text(plan)
    assert "zz9" not in out and "a -> b" in out
    assert Redactor().text("sasl.password=zz9 other=1") == "sasl.password=*** other=1"


def test_settings_know_their_secrets() -> None:
    s = load(*SCRAM)
    text = f"failed: {s.spark_source_options()} {s.producer_conf()}"
    out = s.redactor.text(text)
    assert "s3cr3t-Pw" not in out and "alice" in out
    rendered = render_client_configs(s, revise_client_configs(s, query_id="q7"))
    assert "s3cr3t-Pw" not in rendered and "ScramLoginModule" not in rendered
    assert "transactional.id=revise-q7-p<partition>" in rendered
    assert "group.id=revise-q7" in rendered
    assert "kafka.isolation.level=read_committed" in rendered
    assert "kafka.sasl.jaas.config=***" in rendered and "sasl.password=***" in rendered
    assert "sasl.jaas.config=***" in rendered.split("[changelog producers")[1]
    for client in ("spark kafka source", "changelog producers", "progress reader",
                   "partition takeover", "consumer", "topic admin"):
        assert f"[{client}" in rendered or client in rendered


@pytest.mark.parametrize("level", [logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR,
                                   logging.CRITICAL])
def test_log_records_redacted_at_every_level(level: int, caplog: pytest.LogCaptureFixture,
                                             tmp_path: Path) -> None:
    s = load(*SCRAM)
    handler = logging.FileHandler(tmp_path / "log.txt")
    root = logging.getLogger()
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.DEBUG)
    try:
        install_redaction(s.redactor, loggers=("", "revise", "py4j"))
        log = logging.getLogger("revise.some.module")
        log.log(level, "connecting with %s", s.producer_conf())
        try:
            raise RuntimeError(f"login failed, password {s.producer_conf()['sasl.password']}")
        except RuntimeError:
            log.log(level, "boom", exc_info=True, stack_info=True)
        logging.getLogger("py4j.java_gateway").log(level, "jaas %s",
                                                   s.spark_source_options())
    finally:
        root.removeHandler(handler)
        handler.close()
        root.setLevel(old_level)
        install_redaction(Redactor(), loggers=("", "revise", "py4j"))
    written = (tmp_path / "log.txt").read_text()
    assert "connecting with" in written and "RuntimeError: login failed" in written
    assert "s3cr3t-Pw" not in written and "ScramLoginModule required" not in written
    assert MASK in written


def test_spark_redaction_conf_covers_the_names() -> None:
    import re

    conf = spark_redaction_conf()
    for key in ("spark.redaction.regex", "spark.sql.redaction.options.regex"):
        rx = re.compile(conf[key])
        for name in ("kafka.sasl.jaas.config", "kafka.ssl.key.password", "kafka.ssl.keystore.key",
                     "kafka.sasl.password", "x.token", "client.secret"):
            assert rx.search(name), (key, name)
        assert not rx.search("kafka.bootstrap.servers")


def test_explain_java_error_texts() -> None:
    msg, kind = explain_kafka_error(
        "org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized to access "
        "topics: [orders]")
    assert kind == "not authorized on topic" and "[orders]" in msg and "--operation" in msg
    msg, kind = explain_kafka_error(
        "org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed "
        "during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
        redactor=Redactor.of(["pw1234"]))
    assert kind == "authentication failed" and "sasl.password" in msg
    _msg, kind = explain_kafka_error("javax.net.ssl.SSLHandshakeException: PKIX path building")
    assert kind == "TLS handshake failed"
    msg, kind = explain_kafka_error(RuntimeError("TransactionalIdAuthorizationException pw1234"),
                                    redactor=Redactor.of(["pw1234"]))
    assert kind == "not authorized on transactional id" and "pw1234" not in msg
    assert "--transactional-id revise-" in msg and "\n" not in msg


@pytest.mark.parametrize("code,kind,grant", [
    ("TOPIC_AUTHORIZATION_FAILED", "not authorized on topic", "--topic"),
    ("GROUP_AUTHORIZATION_FAILED", "not authorized on consumer group", "--group"),
    ("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "not authorized on transactional id",
     "--transactional-id"),
    ("CLUSTER_AUTHORIZATION_FAILED", "not authorized on the cluster", "IdempotentWrite"),
    ("SASL_AUTHENTICATION_FAILED", "authentication failed", "sasl.password"),
    ("_AUTHENTICATION", "authentication failed", "sasl.password"),
    ("_SSL", "TLS handshake failed", "ssl.ca.location"),
    ("_ALL_BROKERS_DOWN", "Kafka unreachable", "--bootstrap-servers"),
    ("_TRANSPORT", "Kafka unreachable", "--bootstrap-servers"),
    ("_TIMED_OUT", "Kafka unreachable", "--bootstrap-servers"),
])
def test_explain_confluent_kafka_errors(code: str, kind: str, grant: str) -> None:
    from confluent_kafka import KafkaError, KafkaException

    err = KafkaError(getattr(KafkaError, code), "broker said no to pw1234")
    red = Redactor.of(["pw1234"])
    for error in (err, KafkaException(err)):
        msg, got = explain_kafka_error(error, redactor=red, context="probing b:1")
        assert got == kind and grant in msg and msg.startswith("probing b:1: ")
        assert "pw1234" not in msg and code in msg and "\n" not in msg


def test_settings_are_frozen_hashable_and_picklable() -> None:
    import dataclasses
    import pickle

    s = load(*SCRAM, "linger.ms=3")
    back = pickle.loads(pickle.dumps(s))
    assert back == s and hash(back) == hash(s)
    assert back.producer_conf() == s.producer_conf()
    assert back.redactor.text("x s3cr3t-Pw") == "x ***"
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.bootstrap_servers = "other:1"  # type: ignore[misc]
    with pytest.raises(TypeError):
        s.rdkafka_common["security.protocol"] = "PLAINTEXT"  # type: ignore[index]
    with pytest.raises(ConfigError, match="keys revise sets itself"):
        type(s)(bootstrap_servers="b:1", java={"group.id": "g"})


def test_cli_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from revise.kafka.settings import add_kafka_arguments, settings_from_args

    monkeypatch.delenv(ENV_KAFKA_CONFIG, raising=False)
    f = tmp_path / "c.properties"
    f.write_text("bootstrap.servers=file:1\nclient.id=a\n")
    parser = argparse.ArgumentParser()
    add_kafka_arguments(parser)
    args = parser.parse_args(["--kafka-config", str(f), "--kafka-option", "client.id=b",
                              "--kafka-option", "linger.ms=2"])
    s = settings_from_args(args)
    assert s.bootstrap_servers == "file:1" and s.admin_conf()["client.id"] == "b"
    assert s.producer_conf()["linger.ms"] == "2"
    assert s.with_bootstrap("emb:9").admin_conf()["bootstrap.servers"] == "emb:9"
    env_text = argparse.Namespace(kafka_config=None, kafka_option="client.id=c\nlinger.ms=4\n")
    s2 = settings_from_args(env_text, bootstrap_servers="x:1")
    assert s2.admin_conf()["client.id"] == "c" and s2.producer_conf()["linger.ms"] == "4"
    with pytest.raises(ConfigError, match="--bootstrap-servers 'x:1' and bootstrap.servers"):
        settings_from_args(args, bootstrap_servers="x:1")
