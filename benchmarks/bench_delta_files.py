"""Data files written by the tasks, commits by the driver, against today's driver-side append.

Run: ``python -m benchmarks.bench_delta_files [--rows 1000 10000 100000] [--files 1 8 64]
[--repeat 3]``.

For each ``--rows`` (revisions of one micro-batch) it prints the best of ``--repeat`` of:
``write_data_file`` of all the rows as one file (a task's side); ``commit_files`` of the
same rows split into 1, 8, 64 files, written beforehand (the driver's side: its cost follows
the files, not the rows); and ``write_deltalake``'s append of the same rows through
``DeltaRoot.write_once`` (what the driver does today for each history table). Every write is a
new micro-batch of the same table under a temporary folder.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from deltalake import DeltaTable as RustDeltaTable
    from deltalake.transaction import CommitProperties

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Time the three writes for each size; print one line per size."""
    from deltalake import write_deltalake

    from benchmarks.bench_delta_memory import revisions
    from revise.records import REVISION_SCHEMA
    from sinks.delta_files import commit_files, write_data_file
    from sinks.delta_tables import DeltaTables
    from sinks.delta_txn import DeltaRoot

    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_delta_files",
                                description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    p.add_argument("--files", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)

    folder = tempfile.mkdtemp(prefix="revise-bench-delta-files-")
    try:
        DeltaTables(folder).ensure()
        root = DeltaRoot(folder, None)
        path = root.table_path("revisions")
        batch = iter(range(1, 1_000_000))
        print("ms, best of", args.repeat, "| write_data_file: all rows, one file | commit_files: "
              "the rows in N files (written before) | write_deltalake: append via write_once")
        for n in args.rows:
            rows = revisions(0, n)
            write = _best(args.repeat, partial(write_data_file, path, rows, prefix="w"))

            commits = []
            for k in args.files:
                def commit(k: int = k, rows: pa.Table = rows) -> Callable[[], object]:
                    bounds = [i * rows.num_rows // k for i in range(k + 1)]
                    files = [write_data_file(path, rows.slice(lo, hi - lo), prefix=f"c{i}")
                             for i, (lo, hi) in enumerate(itertools.pairwise(bounds))]
                    return partial(commit_files, root, "revisions", "revise-bench", next(batch),
                                   files, REVISION_SCHEMA)
                commits.append(_best(args.repeat, commit, prepared=True))

            def append(rows: pa.Table = rows) -> None:
                def w(target: RustDeltaTable, props: CommitProperties, _: int | None) -> bool:
                    write_deltalake(target, rows, mode="append", commit_properties=props)
                    return True
                root.write_once("revisions", "revise-bench", next(batch), w)
            appended = _best(args.repeat, append)
            print(f"{n:>7} rows | write_data_file {write * 1e3:7.1f} | commit_files "
                  + " ".join(f"{k}:{c * 1e3:6.1f}" for k, c in zip(args.files, commits,
                                                                   strict=True))
                  + f" | write_deltalake {appended * 1e3:7.1f}", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


def _best(repeat: int, fn: Callable[[], object], *, prepared: bool = False) -> float:
    """Best seconds of ``repeat`` calls of ``fn`` (``prepared``: of the function it returns)."""
    best = float("inf")
    for _ in range(repeat):
        run = fn() if prepared else fn
        assert callable(run), run
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


if __name__ == "__main__":
    raise SystemExit(main())
