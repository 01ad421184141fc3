"""The three PNG figures of ``revise compare`` (matplotlib, Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from revise.compare.results import PLOTS, SWEEP_PLOT, Comparison
from revise.vocab import MODES

if TYPE_CHECKING:
    from revise.compare.sweep import SweepPoint

__all__ = ["plot", "plot_sweep"]


# Longer than ~60 lines: three figures drawn one after the other; splitting would only
# pass the same axes and colours around.
def plot(c: Comparison) -> list[Path]:
    """Draw the three PNGs of ``c`` into its output folder (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"revision": "tab:blue", "watermark": "tab:orange"}
    w = c.windows
    wall = c.wall_clock

    # latency CDFs
    panels = [("first_latency_ms", "first result (event time)"),
              ("final_value_latency_ms", "final value (event time)")]
    if wall:
        panels += [("first_wall_ms", "first result (wall clock)"),
                   ("final_wall_ms", "final value (wall clock)")]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (col, title) in zip(axes[0], panels, strict=True):
        for mode in MODES:
            x = np.sort(w.loc[w["mode"] == mode, col].dropna().to_numpy(dtype=float)) / 1000
            if len(x):
                ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=mode,
                        color=colors[mode])
        ax.axvline(0, color="grey", lw=0.8, ls=":")
        ax.set_title(f"latency to {title}")
        ax.set_xlabel("seconds after window end" if "event" in title
                      else "seconds after arrival in Kafka")
        ax.set_ylabel("share of windows")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(c.output / PLOTS[0], dpi=100)
    plt.close(fig)

    # accuracy over time
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    styles = dict(zip(c.accuracy_fields, ("-", "--", ":", "-."), strict=False))
    grace_s = c.grace_ms / 1000
    for mode in MODES:
        acc = c.accuracy[mode]
        x = acc["since_end_ms"].to_numpy(dtype=float) / 1000
        for f, ls in styles.items():
            y = acc[f"rel_err_{f}"]
            if y.notna().any():
                ax1.plot(x, y, ls=ls, color=colors[mode], label=f"{mode}: {f}")
        ax2.plot(x, acc["share_exact"], color=colors[mode], label=f"{mode}: exact")
        ax2.plot(x, acc["share_answered"], color=colors[mode], ls=":", alpha=0.6,
                 label=f"{mode}: answered")
    for ax in (ax1, ax2):
        ax.axvline(0, color="grey", lw=0.8, ls=":")
        ax.axvline(grace_s, color="grey", lw=0.8, ls="--")
        ax.set_xlabel("seconds after window end (event time); dashed line: grace")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    ax1.set_title("mean relative error of the latest answer vs final")
    ax1.set_ylabel("relative error (no answer = 1)")
    ax2.set_title("share of windows whose latest answer is final")
    ax2.set_ylim(-0.02, 1.02)
    fig.tight_layout()
    fig.savefig(c.output / PLOTS[1], dpi=100)
    plt.close(fig)

    # revisions per window
    fig, ax = plt.subplots(figsize=(6, 4))
    hist = {m: c.modes[m].revisions_histogram for m in MODES}
    ks = sorted({k for h in hist.values() for k in h})
    xs = np.arange(len(ks))
    for i, mode in enumerate(MODES):
        ax.bar(xs + (i - 0.5) * 0.4, [hist[mode].get(k, 0) for k in ks], width=0.4,
               label=mode, color=colors[mode])
    ax.set_xticks(xs, [str(k) for k in ks])
    ax.set_xlabel("revisions per window (FINAL included)")
    ax.set_ylabel("windows")
    ax.set_title("output volume per window")
    ax.legend()
    fig.tight_layout()
    fig.savefig(c.output / PLOTS[2], dpi=100)
    plt.close(fig)
    if c.sweep:
        plot_sweep(c.sweep, c.output / SWEEP_PLOT, recommended=c.recommended)
    return c.plot_paths


def plot_sweep(points: Sequence[SweepPoint], path: Path, *,
               recommended: SweepPoint | None = None) -> Path:
    """First-answer latency against revisions per window, coloured by accuracy, one point a setting.

    Frontier settings (no other setting beats them on all three) are drawn large with a black
    edge and labelled; the recommended one is circled in red.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [p for p in points if p.first_latency_p50_ms is not None]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    x = np.array([float(p.first_latency_p50_ms or 0.0) / 1000 for p in shown])
    y = np.array([p.revisions_per_window for p in shown])
    acc = np.array([p.accuracy for p in shown])
    front = np.array([p.on_frontier for p in shown], dtype=bool)
    markers = {"watermark": "s", "revision": "o"}
    sc = None
    for mode, marker in markers.items():
        m = np.array([p.setting.mode == mode for p in shown], dtype=bool)
        for sel, size, edge in ((m & ~front, 30, "none"), (m & front, 110, "black")):
            if sel.any():
                sc = ax.scatter(x[sel], y[sel], c=acc[sel], cmap="viridis", vmin=0, vmax=1,
                                s=size, marker=marker, edgecolors=edge, linewidths=1.2,
                                label=f"{mode}{' (frontier)' if edge == 'black' else ''}")
    for p, xi, yi in zip(shown, x, y, strict=True):
        if p.on_frontier:
            ax.annotate(p.setting.label.split(" ", 1)[1], (xi, yi), fontsize=6,
                        xytext=(4, 4), textcoords="offset points")
    if recommended is not None and recommended.first_latency_p50_ms is not None:
        ax.scatter([recommended.first_latency_p50_ms / 1000], [recommended.revisions_per_window],
                   s=260, facecolors="none", edgecolors="red", linewidths=1.5,
                   label="recommended")
    if sc is not None:
        fig.colorbar(sc, ax=ax, label="accuracy over time (1 - mean relative count error)")
    ax.axvline(0, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("first answer, p50 seconds after window end (event time)")
    ax.set_ylabel("revisions per window")
    ax.set_title("settings swept offline: lower-left and bright is better")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
