"""Micro-benchmark: sketch kernels vs the existing count/sum kernels, side by side in one run.

Run: ``python -m benchmarks.bench_sketches [--values 2000000] [--groups 10000] [--batches 10]``.
Prints updates/s (values folded into per-window state per second, one core, best of 3) for:
count+sum (AggregateSet, the engine's argsort + reduceat path), p99 and distinct, in one pass and
in ``--batches`` micro-batches merged into the running state, plus state sizes.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.timing import best_of
from windows import AggregateSet, segment_starts
from windows.sketches import DistinctSketch, QuantileSketch, hash_numbers, hash_strings


def main() -> None:
    """Time the kernels and print one line per kernel."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--values", type=int, default=2_000_000)
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--batches", type=int, default=10)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    n, k = a.values, a.groups
    g = rng.integers(0, k, n)
    lat = rng.lognormal(3.0, 1.0, n)  # latency-like, ms
    users = rng.integers(0, 5_000_000, n)  # ~n distinct users over all windows
    user_str = np.char.add("u", users.astype(str)).tolist()
    aggs, q, d = AggregateSet(["count", "sum"]), QuantileSketch(), DistinctSketch()
    cuts = np.linspace(0, n, a.batches + 1).astype(int)

    def countsum() -> None:
        o = np.argsort(g, kind="stable")
        aggs.reduce_values(lat[o], segment_starts(g[o]))

    def countsum_batches() -> None:
        state = aggs.empty(k)
        for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
            part = aggs.empty(k)
            gb = g[lo:hi]
            o = np.argsort(gb, kind="stable")
            seg = segment_starts(gb[o])
            red = aggs.reduce_values(lat[lo:hi][o], seg)
            for c, arr in red.items():
                part[c][gb[o][seg]] = arr
            state = aggs.merge(state, part)

    def p99() -> None:
        q.quantile(q.from_values(lat, g, k), 99)

    def p99_batches() -> None:
        state = q.empty(k)
        for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
            state = q.update(state, lat[lo:hi], g[lo:hi])
        q.quantile(state, 99)

    def distinct() -> None:
        d.result(d.from_hashes(hash_numbers(users), g, k))

    def distinct_batches() -> None:
        state = d.empty(k)
        for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
            state = d.update(state, hash_numbers(users[lo:hi]), g[lo:hi])
        d.result(state)

    rows = [
        ("count+sum, one pass", countsum),
        (f"count+sum, {a.batches} batches", countsum_batches),
        ("p99, one pass (+result)", p99),
        (f"p99, {a.batches} batches (+result)", p99_batches),
        ("distinct numbers, one pass (+hash, result)", distinct),
        (f"distinct numbers, {a.batches} batches", distinct_batches),
        ("hash_numbers only", lambda: hash_numbers(users)),
        ("hash_strings only (Python str)", lambda: hash_strings(user_str)),
    ]
    print(f"{n:,} values over {k:,} groups, best of 3, one core")
    for name, fn in rows:
        t = best_of(fn)
        print(f"{name:45s} {t * 1000:8.0f} ms {n / t / 1e6:7.2f} M values/s")
    qs, ds = q.from_values(lat, g, k), d.from_hashes(hash_numbers(users), g, k)
    print(f"p99 state: {qs.nbytes / k:,.0f} B/window ({len(qs.slots) / k:.0f} buckets); "
          f"distinct state: {ds.nbytes / k:,.0f} B/window ({len(ds.slots) / k:.0f} hashes)")


if __name__ == "__main__":
    main()
