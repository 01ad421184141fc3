"""A pure local driver: feed micro-batches through an Engine with a WatermarkTracker.

Used by the tests and the benchmark; the Spark job has its own driver (Spark's watermark).
The watermark of batch ``i`` is computed from the accepted records of batches ``< i`` (SPEC §3);
at the end every open window is closed with the last real watermark.

Trace (tumbling 10s, grace 0): batch 0 ``[t=1000]`` at ``W=0`` → rev 0 of [0,10000);
batch 1 ``[t=12000]`` at ``W=1000`` → rev 0 of [10000,20000); close_all at ``W=12000`` →
FINAL [10000,20000) (``[0,10000)`` closed in batch 2 if there was one, here at the end).
"""

from __future__ import annotations

from collections.abc import Iterable

from revise.config import EngineConfig
from revise.engine import BatchOutput, Engine, InputBatch
from windows import WatermarkTracker

__all__ = ["run_batches"]


def run_batches(
    config: EngineConfig,
    batches: Iterable[InputBatch],
    *,
    close_at_end: bool = True,
    now_ms: int = 0,
    engine: Engine | None = None,
    tracker: WatermarkTracker | None = None,
    first_batch_id: int = 0,
) -> list[BatchOutput]:
    """Run ``batches`` in order (batch ids ``first_batch_id + i``), then close everything.

    Args:
        config: Engine config (its ``watermark_delay_ms`` drives the tracker).
        batches: Micro-batches in arrival order; empty batches advance the clock only.
        close_at_end: Emit a FINAL for every window still open after the last batch, as one
            extra output with the next batch id, carrying the last real watermark.
        now_ms: The wall-clock value written as ``emitted_at_ms`` (fixed, for determinism).
        engine: Continue an existing engine (e.g. one restored from a snapshot).
        tracker: Continue an existing watermark tracker (pairs with ``engine``).
        first_batch_id: Id of the first batch.

    Returns:
        One :class:`BatchOutput` per batch, plus the closing one when ``close_at_end``.
    """
    eng = engine if engine is not None else Engine(config)
    wm = tracker if tracker is not None else WatermarkTracker(config.watermark_delay_ms)
    outputs: list[BatchOutput] = []
    batch_id = first_batch_id
    for batch in batches:
        out = eng.process(batch, watermark_ms=wm.current_ms, batch_id=batch_id, now_ms=now_ms)
        outputs.append(out)
        wm.observe(out.max_accepted_ts_ms)
        wm.advance()
        batch_id += 1
    if close_at_end:
        outputs.append(eng.close_all(watermark_ms=wm.current_ms, batch_id=batch_id,
                                     now_ms=now_ms))
    return outputs
