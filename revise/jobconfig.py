"""The streaming job's configuration: where it reads, where it writes, how it batches.

A frozen, self-validating dataclass built by the CLI (``revise run``) or by code, made of
groups that validate themselves: :class:`KafkaIO` (broker, topics, client settings),
:class:`DeltaOutput` (the tables), :class:`SparkTuning` (micro-batches, shards),
:class:`InputFields` (where a record holds key, time and value) and the engine's own settings
(window, grace, delay, aggregates, mode, query id) in :class:`revise.config.EngineConfig`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, cast, get_args
from urllib.parse import urlparse

import pyarrow as pa

from revise.checkpoint import checkpoint_fingerprint
from revise.config import EngineConfig
from revise.errors import ConfigError
from revise.inputspec import TS_FORMATS, InputSpec, TsFormat
from revise.kafka import KafkaSettings
from revise.records import revision_schema
from sinks.delta_layout import MIN_LOG_RETENTION_MS

__all__ = [
    "DEFAULT_DELTA_COMMIT_INTERVAL_MS", "DEFAULT_SHARDS", "DEFAULT_TRIGGER_MS", "DRY_RUN_KEY",
    "EMIT_POLICY_KEY", "OUTPUT_LAYOUT", "OUTPUT_LAYOUT_KEY", "STATE_LAYOUT", "STATE_LAYOUT_KEY",
    "DeltaOutput", "InputFields", "JobConfig", "KafkaIO", "SparkTuning", "StartingOffsets",
    "check_state_layout", "parse_ts_format",
]

DEFAULT_SHARDS = 8
"""Keys are hashed into this many shards; one Python call per shard per micro-batch."""

STATE_LAYOUT_KEY = "state_layout"
STATE_LAYOUT = "log+inline/spread"
"""How the stateful operator stores a shard (``revise.spark.operator``): a base snapshot (in
the shard's ``meta`` value when small) and a log of steps (``revise.spark.shard_state``),
under the shard's grouping key that spreads the shards evenly over the state partitions
(``revise.spark.shard_keys``). Recorded in every checkpoint's ``revise-job.json`` under
:data:`STATE_LAYOUT_KEY`; a checkpoint without it, or with another value, holds its state in
a form this version does not read (:func:`check_state_layout`)."""
OUTPUT_LAYOUT_KEY = "output"
OUTPUT_LAYOUT = "tasks"
"""Who writes the output: the stateful tasks, each state partition its own Kafka transactions
with its progress in the group ``revise-<query_id>``'s committed offsets
(``revise.spark.task_output``). Recorded under :data:`OUTPUT_LAYOUT_KEY`; a checkpoint without
it was written by a revise whose driver wrote one transaction per micro-batch, whose progress
this version does not read (:func:`check_state_layout`)."""
EMIT_POLICY_KEY = "emit_policy"
"""Recorded as ``on`` in a checkpoint's fingerprint when the job has an emit policy
(``--emit-min-change`` / ``--emit-every``: its state keeps last emitted revisions); absent
otherwise, so checkpoints from before the options restart unchanged."""
DRY_RUN_KEY = "dry_run"
"""Recorded as ``true`` in a dry run's checkpoint fingerprint (``JobConfig.dry_run``): its
progress is not the output's, so a run that writes refuses it."""


def check_state_layout(checkpoint: str) -> None:
    """Refuse an existing checkpoint of another :data:`STATE_LAYOUT` or :data:`OUTPUT_LAYOUT`.

    Reads only ``revise-job.json``, so ``revise run`` calls it before any Kafka client or Spark
    starts. A new checkpoint (no ``revise-job.json``) passes.

    Raises:
        ConfigError: The checkpoint records no state layout (one snapshot per shard, written
            by an earlier revise) or another one, or no output layout (its driver wrote the
            changelog).
    """
    have = checkpoint_fingerprint(checkpoint)
    if have is None:
        return
    advice = ("start the job with a new --checkpoint and --query-id (its Delta tables and "
              "changelog can stay), or finish it with the revise version that wrote it")
    if have.get(STATE_LAYOUT_KEY) != STATE_LAYOUT:
        had = have.get(STATE_LAYOUT_KEY, "snapshot")
        msg = (f"--checkpoint {checkpoint} was written by the {had} state layout, which this "
               f"version no longer reads: {advice}")
        raise ConfigError(msg)
    if have.get(OUTPUT_LAYOUT_KEY) != OUTPUT_LAYOUT:
        msg = (f"--checkpoint {checkpoint} was written by a revise whose driver wrote the "
               "changelog, one transaction per micro-batch; this version's stateful tasks write "
               "it, each state partition with its own progress, and cannot tell what that one "
               f"committed: {advice}")
        raise ConfigError(msg)


DEFAULT_TRIGGER_MS = 500
"""Micro-batch interval of an unbounded run when ``--trigger`` is not given.

A micro-batch of a steady stream takes ~450-550 ms here, so a 1 s interval left records
waiting ~0.5 s for the next micro-batch to start: first-result latency p50 1.25 s at 10,000
records/s against 0.72 s at 500 ms (docs/lab/benchmarks-diary.md). 250 ms gained little more and
would double the Kafka transactions and Delta commits of a busy job; 0 (back to back) would
ask Kafka for its end offsets every 10 ms while idle."""

DEFAULT_DELTA_COMMIT_INTERVAL_MS = 5_000
"""Least time between two commits of the Delta history tables (``--delta-commit-interval``).

Each Delta commit adds a file to the table's log and each commit costs more as the log grows:
one per micro-batch on the 500 ms trigger made the four tables' writes 37 → 105 ms per batch
over 2,400 micro-batches (docs/lab/benchmarks-diary.md). 5 s is ten micro-batches of a steady stream
per commit while ``revision_history`` trails the changelog by seconds; a micro-batch that takes
longer than that (a big backlog) is committed at once (``sinks.file_stage``)."""

_QUERY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")

StartingOffsets = Literal["earliest", "latest"]
"""Where a new checkpoint starts reading its input topic."""


def _required(value: str, name: str) -> None:
    if not value:
        flag = "--" + name.replace("_", "-")
        msg = f"{flag} is required; give it on the command line or as REVISE_{name.upper()}"
        raise ConfigError(msg)


def parse_ts_format(text: str) -> TsFormat:
    """``--ts-format`` as one of :data:`revise.inputspec.TS_FORMATS` (case and spaces ignored).

    Raises:
        ConfigError: Not one of them.
    """
    value = text.strip().lower()
    if value not in TS_FORMATS:
        msg = (f"--ts-format must be one of {', '.join(TS_FORMATS)}, got {text!r}; epoch_ms is "
               "the default")
        raise ConfigError(msg)
    return cast(TsFormat, value)


@dataclass(frozen=True, slots=True)
class KafkaIO:
    """The job's Kafka side: the broker, the topics it reads and writes, the client settings.

    Attributes:
        bootstrap_servers: Kafka bootstrap servers (``HOST:PORT[,HOST:PORT…]``).
        input_topic: Topic of JSON events.
        changelog_topic: Topic the revisions are committed to, transactionally.
        late_topic: Optional topic of too-late records.
        dead_letter_topic: Optional topic of bad input.
        transactional: Exactly-once changelog (True) or a plain at-least-once producer.
        progress_topic: Compacted topic of the changelog's progress markers.
        starting_offsets: Where a new checkpoint starts reading (``earliest``/``latest``).
        settings: The user's Kafka client settings (SASL, TLS …) for every Kafka client of the
            job; its bootstrap address is ``bootstrap_servers``. Default: none (plaintext).
    """

    bootstrap_servers: str
    input_topic: str
    changelog_topic: str
    late_topic: str | None = None
    dead_letter_topic: str | None = None
    transactional: bool = True
    progress_topic: str = "_revise_progress"
    starting_offsets: StartingOffsets = "earliest"
    settings: KafkaSettings = field(default_factory=lambda: KafkaSettings(None))

    def __post_init__(self) -> None:
        for name in ("bootstrap_servers", "input_topic", "changelog_topic"):
            _required(getattr(self, name), name)
        if self.starting_offsets not in get_args(StartingOffsets):
            msg = f"starting offsets must be earliest or latest, got {self.starting_offsets!r}"
            raise ConfigError(msg)
        outputs = [t for t in (self.changelog_topic, self.late_topic, self.dead_letter_topic) if t]
        if self.input_topic in outputs:
            msg = (
                f"--input-topic {self.input_topic!r} is also an output topic; "
                "read from one topic and write to others"
            )
            raise ConfigError(msg)


@dataclass(frozen=True, slots=True)
class DeltaOutput:
    """The job's Delta tables.

    Attributes:
        path: Folder (or URI) holding the Delta tables.
        commit_interval_ms: Least time between two commits of the Delta history tables
            (``revisions``, ``late``, ``dead_letter``; the micro-batches in between wait in
            ``<checkpoint>/delta-files``, ``sinks.file_stage``) and between two MERGEs
            into ``latest`` (``--delta-commit-interval``). 0: every micro-batch.
        log_retention_ms: How long the four Delta tables keep their log's commit files
            (``--delta-log-retention``, ``delta.logRetentionDuration``; at least
            ``sinks.delta_layout.MIN_LOG_RETENTION_MS``), set at start; None leaves each
            table's own (Delta's default: 30 days). Bounds what each Delta write costs in a
            run of days, and how far back a time travel reaches.
    """

    path: str
    commit_interval_ms: int = DEFAULT_DELTA_COMMIT_INTERVAL_MS
    log_retention_ms: int | None = None

    def __post_init__(self) -> None:
        _required(self.path, "delta_path")
        if self.commit_interval_ms < 0:
            msg = f"--delta-commit-interval must be >= 0ms, got {self.commit_interval_ms}ms"
            raise ConfigError(msg)
        if self.log_retention_ms is not None and self.log_retention_ms < MIN_LOG_RETENTION_MS:
            msg = (f"--delta-log-retention must be at least 1m (a reader lists a table's log "
                   f"before it reads the files), got {self.log_retention_ms}ms")
            raise ConfigError(msg)


@dataclass(frozen=True, slots=True)
class SparkTuning:
    """How Spark cuts the stream into micro-batches and spreads the keys.

    Attributes:
        trigger_ms: Micro-batch interval; None → back-to-back for ``once``, 500 ms otherwise.
        max_records_per_batch: Cap on input records per micro-batch (``maxOffsetsPerTrigger``).
        shards: Number of key shards (fixed for the life of a checkpoint).
        shuffle_partitions: ``spark.sql.shuffle.partitions`` of a new checkpoint (the stateful
            operator's task count per micro-batch); None: the shard count, at most the
            session's own setting. Spark keeps a checkpoint's first value on restarts.
        overlap_commit: Commit a micro-batch's Delta writes while Spark computes the next
            micro-batch (``--overlap-commit``; its Kafka transactions are the tasks', inside
            the batch), not before Spark records it;
            still exactly once: a start rewinds Spark's record of a batch whose writes a crash
            cut short (``revise.spark.rewind``). Needs a local or mounted ``--checkpoint``.
    """

    trigger_ms: int | None = None
    max_records_per_batch: int | None = None
    shards: int = DEFAULT_SHARDS
    shuffle_partitions: int | None = None
    overlap_commit: bool = False

    def __post_init__(self) -> None:
        if self.shards < 1:
            msg = f"--shards must be >= 1, got {self.shards}"
            raise ConfigError(msg)
        if self.shuffle_partitions is not None and self.shuffle_partitions < 1:
            msg = f"--shuffle-partitions must be >= 1, got {self.shuffle_partitions}"
            raise ConfigError(msg)
        if self.max_records_per_batch is not None and self.max_records_per_batch < 1:
            msg = f"--max-records-per-batch must be >= 1, got {self.max_records_per_batch}"
            raise ConfigError(msg)
        if self.trigger_ms is not None and self.trigger_ms < 0:
            msg = f"--trigger must be >= 0ms, got {self.trigger_ms}ms"
            raise ConfigError(msg)


@dataclass(frozen=True, slots=True)
class InputFields:
    """Where a JSON record holds its key, event time and value (docs/FIELDS.md).

    Attributes:
        key_field: JSON field of the key; a dotted path (``payload.user.id``) reads a nested
            object; several comma-separated fields (``store,region``) group by all of them
            (the key is then a JSON array text).
        ts_field: Dotted path of the event time, or ``@timestamp`` for the Kafka record's.
        value_field: Dotted path of the number the bare ``--aggs`` form aggregates.
        ts_format: How ``ts_field`` holds the time: ``epoch_ms``, ``epoch_s``, ``epoch_us``
            or ``iso8601`` (with a zone).
    """

    key_field: str = "key"
    ts_field: str = "ts"
    value_field: str = "value"
    ts_format: TsFormat = "epoch_ms"

    def __post_init__(self) -> None:
        if self.ts_format not in TS_FORMATS:
            parse_ts_format(self.ts_format)


@dataclass(frozen=True, slots=True)
class JobConfig:
    """Everything ``revise run`` needs, in groups.

    Attributes:
        kafka: Broker, topics and Kafka client settings.
        delta: The Delta tables' folder and commit cadence.
        checkpoint: Spark checkpoint folder (offsets and the engine's state).
        engine: Window, grace, delay, aggregates, mode, query id and emit policy.
        spark: Micro-batch interval and size, shards, shuffle partitions, overlapped commits.
        input: Where the key, event time and value are in a record.
        once: Process what is in the topic at start, close every window, stop.
        metrics_port: Serve the job's Prometheus metrics at ``/metrics`` on this TCP port
            (``--metrics-port``, ``revise.ops.metrics``, docs/OPERATIONS.md); None: none.
        dry_run: Compute every revision and write none: no Kafka message or transaction, no
            Delta file or commit; the run's counts say what it would have written. What the
            job costs without its output (``benchmarks.bench_job``'s ``revision-noop``). Its
            checkpoint records it: a run that writes cannot continue from it.

    Example:
        >>> cfg = JobConfig(
        ...     kafka=KafkaIO(bootstrap_servers="localhost:9092", input_topic="events",
        ...                   changelog_topic="events-changelog"),
        ...     delta=DeltaOutput(path="/tmp/delta"), checkpoint="/tmp/ckpt",
        ...     engine=EngineConfig(window=WindowSpec.parse("tumbling:10s"), grace_ms=5000),
        ...     spark=SparkTuning(shards=2), once=True)
    """

    kafka: KafkaIO
    delta: DeltaOutput
    checkpoint: str
    engine: EngineConfig
    spark: SparkTuning = field(default_factory=SparkTuning)
    input: InputFields = field(default_factory=InputFields)
    once: bool = False
    metrics_port: int | None = None
    dry_run: bool = False

    def __post_init__(self) -> None:
        _required(self.checkpoint, "checkpoint")
        aggs, value_field = self.engine.aggs, self.input.value_field.strip()
        if aggs.bare and aggs.value_field != value_field:
            msg = (f"--value-field {value_field!r} is not the field the bare --aggs {aggs} "
                   f"aggregates ({aggs.value_field!r}); build the engine's aggregates with "
                   f"AggList.parse({str(aggs)!r}, value_field={value_field!r})")
            raise ConfigError(msg)
        if len(urlparse(self.checkpoint).scheme) > 1:  # one letter: a Windows drive
            msg = (
                f"--checkpoint {self.checkpoint!r} is a URI; revise keeps its job file and "
                "close-all commands in the checkpoint folder with local file operations, so "
                "give a folder that the driver and every executor reach under the same path: "
                "a local folder on one machine, a shared mount (NFS, a FUSE-mounted bucket) on "
                "a cluster"
            )
            raise ConfigError(msg)
        if not _QUERY_ID.match(self.engine.query_id):
            msg = (
                f"--query-id {self.engine.query_id!r} is not a valid id; use letters, digits, "
                "'.', '_' or '-' (at most 200 characters), starting with a letter or digit"
            )
            raise ConfigError(msg)
        if self.metrics_port is not None and not 1 <= self.metrics_port <= 65535:
            msg = (f"--metrics-port must be a TCP port in 1-65535 (Prometheus scrapes a fixed "
                   f"one), got {self.metrics_port}")
            raise ConfigError(msg)
        self.input_spec  # noqa: B018 - validates the field options (ConfigError)

    @property
    def input_spec(self) -> InputSpec:
        """Where key, event time and aggregated fields are in a record (validated).

        The bare ``--aggs`` form reads one number, ``--value-field``, when it needs any.

        Raises:
            ConfigError: A field option cannot be read (empty path segment, repeated key
                field, unknown ``--ts-format``).
        """
        f = self.input
        return InputSpec.build(key_field=f.key_field, ts_field=f.ts_field,
                               ts_format=f.ts_format, aggs=self.engine.aggs)

    @property
    def revision_schema(self) -> pa.Schema:
        """The revisions' Arrow schema: SPEC §4's, with the ``--aggs`` columns (§7)."""
        return revision_schema(self.engine.aggs)

    @property
    def kafka_settings(self) -> KafkaSettings:
        """The Kafka client settings with this job's bootstrap address."""
        return self.kafka.settings.with_bootstrap(self.kafka.bootstrap_servers)

    @property
    def query_id(self) -> str:
        """The job's stable id (also the Kafka transactional id's suffix)."""
        return self.engine.query_id

    @property
    def effective_trigger_ms(self) -> int:
        """The micro-batch interval in force: back-to-back for ``once``, else 500 ms by default."""
        if self.spark.trigger_ms is not None:
            return self.spark.trigger_ms
        return 0 if self.once else DEFAULT_TRIGGER_MS

    def fingerprint(self) -> dict[str, object]:
        """What a checkpoint is tied to: changing any of these needs a new checkpoint.

        The bare ``--aggs`` form records its list of names (``["count", "sum"]``); the state
        layout is recorded under :data:`STATE_LAYOUT_KEY` and the output's under
        :data:`OUTPUT_LAYOUT_KEY` (a checkpoint without them cannot restart:
        :func:`check_state_layout`). The ``FN(FIELD)`` form
        records the whole ``--aggs`` text and a non-default ``--ts-format`` is recorded under
        its own key. An emit policy (``--emit-min-change`` / ``--emit-every``) is recorded as
        ``emit_policy: on``, without its thresholds: those may change on a restart. A dry run
        is recorded as ``dry_run: true``.
        """
        e = self.engine
        aggs = e.aggs
        out: dict[str, object] = {
            "query_id": e.query_id,
            "input_topic": self.kafka.input_topic,
            "window": str(e.window),
            "grace_ms": e.grace_ms,
            "watermark_delay_ms": e.watermark_delay_ms,
            "aggs": list(aggs.columns) if aggs.bare else str(aggs),
            "mode": e.mode,
            "shards": self.spark.shards,
            "fields": [self.input.key_field, self.input.ts_field, self.input.value_field],
        }
        if self.input.ts_format != "epoch_ms":
            out["ts_format"] = self.input.ts_format
        out[STATE_LAYOUT_KEY] = STATE_LAYOUT
        out[OUTPUT_LAYOUT_KEY] = OUTPUT_LAYOUT
        if e.emit_policy is not None:  # the state keeps last emitted revisions; not the values
            out[EMIT_POLICY_KEY] = "on"
        if self.dry_run:  # its progress is not the output's: nothing was written
            out[DRY_RUN_KEY] = True
        return out
