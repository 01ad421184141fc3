"""The three PNG figures of ``revise compare`` (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from revise.vocab import MODES

if TYPE_CHECKING:
    from revise.compare.report import Comparison

__all__ = ["PLOTS", "plot"]

PLOTS: tuple[str, ...] = ("latency_cdf.png", "accuracy_over_time.png", "revisions_per_window.png")


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
    return c.plot_paths
