"""What ``revise compare`` runs: :class:`CompareConfig`."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from revise.compare.sweep import SweepGrid
from revise.config import EngineConfig
from revise.errors import ConfigError
from revise.generate import GeneratorConfig
from revise.kafka import KafkaSettings
from revise.vocab import MODES, Mode

__all__ = ["MODES", "CompareConfig"]


@dataclass(frozen=True, slots=True)
class CompareConfig:
    """What ``revise compare`` runs.

    Attributes:
        bootstrap_servers: Kafka bootstrap servers.
        output: Folder for the JSON, CSV and PNG files (created).
        delta_path: Delta root; each mode writes under ``<delta_path>/<mode>``, the figures go
            to ``<delta_path>/comparisons``.
        engine: Window, grace, watermark delay and aggregates (mode and query id are set per run).
        input_topic: An existing topic to read; None → generate ``generator`` into a new one.
        generator: The stream to generate when there is no input topic.
        max_records_per_batch: Records per micro-batch, the same for both runs.
        rate: Replay the input at this many records/s while each job runs (wall-clock latency).
        trigger_ms: Micro-batch interval of the rate-driven runs (None: the job's default).
        shards: Key shards of both jobs.
        grace_factors: Grace multipliers of the offline what-if.
        run_id: Names topics, query ids and checkpoints; unique per call by default.
        timeout_s: Give up a job after this long (None: no limit).
        sweep: Also replay the input offline over this grid of settings (``--sweep``).
        target_accuracy: The accuracy the sweep's recommendation must reach (0–1).
        key_field, ts_field, ts_format, value_field: Where the inputs are in a record, as for
            ``revise run`` (docs/FIELDS.md); other than the defaults only with ``input_topic``
            (the generator writes ``key``, ``ts`` in epoch ms and ``value``).
    """

    bootstrap_servers: str
    output: str
    delta_path: str
    engine: EngineConfig
    input_topic: str | None = None
    generator: GeneratorConfig | None = None
    max_records_per_batch: int = 1000
    rate: float | None = None
    trigger_ms: int | None = None
    shards: int = 4
    grace_factors: tuple[float, ...] = (1.0, 2.0, 4.0)
    run_id: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S") + "-"
                        + uuid.uuid4().hex[:6])
    timeout_s: float | None = None
    kafka: KafkaSettings = field(default_factory=lambda: KafkaSettings(None))
    key_field: str = "key"
    ts_field: str = "ts"
    ts_format: str = "epoch_ms"
    value_field: str = "value"
    sweep: SweepGrid | None = None
    target_accuracy: float = 0.9

    @property
    def default_fields(self) -> bool:
        """Whether the input is read from the default fields (``key``, ``ts`` in ms, ``value``)."""
        return ((self.key_field.strip(), self.ts_field.strip(), self.ts_format.strip().lower(),
                 self.value_field.strip()) == ("key", "ts", "epoch_ms", "value"))

    @property
    def kafka_settings(self) -> KafkaSettings:
        """The user's Kafka client settings (SASL, TLS …) with ``bootstrap_servers``."""
        return self.kafka.with_bootstrap(self.bootstrap_servers)

    def __post_init__(self) -> None:
        if (self.input_topic is None) == (self.generator is None):
            msg = "give --input-topic to compare on an existing topic, or --events to generate one"
            raise ConfigError(msg)
        if self.generator is not None and not self.default_fields:
            msg = ("--key-field, --ts-field, --ts-format and --value-field describe an existing "
                   "--input-topic; generated input has key, ts (epoch ms) and value: drop them "
                   "or give --input-topic")
            raise ConfigError(msg)
        if self.max_records_per_batch < 1:
            msg = f"--max-records-per-batch must be >= 1, got {self.max_records_per_batch}"
            raise ConfigError(msg)
        if self.rate is not None and not self.rate > 0:
            msg = f"--rate must be > 0 records per second, got {self.rate}"
            raise ConfigError(msg)
        if not 0 < self.target_accuracy <= 1:
            msg = f"--target-accuracy must be in (0, 1], got {self.target_accuracy}"
            raise ConfigError(msg)
        if self.sweep is not None and (not self.sweep.grace_factors
                                       or any(f <= 0 for f in self.sweep.grace_factors)):
            msg = f"--sweep-grace factors must be > 0, got {self.sweep.grace_factors}"
            raise ConfigError(msg)
        if not self.grace_factors or any(f <= 0 for f in self.grace_factors):
            msg = f"grace factors must be > 0, got {self.grace_factors}"
            raise ConfigError(msg)

    def query_id(self, mode: Mode) -> str:
        """The query id of one mode's run."""
        return f"compare-{self.run_id}-{mode}"
