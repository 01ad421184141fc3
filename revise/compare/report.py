"""The outputs of ``revise compare``: the table, JSON, CSV, plots and Delta rows."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from revise.compare.metrics import Percentiles
from revise.compare.plots import plot
from revise.compare.results import Comparison, ModeReport, accuracy_at
from revise.config import format_duration
from revise.query.local import COMPARISONS_SCHEMA, append_frame

__all__ = ["format_table", "write"]


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
    """The side-by-side table ``revise compare`` prints (``revise.format_comparison``).

    Example:
        >>> print(revise.format_comparison(revise.compare_modes(cfg)))  # doctest: +SKIP
    """
    r, w = c.modes["revision"], c.modes["watermark"]
    grace = c.grace_ms
    first = c.accuracy_fields[0]

    def acc(mode: str, d: int, col: str) -> str:
        row = accuracy_at(c.accuracy[mode], d)
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
