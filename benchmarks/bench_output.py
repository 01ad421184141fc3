"""A stateful task's own output work per revision: the changelog's JSON, its framing, Parquet.

Run: ``python -m benchmarks.bench_output [--rows 10000 100000] [--repeat 3]``.

For each ``--rows`` (the revisions one shard call emits) it prints the best of ``--repeat``,
in µs a revision, of what the task does with them before its JVM writer sends them
(docs/SEMANTICS.md, *Who writes the output*): ``encode_revisions`` (keys and values as JSON,
vectorized), ``frame`` (the ``msg:0`` payload the JVM reads) and ``write_data_file`` (the
``revisions`` table's Parquet file with its Delta stats), and the payload's bytes a revision.
The Kafka producer's own work (compression, the transaction) runs in the JVM and is in
``bench_job``'s figures only.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Sequence
from functools import partial
from typing import Any

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Time the three steps for each size; print one line per size."""
    from benchmarks.bench_delta_memory import revisions
    from benchmarks.timing import best_of
    from sinks.delta_files import write_data_file
    from sinks.kafka.codec import encode_revisions
    from sinks.kafka.partitions import frame_parts

    def frame(keys: Any, values: Any) -> bytes:
        """The messages' payload as a task's output builds it: the pieces, joined once."""
        return b"".join(frame_parts(keys, values))

    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    folder = tempfile.mkdtemp(prefix="bench-output-")
    try:
        for rows in args.rows:
            table = revisions(1, rows)
            keys, values = encode_revisions(table)
            payload = frame(keys, values)
            per = 1e6 / rows
            encode_us = best_of(partial(encode_revisions, table), args.repeat) * per
            frame_us = best_of(partial(frame, keys, values), args.repeat) * per
            parquet_us = best_of(partial(write_data_file, folder, table, prefix="b1"),
                                 args.repeat) * per
            print(f"rows={rows} encode_us={encode_us:.2f} frame_us={frame_us:.2f} "
                  f"parquet_us={parquet_us:.2f} total_us={encode_us + frame_us + parquet_us:.2f} "
                  f"bytes={len(payload) / rows:.0f}", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
