"""The results of ``revise compare``: one mode's figures, and the whole comparison."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from revise.compare.metrics import Percentiles, Volume
from revise.compare.sweep import SweepPoint
from revise.compare.whatif import GraceOutcome
from revise.vocab import Mode

__all__ = ["PLOTS", "SWEEP_PLOT", "Comparison", "ModeReport", "accuracy_at"]

PLOTS: tuple[str, ...] = ("latency_cdf.png", "accuracy_over_time.png", "revisions_per_window.png")
"""The PNG figures every comparison draws."""
SWEEP_PLOT = "sweep.png"
"""The figure of ``--sweep``: one point per setting."""


@dataclass(frozen=True, slots=True)
class ModeReport:
    """The figures of one mode (times in ms)."""

    mode: Mode
    query_id: str
    volume: Volume
    first_event: Percentiles
    final_value_event: Percentiles
    final_event: Percentiles
    first_wall: Percentiles
    final_value_wall: Percentiles
    revisions_histogram: dict[int, int]
    too_late: int
    dead_letters: int
    job_seconds: float

    def to_dict(self) -> dict[str, object]:
        """JSON-ready plain values."""
        return {
            "mode": self.mode,
            "query_id": self.query_id,
            "volume": self.volume.to_dict(),
            "latency_event_ms": {
                "first_result": self.first_event.to_dict(),
                "final_value": self.final_value_event.to_dict(),
                "final_revision": self.final_event.to_dict(),
            },
            "latency_wall_ms": {
                "first_result": self.first_wall.to_dict(),
                "final_value": self.final_value_wall.to_dict(),
            },
            "revisions_per_window": {str(k): v for k, v in self.revisions_histogram.items()},
            "too_late_records": self.too_late,
            "dead_letters": self.dead_letters,
            "job_seconds": self.job_seconds,
        }


@dataclass(frozen=True, slots=True)
class Comparison:
    """Everything ``revise compare`` measured, and where it wrote it."""

    run_id: str
    settings: dict[str, object]
    modes: dict[str, ModeReport]
    windows: pd.DataFrame
    accuracy: dict[str, pd.DataFrame]
    grace: list[GraceOutcome]
    output: Path
    delta_path: str
    grace_ms: int
    wall_clock: bool
    accuracy_fields: tuple[str, ...] = ("count", "sum", "mean")
    sweep: tuple[SweepPoint, ...] = ()
    recommended: SweepPoint | None = None
    recommendation: str | None = None

    @property
    def json_path(self) -> Path:
        """``<output>/comparison.json``."""
        return self.output / "comparison.json"

    @property
    def plot_paths(self) -> list[Path]:
        """The PNG files."""
        return [self.output / p for p in (*PLOTS, *((SWEEP_PLOT,) if self.sweep else ()))]

    def to_dict(self) -> dict[str, object]:
        """The JSON document (per-window rows included)."""
        return {
            "run_id": self.run_id,
            "settings": self.settings,
            "modes": {m: r.to_dict() for m, r in self.modes.items()},
            "accuracy_over_time": {
                m: _records(a) for m, a in self.accuracy.items()
            },
            "grace_what_if": [g.to_dict() for g in self.grace],
            "sweep": [p.to_dict() for p in self.sweep],
            "recommendation": self.recommendation,
            "windows": _records(self.windows),
            "files": {"json": str(self.json_path), "plots": [str(p) for p in self.plot_paths],
                      "windows_csv": str(self.output / "windows.csv"),
                      "comparisons_table": f"{self.delta_path}/comparisons"},
        }

    def metric_rows(self) -> pd.DataFrame:
        """Long-format totals for the ``comparisons`` Delta table."""
        rows: list[tuple[str, str, str, float | None]] = []

        def add(mode: str, section: str, metric: str, value: float | int | None) -> None:
            v = None if value is None or (isinstance(value, float) and math.isnan(value)) \
                else float(value)
            rows.append((mode, section, metric, v))

        for m, r in self.modes.items():
            for k, v in r.volume.to_dict().items():
                add(m, "volume", k, v)
            for name, p in (("first_result", r.first_event), ("final_value",
                            r.final_value_event), ("final_revision", r.final_event)):
                for q in ("p50", "p95", "p99", "mean"):
                    add(m, "latency_event_ms", f"{name}_{q}", getattr(p, q))
            for name, p in (("first_result", r.first_wall), ("final_value", r.final_value_wall)):
                for q in ("p50", "p95", "p99", "mean"):
                    add(m, "latency_wall_ms", f"{name}_{q}", getattr(p, q))
            add(m, "completeness", "too_late_records", r.too_late)
            add(m, "completeness", "dead_letters", r.dead_letters)
            acc = self.accuracy[m]
            for d, label in ((0, "at_window_end"), (self.grace_ms, "at_end_plus_grace")):
                row = accuracy_at(acc, d)
                if row is not None:
                    add(m, "accuracy", f"share_exact_{label}", row["share_exact"])
                    f = self.accuracy_fields[0]
                    add(m, "accuracy", f"rel_err_{f}_{label}", row[f"rel_err_{f}"])
        for g in self.grace:
            add("both", "grace_what_if", f"too_late_at_grace_x{g.factor:g}", g.too_late)
            add("both", "grace_what_if", f"finals_changed_at_grace_x{g.factor:g}",
                g.finals_changed)
        for point in self.sweep:
            for metric, value in (("first_latency_p50_ms", point.first_latency_p50_ms),
                                  ("revisions_per_window", point.revisions_per_window),
                                  ("accuracy", point.accuracy), ("too_late", point.too_late),
                                  ("on_frontier", float(point.on_frontier)),
                                  ("recommended", float(point == self.recommended))):
                add(point.setting.mode, "sweep", f"{point.setting.label}: {metric}", value)
        frame = pd.DataFrame(rows, columns=["mode", "section", "metric", "value"])
        frame.insert(0, "run_id", self.run_id)
        frame.insert(1, "created_at_ms", int(time.time() * 1000))
        return frame


def _records(frame: pd.DataFrame) -> list[dict[str, object]]:
    out: list[dict[str, object]] = json.loads(frame.to_json(orient="records") or "[]")
    return out


def accuracy_at(acc: pd.DataFrame, d: int) -> pd.Series | None:
    """The accuracy row of the largest grid point <= d."""
    sel = acc[acc["since_end_ms"] <= d]
    return None if sel.empty else sel.iloc[-1]
