"""The MERGE into ``latest`` as the table grows: ``python -m benchmarks.bench_latest_merge``.

An unbounded revision-mode run: ``--keys`` keys, each micro-batch bringing ``--span-s``
seconds of event time on tumbling 10 s windows (grace 10 s), so every batch opens new windows
(EARLY revisions, inserted) and finalises those of the batch before (FINAL revisions, which
replace rows written by the last MERGE). The revisions come from revise's own engine and go
through ``DeltaTables.write_batch`` (all four tables, the MERGE in the foreground). Printed
every ``--every`` batches: the MERGE's own milliseconds (``WriteTimings.latest``; the median
of the batches since the last line and the last one), ``latest``'s live rows, its files, the
rows they hold physically (deleted ones included) and how many carry a deletion vector.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["main"]

_T0 = 1_700_000_000_000


def main(argv: Sequence[str] | None = None) -> int:
    """Run the MERGEs; print one line per ``--every`` batches."""
    from revise.config import EngineConfig, WindowSpec
    from revise.engine import Engine, InputBatch
    from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA
    from sinks.delta_log import read_snapshot
    from sinks.delta_tables import DeltaTables

    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_latest_merge",
                                description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=1_000)
    p.add_argument("--span-s", type=int, default=50, help="event time one batch brings")
    p.add_argument("--records", type=int, default=10_000, help="records per batch")
    p.add_argument("--batches", type=int, default=160)
    p.add_argument("--every", type=int, default=20, help="print every this many batches")
    args = p.parse_args(argv)

    cfg = EngineConfig(WindowSpec.parse("tumbling:10s"), 10_000, query_id="bench")
    engine = Engine(cfg)
    rng = np.random.default_rng(3)
    names = np.array([f"key-{i:06d}" for i in range(args.keys)], dtype=object)
    work = Path(tempfile.mkdtemp(prefix="revise-bench-latest-"))
    tables = DeltaTables(str(work / "delta")).ensure()
    path = tables.table_path("latest")
    print(f"{args.keys} keys, {args.records} records and {args.span_s} s of event time a "
          "batch, tumbling 10 s, grace 10 s")
    print(f"{'batch':>5} {'MERGE p50':>10} {'last':>8} {'live rows':>10} {'files':>6} "
          f"{'physical rows':>13} {'vectors':>7}")
    late, dead = LATE_SCHEMA.empty_table(), DEAD_LETTER_SCHEMA.empty_table()
    span_ms = args.span_s * 1_000
    took: list[float] = []
    try:
        for b in range(args.batches):
            ts = _T0 + b * span_ms + rng.integers(0, span_ms, args.records)
            batch = InputBatch.from_arrays(names[rng.integers(0, args.keys, args.records)], ts,
                                           rng.random(args.records))
            watermark = _T0 + b * span_ms - cfg.watermark_delay_ms
            revisions = engine.process(batch, watermark_ms=max(0, watermark), batch_id=b,
                                       now_ms=int(time.time() * 1000)).revisions.to_arrow()
            tables.write_batch("bench", b, revisions, late, dead)
            took.append(tables.last_timings.latest if tables.last_timings else 0.0)
            if b % args.every == args.every - 1 or b == args.batches - 1:
                files = read_snapshot(path).files
                physical = sum(f.num_records or 0 for f in files)
                vectors = [f.deletion_vector for f in files if f.deletion_vector]
                live = physical - sum(v["cardinality"] for v in vectors)
                print(f"{b:>5} {np.median(took) * 1000:>8.0f}ms {took[-1] * 1000:>6.0f}ms "
                      f"{live:>10,} {len(files):>6} {physical:>13,} {len(vectors):>7}",
                      flush=True)
                took.clear()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
