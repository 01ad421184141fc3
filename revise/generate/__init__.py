"""Reproducible out-of-order event streams (``revise generate``): build one, write it to Kafka.

- :mod:`revise.generate.stream` — the seeded stream (``GeneratorConfig`` → ``EventStream``).
- :mod:`revise.generate.produce` — writing it to a topic, optionally paced.
"""

from __future__ import annotations

from revise.generate.produce import ProduceError, produce
from revise.generate.stream import (
    BAD_KINDS,
    DEFAULT_START_MS,
    EventStream,
    GeneratorConfig,
    generate,
    iter_json,
)

__all__ = [
    "BAD_KINDS",
    "DEFAULT_START_MS",
    "EventStream",
    "GeneratorConfig",
    "ProduceError",
    "generate",
    "iter_json",
    "produce",
]
