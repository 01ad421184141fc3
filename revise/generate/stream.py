"""Reproducible out-of-order event streams: what ``revise generate`` writes.

The stream: ``events`` records over ``keys`` keys, event times advancing by ``step_ms`` per
record from ``start_ms`` (so the stream covers ``events × step_ms`` of event time), each
delayed by a uniform disorder in ``[0, disorder_ms]``; a ``late_fraction`` of them is delayed
further by a heavy-tailed amount (``late_by_ms × Pareto(1.5)``, so some are beyond any
reasonable grace); a ``bad_fraction`` is replaced by malformed records of every kind the job
must turn into dead letters. Arrival order is the record index: event time is what is out of
order. Everything derives from ``seed``: the same arguments give the same bytes.

Trace (step 10 ms, disorder 0): record 0 ``{"key":"k00003","ts":T0,"value":…}``, record 1 at
``T0+10``…; a late record i carries ``ts = T0 + 10·i − late_by·(1+Pareto)``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from revise.errors import ConfigError

__all__ = [
    "BAD_KINDS", "DEFAULT_START_MS", "EventStream", "GeneratorConfig", "generate", "iter_json",
]

DEFAULT_START_MS = 1_767_225_600_000
"""2026-01-01T00:00:00Z: generated event times start here."""

BAD_KINDS: tuple[str, ...] = (
    "invalid_json", "missing_ts", "string_ts", "negative_ts", "null_key", "non_numeric_value",
    "empty", "json_array", "fractional_ts",
)


@dataclass(frozen=True, slots=True)
class GeneratorConfig:
    """What to generate; see the module docstring.

    Attributes:
        events: Number of records (good, late and bad together).
        keys: Number of distinct keys (``k00000``…).
        seed: Random seed.
        disorder_ms: Max uniform delay of event time behind arrival order.
        late_fraction: Share of records delayed further by a heavy tail.
        late_by_ms: Scale of that extra delay.
        bad_fraction: Share of malformed records.
        step_ms: Event-time advance per record.
        start_ms: Event time of the first record.
    """

    events: int
    keys: int = 100
    seed: int = 0
    disorder_ms: int = 0
    late_fraction: float = 0.0
    late_by_ms: int = 60_000
    bad_fraction: float = 0.0
    step_ms: int = 10
    start_ms: int = DEFAULT_START_MS

    def __post_init__(self) -> None:
        if self.events < 0:
            msg = f"--events must be >= 0, got {self.events}"
            raise ConfigError(msg)
        if self.keys < 1:
            msg = f"--keys must be >= 1, got {self.keys}"
            raise ConfigError(msg)
        for name in ("late_fraction", "bad_fraction"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                flag = "--" + name.replace("_", "-")
                msg = f"{flag} must be a fraction in [0, 1], got {v}"
                raise ConfigError(msg)
        if self.late_fraction + self.bad_fraction > 1.0:
            msg = "--late-fraction + --bad-fraction must be <= 1"
            raise ConfigError(msg)
        if self.step_ms < 0 or self.disorder_ms < 0 or self.late_by_ms < 0:
            msg = "--disorder, --late-by and the step must be >= 0ms"
            raise ConfigError(msg)


@dataclass(frozen=True, slots=True)
class EventStream:
    """The generated records, columnar, in arrival order.

    ``kind`` is 0 good, 1 late (delayed by the heavy tail; whether the job calls it too late
    depends on the grace), 2 bad. ``payloads`` are the Kafka values.
    """

    keys: npt.NDArray[np.object_]
    ts_ms: npt.NDArray[np.int64]
    values: npt.NDArray[np.float64]
    kind: npt.NDArray[np.int8]
    payloads: list[bytes]

    def __len__(self) -> int:
        return len(self.payloads)

    @property
    def good(self) -> npt.NDArray[np.bool_]:
        """Records that are well formed (on time or late)."""
        good: npt.NDArray[np.bool_] = self.kind != 2
        return good


def generate(cfg: GeneratorConfig) -> EventStream:
    """Generate the stream described by ``cfg`` (deterministic in ``cfg``)."""
    rng = np.random.default_rng(cfg.seed)
    n = cfg.events
    idx = np.arange(n, dtype=np.int64)
    key_ids = rng.integers(0, cfg.keys, size=n)
    ts = cfg.start_ms + idx * cfg.step_ms
    if cfg.disorder_ms:
        ts = ts - rng.integers(0, cfg.disorder_ms + 1, size=n)
    u = rng.random(n)
    kind = np.zeros(n, dtype=np.int8)
    kind[u < cfg.late_fraction] = 1
    kind[(u >= cfg.late_fraction) & (u < cfg.late_fraction + cfg.bad_fraction)] = 2
    late = kind == 1
    if late.any():
        tail = (1.0 + rng.pareto(1.5, size=int(late.sum()))) * cfg.late_by_ms
        ts[late] = ts[late] - tail.astype(np.int64)
    ts = np.maximum(ts, 0)
    values = np.round(rng.gamma(2.0, 10.0, size=n), 3)
    width = max(5, len(str(cfg.keys - 1)))
    names = np.array([f"k{i:0{width}d}" for i in range(cfg.keys)], dtype=object)
    keys = names[key_ids]
    bad_kind = rng.integers(0, len(BAD_KINDS), size=n)
    payloads: list[bytes] = []
    for i in range(n):
        if kind[i] == 2:
            bad = _bad(BAD_KINDS[bad_kind[i]], str(keys[i]), int(ts[i]), float(values[i]))
            payloads.append(bad)
        else:
            payloads.append(
                f'{{"key":"{keys[i]}","ts":{int(ts[i])},"value":{float(values[i])!r}}}'.encode()
            )
    return EventStream(keys, ts.astype(np.int64), values, kind, payloads)


def _bad(kind: str, key: str, ts: int, value: float) -> bytes:
    body: object
    if kind == "invalid_json":
        return f'{{"key":"{key}","ts":{ts},"value":'.encode()
    if kind == "empty":
        return b""
    if kind == "json_array":
        body = [key, ts, value]
    elif kind == "missing_ts":
        body = {"key": key, "value": value}
    elif kind == "string_ts":
        body = {"key": key, "ts": str(ts), "value": value}
    elif kind == "negative_ts":
        body = {"key": key, "ts": -ts - 1, "value": value}
    elif kind == "null_key":
        body = {"key": None, "ts": ts, "value": value}
    elif kind == "non_numeric_value":
        body = {"key": key, "ts": ts, "value": "n/a"}
    elif kind == "fractional_ts":
        body = {"key": key, "ts": ts + 0.5, "value": value}
    else:  # pragma: no cover - BAD_KINDS is closed
        msg = f"unknown bad kind {kind}; expected one of {BAD_KINDS}"
        raise ConfigError(msg)
    return json.dumps(body).encode()


def iter_json(stream: EventStream) -> Iterator[str]:
    """The payloads as text (for printing samples)."""
    for p in stream.payloads:
        yield p.decode(errors="replace")
