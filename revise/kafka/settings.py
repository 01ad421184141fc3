"""One Kafka client configuration for every client revise creates (Spark's source, confluent-kafka).

The user writes one file (``--kafka-config FILE``, Java properties as Kafka's tools take with
``--command-config``; env ``REVISE_KAFKA_CONFIG`` names it when the option is absent) and adds
repeatable ``--kafka-option KEY=VALUE`` (wins over the file). :func:`load_kafka_settings` turns
that into a frozen :class:`KafkaSettings`, translating what the two libraries spell differently
(SASL via ``sasl.jaas.config`` for Java, PEM TLS trust and mutual TLS both ways); the rules and
the mapping table are in ``docs/KAFKA_CONFIG.md``. Everything else goes to the library that knows
the key; a key neither knows is a :class:`~revise.errors.ConfigError` (exit 2).

Bootstrap: ``--bootstrap-servers`` stays its own option. A ``bootstrap.servers`` in the file or
an option is used when ``--bootstrap-servers`` is absent; both given and different is a usage
error naming both.

Trace: file ``sasl.mechanism=SCRAM-SHA-512``, ``sasl.username=u``, ``sasl.password=p`` ->
librdkafka ``sasl.mechanisms=SCRAM-SHA-512, sasl.username=u, sasl.password=p``; Spark
``kafka.sasl.mechanism=SCRAM-SHA-512``, ``kafka.sasl.jaas.config=org.apache.kafka.common.security
.scram.ScramLoginModule required username="u" password="p";``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from revise.errors import ConfigError
from revise.kafka import keys
from revise.kafka.redact import Redactor, is_secret_key, redact_mapping
from revise.kafka.translate import translate

__all__ = [
    "ENV_KAFKA_CONFIG",
    "add_kafka_arguments",
    "settings_from_args",
    "RESERVED_KEYS",
    "SPARK_SOURCE_DEFAULTS",
    "KafkaSettings",
    "Props",
    "load_kafka_settings",
    "parse_kafka_options",
    "parse_properties",
    "render_client_configs",
    "revise_client_configs",
]

#: Environment variable naming the client config file when ``--kafka-config`` is absent.
ENV_KAFKA_CONFIG = "REVISE_KAFKA_CONFIG"

#: revise's tuning of the Spark Kafka source's Java consumer; a user value wins. Spark's reader
#: seeks, polls and then asks the broker for the partition's earliest and latest offsets (two
#: ListOffsets round trips) on every poll, and a poll returns at most ``max.poll.records``
#: (Kafka's default 500): a micro-batch of 500,000 records made 1,000 polls per partition slice.
#: Reading 2M records took 2.9-3.1 s with 20,000 against 3.9-4.5 s with 500
#: (docs/lab/benchmarks-diary.md, *The input stage*). A poll still returns only what the fetches
#: brought (about ``max.partition.fetch.bytes``, 1 MiB, per partition), so memory does not grow
#: with it.
SPARK_SOURCE_DEFAULTS: Mapping[str, str] = MappingProxyType({"max.poll.records": "20000"})

#: Keys revise sets itself per client (exactly-once, offsets, serialization); a user value is
#: a usage error rather than silently ignored or silently breaking exactly-once.
RESERVED_KEYS: frozenset[str] = frozenset({
    "transactional.id", "isolation.level", "enable.idempotence", "group.id",
    "group.instance.id", "enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset",
    "enable.partition.eof", "key.serializer", "value.serializer", "key.deserializer",
    "value.deserializer", "interceptor.classes",
})

_LINE_CONT = "\\"


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """Java properties logical lines: (first physical line number, text), continuations joined."""
    buf: list[str] = []
    start = 0
    for no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip() if not buf else raw.lstrip()
        if not buf:
            if not line or line[0] in "#!":
                continue
            start = no
        # an odd number of trailing backslashes continues the line
        trailing = len(line) - len(line.rstrip(_LINE_CONT))
        if trailing % 2 == 1:
            buf.append(line[:-1])
            continue
        buf.append(line)
        yield start, "".join(buf)
        buf = []
    if buf:
        yield start, "".join(buf)


def _split_key_value(line: str) -> tuple[str, str]:
    """Split at the first unescaped ``=`` or ``:`` (or whitespace), as java.util.Properties does."""
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=:" or ch.isspace():
            break
        i += 1
    key, rest = line[:i], line[i:].lstrip()
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip()
    return _unescape(key), _unescape(rest.rstrip())


def _unescape(s: str) -> str:
    out: list[str] = []
    it = iter(range(len(s)))
    for i in it:
        ch = s[i]
        if ch == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
            next(it, None)
        else:
            out.append(ch)
    return "".join(out)


def parse_properties(text: str, *, source: str = "<text>") -> dict[str, str]:
    """Parse Java properties text (``key=value`` or ``key: value``, ``#``/``!`` comments).

    Blank lines are skipped, surrounding whitespace is stripped, a trailing backslash continues
    the line; a later key wins over an earlier one.

    Raises:
        ConfigError: a line has an empty key.
    """
    props: dict[str, str] = {}
    for no, line in _logical_lines(text):
        key, value = _split_key_value(line)
        if not key:
            msg = f"{source}:{no}: no key before '=' in {line[:40]!r}; write KEY=VALUE"
            raise ConfigError(msg)
        props[key] = value
    return props


def parse_kafka_options(options: Sequence[str]) -> dict[str, str]:
    """Parse repeatable ``--kafka-option KEY=VALUE`` values (a later one wins).

    Raises:
        ConfigError: an option has no ``=`` or an empty key.
    """
    out: dict[str, str] = {}
    for opt in options:
        key, sep, value = opt.partition("=")
        if not sep or not key.strip():
            shown = opt.split("=")[0] if is_secret_key(opt) else opt
            msg = (f"--kafka-option {shown!r} is not KEY=VALUE; write e.g. "
                   "--kafka-option security.protocol=SASL_SSL")
            raise ConfigError(msg)
        out[key.strip()] = value.strip()
    return out


def _read_config_file(path: Path, origin: str) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        msg = f"{origin} {str(path)!r} cannot be read ({e.strerror}); give a readable file"
        raise ConfigError(msg) from e
    return parse_properties(text, source=str(path))


class Props(Mapping[str, str]):
    """An immutable, hashable, picklable str -> str mapping (keys kept in sorted order)."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, str] | None = None) -> None:
        self._items: tuple[tuple[str, str], ...] = tuple(sorted((items or {}).items()))

    def __getitem__(self, key: str) -> str:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self._items) == dict(other.items())

    def __repr__(self) -> str:
        return f"Props({dict(self._items)!r})"

    def __reduce__(self) -> tuple[type[Props], tuple[dict[str, str]]]:
        return (Props, (dict(self._items),))


@dataclass(frozen=True, slots=True)
class KafkaSettings:
    """The validated, translated client settings (no revise-set keys, no bootstrap).

    Build with :func:`load_kafka_settings`. Hashable and picklable (it may ride along in a job
    config that Spark pickles). The mappings are read-only; the ``*_conf`` methods
    return fresh dicts to which the caller adds its own keys (transactional.id, group.id, ...).

    Attributes:
        bootstrap_servers: The resolved bootstrap address, None when neither option nor file
            gave one (the caller then uses the embedded broker).
        rdkafka_common: librdkafka properties for every client.
        rdkafka_producer: librdkafka producer-only properties.
        rdkafka_consumer: librdkafka consumer-only properties.
        java: Java client properties for Spark's source (without the ``kafka.`` prefix).
        redactor: Knows every secret value of these settings.
        origin: Where the settings came from, for messages (``file X + 2 options``).
    """

    bootstrap_servers: str | None
    rdkafka_common: Mapping[str, str] = field(default_factory=Props)
    rdkafka_producer: Mapping[str, str] = field(default_factory=Props)
    rdkafka_consumer: Mapping[str, str] = field(default_factory=Props)
    java: Mapping[str, str] = field(default_factory=Props)
    redactor: Redactor = field(default_factory=Redactor)
    origin: str = "defaults"

    def __post_init__(self) -> None:
        for name in ("rdkafka_common", "rdkafka_producer", "rdkafka_consumer", "java"):
            value = getattr(self, name)
            clash = RESERVED_KEYS & set(value)
            if clash:
                msg = f"KafkaSettings.{name} holds keys revise sets itself: {sorted(clash)}"
                raise ConfigError(msg)
            object.__setattr__(self, name, Props(value))

    def _with_bootstrap(self, conf: dict[str, str]) -> dict[str, str]:
        if self.bootstrap_servers is None:
            msg = ("no Kafka bootstrap address: give --bootstrap-servers HOST:PORT or "
                   "bootstrap.servers in --kafka-config")
            raise ConfigError(msg)
        return {"bootstrap.servers": self.bootstrap_servers, **conf}

    def producer_conf(self) -> dict[str, str]:
        """confluent-kafka Producer settings (add transactional.id etc. on top)."""
        return self._with_bootstrap({**self.rdkafka_common, **self.rdkafka_producer})

    def consumer_conf(self) -> dict[str, str]:
        """confluent-kafka Consumer settings (add group.id, isolation.level on top)."""
        return self._with_bootstrap({**self.rdkafka_common, **self.rdkafka_consumer})

    def java_conf(self) -> dict[str, str]:
        """Java client settings (the stateful tasks' changelog producers and progress reader)."""
        return self._with_bootstrap(dict(self.java))

    def admin_conf(self) -> dict[str, str]:
        """confluent-kafka AdminClient settings."""
        return self._with_bootstrap(dict(self.rdkafka_common))

    def spark_source_options(self) -> dict[str, str]:
        """Spark Kafka source options: every Java client key prefixed ``kafka.``.

        With revise's :data:`SPARK_SOURCE_DEFAULTS` where the user set nothing.
        """
        java = self._with_bootstrap({**SPARK_SOURCE_DEFAULTS, **self.java})
        return {f"kafka.{k}": v for k, v in java.items()}

    def with_bootstrap(self, bootstrap_servers: str) -> KafkaSettings:
        """The same settings for this bootstrap address (e.g. the embedded broker's)."""
        return dataclasses.replace(self, bootstrap_servers=bootstrap_servers)

    @property
    def is_secured(self) -> bool:
        """Whether any SASL or TLS setting is in force."""
        proto = self.rdkafka_common.get("security.protocol", "PLAINTEXT")
        return proto != "PLAINTEXT"


def _resolve_bootstrap(option: str | None, props: dict[str, str]) -> str | None:
    from_file = props.pop("bootstrap.servers", None) or None
    props.pop("metadata.broker.list", None)
    if option and from_file and _norm_hosts(option) != _norm_hosts(from_file):
        msg = (f"--bootstrap-servers {option!r} and bootstrap.servers={from_file!r} in the "
               "Kafka client config differ; give only one of them, or the same address")
        raise ConfigError(msg)
    return option or from_file


def _norm_hosts(value: str) -> list[str]:
    return sorted(h.strip() for h in value.split(",") if h.strip())


def load_kafka_settings(
    *,
    bootstrap_servers: str | None = None,
    config_file: str | Path | None = None,
    options: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> KafkaSettings:
    """Load, merge, validate and translate one client configuration.

    Precedence (highest first): ``--kafka-option`` values, the ``--kafka-config`` file (else the
    file named by ``$REVISE_KAFKA_CONFIG``). ``--bootstrap-servers`` vs ``bootstrap.servers``:
    see the module docstring.

    Args:
        bootstrap_servers: The ``--bootstrap-servers`` value, or None.
        config_file: The ``--kafka-config`` path, or None.
        options: The ``--kafka-option KEY=VALUE`` values, in order.
        environ: The environment (default ``os.environ``).

    Raises:
        ConfigError: unreadable file, malformed line, unknown key, reserved key, a value that
            cannot be translated, or conflicting bootstrap addresses.
    """
    env = os.environ if environ is None else environ
    origin: list[str] = []
    props: dict[str, str] = {}
    if config_file is None and env.get(ENV_KAFKA_CONFIG):
        config_file = env[ENV_KAFKA_CONFIG]
        origin.append(f"${ENV_KAFKA_CONFIG}={config_file}")
        props.update(_read_config_file(Path(config_file), f"${ENV_KAFKA_CONFIG}"))
    elif config_file is not None:
        origin.append(f"--kafka-config {config_file}")
        props.update(_read_config_file(Path(config_file), "--kafka-config"))
    if options:
        origin.append(f"{len(options)} --kafka-option")
        props.update(parse_kafka_options(options))
    bootstrap = _resolve_bootstrap(bootstrap_servers, props)
    reserved = sorted(RESERVED_KEYS & set(props))
    if reserved:
        msg = (f"Kafka client setting(s) {', '.join(reserved)} are set by revise itself "
               "(exactly-once and offset handling depend on them); remove them from "
               "--kafka-config / --kafka-option")
        raise ConfigError(msg)
    t = translate(props)
    return KafkaSettings(
        bootstrap_servers=bootstrap,
        rdkafka_common=t.rdkafka_common,
        rdkafka_producer=t.rdkafka_producer,
        rdkafka_consumer=t.rdkafka_consumer,
        java=t.java,
        redactor=Redactor.of(t.secret_values),
        origin=" + ".join(origin) or "defaults",
    )


def known_to_any(key: str) -> bool:
    """Whether either client library knows the property ``key`` (for messages and tests)."""
    return key in (keys.RDKAFKA_ALL_ROLES | keys.RDKAFKA_PRODUCER_ONLY
                   | keys.RDKAFKA_CONSUMER_ONLY | keys.JAVA_CONSUMER | keys.JAVA_ADMIN_ONLY)


def revise_client_configs(
    settings: KafkaSettings,
    *,
    query_id: str,
    producer_defaults: Mapping[str, object] | None = None,
    task_producer_defaults: Mapping[str, object] | None = None,
) -> dict[str, dict[str, str]]:
    """The effective settings of every Kafka client a revise job creates, with revise's keys.

    Args:
        settings: The user's translated settings.
        query_id: The job's ``--query-id`` (state partition ``p``'s producers have the
            ``transactional.id`` ``revise-<query_id>-p<p>``).
        producer_defaults: revise's own tuning of its confluent-kafka producers
            (``sinks.kafka.changelog_config.DEFAULT_PRODUCER_CONFIG``); user settings win over
            it, revise-set keys win over all.
        task_producer_defaults: revise's own tuning of the stateful tasks' Java producers
            (``revise.spark.task_output.PRODUCER_DEFAULTS``), likewise.

    Returns:
        Client name -> its settings (values as strings), secrets NOT yet redacted.
    """
    defaults = {k: str(v) for k, v in (producer_defaults or {}).items()}
    task_defaults = {k: str(v) for k, v in (task_producer_defaults or {}).items()}
    partition_id = f"revise-{query_id}-p<partition>"
    return {
        "spark kafka source (Java client, driver and executors)": {
            **settings.spark_source_options(), "kafka.isolation.level": "read_committed"},
        "changelog producers (Java client, in the stateful tasks, transactional)": {
            **task_defaults, **settings.java_conf(), "transactional.id": partition_id,
            "enable.idempotence": "true"},
        "progress reader (Java client, in the stateful tasks)": {
            **settings.java_conf(), "isolation.level": "read_committed",
            "group.id": f"revise-{query_id}", "enable.auto.commit": "false"},
        "partition takeover at start (confluent-kafka, transactional)": {
            **defaults, **settings.producer_conf(), "transactional.id": partition_id,
            "enable.idempotence": "true"},
        "progress / offsets consumer (confluent-kafka)": {
            **settings.consumer_conf(), "isolation.level": "read_committed",
            "group.id": "revise-reader-<unique per use>", "enable.auto.commit": "false"},
        "topic admin (confluent-kafka)": settings.admin_conf(),
    }


def render_client_configs(settings: KafkaSettings, configs: Mapping[str, Mapping[str, str]]) -> str:
    """Text for ``revise run --print-config``: one section per client, keys sorted, redacted.

    Secret options show ``***``; any secret value that appears inside another value (e.g. a
    password inside a jaas line) is masked too.
    """
    lines = [f"# Kafka client settings from {settings.origin}; secrets shown as ***"]
    for client, conf in configs.items():
        lines.append(f"[{client}]")
        shown = redact_mapping(conf)
        lines.extend(f"{k}={settings.redactor.text(str(shown[k]))}" for k in sorted(shown))
        lines.append("")
    return "\n".join(lines)


def add_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--kafka-config FILE`` and repeatable ``--kafka-option KEY=VALUE`` to a subcommand."""
    parser.add_argument(
        "--kafka-config", metavar="FILE",
        help="Kafka client properties file (as Kafka's tools take with --command-config) for "
             "every Kafka client; see docs/KAFKA_CONFIG.md")
    parser.add_argument(
        "--kafka-option", metavar="KEY=VALUE", action="append", default=[],
        help="one Kafka client setting, wins over --kafka-config (repeatable)")


def settings_from_args(
    args: argparse.Namespace, *, bootstrap_servers: str | None = None
) -> KafkaSettings:
    """The settings of a parsed command line (see :func:`add_kafka_arguments`).

    ``--kafka-option`` values that arrive as one text (from a ``REVISE_KAFKA_OPTION``
    environment default) are split into lines.
    """
    raw = getattr(args, "kafka_option", None) or []
    options = [o for o in raw.splitlines() if o.strip()] if isinstance(raw, str) else list(raw)
    return load_kafka_settings(bootstrap_servers=bootstrap_servers,
                               config_file=getattr(args, "kafka_config", None), options=options)
