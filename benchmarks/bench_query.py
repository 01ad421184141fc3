"""``revise query`` from a cold process on both engines (issue 14).

Builds two runs' Delta tables with the project's writer (:class:`sinks.delta_tables.DeltaTables`,
the same idempotent per-batch appends and MERGE the job does) from synthetic revisions, then
times each query as a fresh ``python -m revise query … --engine E`` subprocess (cold: a new
interpreter, and for Spark a new JVM), the median of ``--repeats``:

- ``demo``: demo-sized, 1,100 windows × 2 revisions (about what ``revise demo`` writes:
  2,314 revisions, 105 too-late records, 198 dead letters; here 2,200, 100 and 200 in 4 batches);
- ``large``: 500,000 windows × 4 revisions = 2,000,000 revisions in 40 micro-batches of
  50,000, 20,000 too-late records, 2,000 dead letters.

Run from the repository root::

    python -m benchmarks.bench_query [--repeats 3] [--workdir DIR] [--only demo|large]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA, REVISION_SCHEMA
from sinks.delta_tables import DeltaTables

QUERIES: dict[str, str] = {
    "timing counts": "SELECT timing, count(*) AS n FROM revision_history GROUP BY timing "
                     "ORDER BY timing",
    "finals top 5": "SELECT key, window_start_ms, count, mean FROM final_windows "
                    "ORDER BY count DESC, key, window_start_ms LIMIT 5",
    "history ⋈ finals": "SELECT h.timing, count(*) AS n, avg(f.count - h.count) AS missing "
                        "FROM revision_history h JOIN final_windows f ON h.key = f.key "
                        "AND h.window_start_ms = f.window_start_ms GROUP BY h.timing "
                        "ORDER BY h.timing",
    "late by key": "SELECT key, count(*) AS n, max(lateness_ms) AS worst FROM late_records "
                   "GROUP BY key ORDER BY n DESC, key LIMIT 5",
}

WINDOW_MS = 10_000
T0_MS = 1_767_225_600_000


def _revisions(qid: str, keys: np.ndarray, starts: np.ndarray, rev: int, final: bool,
               batch: int, rng: np.random.Generator) -> pa.Table:
    """Revision ``rev`` of the windows ``(keys[i], [starts[i], starts[i] + 10 s))``."""
    n = len(keys)
    count = rng.integers(1, 50, n) + 10 * rev
    total = count * rng.random(n) * 10
    prev = None if rev == 0 else count - 10
    completeness = np.full(n, 1.0 if final else min(0.5 + 0.2 * rev, 0.95))
    cols = {
        "query_id": [qid] * n, "mode": ["revision"] * n,
        "key": np.char.add("k", keys.astype(str)).tolist(),
        "window_start_ms": starts, "window_end_ms": starts + WINDOW_MS,
        "revision": np.full(n, rev, np.int32),
        "timing": ["FINAL" if final else ("EARLY" if rev < 2 else "LATE")] * n,
        "is_final": np.full(n, final), "retracted": np.zeros(n, bool),
        "count": count, "sum": total, "min": np.zeros(n), "max": total, "mean": total / count,
        "prev_count": prev, "prev_sum": None if prev is None else total,
        "prev_min": None if prev is None else np.zeros(n),
        "prev_max": None if prev is None else total,
        "prev_mean": None if prev is None else total / count,
        "n_late": np.full(n, rev), "max_lateness_ms": np.full(n, 100 * rev),
        "watermark_ms": starts + 5_000 * rev, "batch_id": np.full(n, batch),
        "emitted_at_ms": np.full(n, int(time.time() * 1000)),
        "completeness": completeness, "est_count": count / completeness,
        "est_sum": total / completeness,
    }
    arrays = [pa.nulls(n, f.type) if cols[f.name] is None else pa.array(cols[f.name], f.type)
              for f in REVISION_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=REVISION_SCHEMA)


def _late(n: int, batch: int, rng: np.random.Generator) -> pa.Table:
    ts = T0_MS + rng.integers(0, 10**8, n)
    cols = {"key": np.char.add("k", rng.integers(0, 1000, n).astype(str)).tolist(),
            "ts_ms": ts, "value": rng.random(n), "window_start_ms": ts - ts % WINDOW_MS,
            "window_end_ms": ts - ts % WINDOW_MS + WINDOW_MS, "watermark_ms": ts + 30_000,
            "lateness_ms": np.full(n, 30_000), "reason": ["too late"] * n,
            "batch_id": np.full(n, batch), "topic": ["events"] * n,
            "partition": np.zeros(n, np.int32), "offset": np.arange(n) + batch * n}
    return pa.Table.from_arrays([pa.array(cols[f.name], f.type) for f in LATE_SCHEMA],
                                schema=LATE_SCHEMA)


def _dead(n: int, batch: int) -> pa.Table:
    cols = {"raw_value": ["{not json"] * n, "reason": ["invalid JSON"] * n,
            "topic": ["events"] * n, "partition": np.zeros(n, np.int32),
            "offset": np.arange(n) + batch * n, "batch_id": np.full(n, batch)}
    return pa.Table.from_arrays([pa.array(cols[f.name], f.type) for f in DEAD_LETTER_SCHEMA],
                                schema=DEAD_LETTER_SCHEMA)


def build(path: str, *, windows: int, revisions_per_window: int, batches_per_round: int,
          late: int, dead: int, seed: int = 1) -> int:
    """Write a run's four tables under ``path`` with the job's writer.

    Every window gets ``revisions_per_window`` revisions (the last one FINAL), one round of
    ``batches_per_round`` micro-batches per revision number.

    Returns:
        The number of revisions written.
    """
    rng = np.random.default_rng(seed)
    tables = DeltaTables(path).ensure()
    keys = np.arange(windows) % 1000
    starts = T0_MS + (np.arange(windows) // 1000) * WINDOW_MS
    batches = revisions_per_window * batches_per_round
    written, batch = 0, 0
    for rev in range(revisions_per_window):
        for part in np.array_split(np.arange(windows), batches_per_round):
            revs = _revisions("bench", keys[part], starts[part], rev,
                              rev == revisions_per_window - 1, batch, rng)
            tables.write_batch("bench", batch, revs, _late(late // batches, batch, rng),
                               _dead(dead // batches, batch))
            written += revs.num_rows
            batch += 1
    return written


def time_query(sql: str, delta: str, engine: str, repeats: int) -> float:
    """Median wall seconds of ``python -m revise query SQL --engine ENGINE`` (fresh process)."""
    cmd = [sys.executable, "-m", "revise", "query", sql, "--delta-path", delta,
           "--engine", engine, "--format", "csv"]
    took = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
        took.append(time.perf_counter() - t0)
        if done.returncode != 0:
            msg = f"{engine} failed on {sql!r}: {done.stderr.strip()[-500:]}"
            raise RuntimeError(msg)
    return statistics.median(took)


def main(argv: list[str] | None = None) -> int:
    """Build the tables (unless present), time every query on both engines, print a table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "revise-bench-query"))
    p.add_argument("--only", choices=("demo", "large"))
    args = p.parse_args(argv)
    runs = {"demo": dict(windows=1100, revisions_per_window=2, batches_per_round=2, late=100,
                         dead=200),
            "large": dict(windows=500_000, revisions_per_window=4, batches_per_round=10,
                          late=20_000, dead=2_000)}
    print("| tables | query | datafusion s | spark s | spark / datafusion |")
    print("|---|---|---:|---:|---:|")
    for name, shape in runs.items():
        if args.only and name != args.only:
            continue
        delta = str(Path(args.workdir) / name)
        if not Path(delta, "latest", "_delta_log").is_dir():
            t0 = time.perf_counter()
            n = build(delta, **shape)
            print(f"<!-- built {name}: {n:,} revisions in {time.perf_counter() - t0:.0f} s -->",
                  flush=True)
        for label, sql in QUERIES.items():
            local = time_query(sql, delta, "datafusion", args.repeats)
            spark = time_query(sql, delta, "spark", args.repeats)
            print(f"| {name} | {label} | {local:.2f} | {spark:.2f} | {spark / local:.1f}× |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
