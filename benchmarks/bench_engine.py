"""Benchmark of the pure engine core: ``python -m benchmarks.bench_engine`` (issue 2).

One core: the process pins itself to one CPU (``sched_setaffinity``) and sets the BLAS/OpenMP
thread counts to 1 before numpy is imported. Workload (defaults): 1,000,000 events over 10,000
keys, event time advancing 10,000 events/s with up to 1 s of jitter, 1% late records (2–20 s
behind), batches of 100,000, grace 5 s, watermark delay 0, all five aggregates.
Windows: tumbling 10s, hopping 10s:2500ms (size = 4 × advance), session 2s; both modes.

Reported per run (best of ``--repeat``): records/s through ``run_batches`` (all batches plus the
final ``close_all``; input arrays are built beforehand), revisions and late rows emitted; the
snapshot size / save / restore time of the state after half the batches; and the floor, a
one-shot pandas groupby computing the same final aggregates over all records in this process.

``--aggs "count,p99(value)"`` or ``"count,distinct(user)"`` measures the ``FN(FIELD)`` form
(issue 13): ``value`` is the numeric field, ``user`` one of 1,000 ids per event, pre-hashed
(int64) as the parse step will hand it over. The floor stays the count/sum/min/max/mean one.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
             "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import asdict, dataclass, replace  # noqa: E402

import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402
import pandas as pd  # noqa: E402

from benchmarks.timing import best_of  # noqa: E402
from revise.aggspec import AggList  # noqa: E402
from revise.config import EngineConfig, WindowSpec  # noqa: E402
from revise.engine import BatchOutput, Engine, InputBatch  # noqa: E402
from revise.local import run_batches  # noqa: E402
from windows import WatermarkTracker  # noqa: E402
from windows.sketches import hash_numbers  # noqa: E402

__all__ = ["Workload", "main", "make_workload"]


@dataclass(frozen=True, slots=True)
class Workload:
    """The benchmark input, already split into engine batches."""

    keys: npt.NDArray[np.object_]
    ts_ms: npt.NDArray[np.int64]
    values: npt.NDArray[np.float64]
    batches: list[InputBatch]


@dataclass(frozen=True, slots=True)
class Result:
    """One measured configuration."""

    window: str
    mode: str
    records_per_s: float
    seconds: float
    revisions: int
    late: int
    floor_records_per_s: float
    snapshot_bytes: int
    open_windows: int
    snapshot_ms: float
    restore_ms: float


def make_workload(events: int, keys: int, batch: int, seed: int = 7) -> Workload:
    """Synthetic out-of-order stream (see the module docstring)."""
    rng = np.random.default_rng(seed)
    key_names = np.array([f"user-{i:06d}" for i in range(keys)], dtype=object)
    k = key_names[rng.integers(0, keys, events)]
    base = np.arange(events, dtype=np.int64) // 10  # 10,000 events per second of event time
    ts = base - rng.integers(0, 1000, events)
    late = rng.random(events) < 0.01
    ts[late] -= rng.integers(2000, 20000, int(late.sum()))
    ts = np.maximum(ts, 0)
    vals = rng.normal(100.0, 15.0, events)
    users = hash_numbers(rng.integers(0, 1000, events))
    batches = [
        InputBatch.from_arrays(k[i:i + batch], ts[i:i + batch], vals[i:i + batch],
                               offsets=np.arange(i, min(i + batch, events)), topic="bench",
                               numeric={"value": vals[i:i + batch]},
                               distinct={"user": users[i:i + batch]})
        for i in range(0, events, batch)
    ]
    return Workload(k, ts, vals, batches)


def _floor(window: WindowSpec, wl: Workload) -> Callable[[], object]:
    """One-shot pandas groupby of count/sum/min/max/mean per (key, window), all records."""
    aggs = ["count", "sum", "min", "max", "mean"]

    def fixed() -> object:
        ts = wl.ts_ms
        if window.kind == "tumbling":
            df = pd.DataFrame({"key": wl.keys, "start": ts - ts % window.size_ms,
                               "value": wl.values})
        else:
            n = window.size_ms // window.advance_ms
            last = ts // window.advance_ms
            start = (np.repeat(last, n) - np.tile(np.arange(n), len(ts))) * window.advance_ms
            df = pd.DataFrame({"key": np.repeat(wl.keys, n), "start": start,
                               "value": np.repeat(wl.values, n)})
        return df.groupby(["key", "start"], sort=False)["value"].agg(aggs)

    def sessions() -> object:
        df = pd.DataFrame({"key": wl.keys, "ts": wl.ts_ms, "value": wl.values})
        df = df.sort_values(["key", "ts"], kind="stable")
        ts = df["ts"].to_numpy()
        key = df["key"].to_numpy()
        new = np.ones(len(df), dtype=bool)
        new[1:] = (key[1:] != key[:-1]) | (ts[1:] - ts[:-1] >= window.gap_ms)
        df["sid"] = np.cumsum(new)
        return df.groupby("sid", sort=False)["value"].agg(aggs)

    return sessions if window.kind == "session" else fixed


def _measure(window: str, mode: str, wl: Workload, repeat: int, floor_s: float,
             aggs: AggList | None = None) -> Result:
    base = EngineConfig(WindowSpec.parse(window), grace_ms=5000,
                        mode="revision" if mode == "revision" else "watermark")
    cfg = base if aggs is None else replace(base, aggs=aggs)
    outputs: list[BatchOutput] = []

    def go() -> None:
        outputs.clear()
        outputs.extend(run_batches(cfg, wl.batches, now_ms=0))

    secs = best_of(go, repeat)
    revs = sum(len(o.revisions) for o in outputs)
    late = sum(len(o.late) for o in outputs)
    # state after half the batches
    engine = Engine(cfg)
    tracker = WatermarkTracker(cfg.watermark_delay_ms)
    run_batches(cfg, wl.batches[: len(wl.batches) // 2], close_at_end=False, engine=engine,
                tracker=tracker)
    blob = engine.snapshot()
    snap_s = best_of(engine.snapshot, repeat)
    restore_s = best_of(lambda: Engine.build(cfg, blob), repeat)
    n = len(wl.ts_ms)
    return Result(window, mode, n / secs, secs, revs, late, n / floor_s, len(blob),
                  engine.open_windows, snap_s * 1e3, restore_s * 1e3)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a table (``--json PATH`` also writes the figures)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_engine", description=__doc__)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--batch", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--windows", default="tumbling:10s,hopping:10s:2500ms,session:2s")
    p.add_argument("--json", default=None, help="also write the results as JSON here")
    p.add_argument("--aggs", default=None,
                   help='FN(FIELD) aggregates, e.g. "count,p99(value)" (default: the bare five)')
    args = p.parse_args(argv)
    aggs = AggList.parse(args.aggs) if args.aggs else None
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    wl = make_workload(args.events, args.keys, args.batch)
    results: list[Result] = []
    for window in args.windows.split(","):
        floor_s = best_of(_floor(WindowSpec.parse(window), wl), args.repeat)
        for mode in ("revision", "watermark"):
            results.append(_measure(window, mode, wl, args.repeat, floor_s, aggs))
    print(f"{args.events:,} events, {args.keys:,} keys, batches of {args.batch:,}, grace 5s, "
          f"1 core, best of {args.repeat}, aggs {aggs or 'count,sum,min,max,mean'}")
    head = (f"{'window':<22}{'mode':<10}{'rec/s':>12}{'floor rec/s':>13}{'x floor':>9}"
            f"{'revisions':>11}{'late':>8}{'open':>8}{'snap KB':>9}{'save ms':>9}"
            f"{'load ms':>9}")
    print(head)
    print("-" * len(head))
    for r in results:
        print(f"{r.window:<22}{r.mode:<10}{r.records_per_s:>12,.0f}"
              f"{r.floor_records_per_s:>13,.0f}{r.floor_records_per_s / r.records_per_s:>9.2f}"
              f"{r.revisions:>11,}{r.late:>8,}{r.open_windows:>8,}"
              f"{r.snapshot_bytes / 1024:>9.0f}{r.snapshot_ms:>9.1f}{r.restore_ms:>9.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
