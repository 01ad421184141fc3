"""``revise compare --sweep``: which settings to choose, computed offline on the recorded input.

The real run's well-formed input, cut into the micro-batches that read it
(:func:`~revise.compare.whatif.replay_batches`), is run through the pure engine once per
setting: every combination of a grace, a watermark delay and an emission policy (watermark
mode; revision mode revising on every change; ``--emit-min-change F``; ``--emit-every DUR``).
Each setting gets three figures, all deterministic for the recorded split (no wall clock):

- *first-answer latency*: p50 over windows of ``frontier - window_end_ms`` at revision 0, where
  the frontier is the max event time seen (``watermark_ms + watermark delay``), so settings with
  different delays are measured on the same clock (event time, ms; negative = an answer before
  the window ended);
- *revisions per window*: revisions emitted ÷ windows closed;
- *accuracy*: ``1 - mean relative count error`` of each window's latest revision against the
  true final count (a replay that accepts every record) of every window some swept setting
  closes (a window only very late records open is out of every setting's reach, and would
  lower all alike), averaged over the same frontier grid
  for every setting, from the window's end to the largest ``grace + delay`` swept (a window
  without an answer yet counts as error 1): how right the answer a reader finds is, from the
  moment the window has ended. It is the area under the accuracy-over-time curve of
  :func:`~revise.compare.metrics.accuracy_over_time`, measured on the frontier.

A setting is *on the frontier* when no other setting is at least as good on all three
(lower latency, fewer revisions, higher accuracy) and better on one. The recommendation for an
accuracy target is the frontier setting with the lowest first-answer latency among those that
reach it, then the fewest revisions per window.

Trace (tumbling 10 s, input with 5 % of records 5 s late): watermark mode with grace 5 s
answers at +5 s with 1 revision a window and accuracy ~0.5 (no answer before end + grace);
revision mode answers at about −9 s with ~3 revisions a window and accuracy ~0.8;
``--emit-min-change 0.2`` keeps most of that accuracy with ~2 revisions a window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from revise.aggspec import AggList
from revise.compare.metrics import accuracy_over_time, anchor_initial_watermark, percentiles
from revise.config import EngineConfig, format_duration
from revise.engine import InputBatch
from revise.local import run_batches
from revise.vocab import WINDOW_BOUNDS, Mode

__all__ = ["SweepGrid", "SweepPoint", "SweepSetting", "frontier", "recommend", "run_sweep",
           "sweep_settings"]

_AGGS = AggList.parse("count,sum")
"""The aggregates of every replay: ``--emit-min-change`` judges them, accuracy uses count."""


@dataclass(frozen=True, slots=True)
class SweepGrid:
    """The values swept; each list is tried in every combination with the others.

    Attributes:
        grace_factors: Multipliers of the run's grace.
        delays_ms: Watermark delays (ms).
        min_changes: ``--emit-min-change`` values tried in revision mode.
        every_ms: ``--emit-every`` values tried in revision mode (ms).
    """

    grace_factors: tuple[float, ...] = (0.5, 1.0, 2.0)
    delays_ms: tuple[int, ...] = (0,)
    min_changes: tuple[float, ...] = (0.05, 0.2)
    every_ms: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class SweepSetting:
    """One point of the sweep: a mode, its grace and delay, and revision mode's policy."""

    mode: Mode
    grace_ms: int
    watermark_delay_ms: int
    emit_min_change: float | None = None
    emit_every_ms: int | None = None

    @property
    def label(self) -> str:
        """``revision grace=10s delay=0ms min-change=0.2`` (the options it stands for)."""
        parts = [self.mode, f"grace={format_duration(self.grace_ms)}",
                 f"delay={format_duration(self.watermark_delay_ms)}"]
        if self.emit_min_change is not None:
            parts.append(f"min-change={self.emit_min_change:g}")
        if self.emit_every_ms is not None:
            parts.append(f"every={format_duration(self.emit_every_ms)}")
        return " ".join(parts)

    def engine(self, base: EngineConfig) -> EngineConfig:
        """``base`` with this setting (aggregates ``count,sum``, query id ``sweep``)."""
        return replace(base, mode=self.mode, grace_ms=self.grace_ms,
                       watermark_delay_ms=self.watermark_delay_ms, aggs=_AGGS,
                       query_id="sweep", emit_min_change=self.emit_min_change,
                       emit_every_ms=self.emit_every_ms)


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """The figures of one setting (times in ms).

    Attributes:
        setting: What was replayed.
        first_latency_p50_ms: p50 of revision 0's ``watermark_ms - window_end_ms``.
        revisions_per_window: Revisions ÷ windows closed.
        accuracy: Mean over the common grid of ``1 - mean relative count error``.
        too_late: Too-late (record, window) pairs.
        windows: Windows closed.
        on_frontier: No other setting is at least as good on all three figures.
    """

    setting: SweepSetting
    first_latency_p50_ms: float | None
    revisions_per_window: float
    accuracy: float
    too_late: int
    windows: int
    on_frontier: bool = False

    def to_dict(self) -> dict[str, object]:
        """JSON-ready plain values."""
        s = self.setting
        return {"label": s.label, "mode": s.mode, "grace_ms": s.grace_ms,
                "watermark_delay_ms": s.watermark_delay_ms,
                "emit_min_change": s.emit_min_change, "emit_every_ms": s.emit_every_ms,
                "first_latency_p50_ms": self.first_latency_p50_ms,
                "revisions_per_window": self.revisions_per_window, "accuracy": self.accuracy,
                "too_late": self.too_late, "windows": self.windows,
                "on_frontier": self.on_frontier}


def sweep_settings(base: EngineConfig, grid: SweepGrid) -> list[SweepSetting]:
    """Every combination of ``grid`` around ``base``'s grace, in a stable order.

    Per (grace, delay): watermark mode, revision mode on every change, then one revision-mode
    setting per ``min_changes`` and per ``every_ms`` value.
    """
    graces = sorted({int(round(base.grace_ms * f)) for f in grid.grace_factors})
    out: list[SweepSetting] = []
    for grace in graces:
        for delay in sorted(set(grid.delays_ms)):
            out.append(SweepSetting("watermark", grace, delay))
            out.append(SweepSetting("revision", grace, delay))
            out += [SweepSetting("revision", grace, delay, emit_min_change=f)
                    for f in grid.min_changes]
            out += [SweepSetting("revision", grace, delay, emit_every_ms=e)
                    for e in grid.every_ms]
    return out


def _revisions(config: EngineConfig, batches: Sequence[InputBatch]) -> tuple[pd.DataFrame, int]:
    """All revisions of one replay as a DataFrame, and its too-late count."""
    results = run_batches(config, batches)
    frames = [r.revisions.to_arrow().to_pandas() for r in results if len(r.revisions)]
    revs = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    real = revs["watermark_ms"][revs["watermark_ms"] > 0] if len(revs) else revs
    if len(real):  # as the real runs' figures: batch 0 (no watermark yet) at the first one
        revs = anchor_initial_watermark(revs, int(real.min()))
    return revs, sum(len(r.late) for r in results)


def _on_frontier_clock(revs: pd.DataFrame, delay_ms: int) -> pd.DataFrame:
    """``revs`` with ``watermark_ms`` moved to the frontier it trails (``+ delay_ms``)."""
    return revs.assign(watermark_ms=revs["watermark_ms"] + delay_ms) if delay_ms else revs


def _keyed_bounds(revs: pd.DataFrame) -> pd.DataFrame:
    """The closed windows' bounds of one replay."""
    return revs.loc[revs["is_final"] & ~revs["retracted"], list(WINDOW_BOUNDS)]


def _first_latency(revs: pd.DataFrame) -> float | None:
    first = revs[(revs["revision"] == 0) & ~revs["retracted"]]
    return percentiles(first["watermark_ms"] - first["window_end_ms"]).p50


# Longer than ~60 lines: the truth replay, then one replay and three figures per setting.
def run_sweep(base: EngineConfig, batches: Sequence[InputBatch],
              settings: Sequence[SweepSetting]) -> list[SweepPoint]:
    """Replay ``batches`` once per setting and compute its figures (see the module docstring).

    Args:
        base: The run's engine config (window kind and size).
        batches: The recorded micro-batches (:func:`~revise.compare.whatif.replay_batches`).
        settings: What to try (:func:`sweep_settings`).

    Returns:
        One :class:`SweepPoint` per setting, in order, with ``on_frontier`` set.
    """
    if not settings:
        return []
    ts = [b.ts_ms for b in batches if len(b.ts_ms)]
    span_all = int(np.max(np.concatenate(ts)) - np.min(np.concatenate(ts))) if ts else 0
    size = base.window.size_ms or base.window.gap_ms
    truth_cfg = replace(base, mode="watermark", grace_ms=span_all + size,
                        watermark_delay_ms=0, aggs=_AGGS, query_id="truth",
                        emit_min_change=None, emit_every_ms=None)
    truth_revs, _ = _revisions(truth_cfg, batches)
    truth = (truth_revs[truth_revs["is_final"] & ~truth_revs["retracted"]]
             [[*WINDOW_BOUNDS, "count"]] if len(truth_revs) else
             pd.DataFrame(columns=[*WINDOW_BOUNDS, "count"]))
    horizon = max(s.grace_ms + s.watermark_delay_ms for s in settings)
    step = max(1, math.ceil(horizon / 30))
    grid = list(range(0, horizon + step, step))
    replays = [(s, *_revisions(s.engine(base), batches)) for s in settings]
    closed_bounds = [_keyed_bounds(r) for _, r, _ in replays if len(r)]
    answered = (pd.concat(closed_bounds, ignore_index=True).drop_duplicates() if closed_bounds
                else pd.DataFrame(columns=list(WINDOW_BOUNDS)))
    truth = truth.merge(answered, on=list(WINDOW_BOUNDS), how="inner")
    points: list[SweepPoint] = []
    for s, revs, too_late in replays:
        revs = _on_frontier_clock(revs, s.watermark_delay_ms)
        if revs.empty:
            points.append(SweepPoint(s, None, math.nan, 0.0, too_late, 0))
            continue
        closed = int((revs["is_final"] & ~revs["retracted"]).sum())
        acc = accuracy_over_time(revs, grid, ("count",), truth=truth)
        accuracy = float(1.0 - np.minimum(acc["rel_err_count"].to_numpy(), 1.0).mean())
        points.append(SweepPoint(s, _first_latency(revs),
                                 len(revs) / closed if closed else math.nan,
                                 accuracy, too_late, closed))
    marks = frontier(points)
    return [replace(p, on_frontier=m) for p, m in zip(points, marks, strict=True)]


def _figures(p: SweepPoint) -> tuple[float, float, float]:
    """(latency, revisions, −accuracy): lower is better in each."""
    lat = math.inf if p.first_latency_p50_ms is None else p.first_latency_p50_ms
    rev = math.inf if math.isnan(p.revisions_per_window) else p.revisions_per_window
    return lat, rev, -p.accuracy


def frontier(points: Sequence[SweepPoint]) -> list[bool]:
    """For each point, whether no other point is as good on all three figures and better on one.

    Trace: (−9 s, 3.0, 0.8), (5 s, 1.0, 0.5), (−9 s, 3.5, 0.8) → True, True, False (the third
    is beaten by the first: same latency and accuracy, more revisions).
    """
    figs = [_figures(p) for p in points]
    out: list[bool] = []
    for i, a in enumerate(figs):
        beaten = any(all(x <= y for x, y in zip(b, a, strict=True)) and b != a
                     for j, b in enumerate(figs) if j != i)
        out.append(not beaten)
    return out


def recommend(points: Sequence[SweepPoint], target: float) -> tuple[SweepPoint | None, str]:
    """The setting to choose for an accuracy target, and a one-line recommendation.

    Among frontier settings whose accuracy reaches ``target``: the lowest first-answer latency,
    then the fewest revisions per window. When none reaches it, the most accurate setting, said
    so.
    """
    reach = [p for p in points if p.on_frontier and p.accuracy >= target]
    if reach:
        best = min(reach, key=lambda p: _figures(p)[:2])
        lat = best.first_latency_p50_ms
        return best, (f"for accuracy >= {target:g}: {best.setting.label} (first answer p50 "
                      f"{'-' if lat is None else f'{lat / 1000:+.1f} s'} from window end, "
                      f"{best.revisions_per_window:.2f} revisions/window, "
                      f"accuracy {best.accuracy:.3f})")
    if not points:
        return None, "no setting was swept"
    best = max(points, key=lambda p: p.accuracy)
    return best, (f"no setting reaches accuracy {target:g}; the most accurate is "
                  f"{best.setting.label} ({best.accuracy:.3f})")
