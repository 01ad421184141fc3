"""The results of ``revise compare`` and their outputs: the table, JSON, CSV and Delta rows."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from revise.compare.metrics import Percentiles, Volume
from revise.compare.plots import PLOTS, SWEEP_PLOT, plot
from revise.compare.sweep import SweepPoint
from revise.compare.whatif import GraceOutcome
from revise.config import format_duration
from revise.query.local import COMPARISONS_SCHEMA, append_frame
from revise.vocab import Mode

__all__ = ["Comparison", "ModeReport", "format_table", "write"]


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
                row = _at(acc, d)
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


def _at(acc: pd.DataFrame, d: int) -> pd.Series | None:
    """The accuracy row of the largest grid point <= d."""
    sel = acc[acc["since_end_ms"] <= d]
    return None if sel.empty else sel.iloc[-1]


def write(c: Comparison) -> None:
    """Write ``comparison.json``, ``windows.csv``, the plots and the ``comparisons`` rows.

    The rows are appended to ``<delta-path>/comparisons`` with delta-rs, in the schema Spark
    wrote them with before (:data:`revise.query.local.COMPARISONS_SCHEMA`), so tables written
    by either read alike.
    """
    c.output.mkdir(parents=True, exist_ok=True)
    c.json_path.write_text(json.dumps(c.to_dict(), indent=2, allow_nan=False,
                                      default=_json_default) + "\n")
    c.windows.to_csv(c.output / "windows.csv", index=False)
    plot(c)
    append_frame(f"{c.delta_path}/comparisons", c.metric_rows(), COMPARISONS_SCHEMA)


def _json_default(o: object) -> object:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return None if math.isnan(float(o)) else float(o)
    msg = f"not JSON serializable: {type(o).__name__}"
    raise TypeError(msg)


def _fmt_p(p: Percentiles, scale: float = 1000.0, unit: str = "s") -> str:
    if p.n == 0 or p.p50 is None or p.p95 is None or p.p99 is None:
        return "not measured"
    return f"{p.p50 / scale:.1f} / {p.p95 / scale:.1f} / {p.p99 / scale:.1f} {unit}"


def format_table(c: Comparison) -> str:
    """The side-by-side table ``revise compare`` prints."""
    r, w = c.modes["revision"], c.modes["watermark"]
    grace = c.grace_ms
    first = c.accuracy_fields[0]

    def acc(mode: str, d: int, col: str) -> str:
        row = _at(c.accuracy[mode], d)
        return "-" if row is None or pd.isna(row[col]) else f"{float(row[col]):.2f}"

    def hist_max(m: ModeReport) -> int:
        return max(m.revisions_histogram, default=0)

    lines: list[tuple[str, str, str]] = [
        ("windows closed", str(r.volume.windows), str(w.volume.windows)),
        ("input records", str(r.volume.input_records), str(w.volume.input_records)),
        ("revisions written", str(r.volume.revisions), str(w.volume.revisions)),
        ("revisions per window (mean / max)",
         f"{r.volume.revisions_per_window:.2f} / {hist_max(r)}",
         f"{w.volume.revisions_per_window:.2f} / {hist_max(w)}"),
        ("revisions per input record", f"{r.volume.revisions_per_input:.3f}",
         f"{w.volume.revisions_per_input:.3f}"),
        ("changelog bytes per input record", f"{r.volume.bytes_per_input:.1f}",
         f"{w.volume.bytes_per_input:.1f}"),
        ("first result, event time p50/p95/p99", _fmt_p(r.first_event), _fmt_p(w.first_event)),
        ("final value, event time p50/p95/p99", _fmt_p(r.final_value_event),
         _fmt_p(w.final_value_event)),
        ("FINAL revision, event time p50/p95/p99", _fmt_p(r.final_event), _fmt_p(w.final_event)),
        ("first result, wall clock p50/p95/p99", _fmt_p(r.first_wall), _fmt_p(w.first_wall)),
        ("final value, wall clock p50/p95/p99", _fmt_p(r.final_value_wall),
         _fmt_p(w.final_value_wall)),
        ("windows exact at window end", acc("revision", 0, "share_exact"),
         acc("watermark", 0, "share_exact")),
        (f"{first} error at window end (mean)", acc("revision", 0, f"rel_err_{first}"),
         acc("watermark", 0, f"rel_err_{first}")),
        (f"windows exact at end + grace ({format_duration(grace)})",
         acc("revision", grace, "share_exact"), acc("watermark", grace, "share_exact")),
        ("too-late records", str(r.too_late), str(w.too_late)),
        ("dead letters", str(r.dead_letters), str(w.dead_letters)),
        ("job seconds", f"{r.job_seconds:.0f}", f"{w.job_seconds:.0f}"),
    ]
    width = max(len(a) for a, _, _ in lines)
    col = max(22, *(len(b) for _, b, _ in lines), *(len(x) for _, _, x in lines))
    out = [f"{'':<{width}}  {'revision':>{col}}  {'watermark':>{col}}",
           f"{'-' * width}  {'-' * col}  {'-' * col}"]
    out += [f"{a:<{width}}  {b:>{col}}  {x:>{col}}" for a, b, x in lines]
    out.append("")
    out.append("what a larger grace would have kept (offline re-run of the engine, both modes):")
    out.append(f"  {'grace':>8}  {'too-late records':>16}  {'finals changed':>14}  "
               f"{'FINAL latency p50':>17}")
    for g in c.grace:
        p50 = "-" if g.final_latency_p50_ms is None else f"{g.final_latency_p50_ms / 1000:.1f} s"
        out.append(f"  {format_duration(g.grace_ms):>8}  {g.too_late:>16}  "
                   f"{g.finals_changed:>14}  {p50:>17}")
    if not c.wall_clock:
        out.append("(wall-clock latency is measured only with --rate: the input must arrive "
                   "while the job runs)")
    if c.sweep:
        out += ["", "settings swept offline on the same micro-batches (* = no other setting "
                "beats it on all three):",
                f"  {'setting':<48}  {'first answer p50':>16}  {'revisions/window':>16}  "
                f"{'accuracy':>8}"]
        for p in c.sweep:
            lat = ("-" if p.first_latency_p50_ms is None
                   else f"{p.first_latency_p50_ms / 1000:+.1f} s")
            out.append(f"{'*' if p.on_frontier else ' '} {p.setting.label:<48}  {lat:>16}  "
                       f"{p.revisions_per_window:>16.2f}  {p.accuracy:>8.3f}")
        if c.recommendation:
            out.append(f"recommendation: {c.recommendation}")
    return "\n".join(out)
