"""A new aggregate is one registry entry: registered in a temporary registry (no other module
edited), it parses in ``FN(FIELD)``, runs through the engine and equals a plain oracle.

``range`` (max − min) reuses the built-in ``min``/``max`` state columns; ``sumsq`` (sum of
squares) brings a state column of its own.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import oracle
import pytest
from helpers import configs, streams
from hypothesis import HealthCheck, given, settings

from revise.aggspec import AggList
from revise.config import EngineConfig, WindowSpec
from revise.engine import Engine, InputBatch
from revise.errors import ConfigError
from revise.local import run_batches
from revise.records import revision_schema
from windows.aggregates import MAX, MIN, REGISTRY, Aggregate, StateColumn

SUMSQ = StateColumn("sumsq", np.float64, np.add, 0.0, lambda v: v * v)
TEMP_REGISTRY = {
    **REGISTRY,
    "range": Aggregate("range", 1, (MIN, MAX), lambda s: s["max"] - s["min"]),
    "sumsq": Aggregate("sumsq", 1, (SUMSQ,), lambda s: s["sumsq"]),
}
AGGS = AggList.parse("count,range(a),sumsq(a),max(a)", registry=TEMP_REGISTRY)


def make_batch(recs: list[oracle.Rec]) -> InputBatch:
    v = np.array([r.value for r in recs], dtype=np.float64)
    return InputBatch.from_arrays(
        [r.key for r in recs], np.array([r.ts for r in recs], dtype=np.int64), v,
        offsets=np.array([r.rid for r in recs], dtype=np.int64), topic="t", numeric={"a": v})


def rows(config: EngineConfig, batches: list[list[oracle.Rec]]) -> list[dict]:
    outs = run_batches(config, [make_batch(b) for b in batches], now_ms=7)
    return [r for o in outs for r in o.revisions.to_arrow().to_pylist()]


def test_the_global_registry_does_not_know_the_new_aggregates():
    assert "range" not in REGISTRY and "sumsq" not in REGISTRY
    with pytest.raises(ConfigError, match="unknown aggregate 'range'"):
        AggList.parse("range(a)")


def test_columns_are_named_fn_field_with_prev_columns():
    assert AGGS.columns == ("count", "range_a", "sumsq_a", "max_a")
    names = revision_schema(AGGS).names
    for c in ("range_a", "sumsq_a", "prev_range_a", "prev_sumsq_a"):
        assert c in names
    with pytest.raises(ConfigError, match="range takes|needs a field"):
        AggList.parse("count,range", registry=TEMP_REGISTRY)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs(), streams())
def test_new_aggregates_end_to_end_equal_the_oracle(config, batches):
    config = dataclasses.replace(config, aggs=AGGS)
    truth = oracle.compute(config, batches)
    out = rows(config, batches)
    finals = {(r["key"], r["window_start_ms"], r["window_end_ms"]): r
              for r in out if r["is_final"]}
    assert set(finals) == set(truth.windows)
    for w, t in truth.windows.items():
        got = finals[w]
        assert got["count"] == t.count
        assert got["range_a"] == max(t.values) - min(t.values), w
        assert got["max_a"] == max(t.values), w
        assert math.isclose(got["sumsq_a"], math.fsum(x * x for x in t.values),
                            rel_tol=1e-9, abs_tol=1e-300), w
    last: dict[tuple, dict] = {}
    for r in out:  # every prev_ column holds the previous revision's value
        w = (r["key"], r["window_start_ms"], r["window_end_ms"])
        if r["revision"] == 0:
            assert r["prev_range_a"] is None and r["prev_sumsq_a"] is None
        elif w in last and not r["retracted"]:
            assert r["prev_range_a"] == last[w]["range_a"]
            assert r["prev_sumsq_a"] == last[w]["sumsq_a"]
        last[w] = r


def test_the_snapshot_restores_with_the_new_state_column():
    config = EngineConfig(WindowSpec.parse("tumbling:1s"), 0, aggs=AGGS)
    engine = Engine(config)
    recs = [oracle.Rec("k", 100, 3.0, 0), oracle.Rec("k", 200, -4.0, 1)]
    engine.process(make_batch(recs), watermark_ms=0, batch_id=0, now_ms=7)
    blob = engine.snapshot()
    assert Engine.build(config, blob).snapshot() == blob

