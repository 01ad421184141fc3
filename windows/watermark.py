"""Event-time watermark: max accepted event time − delay, monotonic, advanced per batch.

Like Spark's watermark it starts at 0, never goes back, is clamped at ``>= 0`` and moves only at
micro-batch boundaries: records of batch ``i`` are judged against the watermark computed from
batches ``< i``.

Trace (delay=2000): start ``wm=0``; batch 0 max ts 10000 → ``wm=8000``; batch 1 max ts 5000
(late data) → ``wm`` stays 8000; batch 2 empty → 8000.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["WatermarkTracker"]


class WatermarkTracker:
    """Tracks the global watermark across micro-batches.

    Args:
        delay_ms: Watermark delay in ms (>= 0): the watermark trails the max event time by it.
    """

    __slots__ = ("_current_ms", "_delay_ms", "_max_ts_ms")

    def __init__(self, delay_ms: int = 0, *, current_ms: int = 0) -> None:
        if delay_ms < 0 or current_ms < 0:
            msg = f"watermark delay and start must be >= 0 ms, got {delay_ms} and {current_ms}"
            raise ValueError(msg)
        self._delay_ms = int(delay_ms)
        self._current_ms = int(current_ms)
        self._max_ts_ms: int | None = None

    @property
    def current_ms(self) -> int:
        """The watermark in force for the next micro-batch, int64 epoch ms (>= 0)."""
        return self._current_ms

    @property
    def max_event_time_ms(self) -> int | None:
        """Max accepted event time seen so far (None before any)."""
        return self._max_ts_ms

    def observe(self, max_accepted_ts_ms: int | None) -> None:
        """Record the max accepted event time of the batch just processed (None: no records)."""
        if max_accepted_ts_ms is not None and (
            self._max_ts_ms is None or max_accepted_ts_ms > self._max_ts_ms
        ):
            self._max_ts_ms = int(max_accepted_ts_ms)

    def observe_array(self, accepted_ts_ms: npt.NDArray[np.int64]) -> None:
        """Like :meth:`observe` with the event times of the accepted records."""
        if len(accepted_ts_ms):
            self.observe(int(np.max(accepted_ts_ms)))

    def advance(self) -> int:
        """Move to the next batch boundary; returns the new watermark (never smaller)."""
        if self._max_ts_ms is not None:
            self._current_ms = max(self._current_ms, self._max_ts_ms - self._delay_ms, 0)
        return self._current_ms
