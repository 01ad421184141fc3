"""Security material and ACLs of the secure embedded broker (``revise broker start --secure``).

Listeners of every node (all on 127.0.0.1, all over TLS with one locally generated CA)::

    CLIENT      SASL_SSL, SCRAM-SHA-512   the only listener clients use (advertised)
    INTERNAL    SASL_SSL, PLAIN           broker to broker, user ``broker`` (a super user)
    CONTROLLER  SASL_SSL, PLAIN           KRaft quorum, same user (SCRAM cannot serve it)

No listener lets an unauthenticated client in. Authorization is KRaft's ``StandardAuthorizer``
with ``allow.everyone.if.no.acl.found=false``; super users are ``admin`` and ``broker``.

Files under the broker's home (secrets mode 0600)::

    tls/ca.pem            the CA certificate clients trust (ssl.ca.location)
    tls/broker.pem        the broker's private key + certificate (SAN localhost, 127.0.0.1)
    tls/secrets.json      the users' passwords (random, made once, kept across restarts)
    clients/<user>.properties   a ready client config per user (librdkafka spelling)

Users (SCRAM-SHA-512, written into the storage at format time): ``admin`` (super user),
``revise`` (what a revise job needs, see :func:`start_acls` and :func:`job_acls`), ``reader``
(read-only) and ``intruder`` (no ACLs).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from revise.errors import InfraError

__all__ = [
    "BROKER_USER", "USERS", "SecureMaterial", "admin_config", "client_config", "describe_lines",
    "ensure_material", "grant", "job_acls", "listener_properties", "load_material",
    "scram_format_args", "start_acls", "write_secret",
]

USERS: tuple[str, ...] = ("admin", "revise", "reader", "intruder")
BROKER_USER = "broker"
SUPER_USERS: tuple[str, ...] = ("admin", BROKER_USER)
SCRAM = "SCRAM-SHA-512"
_CERT_DAYS = 365
_ACL_TIMEOUT_S = 30.0


class SecureBrokerError(InfraError):
    """The secure broker's material or ACLs cannot be made."""


@dataclass(frozen=True, slots=True)
class SecureMaterial:
    """Where the secure broker's TLS files and passwords are.

    Attributes:
        home: the broker's home folder.
        passwords: user name -> password, for :data:`USERS` and :data:`BROKER_USER`.
    """

    home: Path
    passwords: dict[str, str]

    @property
    def ca_pem(self) -> Path:
        """The CA certificate (PEM) every client trusts."""
        return self.home / "tls" / "ca.pem"

    @property
    def broker_pem(self) -> Path:
        """The broker's unencrypted PKCS#8 key followed by its certificate (PEM)."""
        return self.home / "tls" / "broker.pem"

    def client_file(self, user: str) -> Path:
        """``HOME/clients/<user>.properties``."""
        return self.home / "clients" / f"{user}.properties"


def write_secret(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (mode 0600 from creation)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def _make_tls(ca_pem: Path, broker_pem: Path) -> None:
    """A self-signed CA and a broker certificate it signs (SAN DNS:localhost, IP:127.0.0.1)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "revise embedded broker CA")])
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=_CERT_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    san = x509.SubjectAlternativeName(
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=_CERT_DAYS))
        .add_extension(san, critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                   ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    write_secret(broker_pem, key_pem + cert.public_bytes(pem).decode())
    ca_pem.write_bytes(ca_cert.public_bytes(pem))


def ensure_material(home: Path) -> SecureMaterial:
    """The secure broker's TLS files, passwords and client files under ``home``; made if missing.

    Passwords and certificates are made once and reused on restart (the SCRAM credentials live in
    the formatted storage, so they must not change while the data folder exists).
    """
    secrets_file = home / "tls" / "secrets.json"
    if secrets_file.is_file():
        passwords = dict(json.loads(secrets_file.read_text()))
    else:
        passwords = {u: secrets.token_hex(16) for u in (*USERS, BROKER_USER)}
        write_secret(secrets_file, json.dumps(passwords, indent=2))
    material = SecureMaterial(home, passwords)
    if not (material.ca_pem.is_file() and material.broker_pem.is_file()):
        _make_tls(material.ca_pem, material.broker_pem)
    for user in USERS:
        conf = client_config(material, user)
        body = "".join(f"{k}={v}\n" for k, v in conf.items())
        write_secret(material.client_file(user),
                      f"# revise embedded secure broker: client settings of user {user}\n" + body)
    return material


def load_material(home: Path) -> SecureMaterial:
    """The material :func:`ensure_material` made under ``home``.

    Raises:
        SecureBrokerError: ``home`` holds no secure broker's passwords.
    """
    secrets_file = home / "tls" / "secrets.json"
    try:
        return SecureMaterial(home, dict(json.loads(secrets_file.read_text())))
    except (OSError, ValueError) as exc:
        msg = (f"{secrets_file} is missing or unreadable ({exc}); the secure broker under {home} "
               "was not started by revise: start it with `revise broker start --secure`")
        raise SecureBrokerError(msg) from exc


def client_config(material: SecureMaterial, user: str) -> dict[str, str]:
    """The librdkafka (confluent-kafka) settings that authenticate as ``user`` (no bootstrap)."""
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": SCRAM,
        "sasl.username": user,
        "sasl.password": material.passwords[user],
        "ssl.ca.location": str(material.ca_pem),
    }


def admin_config(material: SecureMaterial, bootstrap_servers: str) -> dict[str, Any]:
    """confluent-kafka settings of the ``admin`` super user against ``bootstrap_servers``."""
    return {"bootstrap.servers": bootstrap_servers, **client_config(material, "admin")}


def scram_format_args(material: SecureMaterial) -> list[str]:
    """``kafka-storage format`` arguments that bootstrap every user's SCRAM-SHA-512 credential."""
    args: list[str] = []
    for user in USERS:
        args += ["--add-scram", f"{SCRAM}=[name={user},password={material.passwords[user]}]"]
    return args


def listener_properties(
    material: SecureMaterial, *, port: int, internal_port: int, controller_port: int
) -> dict[str, str]:
    """The ``server.properties`` entries of one node in secure mode (listeners, TLS, SASL, ACLs)."""
    pw = material.passwords[BROKER_USER]
    plain = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{BROKER_USER}" password="{pw}" user_{BROKER_USER}="{pw}";'
    )
    return {
        "listeners": (f"CLIENT://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal_port},"
                      f"CONTROLLER://127.0.0.1:{controller_port}"),
        "advertised.listeners": f"CLIENT://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "INTERNAL",
        "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL",
        "listener.name.client.sasl.enabled.mechanisms": SCRAM,
        "listener.name.client.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": plain,
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": plain,
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(material.broker_pem),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(material.ca_pem),
        "ssl.client.auth": "none",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": ";".join(f"User:{u}" for u in SUPER_USERS),
    }


# --------------------------------------------------------------------------- ACLs


def _binding(resource: str, name: str, pattern: str, user: str, op: str) -> Any:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    return AclBinding(ResourceType[resource], name, ResourcePatternType[pattern], f"User:{user}",
                      "*", AclOperation[op], AclPermissionType.ALLOW)


def _shared_job_acls(user: str, query_id: str | None) -> list[Any]:
    """What every revise job needs beside its topics: transactions, idempotence, groups."""
    if query_id is None:
        txn = [_binding("TRANSACTIONAL_ID", "revise-", "PREFIXED", user, op)
               for op in ("WRITE", "DESCRIBE")]
    else:  # one producer per state partition: revise-<query_id>-p<partition>
        txn = [_binding("TRANSACTIONAL_ID", f"revise-{query_id}-p", "PREFIXED", user, op)
               for op in ("WRITE", "DESCRIBE")]
    return [
        *txn,
        # confluent-kafka names the cluster resource BROKER (Kafka's CLUSTER, "kafka-cluster").
        _binding("BROKER", "kafka-cluster", "LITERAL", user, "IDEMPOTENT_WRITE"),
        # The group ``revise-<query_id>`` holds the state partitions' progress (offsets
        # committed in their transactions, read back); revise's own other consumers (end
        # offsets) use random ``revise-...`` group ids. Those assign partitions and commit
        # nothing, yet librdkafka looks up the group's coordinator whenever a group.id is set
        # and reports GROUP_AUTHORIZATION_FAILED without this. Spark's Kafka source (AdminClient
        # offsets, assign-mode consumers, no commits) needs no group ACL: measured with a batch
        # and an availableNow streaming read.
        _binding("GROUP", "revise-", "PREFIXED", user, "READ"),
    ]


def start_acls() -> list[Any]:
    """The ACLs the secure embedded broker grants at start.

    Topic names are chosen per job, so ``revise`` gets its topic operations on every topic
    (the LITERAL ``*`` wildcard): READ, DESCRIBE, WRITE, CREATE, ALTER (the progress topic
    grows to one partition per state partition). On a shared cluster grant
    :func:`job_acls` instead. ``reader`` gets READ + DESCRIBE on every topic and READ on groups
    ``reader-*`` and ``revise-reader-*``; ``intruder`` and the others get nothing.
    """
    acls = [_binding("TOPIC", "*", "LITERAL", "revise", op)
            for op in ("READ", "DESCRIBE", "WRITE", "CREATE", "ALTER")]
    acls += _shared_job_acls("revise", None)
    acls += [_binding("TOPIC", "*", "LITERAL", "reader", op) for op in ("READ", "DESCRIBE")]
    acls += [_binding("GROUP", g, "PREFIXED", "reader", "READ")
             for g in ("reader-", "revise-reader-")]
    return acls


def job_acls(
    user: str,
    *,
    input_topics: Sequence[str],
    output_topics: Sequence[str],
    progress_topic: str = "_revise_progress",
    query_id: str,
) -> list[Any]:
    """The minimal LITERAL ACLs one revise job needs (what an operator grants on their cluster).

    Args:
        user: the principal's user name (``User:<user>``).
        input_topics: topics the job reads: READ + DESCRIBE.
        output_topics: changelog, late and dead-letter topics: WRITE + DESCRIBE + CREATE
            (revise creates missing output topics).
        progress_topic: the progress topic: WRITE + DESCRIBE + CREATE + READ + ALTER (its
            partitions' committed offsets are the job's progress, read back on restart; it
            grows to one partition per state partition).
        query_id: the job's ``--query-id``; transactional ids ``revise-<query_id>-p<n>``.

    Returns:
        ``confluent_kafka.admin.AclBinding`` objects, ALLOW, any host.
    """
    acls = [_binding("TOPIC", t, "LITERAL", user, op)
            for t in input_topics for op in ("READ", "DESCRIBE")]
    acls += [_binding("TOPIC", t, "LITERAL", user, op)
             for t in (*output_topics, progress_topic) for op in ("WRITE", "DESCRIBE", "CREATE")]
    acls += [_binding("TOPIC", progress_topic, "LITERAL", user, op) for op in ("READ", "ALTER")]
    return acls + _shared_job_acls(user, query_id)


def grant(admin_conf: dict[str, Any], acls: Iterable[Any],
          timeout_s: float = _ACL_TIMEOUT_S) -> None:
    """Create ``acls`` as the client ``admin_conf`` describes (a super user).

    Raises:
        SecureBrokerError: the broker refused or did not answer within ``timeout_s`` seconds.
    """
    from confluent_kafka.admin import AdminClient

    acls = list(acls)
    if not acls:
        return
    admin = AdminClient(admin_conf)  # kept referenced until every future is done
    futures = admin.create_acls(acls, request_timeout=timeout_s)
    for binding, fut in futures.items():
        try:
            fut.result(timeout_s)
        except Exception as exc:
            msg = f"granting {binding} failed: {exc}; check that the admin user is a super user"
            raise SecureBrokerError(msg) from exc


def describe_lines(bootstrap_servers: str, home: Path) -> list[str]:
    """What ``revise broker start|status --secure`` prints: the bootstrap, one config per user.

    ``bootstrap=HOST:PORT[,...]`` then ``config.<user>=<HOME/clients/<user>.properties>``.
    """
    material = SecureMaterial(home, {})
    return [f"bootstrap={bootstrap_servers}",
            *(f"config.{u}={material.client_file(u)}" for u in USERS)]
