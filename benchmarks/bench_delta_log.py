"""A day of ``revisions`` commits, fast-forwarded: what Delta's growing log costs each append.

Run: ``python -m benchmarks.bench_delta_log [--commits 6000] [--rows 600]
[--log-retention DUR] [--property KEY=VALUE ...]``.

A job on the default ``--delta-commit-interval`` (5 s) commits to ``revisions`` once per 5 s:
17,280 commits a day, each a new file in ``_delta_log`` that Delta keeps for
``delta.logRetentionDuration`` (30 days). This commits a data file of ``--rows`` revisions
per commit through ``DeltaTables``' own idempotent commit (an app transaction per commit, the
history compaction every 100 commits in the background, as the job does), back to back, and
prints every 1,000 commits the files in ``_delta_log`` and the median and p95 milliseconds of
the last 1,000 commits. ``--log-retention`` gives the tables a log retention as ``revise run
--delta-log-retention`` does (e.g. ``2m``: delta-rs then deletes expired log files at its
checkpoints; back to back, two minutes hold a few thousand commits). ``--property`` sets any
other property of ``revisions`` first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Append ``--commits`` times; print a line every 1,000 commits."""
    from deltalake import DeltaTable

    from benchmarks.bench_delta_memory import revisions
    from revise.config import parse_duration
    from sinks.delta_history import write_rows
    from sinks.delta_tables import DeltaTables

    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_delta_log",
                                description=__doc__.splitlines()[0])
    p.add_argument("--commits", type=int, default=6_000)
    p.add_argument("--rows", type=int, default=600, help="revisions per commit (10 batches of 60)")
    p.add_argument("--log-retention", metavar="DUR",
                   help="as revise run --delta-log-retention (default: Delta's 30 days)")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    retention_ms = None if args.log_retention is None else parse_duration(args.log_retention)

    root = tempfile.mkdtemp(prefix="revise-bench-delta-log-")
    tables = DeltaTables(root, log_retention_ms=retention_ms).ensure()
    log_dir = f"{root}/revisions/_delta_log"
    if args.property:
        DeltaTable(tables.table_path("revisions")).alter.set_table_properties(
            dict(kv.split("=", 1) for kv in args.property))
        tables = DeltaTables(root).ensure()  # re-open: a fresh snapshot
    settings = [*([f"log retention {args.log_retention}"] if args.log_retention else []),
                *args.property]
    print(f"{args.commits} appends of {args.rows} revisions to revisions, back to back"
          + (f"; {', '.join(settings)}" if settings else ""), flush=True)
    took: list[float] = []
    t0 = time.perf_counter()
    try:
        for n in range(1, args.commits + 1):
            files = write_rows(tables._root, tables.schema, {"revisions": revisions(n, args.rows)},
                               prefix=f"b{n}")  # as the job's tasks write them
            start = time.perf_counter()
            tables._history.write("revise-bench", n, files, "{error}", {})  # the job's commit
            took.append(time.perf_counter() - start)
            if n % 1_000 == 0 or n == args.commits:
                last = sorted(took[-1_000:])
                print(f"commits={n:>6} log_files={len(os.listdir(log_dir)):>6} "
                      f"append_ms_p50={statistics.median(last) * 1000:6.1f} "
                      f"p95={last[int(0.95 * (len(last) - 1))] * 1000:6.1f} "
                      f"elapsed_s={time.perf_counter() - t0:6.0f}", flush=True)
        tables.flush()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
