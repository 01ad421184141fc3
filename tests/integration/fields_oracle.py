"""SPEC §7 in plain Python for the end-to-end tests: a record's fields under an InputSpec, and the
batch computation of every ``FN(FIELD)`` aggregate over a window's accepted records.

Deliberately simple (loops, ``json``, ``datetime``); covers what the tests' inputs hold: dotted
paths, grouped keys of strings and integers, ``epoch_ms`` / ``iso8601`` / ``@timestamp`` time,
finite numbers, and distinct values that are strings or integers (docs/FIELDS.md has the full
rules, checked against Spark by ``test_fields_parse.py``).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Callable
from typing import Any

import oracle

from revise.aggspec import AggList
from revise.inputspec import KAFKA_TIMESTAMP, InputSpec

MAX_TS = 2**53
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}(:?\d{2})?)$")
_MISSING = object()
Parsed = tuple[str, int, float, dict[tuple[str, str], Any]]


def get_path(obj: Any, path: str) -> Any:
    """The value at a dotted path, or ``_MISSING``."""
    for seg in path.split("."):
        if not isinstance(obj, dict) or seg not in obj:
            return _MISSING
        obj = obj[seg]
    return obj


def canonical(v: Any) -> str | None:
    """The canonical text of a key member or distinct value (strings, bools, integers)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float) and math.isfinite(v) and v.is_integer() and abs(v) < MAX_TS:
        return str(int(v))
    return None


def iso_ms(text: str) -> int | None:
    """Epoch ms of a zoned ISO-8601 text (sub-ms digits truncated), None when not one."""
    if not _ISO.match(text):
        return None
    body, frac = text, ""
    m = re.match(r"^(.{19})(\.\d+)?(.*)$", text)
    assert m is not None
    body, frac, zone = m.group(1), (m.group(2) or "")[1:], m.group(3)
    zone = "+00:00" if zone == "Z" else zone
    if len(zone) == 3:
        zone += ":00"
    elif ":" not in zone:
        zone = zone[:3] + ":" + zone[3:]
    try:
        at = dt.datetime.fromisoformat(body.replace(" ", "T") + zone)
    except ValueError:
        return None
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (at - epoch) // dt.timedelta(milliseconds=1) + int((frac + "000")[:3] or 0)


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def _ts(obj: dict[str, Any], spec: InputSpec, kafka_ts_ms: int) -> int | None:
    if spec.ts_field == KAFKA_TIMESTAMP:
        return kafka_ts_ms if 0 <= kafka_ts_ms < MAX_TS else None
    v = get_path(obj, spec.ts_field)
    if spec.ts_format == "iso8601":
        ms = iso_ms(v) if isinstance(v, str) else None
    else:
        assert spec.ts_format == "epoch_ms", "the tests use epoch_ms, iso8601, @timestamp"
        ms = int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) \
            and float(v).is_integer() else None
    return ms if ms is not None and 0 <= ms < MAX_TS else None


def parser(spec: InputSpec) -> Callable[[bytes | None, int], Parsed | None]:
    """``parse(raw, kafka_ts_ms)`` → ``(key, ts_ms, late value, fields)`` or None (bad input).

    ``fields`` maps ``("num", path)`` of each numeric field to its float and
    ``("dst", path)`` of each distinct field to its canonical text (a field may be both); the
    late value is the first numeric field (0.0 without one), as the job's late
    records carry it.
    """

    def parse(raw: bytes | None, kafka_ts_ms: int) -> Parsed | None:
        try:
            obj = json.loads(raw or b"")
        except ValueError:
            return None
        if not isinstance(obj, dict):
            return None
        members = [get_path(obj, f) for f in spec.key_fields]
        if len(members) == 1:
            if not isinstance(members[0], str):
                return None
            key = members[0]
        else:
            texts = [canonical(m) for m in members]
            if any(t is None for t in texts):
                return None
            key = "[" + ",".join(t for t in texts if t is not None) + "]"
        ts = _ts(obj, spec, kafka_ts_ms)
        if ts is None:
            return None
        fields: dict[tuple[str, str], Any] = {}
        for f in spec.numeric_fields:
            fields[("num", f)] = _number(get_path(obj, f))
            if fields[("num", f)] is None:
                return None
        for f in spec.distinct_fields:
            fields[("dst", f)] = canonical(get_path(obj, f))
            if fields[("dst", f)] is None:
                return None
        first = fields[("num", spec.numeric_fields[0])] if spec.numeric_fields else 0.0
        return key, ts, first, fields

    return parse


def expected(aggs: AggList) -> Callable[[list[dict[tuple[str, str], Any]]], dict[str, Any]]:
    """The batch computation of every column of ``aggs`` over a window's records' fields."""

    def compute(records: list[dict[tuple[str, str], Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for s in aggs.specs:
            if s.kind == "count":
                out[s.column] = len(records)
                continue
            vals = [r[("dst" if s.kind == "distinct" else "num", str(s.field))] for r in records]
            if s.kind == "distinct":
                out[s.column] = oracle.distinct(vals)
            elif s.percentile is not None:
                out[s.column] = oracle.percentile(vals, s.percentile)
            else:
                out[s.column] = {"sum": math.fsum, "min": min, "max": max,
                                 "mean": lambda v: math.fsum(v) / len(v)}[s.fn](vals)
        return out

    return compute
