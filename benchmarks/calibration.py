"""How well ``completeness`` and ``est_count`` predict the FINAL: prints one line per setting.

Runs the pure engine (revision mode) on streams from ``revise generate`` (in arrival order,
split into micro-batches of a fixed number of records, keyed into 4 partitions as the
generator's producer does) and, over the EARLY revisions of windows whose FINAL counts at least
``--min-count`` records, reports:

- ``mae_pp``: mean |completeness - count / FINAL count|, percentage points;
- ``bias_pp``: mean (completeness - count / FINAL count): > 0 means too optimistic;
- ``closer``: among those revisions whose count is still below the FINAL's (``incomplete``
  of them), the share whose ``est_count`` is closer to the FINAL count than ``count``;
- ``worse``: among all of them, the share whose ``est_count`` is farther from it than ``count``
  (a complete window's estimate above its count);
- ``floor_pp``: the same MAE for an oracle that knows each window's expected share exactly but
  not which of its records come (the binomial noise of a window of that many records), so
  ``mae_pp`` cannot be much below it.

Usage: ``python -m benchmarks.calibration [--events N] [--min-count 20] [--seed S]``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from revise.aggspec import AggList
from revise.config import EngineConfig, WindowSpec
from revise.engine import InputBatch
from revise.generate.stream import GeneratorConfig, generate
from revise.local import run_batches

PARTITIONS = 4


@dataclass(frozen=True)
class Setting:
    """One calibration run: the stream, the window and how it is cut into micro-batches."""

    name: str
    window: str
    grace_ms: int
    batch_records: int
    keys: int = 10
    disorder_ms: int = 0
    late_fraction: float = 0.0
    late_by_ms: int = 60_000
    watermark_delay_ms: int = 0


SETTINGS = (
    Setting("disorder 2s, batches of 10s", "tumbling:10s", 5_000, 1_000, disorder_ms=2_000),
    Setting("disorder 5s, batches of 1s", "tumbling:10s", 10_000, 100, disorder_ms=5_000),
    Setting("heavy tail 20% late by 3s×Pareto", "tumbling:10s", 30_000, 200,
            disorder_ms=1_000, late_fraction=0.2, late_by_ms=3_000),
    Setting("heavy tail 5% late by 10s×Pareto", "tumbling:30s", 60_000, 500,
            disorder_ms=2_000, late_fraction=0.05, late_by_ms=10_000),
    Setting("watermark delay 3s, disorder 3s", "tumbling:10s", 2_000, 300,
            disorder_ms=3_000, watermark_delay_ms=3_000),
    Setting("hopping 20s:5s, disorder 2s", "hopping:20s:5s", 5_000, 250, disorder_ms=2_000),
    Setting("sessions 5s, 200 keys", "session:5s", 5_000, 200, keys=200, disorder_ms=1_000),
)


def batches_of(setting: Setting, events: int, seed: int) -> list[InputBatch]:
    """The generated stream's good records, in arrival order, cut into micro-batches."""
    s = generate(GeneratorConfig(events=events, keys=setting.keys, seed=seed,
                                 disorder_ms=setting.disorder_ms,
                                 late_fraction=setting.late_fraction,
                                 late_by_ms=setting.late_by_ms))
    good = s.good
    keys, ts, values = s.keys[good], s.ts_ms[good], s.values[good]
    part = (pd.util.hash_array(keys.astype(str)) % PARTITIONS).astype(np.int32)
    offsets = pd.Series(np.ones(len(part), dtype=np.int64)).groupby(part).cumsum().to_numpy()
    n = setting.batch_records
    return [InputBatch.from_arrays(keys[i:i + n], ts[i:i + n], values[i:i + n], part[i:i + n],
                                   offsets[i:i + n]) for i in range(0, len(keys), n)]


def measure(setting: Setting, events: int, seed: int, min_count: int) -> dict[str, Any]:
    """Run one setting and compute its figures (module docstring)."""
    config = EngineConfig(WindowSpec.parse(setting.window), setting.grace_ms,
                          setting.watermark_delay_ms, AggList.parse("count,sum"), "revision",
                          "calib")
    batches = batches_of(setting, events, seed)
    t0 = time.perf_counter()
    outs = run_batches(config, batches)
    took = time.perf_counter() - t0
    revs = pd.concat([o.revisions.to_arrow().to_pandas() for o in outs], ignore_index=True)
    window = ["key", "window_start_ms", "window_end_ms"]
    finals = revs[revs["is_final"]][[*window, "count"]].rename(columns={"count": "final"})
    early = revs[(revs["timing"] == "EARLY") & ~revs["retracted"]].merge(finals, on=window)
    early = early[early["final"] >= min_count]
    share = early["count"] / early["final"]
    err = early["completeness"] - share
    est_off = (early["est_count"] - early["final"]).abs()
    raw_off = (early["count"] - early["final"]).abs()
    incomplete = early["count"] < early["final"]
    # binomial floor: an estimator that knew each revision's expected share p exactly
    rng = np.random.default_rng(seed)
    p = share.clip(0, 1).to_numpy()
    f = early["final"].to_numpy()
    floor = np.abs(rng.binomial(f, p) / f - p).mean() if len(f) else float("nan")
    return {"setting": setting.name, "window": setting.window, "batch": setting.batch_records,
            "windows": int(finals["final"].ge(min_count).sum()), "early": len(early),
            "mae_pp": 100 * float(err.abs().mean()), "bias_pp": 100 * float(err.mean()),
            "floor_pp": 100 * float(floor), "incomplete": int(incomplete.sum()),
            "closer": float((est_off < raw_off)[incomplete].mean()),
            "worse": float((est_off > raw_off).mean()),
            "engine_s": round(took, 2)}


def main(argv: list[str] | None = None) -> None:
    """Print the figures of every setting."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-count", type=int, default=20)
    args = ap.parse_args(argv)
    rows = [measure(s, args.events, args.seed, args.min_count) for s in SETTINGS]
    frame = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(frame.round({"mae_pp": 2, "bias_pp": 2, "floor_pp": 2, "closer": 3,
                                "worse": 3})
              .to_string(index=False))


if __name__ == "__main__":
    main()
