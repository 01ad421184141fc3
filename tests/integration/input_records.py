"""The input topic as a ``read_committed`` consumer sees it, classified by SPEC §2 (today's
options) or by a run's own rules (SPEC §7, ``fields_oracle.parser``): the records the end-to-end
checks (``integration_support.check_run``) compare the outputs with."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import oracle

from sinks.kafka import read_committed

MAX_TS = 2**53


@dataclass(frozen=True)
class InputRecord:
    partition: int
    offset: int
    raw: bytes | None


def rid(partition: int, offset: int) -> int:
    """The oracle's record id of a Kafka record."""
    return partition * 1_000_000_000 + offset


def parse_good(raw: bytes | None) -> tuple[str, int, float] | None:
    """SPEC §2 in plain Python: (key, ts, value) of a well-formed record, None for bad input."""
    if not raw or not raw.strip():
        return None
    try:
        obj = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    key, ts, value = obj.get("key"), obj.get("ts"), obj.get("value")
    if not isinstance(key, str):
        return None
    if isinstance(ts, float) and ts.is_integer():
        ts = int(ts)
    if isinstance(ts, bool) or not isinstance(ts, int) or not 0 <= ts < MAX_TS:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return key, ts, float(value)


# A record's parse: (key, ts, value, aggregated fields by path) or None for bad input; takes
# the raw value and the Kafka record timestamp (ms).
Parser = Callable[[bytes | None, int], tuple[str, int, float, dict[Any, Any]] | None]


def parse_plain(raw: bytes | None, _kafka_ts_ms: int) -> tuple[str, int, float,
                                                                 dict[Any, Any]] | None:
    parsed = parse_good(raw)
    return None if parsed is None else (*parsed, {})


@dataclass
class Input:
    """The input topic as a read_committed consumer sees it, classified by SPEC §2 (or §7).

    ``fields``: per record id, the aggregated fields of a good record (``FN(FIELD)`` form).
    """

    records: list[InputRecord]
    good: dict[tuple[int, int], oracle.Rec]
    bad: dict[tuple[int, int], bytes | None]
    fields: dict[int, dict[Any, Any]] = field(default_factory=dict)

    @staticmethod
    def read(bootstrap: str, topic: str, client_config: dict[str, Any] | None = None,
             parse: Parser = parse_plain) -> Input:
        msgs = read_committed(bootstrap, topic, timeout_s=60, client_config=client_config)
        records = [InputRecord(m.partition(), m.offset(), m.value()) for m in msgs]
        stamps = {(m.partition(), m.offset()): m.timestamp()[1] for m in msgs}
        good, bad, fields = {}, {}, {}
        for r in records:
            parsed = parse(r.raw, stamps[(r.partition, r.offset)])
            if parsed is None:
                bad[(r.partition, r.offset)] = r.raw
            else:
                i = rid(r.partition, r.offset)
                good[(r.partition, r.offset)] = oracle.Rec(*parsed[:3], i)
                fields[i] = parsed[3]
        return Input(records, good, bad, fields)
