"""After close_all a window never starts again: later records for it are too late."""

from __future__ import annotations

from revise.config import EngineConfig, WindowSpec
from revise.engine import Engine, InputBatch


def _batch(keys: list[str], ts: list[int]) -> InputBatch:
    return InputBatch.from_arrays(keys, ts, [1.0] * len(ts), topic="t")


def test_closed_by_close_all_stays_closed_tumbling() -> None:
    """t=1200 → rev 0 of [0,10000); close_all → FINAL rev 1; later t=5000 → too late (sealed)."""
    cfg = EngineConfig(window=WindowSpec.parse("tumbling:10s"), grace_ms=60_000)
    e = Engine(cfg)
    e.process(_batch(["a"], [1200]), watermark_ms=0, batch_id=0, now_ms=0)
    closed = e.close_all(watermark_ms=1200, batch_id=1, now_ms=0)
    assert [(r.window_start_ms, r.revision, r.timing) for r in closed.revisions.rows()] == [
        (0, 1, "FINAL")
    ]
    assert e.sealed and e.open_windows == 0
    restored = Engine.build(cfg, e.snapshot())
    out = restored.process(_batch(["a", "b", "a"], [5000, 9000, 20_000]), watermark_ms=1200,
                           batch_id=2, now_ms=0)
    late = sorted((r.key, r.ts_ms, r.window_start_ms) for r in out.late.rows())
    assert late == [("a", 5000, 0), ("b", 9000, 0)]
    revs = [(r.key, r.window_start_ms, r.revision) for r in out.revisions.rows()]
    assert revs == [("a", 20_000, 0)], "a window after the sealed horizon opens normally"


def test_closed_by_close_all_stays_closed_sessions() -> None:
    cfg = EngineConfig(window=WindowSpec.parse("session:10s"), grace_ms=60_000)
    e = Engine(cfg)
    e.process(_batch(["a"], [1000]), watermark_ms=0, batch_id=0, now_ms=0)
    e.close_all(watermark_ms=1000, batch_id=1, now_ms=0)
    out = Engine.build(cfg, e.snapshot()).process(
        _batch(["a", "a"], [500, 1001]), watermark_ms=1000, batch_id=2, now_ms=0
    )
    assert [r.ts_ms for r in out.late.rows()] == [500]
    assert [(r.window_start_ms, r.window_end_ms) for r in out.revisions.rows()] == [(1001, 11_001)]


def test_unsealed_engine_is_not_sealed() -> None:
    e = Engine(EngineConfig(window=WindowSpec.parse("tumbling:10s"), grace_ms=0))
    e.process(_batch(["a"], [1]), watermark_ms=0, batch_id=0, now_ms=0)
    assert not e.sealed
