"""The MERGE into ``latest`` as the table grows: ``python -m benchmarks.bench_latest_merge``.

An unbounded revision-mode run: ``--keys`` keys, each micro-batch bringing ``--span-s``
seconds of event time on tumbling 10 s windows (grace 10 s), so every batch opens new windows
(EARLY revisions, inserted) and finalises those of the batch before (FINAL revisions, which
update rows written by the last MERGE). The revisions come from revise's own engine and go
through ``DeltaTables.write_batch`` (all four tables, the MERGE in the foreground); the figure
is the MERGE's own seconds (``WriteTimings.latest``) and the rows it copied unchanged
(delta-rs' ``num_target_rows_copied``), every ``--every`` batches, for two ``latest`` tables
side by side on the same revisions:

- ``bounded``: as revise creates it, ``delta.targetFileSize`` = ``LATEST_FILE_BYTES``
  (``sinks.delta_layout``; 2 MiB, 8 MiB before 2026-11-26);
- ``unbounded``: 100 MiB, delta-rs's default, which is what ``latest`` had before;
- ``N MiB`` for each ``--file-mib N``: another bound, to choose one.
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
_VARIANTS = {"bounded": None, "unbounded": str(100 * 2**20)}


def main(argv: Sequence[str] | None = None) -> int:
    """Run both tables on the same revisions; print one line per ``--every`` batches."""
    from deltalake import DeltaTable

    from revise.config import EngineConfig, WindowSpec
    from revise.engine import Engine, InputBatch
    from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA
    from sinks.delta_layout import LATEST_FILE_SIZE_KEY
    from sinks.delta_tables import DeltaTables

    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_latest_merge",
                                description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=1_000)
    p.add_argument("--span-s", type=int, default=50, help="event time one batch brings")
    p.add_argument("--records", type=int, default=10_000, help="records per batch")
    p.add_argument("--batches", type=int, default=160)
    p.add_argument("--every", type=int, default=20, help="print every this many batches")
    p.add_argument("--file-mib", type=float, action="append", default=[],
                   help="also a latest table with this file bound (repeatable)")
    args = p.parse_args(argv)
    variants = dict(_VARIANTS) | {f"{m:g} MiB": str(int(m * 2**20)) for m in args.file_mib}

    cfg = EngineConfig(WindowSpec.parse("tumbling:10s"), 10_000, query_id="bench")
    engine = Engine(cfg)
    rng = np.random.default_rng(3)
    names = np.array([f"key-{i:06d}" for i in range(args.keys)], dtype=object)
    work = Path(tempfile.mkdtemp(prefix="revise-bench-latest-"))
    tables: dict[str, DeltaTables] = {}
    for name, size in variants.items():
        tables[name] = DeltaTables(str(work / name)).ensure()
        if size is not None:
            DeltaTable(tables[name].table_path("latest")).alter.set_table_properties(
                {LATEST_FILE_SIZE_KEY: size})
            tables[name] = DeltaTables(str(work / name)).ensure()  # re-open: a fresh snapshot
    print(f"{args.keys} keys, {args.records} records and {args.span_s} s of event time a "
          f"batch, tumbling 10 s, grace 10 s; MERGE ms (rows copied unchanged) per table")
    print(f"{'batch':>5} {'latest rows':>11} " + " ".join(f"{n:>22}" for n in variants))
    late, dead = LATE_SCHEMA.empty_table(), DEAD_LETTER_SCHEMA.empty_table()
    span_ms = args.span_s * 1_000
    try:
        for b in range(args.batches):
            ts = _T0 + b * span_ms + rng.integers(0, span_ms, args.records)
            batch = InputBatch.from_arrays(names[rng.integers(0, args.keys, args.records)], ts,
                                           rng.random(args.records))
            watermark = _T0 + b * span_ms - cfg.watermark_delay_ms
            revisions = engine.process(batch, watermark_ms=max(0, watermark), batch_id=b,
                                       now_ms=int(time.time() * 1000)).revisions.to_arrow()
            figures = []
            for t in tables.values():
                t.write_batch("bench", b, revisions, late, dead)
                took = t.last_timings.latest if t.last_timings else 0.0
                merge = next(op for op in DeltaTable(t.table_path("latest")).history(5)
                             if op.get("operation") == "MERGE")  # not a compaction after it
                copied = merge["operationMetrics"]["num_target_rows_copied"]
                figures.append(f"{took * 1000:9.0f} ms ({copied:>8})")
            if b % args.every == args.every - 1 or b == args.batches - 1:
                rows = DeltaTable(tables["bounded"].table_path("latest")).to_pyarrow_dataset()
                print(f"{b:>5} {rows.count_rows():>11} " + " ".join(f"{f:>22}" for f in figures),
                      flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
