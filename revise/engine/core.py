"""The :class:`Engine`: micro-batches of records in, numbered revisions and too-late records out.

The rules it implements are in the package docstring (:mod:`revise.engine`). It keeps the
key table and the open windows (:mod:`revise.engine.state`), hands each batch to the fixed
window or session step (:mod:`revise.engine.fixed`, :mod:`revise.engine.sessions`), closes the
windows the watermark has passed, and builds the batch's revisions (:mod:`revise.engine.emitter`).
"""

from __future__ import annotations

import numpy as np

from revise.config import EngineConfig
from revise.engine.aggplan import AggPlan
from revise.engine.batch import BatchOutput, InputBatch, Step
from revise.engine.completeness import CompletenessModel
from revise.engine.emitter import Emitter, emit_finals
from revise.engine.fixed import process_fixed
from revise.engine.sessions import process_sessions
from revise.engine.snapshot import Snapshot, decode_snapshot, encode_snapshot, state_config
from revise.engine.state import NO_SEAL, KeyTable, WindowTable, unique_sorted
from revise.errors import ReviseError
from revise.record_batches import LateBatch, RevisionBatch
from windows import HoppingAssigner, TumblingAssigner, WindowAssigner

__all__ = ["Engine", "WatermarkRegression"]


class WatermarkRegression(ReviseError, ValueError):
    """The caller passed a watermark smaller than one it passed before (or < 0)."""


class Engine:
    """Incremental windowed aggregation that emits numbered revisions (see the module doc).

    Args:
        config: The engine config (window, grace, aggregates, mode, query id).

    Trace (tumbling 1s, grace 0): ``t=1200 → rev 0 of [1000,2000) count=1 (EARLY)``;
    next batch at ``W=1500``: ``t=1100 → rev 1 count=2 (EARLY)``; batch at ``W=2000``
    → ``rev 2 FINAL count=2``.
    """

    __slots__ = ("_assigner", "_aggs", "_completeness", "_config", "_keys", "_max_ts_ms",
                 "_sealed_ms", "_state", "_watermark_ms")

    def __init__(self, config: EngineConfig) -> None:
        if not isinstance(config, EngineConfig):
            msg = f"Engine needs an EngineConfig, got {type(config).__name__}"
            raise TypeError(msg)
        self._config = config
        self._aggs = AggPlan(config.aggs)
        w = config.window
        self._assigner: WindowAssigner | None
        if w.kind == "tumbling":
            self._assigner = TumblingAssigner(w.size_ms)
        elif w.kind == "hopping":
            self._assigner = HoppingAssigner(w.size_ms, w.advance_ms)
        else:
            self._assigner = None
        self._keys = KeyTable()
        self._state = WindowTable.empty(self._aggs, last=config.emit_policy is not None)
        self._watermark_ms = 0
        self._max_ts_ms = -1  # max accepted event time so far (-1: none)
        self._sealed_ms = NO_SEAL  # windows starting at or before this were closed (close_all)
        self._completeness = CompletenessModel(config)

    # -- public ------------------------------------------------------------------------

    @property
    def config(self) -> EngineConfig:
        """The config this engine was built with."""
        return self._config

    @property
    def aggs(self) -> AggPlan:
        """The aggregate plan (state columns, sketches and result functions)."""
        return self._aggs

    @property
    def key_table(self) -> KeyTable:
        """Sorted unique keys of open windows (and recently seen ones)."""
        return self._keys

    @property
    def open_windows(self) -> int:
        """Number of open (key, window) states."""
        return len(self._state)

    @property
    def next_close_ms(self) -> int | None:
        """The lowest watermark at which an open window closes: min(end) + grace (None: none open).

        :meth:`process` with a watermark below it and no records emits nothing and changes
        nothing but the stored watermark, so a caller may skip the call (the Spark operator's
        event-time timeout or timer is set from it). Trace (tumbling 10s, grace 5s): open
        ``[0,10000)`` and ``[10000,20000)`` → 15000.
        """
        if len(self._state) == 0:
            return None
        return int(self._state.end.min()) + self._config.grace_ms

    @property
    def sealed(self) -> bool:
        """True after :meth:`close_all` closed windows: the (small) state must be kept."""
        return self._sealed_ms > NO_SEAL

    @property
    def watermark_ms(self) -> int:
        """The largest watermark passed so far (0 initially)."""
        return self._watermark_ms

    @classmethod
    def build(cls, config: EngineConfig, snapshot: bytes | None) -> Engine:
        """An engine with ``config``, restored from ``snapshot`` (None: empty).

        Raises:
            StateSchemaMismatch: If the snapshot is not one of ours, has another format
                version, or was written under a config that changes the meaning of the state
                (window, grace, aggregates and their versions, mode).
        """
        engine = cls(config)
        if snapshot is not None:
            engine._restore(snapshot)
        return engine

    def process(self, batch: InputBatch, *, watermark_ms: int, batch_id: int,
                now_ms: int) -> BatchOutput:
        """Apply one micro-batch judged against ``watermark_ms``; see the module docstring.

        Args:
            batch: The records (any order; the output does not depend on it).
            watermark_ms: Watermark ``W`` in force for this batch (>= 0, never decreasing).
            batch_id: Micro-batch id carried by every output row.
            now_ms: Wall-clock time carried as ``emitted_at_ms``.

        Returns:
            Revisions (touched windows, then FINALs; sorted by key and bounds), too-late
            records, ``W`` and the max accepted event time.

        Raises:
            WatermarkRegression: If ``watermark_ms`` is below an earlier one or below 0.
        """
        w = self._check_watermark(watermark_ms)
        out = Emitter()
        late = LateBatch.empty()
        max_ts: int | None = None
        frontier_ms = -1  # the event-time frontier after the batch (completeness)
        if len(batch):
            ranks, remap = self._keys.encode(batch.keys)
            if remap is not None and len(self._state):
                self._state.key = remap[self._state.key]
            step = self._step(w, batch_id)
            if self._assigner is None:
                self._state, late, accepted = process_sessions(
                    self._config.window.gap_ms, batch, ranks, self._state, step, out)
            else:
                self._state, late, accepted = process_fixed(
                    self._assigner, batch, ranks, self._state, len(self._keys), step, out)
            if len(accepted):
                max_ts = int(batch.ts_ms[accepted].max())
                if step.revision_mode:
                    frontier_ms = self._completeness.observe(
                        batch, accepted, self._completeness.frontier_ms(w, self._max_ts_ms))
        if max_ts is not None:
            self._max_ts_ms = max(self._max_ts_ms, max_ts)
        self._close(w, out, everything=False)
        revisions = self._completeness.apply(self._build(out, w, batch_id, now_ms), frontier_ms)
        self._maybe_compact()
        return BatchOutput(revisions, late, w, max_ts)

    def close_all(self, *, watermark_ms: int, batch_id: int, now_ms: int) -> BatchOutput:
        """Close every open window (end of bounded input): one FINAL each, state emptied.

        The FINALs carry ``watermark_ms`` (the last real watermark), as SPEC §3 asks.

        Closed stays closed: afterwards the engine is *sealed* at the max accepted event time
        ``M`` seen so far — a later record for a window starting at or before ``M`` (for
        sessions: a record with ``ts <= M``) is too late, so a window closed here never starts
        again at revision 0 (which would repeat an idempotency key). :attr:`sealed` tells
        whether the state must be kept for that.
        """
        w = self._check_watermark(watermark_ms)
        out = Emitter()
        self._close(w, out, everything=True)
        if self._max_ts_ms >= 0:
            self._sealed_ms = max(self._sealed_ms, self._max_ts_ms)
        revisions = self._build(out, w, batch_id, now_ms)
        self._maybe_compact()
        return BatchOutput(revisions, LateBatch.empty(), w, None)

    def snapshot(self) -> bytes:
        """The whole state as bytes: one Arrow IPC stream (layout: ``encode_snapshot``)."""
        snap = Snapshot(self._keys, self._state, self._watermark_ms, self._max_ts_ms,
                        self._sealed_ms, self._completeness.histogram)
        return encode_snapshot(snap, state_config(self._config, self._aggs), self._aggs)

    # -- internals --------------------------------------------------------------------------

    def _step(self, w: int, batch_id: int) -> Step:
        return Step(self._aggs, self._config.grace_ms, self._sealed_ms,
                    self._config.mode == "revision", w, batch_id, self._config.emit_policy)

    def _build(self, out: Emitter, w: int, batch_id: int, now_ms: int) -> RevisionBatch:
        return out.build(self._config, self._aggs, self._keys, watermark_ms=w,
                         batch_id=batch_id, now_ms=now_ms)

    def _close(self, w: int, out: Emitter, *, everything: bool) -> None:
        """Emit one FINAL per window with ``W >= end + grace`` (or every window) and drop it."""
        st = self._state
        if len(st) == 0:
            return
        if everything:
            closing = np.ones(len(st), dtype=bool)
        else:
            closing = st.end + self._config.grace_ms <= w
            if not closing.any():
                return
        emit_finals(out, st.take(closing), revision_mode=self._config.mode == "revision")
        self._state = st.take(~closing)

    def _check_watermark(self, watermark_ms: int) -> int:
        w = int(watermark_ms)
        if w < 0 or w < self._watermark_ms:
            msg = (
                f"watermark_ms={w} is below the watermark already in force "
                f"({self._watermark_ms}) or below 0; the watermark never goes back — pass the "
                "global watermark of the batch (e.g. from WatermarkTracker)"
            )
            raise WatermarkRegression(msg)
        self._watermark_ms = w
        return w

    def _maybe_compact(self) -> None:
        st = self._state
        live = unique_sorted(st.key)
        if len(self._keys) > 2 * len(live) + 1024:
            remap = self._keys.compact(live)
            st.key = remap[st.key]

    def _restore(self, snapshot: bytes) -> None:
        snap = decode_snapshot(snapshot, state_config(self._config, self._aggs), self._aggs)
        self._keys, self._state = snap.keys, snap.table
        self._watermark_ms, self._max_ts_ms = snap.watermark_ms, snap.max_ts_ms
        self._sealed_ms = snap.sealed_ms
        self._completeness = CompletenessModel(self._config, snap.delays)
