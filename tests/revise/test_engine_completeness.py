"""The engine's ``completeness`` and ``est_*`` (SPEC §4): ranges, FINALs, calibration, state."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from revise.aggspec import AggList
from revise.config import EngineConfig, WindowSpec
from revise.engine import Engine, InputBatch
from revise.errors import StateSchemaMismatch
from revise.generate.stream import GeneratorConfig, generate
from revise.local import run_batches


def _config(window: str = "tumbling:10s", grace_ms: int = 5000, mode: str = "revision",
            delay_ms: int = 0) -> EngineConfig:
    return EngineConfig(WindowSpec.parse(window), grace_ms, delay_ms,
                        AggList.parse("count,sum"), mode, "q")


def _batches(per_batch: int, *, events: int = 20_000, disorder_ms: int = 2000,
             late_fraction: float = 0.0, keys: int = 5) -> list[InputBatch]:
    s = generate(GeneratorConfig(events=events, keys=keys, seed=4, disorder_ms=disorder_ms,
                                 late_fraction=late_fraction, late_by_ms=3000))
    part = (np.arange(len(s.keys)) % 2).astype(np.int32)
    return [InputBatch.from_arrays(s.keys[i:i + per_batch], s.ts_ms[i:i + per_batch],
                                   s.values[i:i + per_batch], part[i:i + per_batch],
                                   np.arange(i, min(i + per_batch, len(s.keys))))
            for i in range(0, len(s.keys), per_batch)]


def _frame(outs) -> pd.DataFrame:
    return pd.concat([o.revisions.to_arrow().to_pandas() for o in outs], ignore_index=True)


@pytest.mark.parametrize("window", ["tumbling:10s", "hopping:10s:5s", "session:2s"])
def test_completeness_is_a_share_and_one_on_the_final(window):
    revs = _frame(run_batches(_config(window), _batches(300, late_fraction=0.1)))
    assert revs["completeness"].between(0.0, 1.0).all()
    final = revs[revs["is_final"]]
    assert (final["completeness"] == 1.0).all()
    assert (final["est_count"] == final["count"]).all() and (final["est_sum"] == final["sum"]).all()
    early = revs[~revs["is_final"]]
    assert (early["completeness"] < 1.0).any()
    ok = early["completeness"] > 0
    assert np.allclose(early["est_count"][ok], early["count"][ok] / early["completeness"][ok])
    assert early["est_count"][~ok].isna().all()


def test_watermark_mode_finals_carry_one_and_the_actual_values():
    revs = _frame(run_batches(_config(mode="watermark"), _batches(300)))
    assert len(revs) and (revs["completeness"] == 1.0).all()
    assert (revs["est_count"] == revs["count"]).all() and (revs["est_sum"] == revs["sum"]).all()


def test_in_order_windows_grow_more_complete_and_match_their_share():
    revs = _frame(run_batches(_config(), _batches(100, disorder_ms=500)))
    window = ["key", "window_start_ms", "window_end_ms"]
    finals = revs[revs["is_final"]].set_index(window)["count"].rename("final")
    early = revs[revs["timing"] == "EARLY"].join(finals, on=window)
    for _, w in early.groupby(window):
        assert w["completeness"].is_monotonic_increasing
    share = early["count"] / early["final"]
    assert (early["completeness"] - share).abs().mean() < 0.06
    # the estimate of the final is closer than the raw count for most incomplete revisions
    incomplete = early["count"] < early["final"]
    closer = ((early["est_count"] - early["final"]).abs()
              < (early["count"] - early["final"]).abs())[incomplete]
    assert closer.mean() > 0.8


def test_learned_delays_survive_a_snapshot_and_old_snapshots_start_empty():
    cfg = _config()
    batches = _batches(400, disorder_ms=3000)
    full = run_batches(cfg, batches)
    engine = Engine(cfg)
    first = run_batches(cfg, batches[:10], close_at_end=False, engine=engine)
    restored = Engine.build(cfg, engine.snapshot())
    from windows import WatermarkTracker

    tracker = WatermarkTracker(0, current_ms=first[-1].watermark_ms)
    tracker.observe(first[-1].max_accepted_ts_ms)
    tracker.advance()
    rest = run_batches(cfg, batches[10:], engine=restored, tracker=tracker, first_batch_id=10)
    got = [o.revisions.to_arrow() for o in first + rest]
    want = [o.revisions.to_arrow() for o in full]
    assert all(a.equals(b) for a, b in zip(got, want, strict=True))
    # a snapshot of the previous format (no delays) is read as having learned nothing yet
    table = pa.ipc.open_stream(pa.py_buffer(engine.snapshot())).read_all()
    meta = dict(table.schema.metadata)
    assert meta[b"revise.delays"] != b"[]"

    def rewrite(**changes: bytes) -> bytes:
        sink = pa.BufferOutputStream()
        t = table.replace_schema_metadata({**meta, **{k.replace("_", ".").encode(): v
                                                      for k, v in changes.items()}})
        with pa.ipc.new_stream(sink, t.schema) as w:
            w.write_table(t)
        return sink.getvalue().to_pybytes()

    old = Engine.build(cfg, rewrite(revise_format=b"2"))
    assert old.open_windows == engine.open_windows
    assert pa.ipc.open_stream(pa.py_buffer(old.snapshot())).read_all() \
        .schema.metadata[b"revise.delays"] == b"[]"
    with pytest.raises(StateSchemaMismatch, match="delay histogram has tag"):
        Engine.build(cfg, rewrite(revise_delays_tag=b"delays:linear:v9"))
