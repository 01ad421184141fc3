"""The driver's memory and time writing many micro-batches to the Delta tables.

Run: ``python -m benchmarks.bench_delta_memory [--batches 700] [--rows 60]
[--reload-every 50 1000000] [--allocator revise bounded jemalloc] [--fresh-tables]
[--property KEY=VALUE ...] [--commit-interval 0 5]``.

For each ``--reload-every`` value and each ``--allocator`` setting (side by side, each in a
fresh process so that one's heap does not hide the other's) — ``revise``: delta-rs's jemalloc
with :data:`revise.DELTA_RS_MALLOC_CONF`, what an unbounded run uses; ``bounded``: with
:data:`revise.BOUNDED_DELTA_RS_MALLOC_CONF`, a bounded run's; ``jemalloc``: its defaults, as
before revise set it — writes ``--batches`` micro-batches of ``--rows``
revisions (windows of 10 batches, revisions 0–9, no late records or dead letters) through
:class:`sinks.delta_tables.DeltaTables` into fresh tables, exactly as the job's committer does
(three appends skipped as empty or written, one MERGE into ``latest``), with
:data:`sinks.delta_txn.RELOAD_EVERY` set to the value (1000000: never re-open, delta-rs's
``update_incremental`` only). Prints the process's resident memory every 100 batches, the
wall time and the mean milliseconds per batch of the last 100, and of those the ``revisions``
writes' (appends, or staged commits) and ``latest``'s (MERGEs): a long-running job's driver must
stay flat (issue 11's soak).

``--commit-interval S`` (one child per value) writes as the job with
``--delta-commit-interval S`` on the default 500 ms trigger: the micro-batches are 0.5 s apart
on a simulated clock, the history tables get one commit per ``S`` seconds through a
:class:`sinks.file_stage.FileStage`, and ``latest`` one MERGE per ``S`` seconds (the
background merger's least rest); 0 is a commit of every table per micro-batch.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from revise import BOUNDED_DELTA_RS_MALLOC_CONF, DELTA_RS_MALLOC_CONF, MALLOC_CONF_ENV
from revise.vocab import TABLE_NAMES

__all__ = ["ALLOCATORS", "main"]

MIB = 1024 * 1024
ALLOCATORS = {"revise": DELTA_RS_MALLOC_CONF, "bounded": BOUNDED_DELTA_RS_MALLOC_CONF,
              "jemalloc": ""}
"""``--allocator`` choices: the value of :data:`revise.MALLOC_CONF_ENV` in the child."""


def revisions(batch: int, rows: int) -> pa.Table:
    """``rows`` revisions of batch ``batch`` in the revisions schema (all windows EARLY)."""
    from revise.records import REVISION_SCHEMA

    rng = np.random.default_rng(batch)
    cols: dict[str, pa.Array] = {}
    ints = {"window_start_ms": (batch // 10) * 10_000, "window_end_ms": (batch // 10 + 1) * 10_000,
            "revision": batch % 10}
    for f in REVISION_SCHEMA:
        if pa.types.is_string(f.type) or pa.types.is_large_string(f.type):
            text = {"timing": "EARLY", "mode": "revision"}.get(f.name, "q")
            values = [f"k{i:04d}" for i in range(rows)] if f.name == "key" else [text] * rows
            cols[f.name] = pa.array(values, f.type)
        elif pa.types.is_boolean(f.type):
            cols[f.name] = pa.array([False] * rows)
        elif pa.types.is_integer(f.type):
            cols[f.name] = pa.array([ints.get(f.name, batch)] * rows, f.type)
        else:
            cols[f.name] = pa.array(rng.random(rows), f.type)
    return pa.table(cols, schema=REVISION_SCHEMA)


TRIGGER_S = 0.5
"""The simulated micro-batch interval of ``--commit-interval`` (the job's default trigger)."""


# Longer than ~60 lines: one loop that writes, times and prints, as the job's driver would.
def one(batches: int, rows: int, reload_every: int, *, fresh: bool = False,
        label: str = "", properties: dict[str, str] | None = None,
        commit_interval_s: float | None = None) -> None:
    """Write the batches in this process and print its RSS every 100 batches.

    ``fresh``: the control experiment — every batch goes to new tables in a new folder (so no
    table ever has more than a couple of commits), which the job never does. ``properties``:
    Delta table properties set on the four tables before the first batch.
    ``commit_interval_s``: write as the job with that ``--delta-commit-interval`` (module
    docstring); None: the synchronous writes above.
    """
    import psutil

    import sinks.delta_tables as delta
    import sinks.delta_txn as txn
    from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA
    from sinks.file_stage import FileStage

    txn.RELOAD_EVERY = reload_every  # type: ignore[misc]  # the knob under test
    root = tempfile.mkdtemp(prefix="revise-bench-delta-")
    now = [0.0]
    stage = (None if commit_interval_s is None else
             FileStage(f"{root}/stage", commit_interval_s, clock=lambda: now[0]))
    tables = delta.DeltaTables(root, stage=stage).ensure()
    if properties:
        from deltalake import DeltaTable

        for name in TABLE_NAMES:
            DeltaTable(tables.table_path(name)).alter.set_table_properties(properties)
        tables = delta.DeltaTables(root, stage=stage).ensure()  # re-open: a fresh snapshot
    late, dead = LATE_SCHEMA.empty_table(), DEAD_LETTER_SCHEMA.empty_table()
    proc, t0 = psutil.Process(), time.perf_counter()
    first, last, last_b = None, t0, 0
    per_merge = max(1, round((commit_interval_s or 0) / TRIGGER_S))
    spent = dict.fromkeys(("revisions", "latest"), 0.0)  # seconds since the last line
    for b in range(batches):
        if fresh:
            tables = delta.DeltaTables(f"{root}/{b}").ensure()
        now[0] = b * TRIGGER_S
        tables.write_batch("bench", b, revisions(b, rows), late, dead,
                           defer_latest=commit_interval_s is not None)
        if tables.last_timings is not None:
            spent["revisions"] += tables.last_timings.revisions
            spent["latest"] += tables.last_timings.latest
        if commit_interval_s is not None and b % per_merge == 0:
            spent["latest"] += tables.flush()  # the merger's MERGE, once per interval
        if b % 100 == 99 or b == batches - 1:
            rss = proc.memory_info().rss / MIB
            first = rss if first is None else first
            interval = "" if commit_interval_s is None else f" interval={commit_interval_s:g}s"
            n = b + 1 - last_b
            print(f"{label:>8}{interval} {'fresh tables' if fresh else 'reload_every=':>13}"
                  f"{'' if fresh else reload_every:>7} batch={b + 1:>5} rss_mib={rss:7.1f} "
                  f"since_batch_100={rss - first:+6.1f} seconds={time.perf_counter() - t0:6.1f} "
                  f"ms_per_batch={_per_batch(time.perf_counter() - last, n):6.1f} "
                  f"revisions_ms={_per_batch(spent['revisions'] + _unbatched(tables), n):5.1f} "
                  f"latest_ms={_per_batch(spent['latest'], n):5.1f}",
                  flush=True)
            last, last_b = time.perf_counter(), b + 1
            spent = dict.fromkeys(spent, 0.0)
            tables.unbatched_seconds.clear()


def _per_batch(seconds: float, batches: int) -> float:
    return seconds * 1000 / batches


def _unbatched(tables: object) -> float:
    """Seconds of the staged ``revisions`` commits made by ``flush`` since they were cleared."""
    return float(getattr(tables, "unbatched_seconds", {}).get("revisions", 0.0))


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: one child process per ``--reload-every`` value, in turn."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batches", type=int, default=700)
    ap.add_argument("--rows", type=int, default=60, help="revisions per micro-batch")
    ap.add_argument("--reload-every", type=int, nargs="+", default=[50, 1_000_000])
    ap.add_argument("--allocator", nargs="+", choices=sorted(ALLOCATORS),
                    default=["revise", "jemalloc"],
                    help="delta-rs's allocator settings to compare (an unbounded run's, a bounded "
                         "run's, jemalloc's own)")
    ap.add_argument("--fresh-tables", action="store_true",
                    help="also the control: each batch to new tables (the growth follows "
                         "commits to an existing table)")
    ap.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                    help="a Delta table property set on the four tables first (repeatable), "
                         "e.g. delta.logRetentionDuration='interval 1 hours'")
    ap.add_argument("--commit-interval", type=float, nargs="+", metavar="S",
                    help="write as the job with --delta-commit-interval S (one run per value; "
                         "0: every table committed per micro-batch), micro-batches 0.5 s apart")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--child-interval", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--child-fresh", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-label", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child is not None:
        one(a.batches, a.rows, a.child, fresh=a.child_fresh, label=a.child_label,
            properties=dict(p.split("=", 1) for p in a.property),
            commit_interval_s=a.child_interval)
        return 0
    for allocator in a.allocator:
        runs = [[str(every)] for every in a.reload_every]
        runs += [["50", "--child-fresh"]] if a.fresh_tables else []
        if a.commit_interval:
            runs = [[*run, f"--child-interval={s}"] for run in runs for s in a.commit_interval]
        # The child imports revise, which keeps a set variable: "" is jemalloc's defaults.
        env = {**os.environ, MALLOC_CONF_ENV: ALLOCATORS[allocator]}
        for run in runs:
            subprocess.run([sys.executable, "-m", "benchmarks.bench_delta_memory", "--batches",
                            str(a.batches), "--rows", str(a.rows), "--child-label", allocator,
                            *(f"--property={p}" for p in a.property), "--child", *run],
                           check=True, env=env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
