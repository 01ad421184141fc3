"""The ``completeness`` of every revision, learned online from the stream's arrival delays.

Each engine (one per shard in Spark) keeps a :class:`~windows.completeness.DelayHistogram` of
its accepted records' arrival delays (the kernel's module docstring defines the delay, the
estimate and its assumptions). Per micro-batch, in revision mode:

1. :meth:`CompletenessModel.observe` adds the delays of the batch's accepted records, each
   measured against the frontier (max event time) in force when the batch started
   (``watermark + watermark_delay``), moved on by the earlier records of the same partition;
   it returns the frontier after the batch, ``now``;
2. :meth:`CompletenessModel.apply` sets ``completeness`` of each EARLY/LATE revision (retracted
   ones included) to the estimated share of its window's eventually accepted records counted
   at ``now``; FINALs keep 1.0.

The histogram is part of the engine's snapshot, so a restored engine continues with exactly
the same estimates; the same input in the same micro-batches gives the same values. In
watermark mode nothing is learned and every revision (a FINAL) carries 1.0.

Trace (tumbling 10s, grace 0, records arriving in event-time order): a batch whose frontier
reaches 4000 → rev 0 of ``[0,10000)`` completeness 0.4, ``est_count = count / 0.4``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import numpy.typing as npt

from revise.config import EngineConfig
from revise.engine.batch import InputBatch
from revise.record_batches import RevisionBatch
from windows.completeness import (
    DelayHistogram,
    arrival_delays,
    fixed_completeness,
    session_completeness,
)

__all__ = ["CompletenessModel"]


class CompletenessModel:
    """The delay histogram of one engine and the completeness it gives revisions.

    Args:
        config: The engine's config (window, grace, watermark delay).
        histogram: Learned delays (a restored snapshot's); None: nothing learned yet.
    """

    __slots__ = ("_config", "histogram")

    def __init__(self, config: EngineConfig, histogram: DelayHistogram | None = None) -> None:
        self._config = config
        self.histogram = histogram if histogram is not None else DelayHistogram()

    def frontier_ms(self, watermark_ms: int, max_ts_ms: int) -> int | None:
        """The max event time in force for a batch at ``watermark_ms`` (None: unknown).

        ``watermark + watermark_delay`` once the watermark has moved; before that (it is
        clamped at 0) the engine's own max accepted event time ``max_ts_ms`` (-1: none).
        """
        if watermark_ms > 0:
            return watermark_ms + self._config.watermark_delay_ms
        return max_ts_ms if max_ts_ms >= 0 else None

    def observe(self, batch: InputBatch, accepted: npt.NDArray[np.intp],
                frontier_ms: int | None) -> int:
        """Learn the delays of the records ``accepted`` (positions in ``batch``).

        Returns:
            The frontier after the batch (ms): the max of ``frontier_ms`` and every record's
            event time (-1 when both are unknown / empty).
        """
        delays, now = arrival_delays(batch.ts_ms, batch.partitions, batch.offsets,
                                     frontier_ms)
        self.histogram.add(delays[accepted])
        return now

    def apply(self, revisions: RevisionBatch, now_ms: int) -> RevisionBatch:
        """``revisions`` with ``completeness`` at frontier ``now_ms`` (FINALs: 1.0)."""
        open_ = ~revisions.is_final
        if not open_.any():
            return revisions
        c = self._config
        start, end = revisions.window_start_ms[open_], revisions.window_end_ms[open_]
        if c.window.kind == "session":
            est = session_completeness(self.histogram, start, end, now_ms,
                                       gap_ms=c.window.gap_ms, grace_ms=c.grace_ms,
                                       delay_ms=c.watermark_delay_ms)
        else:
            est = fixed_completeness(self.histogram, start, end, now_ms, grace_ms=c.grace_ms,
                                     delay_ms=c.watermark_delay_ms,
                                     advance_ms=c.window.advance_ms)
        completeness = np.ones(len(revisions))
        completeness[open_] = est
        return replace(revisions, completeness=completeness)
