"""Window assignment: event times (int64 epoch ms) to the windows ``[start_ms, end_ms)``.

Tumbling and hopping windows align to epoch 0: window ``k`` of a hopping assigner is
``[k * advance_ms, k * advance_ms + size_ms)``; tumbling is hopping with ``advance_ms == size_ms``.
Assignment is vectorized (floor division on int64, ``np.repeat`` to expand a record into every
window that contains it); nothing here loops over records in Python.

Trace (hopping size=10s, advance=5s): ``t=12000 → [5000,15000) and [10000,20000)``;
``t=3000 → [-5000,5000) and [0,10000)`` (windows before epoch 0 exist, as in Spark).

Session windows are not assigned record by record (their bounds depend on the neighbours); see
:mod:`windows.sessions`. A future sliding-window kind implements :class:`WindowAssigner`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = ["Assignment", "HoppingAssigner", "TumblingAssigner", "WindowAssigner"]


@dataclass(frozen=True, slots=True)
class Assignment:
    """One row per (record, window) pair, in record order then window start order.

    Attributes:
        record: Index of the record in the input arrays (``np.intp``).
        start_ms: Window start, inclusive, int64 epoch ms.
        end_ms: Window end, exclusive, int64 epoch ms (``start_ms + size``).
    """

    record: npt.NDArray[np.intp]
    start_ms: npt.NDArray[np.int64]
    end_ms: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.record)


@runtime_checkable
class WindowAssigner(Protocol):
    """Maps event times to the fixed windows ``[start_ms, end_ms)`` that contain them.

    Implementations must be pure and vectorized. ``window_index`` must be a strictly increasing
    function of ``start_ms`` so that ``(key, window_index)`` can be packed into one sortable int64.
    """

    @property
    def size_ms(self) -> int:
        """Window length in ms (> 0)."""
        ...

    @property
    def advance_ms(self) -> int:
        """Distance in ms between consecutive window starts (> 0)."""
        ...

    def assign(self, ts_ms: npt.NDArray[np.int64]) -> Assignment:
        """Every (record, window) pair with ``start_ms <= ts_ms < end_ms``."""
        ...

    def window_index(self, start_ms: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Dense integer id of the windows starting at ``start_ms``."""
        ...


@dataclass(frozen=True, slots=True)
class HoppingAssigner:
    """Windows of ``size_ms`` starting every ``advance_ms``, aligned to epoch 0.

    Requires ``0 < advance_ms <= size_ms`` so that every record falls in at least one window
    (a gap between windows would silently drop records). ``size_ms % advance_ms`` may be
    non-zero: a record then falls in ``floor`` or ``ceil`` of ``size_ms / advance_ms`` windows.

    Trace (size=10s, advance=5s): ``t=9999 → [0,10000), [5000,15000)``;
    ``t=10000 → [5000,15000), [10000,20000)`` (end is exclusive).
    """

    size_ms: int
    advance_ms: int

    def __post_init__(self) -> None:
        if not (0 < self.advance_ms <= self.size_ms):
            msg = (
                f"hopping window needs 0 < advance <= size, got size={self.size_ms}ms "
                f"advance={self.advance_ms}ms; use an advance no longer than the size"
            )
            raise ValueError(msg)

    def assign(self, ts_ms: npt.NDArray[np.int64]) -> Assignment:
        """Every (record, window) pair with ``start_ms <= ts_ms < end_ms``.

        Args:
            ts_ms: Event times, int64 epoch ms, any order.

        Returns:
            Pairs in record order, each record's windows by increasing start.
        """
        ts = np.asarray(ts_ms, dtype=np.int64)
        size, adv = self.size_ms, self.advance_ms
        last_k = ts // adv
        if size == adv:
            start = last_k * adv
            return Assignment(np.arange(len(ts), dtype=np.intp), start, start + size)
        first_k = (ts - size) // adv + 1
        counts = last_k - first_k + 1
        n = len(ts)
        if n == 0:
            empty = np.empty(0, dtype=np.int64)
            return Assignment(np.empty(0, dtype=np.intp), empty, empty.copy())
        c0 = int(counts[0])
        if bool((counts == c0).all()):
            record = np.repeat(np.arange(n, dtype=np.intp), c0)
            k = np.repeat(first_k, c0) + np.tile(np.arange(c0, dtype=np.int64), n)
        else:
            record = np.repeat(np.arange(n, dtype=np.intp), counts)
            first_pair = np.cumsum(counts) - counts
            k = first_k[record] + (np.arange(len(record), dtype=np.int64) - first_pair[record])
        start = k * adv
        return Assignment(record, start, start + size)

    def window_index(self, start_ms: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """``start_ms // advance_ms``: consecutive windows get consecutive ids."""
        return np.asarray(start_ms, dtype=np.int64) // self.advance_ms


@dataclass(frozen=True, slots=True)
class TumblingAssigner:
    """Back-to-back windows ``[k*size_ms, (k+1)*size_ms)``: each record in exactly one.

    Trace (size=10s): ``t=0 → [0,10000)``; ``t=9999 → [0,10000)``; ``t=10000 → [10000,20000)``.
    """

    size_ms: int

    def __post_init__(self) -> None:
        if self.size_ms <= 0:
            msg = f"tumbling window size must be > 0 ms, got {self.size_ms}"
            raise ValueError(msg)

    @property
    def advance_ms(self) -> int:
        """Equal to ``size_ms``."""
        return self.size_ms

    def assign(self, ts_ms: npt.NDArray[np.int64]) -> Assignment:
        """One pair per record: the window ``[ts - ts % size, ts - ts % size + size)``."""
        ts = np.asarray(ts_ms, dtype=np.int64)
        start = ts - ts % self.size_ms
        return Assignment(np.arange(len(ts), dtype=np.intp), start, start + self.size_ms)

    def window_index(self, start_ms: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """``start_ms // size_ms``."""
        return np.asarray(start_ms, dtype=np.int64) // self.size_ms
