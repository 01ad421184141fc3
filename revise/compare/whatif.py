"""The offline what-if of ``revise compare``: the recorded input replayed through the engine.

:func:`replay_batches` cuts the well-formed input into the real run's micro-batches;
:func:`grace_what_if` re-runs the pure engine on them with larger graces (windows are
half-open ``[window_start_ms, window_end_ms)``, times int64 ms).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from revise.aggspec import AggList
from revise.compare.metrics import percentiles
from revise.config import EngineConfig
from revise.engine import InputBatch
from revise.local import run_batches
from revise.vocab import WINDOW_BOUNDS

__all__ = ["GraceOutcome", "grace_what_if", "replay_batches"]


@dataclass(frozen=True, slots=True)
class GraceOutcome:
    """What the engine would have done with ``grace_ms`` (one row of :func:`grace_what_if`).

    Attributes:
        factor: ``grace_ms`` / the run's grace (1 reproduces the run offline).
        grace_ms: The grace tried.
        too_late: Too-late (record, window) pairs.
        windows: Windows closed with a FINAL.
        finals_changed: Windows whose FINAL count differs from the reference finals (or that
            the reference does not have).
        final_latency_p50_ms: Median event-time latency of the FINAL revisions.
    """

    factor: float
    grace_ms: int
    too_late: int
    windows: int
    finals_changed: int
    final_latency_p50_ms: float | None

    def to_dict(self) -> dict[str, float | int | None]:
        """JSON-ready plain values."""
        return asdict(self)


def replay_batches(records: pd.DataFrame, *, batch_size: int | None = None
                   ) -> list[InputBatch]:
    """Well-formed input cut into the micro-batches an offline replay feeds the engine.

    The records are cut at the changes of their ``batch`` column (the real run's split, so a
    replay reproduces its watermarks and too-late records), or else into ``batch_size``
    records each in arrival order.

    Args:
        records: ``key, ts_ms, value`` in arrival order (+ optional ``partition, offset`` and
            ``batch``: the micro-batch that read the record).
        batch_size: Records per micro-batch when there is no ``batch`` column (default 1).

    Returns:
        The :class:`~revise.engine.InputBatch` list, in order.
    """
    if "batch" in records:
        records = records.sort_values(["batch", *[c for c in ("partition", "offset")
                                                  if c in records]], kind="stable")
        cuts = np.flatnonzero(np.diff(records["batch"].to_numpy())) + 1
        bounds = list(zip([0, *cuts.tolist()], [*cuts.tolist(), len(records)], strict=True))
    else:
        size = max(1, int(batch_size or 1))
        bounds = [(i, min(i + size, len(records))) for i in range(0, len(records), size)]
    n = len(records)
    keys = records["key"].astype(object).to_numpy()
    ts = records["ts_ms"].astype("int64").to_numpy()
    vals = records["value"].astype("float64").to_numpy()
    parts = (records["partition"].astype("int32").to_numpy() if "partition" in records
             else np.zeros(n, dtype=np.int32))
    offs = (records["offset"].astype("int64").to_numpy() if "offset" in records
            else np.arange(n, dtype=np.int64))
    return [
        InputBatch.from_arrays(keys[a:b], ts[a:b], vals[a:b], parts[a:b], offs[a:b],
                               topic="what-if")
        for a, b in bounds
    ]


# Longer than ~60 lines: a docstring with the method, then one replay per grace factor.
def grace_what_if(
    config: EngineConfig,
    batches: Sequence[InputBatch],
    *,
    factors: Sequence[float] = (1.0, 2.0, 4.0),
    reference_finals: pd.DataFrame | None = None,
) -> list[GraceOutcome]:
    """Re-run the pure engine offline with larger graces on the same well-formed input.

    The well-formed input, cut into micro-batches by :func:`replay_batches` (the real run's
    split, so factor 1 reproduces its too-late records), is run through
    :func:`revise.local.run_batches` (watermark from the batches before, SPEC §3; everything
    closed at the end) once per factor, with ``grace_ms = round(config.grace_ms × factor)``.
    Acceptance does not depend on the mode, so one table serves both.

    Args:
        config: The run's engine config.
        batches: The input's micro-batches (:func:`replay_batches`).
        factors: Grace multipliers to try.
        reference_finals: ``key, window_start_ms, window_end_ms, count`` of the real run's
            FINALs; ``finals_changed`` counts windows that differ from it (0 when None).

    Returns:
        One :class:`GraceOutcome` per factor, in the given order.

    Trace (tumbling 10 s, grace 5 s, batches of 1): ``t=5000`` then ``t=15000`` then
    ``t=9000`` → the third record is too late for ``[0,10000)`` at watermark 15000 (≥ 10000 +
    5000); with grace × 2 = 10 s it is accepted (count 2), so ``finals_changed = 1``.
    """
    ref: dict[tuple[str, int, int], int] | None = None
    if reference_finals is not None:
        ref = {
            (str(k), int(s), int(e)): int(c)
            for k, s, e, c in reference_finals[[*WINDOW_BOUNDS, "count"]].itertuples(index=False)
        }
    out: list[GraceOutcome] = []
    for factor in factors:
        grace = int(round(config.grace_ms * factor))
        cfg = EngineConfig(window=config.window, grace_ms=grace,
                           watermark_delay_ms=config.watermark_delay_ms,
                           aggs=AggList.parse("count"), mode="watermark", query_id="what-if")
        results = run_batches(cfg, batches)
        too_late = sum(len(r.late) for r in results)
        finals: dict[tuple[str, int, int], int] = {}
        lat: list[int] = []
        for r in results:
            for rev in r.revisions.rows():
                if rev.is_final and not rev.retracted:
                    finals[(rev.key, rev.window_start_ms, rev.window_end_ms)] = int(rev.count or 0)
                    lat.append(rev.watermark_ms - rev.window_end_ms)
        changed = 0
        if ref is not None:
            changed = sum(1 for w, c in finals.items() if ref.get(w) != c)
            changed += sum(1 for w in ref if w not in finals)
        out.append(GraceOutcome(float(factor), grace, too_late, len(finals), changed,
                                percentiles(lat).p50))
    return out
