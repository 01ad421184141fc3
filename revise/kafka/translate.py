"""Translate one merged Kafka client configuration into librdkafka and Java client properties.

The rules (table in ``docs/KAFKA_CONFIG.md``):

- ``security.protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) goes to both.
- SASL: ``sasl.mechanism`` (or librdkafka's alias ``sasl.mechanisms``) PLAIN / SCRAM-SHA-256 /
  SCRAM-SHA-512 with ``sasl.username`` + ``sasl.password`` -> librdkafka as given, Java as a
  generated ``sasl.jaas.config``; a given ``sasl.jaas.config`` (Plain/Scram login module) -> Java
  as given, librdkafka gets the username and password parsed out of it.
- TLS trust: ``ssl.ca.location`` (PEM file) <-> Java ``ssl.truststore.type=PEM`` +
  ``ssl.truststore.location``; ``ssl.ca.pem`` <-> ``ssl.truststore.certificates`` (inline PEM).
- Mutual TLS: ``ssl.certificate.location`` + ``ssl.key.location`` -> Java PEM keystore with the
  certificate chain and key inline (read from the files on the driver, so executors need no
  copy); Java ``ssl.keystore.type=PEM`` (file or inline) -> librdkafka ``ssl.certificate.pem`` +
  ``ssl.key.pem``; PKCS#12 keystores go to both as they are.
- ``ssl.endpoint.identification.algorithm``: ``''``/``none``/``https`` (librdkafka ``none``, Java
  ``''``).
- ``librdkafka.KEY`` / ``java.KEY`` send a key to one library only; any other key goes to each
  library that knows it; a key neither knows is an error.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from revise.errors import ConfigError
from revise.kafka import keys
from revise.kafka.redact import is_secret_key

__all__ = ["Translated", "build_jaas", "parse_jaas", "translate"]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_RDKAFKA = keys.RDKAFKA_ALL_ROLES | keys.RDKAFKA_PRODUCER_ONLY | keys.RDKAFKA_CONSUMER_ONLY
_JAVA = keys.JAVA_CONSUMER | keys.JAVA_ADMIN_ONLY
#: Same name in both libraries, different meaning: must be sent to one with a prefix.
_DIFFERENT_MEANING = {
    "ssl.cipher.suites": "OpenSSL cipher names in librdkafka, Java (IANA) names in Java",
    "retries": "a producer retry count in librdkafka, an admin retry count in Java",
}
_JAAS_RE = re.compile(
    r"^\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)"
    r"(?P<opts>(?:\s+[\w.\-]+\s*=\s*(?:\"(?:[^\"\\\n]|\\.)*\"|[^\s;\"]+))*)\s*;\s*$"
)
_JAAS_OPT_RE = re.compile(r"([\w.\-]+)\s*=\s*(\"(?:[^\"\\\n]|\\.)*\"|[^\s;\"]+)")
_PEM_BLOCK_RE = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Translated:
    """The outcome of :func:`translate` (plain dicts; :class:`KafkaSettings` freezes them)."""

    rdkafka_common: dict[str, str] = field(default_factory=dict)
    rdkafka_producer: dict[str, str] = field(default_factory=dict)
    rdkafka_consumer: dict[str, str] = field(default_factory=dict)
    java: dict[str, str] = field(default_factory=dict)
    secret_values: list[str] = field(default_factory=list)

    def rd(self, key: str, value: str) -> None:
        """Route a librdkafka key by its role (all clients, producer only, consumer only)."""
        if key in keys.RDKAFKA_PRODUCER_ONLY:
            self.rdkafka_producer[key] = value
        elif key in keys.RDKAFKA_CONSUMER_ONLY:
            self.rdkafka_consumer[key] = value
        else:
            self.rdkafka_common[key] = value


def _fail(msg: str) -> NoReturn:
    """Raise a :class:`ConfigError` (keeps the many one-line checks below short)."""
    raise ConfigError(msg)


def _jaas_quote(value: str, what: str) -> str:
    if "\n" in value or "\r" in value:
        _fail(f"{what} contains a line break, which a Java sasl.jaas.config cannot hold; "
                   "use a value without line breaks")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _jaas_unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def build_jaas(mechanism: str, username: str, password: str) -> str:
    """The Java ``sasl.jaas.config`` line for PLAIN or SCRAM-SHA-256/512 (values escaped)."""
    module = _LOGIN_MODULES[mechanism]
    user = _jaas_quote(username, "sasl.username")
    pw = _jaas_quote(password, "sasl.password")
    return f"{module} required username={user} password={pw};"


def parse_jaas(line: str) -> tuple[str, dict[str, str]]:
    """Parse a one-entry ``sasl.jaas.config`` into (login module class, options).

    Raises:
        ConfigError: the line is not ``MODULE FLAG key="value" ...;`` (the value is not shown).
    """
    m = _JAAS_RE.match(line)
    if m is None:
        msg = ("sasl.jaas.config cannot be parsed (value not shown: it holds secrets); expected "
               "'org.apache.kafka.common.security.scram.ScramLoginModule required "
               "username=\"USER\" password=\"PASSWORD\";' with one module and a final ';'")
        _fail(msg)
    opts = {k: _jaas_unquote(v) for k, v in _JAAS_OPT_RE.findall(m.group("opts"))}
    return m.group("module"), opts


def _pop_mechanism(p: dict[str, str]) -> str | None:
    a, b = p.pop("sasl.mechanism", None), p.pop("sasl.mechanisms", None)
    if a and b and a.strip().upper() != b.strip().upper():
        _fail(f"sasl.mechanism={a!r} and sasl.mechanisms={b!r} differ; give one of them")
    mech = (a or b or "").strip().upper()
    return mech or None


def _sasl(p: dict[str, str], out: Translated, native_rd: bool) -> str | None:
    """Translate SASL settings; returns the mechanism in force (or None)."""
    mech = _pop_mechanism(p)
    user, pw = p.pop("sasl.username", None), p.pop("sasl.password", None)
    jaas = p.pop("sasl.jaas.config", None)
    if jaas:
        out.secret_values.append(jaas)
        module, opts = parse_jaas(jaas)
        short = module.rsplit(".", 1)[-1]
        if short == "PlainLoginModule":
            mech = mech or "PLAIN"
        elif short == "ScramLoginModule" and mech not in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            _fail("sasl.jaas.config uses ScramLoginModule; add sasl.mechanism=SCRAM-SHA-512 "
                       "or SCRAM-SHA-256 (the login module does not say which)")
        if short in ("PlainLoginModule", "ScramLoginModule"):
            for name, given in (("username", user), ("password", pw)):
                if given is not None and given != opts.get(name):
                    _fail(f"sasl.{name} and the {name} in sasl.jaas.config differ; "
                               "give only one of them")
            user, pw = opts.get("username"), opts.get("password")
            if user is None or pw is None:
                _fail(f"sasl.jaas.config ({short}) lacks username=\"...\" or "
                           "password=\"...\"; give both")
        elif not native_rd:
            _fail(f"sasl.jaas.config uses {module}, which revise cannot translate for "
                       "confluent-kafka (librdkafka); give its librdkafka settings too "
                       "(sasl.oauthbearer.* or sasl.kerberos.* keys, or librdkafka.KEY=VALUE)")
        out.java["sasl.jaas.config"] = jaas
    elif user is not None or pw is not None:
        if mech not in _LOGIN_MODULES:
            _fail(f"sasl.username/sasl.password need sasl.mechanism PLAIN, SCRAM-SHA-256 "
                       f"or SCRAM-SHA-512; got {mech or 'none'}")
        if not user or pw is None:
            _fail("give both sasl.username and sasl.password (one of them is missing)")
        out.java["sasl.jaas.config"] = build_jaas(mech, user, pw)
        out.secret_values.append(out.java["sasl.jaas.config"])
    elif mech in _LOGIN_MODULES:
        _fail(f"sasl.mechanism={mech} needs sasl.username and sasl.password "
                   "(or sasl.jaas.config)")
    if mech:
        out.rdkafka_common["sasl.mechanisms"] = mech
        out.java["sasl.mechanism"] = mech
    if user is not None and pw is not None:
        out.rdkafka_common["sasl.username"] = user
        out.rdkafka_common["sasl.password"] = pw
        out.secret_values.append(pw)
    return mech


def _read_pem(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as e:
        msg = f"{what} {path!r} cannot be read as a PEM file ({e}); give a readable PEM file"
        raise ConfigError(msg) from e


def _split_pem(text: str, what: str) -> tuple[str, str]:
    """(certificate chain, private key) PEM blocks of a PEM keystore file or text."""
    certs: list[str] = []
    pkeys: list[str] = []
    for m in _PEM_BLOCK_RE.finditer(text):
        (pkeys if "PRIVATE KEY" in m.group(1) else certs).append(m.group(0))
    if not certs or len(pkeys) != 1:
        _fail(f"{what} must hold one PRIVATE KEY block and at least one CERTIFICATE "
                   f"block; found {len(pkeys)} key(s) and {len(certs)} certificate(s)")
    return "\n".join(certs) + "\n", pkeys[0] + "\n"


def _java_key(pem: str, what: str) -> str:
    if "-----BEGIN PRIVATE KEY-----" in pem or "-----BEGIN ENCRYPTED PRIVATE KEY-----" in pem:
        return pem
    _fail(f"{what} is not a PKCS#8 PEM key, which the Java client needs; convert it with "
               "'openssl pkcs8 -topk8 -in KEY -out KEY.pk8' (add -nocrypt for no password)")


def _tls_trust(p: dict[str, str], out: Translated) -> None:
    ca_loc, ca_pem = p.pop("ssl.ca.location", None), p.pop("ssl.ca.pem", None)
    ts_type = (p.pop("ssl.truststore.type", None) or "").upper()
    ts_loc, ts_certs = p.pop("ssl.truststore.location", None), p.pop(
        "ssl.truststore.certificates", None)
    ts_pw = p.pop("ssl.truststore.password", None)
    if ts_type and ts_type != "PEM" and (ts_loc or ts_certs):
        _fail(f"ssl.truststore.type={ts_type} cannot be read by confluent-kafka "
                   "(librdkafka takes PEM CA files); export the CA as PEM (keytool -exportcert "
                   "-rfc -alias CA -keystore FILE) and give ssl.ca.location=CA.pem")
    loc = ca_loc or ts_loc
    if ca_loc and ts_loc and ca_loc != ts_loc:
        _fail(f"ssl.ca.location={ca_loc!r} and ssl.truststore.location={ts_loc!r} differ; "
                   "give one PEM CA file")
    pem = ca_pem or ts_certs
    if loc and pem:
        _fail("give the CA either as a file (ssl.ca.location) or inline (ssl.ca.pem), "
                   "not both")
    if loc:
        out.rdkafka_common["ssl.ca.location"] = loc
        out.java.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": loc})
    elif pem:
        out.rdkafka_common["ssl.ca.pem"] = pem
        out.java.update({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": pem})
    if ts_pw:
        out.java["ssl.truststore.password"] = ts_pw
        out.secret_values.append(ts_pw)


def _tls_identity(p: dict[str, str], out: Translated) -> None:
    names = ("ssl.certificate.location", "ssl.key.location", "ssl.certificate.pem",
             "ssl.key.pem", "ssl.keystore.type", "ssl.keystore.location",
             "ssl.keystore.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
             "ssl.key.password")
    g = {n: p.pop(n) for n in names if n in p}
    ks_type = g.get("ssl.keystore.type", "").upper()
    cert = key = None
    if "ssl.certificate.location" in g or "ssl.key.location" in g:
        if not ("ssl.certificate.location" in g and "ssl.key.location" in g):
            _fail("mutual TLS needs both ssl.certificate.location and ssl.key.location")
        cert = _read_pem(g["ssl.certificate.location"], "ssl.certificate.location")
        key = _read_pem(g["ssl.key.location"], "ssl.key.location")
        out.rdkafka_common["ssl.certificate.location"] = g["ssl.certificate.location"]
        out.rdkafka_common["ssl.key.location"] = g["ssl.key.location"]
    elif "ssl.certificate.pem" in g or "ssl.key.pem" in g:
        cert, key = g.get("ssl.certificate.pem"), g.get("ssl.key.pem")
        if not cert or not key:
            _fail("mutual TLS needs both ssl.certificate.pem and ssl.key.pem")
        out.rdkafka_common.update({"ssl.certificate.pem": cert, "ssl.key.pem": key})
    elif ks_type == "PEM" or "ssl.keystore.key" in g:
        if "ssl.keystore.location" in g:
            text = _read_pem(g["ssl.keystore.location"], "ssl.keystore.location")
            cert, key = _split_pem(text, f"ssl.keystore.location {g['ssl.keystore.location']!r}")
        else:
            cert, key = g.get("ssl.keystore.certificate.chain"), g.get("ssl.keystore.key")
            if not cert or not key:
                _fail("ssl.keystore.type=PEM needs ssl.keystore.location, or both "
                           "ssl.keystore.certificate.chain and ssl.keystore.key")
        out.rdkafka_common.update({"ssl.certificate.pem": cert, "ssl.key.pem": key})
    elif "ssl.keystore.location" in g:
        if ks_type not in ("", "PKCS12"):
            _fail(f"ssl.keystore.type={ks_type} cannot be read by confluent-kafka "
                       "(librdkafka reads PKCS12 or PEM); convert it with keytool "
                       "-importkeystore -deststoretype PKCS12, or give PEM files")
        out.rdkafka_common["ssl.keystore.location"] = g["ssl.keystore.location"]
        out.java.update({"ssl.keystore.type": "PKCS12",
                         "ssl.keystore.location": g["ssl.keystore.location"]})
        if "ssl.keystore.password" in g:
            out.rdkafka_common["ssl.keystore.password"] = g["ssl.keystore.password"]
            out.java["ssl.keystore.password"] = g["ssl.keystore.password"]
    if cert is not None and key is not None:
        out.secret_values.append(key)
        if "ssl.keystore.location" in g and ks_type == "PEM":
            _java_key(key, "the key in ssl.keystore.location")
            out.java.update({"ssl.keystore.type": "PEM",
                             "ssl.keystore.location": g["ssl.keystore.location"]})
        else:
            out.java.update({"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": cert,
                             "ssl.keystore.key": _java_key(key, "the mutual-TLS private key")})
    if "ssl.key.password" in g:
        out.rdkafka_common["ssl.key.password"] = g["ssl.key.password"]
        out.java["ssl.key.password"] = g["ssl.key.password"]
    out.secret_values.extend(v for k, v in g.items() if is_secret_key(k))


def _endpoint(p: dict[str, str], out: Translated) -> None:
    raw = p.pop("ssl.endpoint.identification.algorithm", None)
    if raw is None:
        return
    v = raw.strip().lower()
    if v not in ("", "none", "https"):
        _fail(f"ssl.endpoint.identification.algorithm={raw!r}; expected https (check the "
                   "broker's host name) or '' / none (do not)")
    out.rdkafka_common["ssl.endpoint.identification.algorithm"] = v or "none"
    out.java["ssl.endpoint.identification.algorithm"] = "" if v in ("", "none") else v


def _unknown(key: str) -> ConfigError:
    near = difflib.get_close_matches(key, sorted(_RDKAFKA | _JAVA), n=2, cutoff=0.8)
    hint = f"did you mean {' or '.join(near)}?" if near else "check its spelling or remove it"
    msg = (f"Kafka client setting {key!r} is known to neither confluent-kafka (librdkafka 2.16) "
           f"nor the Java client of Spark's Kafka source (kafka-clients 3.9.2); {hint}")
    return ConfigError(msg)


def _route_rest(p: dict[str, str], out: Translated) -> None:
    for key, value in p.items():
        if key.startswith("librdkafka."):
            name = key.removeprefix("librdkafka.")
            if name not in _RDKAFKA:
                raise _unknown(name)
            out.rd(name, value)
        elif key.startswith("java."):
            name = key.removeprefix("java.")
            if name not in _JAVA:
                raise _unknown(name)
            out.java[name] = value
        elif key in _DIFFERENT_MEANING:
            _fail(f"{key} means different things to the two client libraries "
                       f"({_DIFFERENT_MEANING[key]}); write librdkafka.{key}=... and/or "
                       f"java.{key}=...")
        elif key in _RDKAFKA or key in _JAVA:
            if key in _RDKAFKA:
                out.rd(key, value)
            if key in _JAVA:
                out.java[key] = value
        else:
            raise _unknown(key)
        if is_secret_key(key):
            out.secret_values.append(value)


def translate(props: dict[str, str]) -> Translated:
    """Translate merged user properties (no bootstrap, no reserved keys) for both libraries.

    Raises:
        ConfigError: a key neither library knows, or a value that cannot be translated.
    """
    p = dict(props)
    out = Translated()
    proto = (p.pop("security.protocol", None) or "PLAINTEXT").strip().upper()
    if proto not in PROTOCOLS:
        _fail(f"security.protocol={proto!r}; expected one of {', '.join(PROTOCOLS)}")
    out.rdkafka_common["security.protocol"] = proto
    out.java["security.protocol"] = proto
    native_rd = any(k.startswith(("sasl.oauthbearer.", "sasl.kerberos.", "librdkafka.sasl."))
                    for k in p)
    mech = _sasl(p, out, native_rd)
    if mech and not proto.startswith("SASL_"):
        _fail(f"sasl.mechanism={mech} is set but security.protocol={proto}; use "
                   "SASL_SSL (or SASL_PLAINTEXT without TLS)")
    if proto.startswith("SASL_") and not mech:
        _fail(f"security.protocol={proto} needs sasl.mechanism (PLAIN, SCRAM-SHA-256 or "
                   "SCRAM-SHA-512) with sasl.username and sasl.password")
    _tls_trust(p, out)
    _tls_identity(p, out)
    _endpoint(p, out)
    _route_rest(p, out)
    return out
