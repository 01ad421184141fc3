"""``latest``'s MERGE by design as a table of random keys grows: ``bench_latest_designs``.

The shape of the 1M-key daily workload: every micro-batch brings ``--records`` records of
``--keys`` random keys into one 24 h window, so a batch inserts the windows it sees first,
updates the others, and its windows are spread over the whole table. The same revisions
(revise's engine, EARLY only: nothing closes) go to three ``latest`` tables side by side:

- ``revise``: revise's own MERGE (``DeltaTables.write_batch``, in the foreground): deletion
  vectors mark the rows it replaces, its rows go into one new file
  (``sinks.merge_on_read``);
- ``spark-cow``: Spark's Delta MERGE with the same condition and clauses, copy-on-write;
- ``spark-dv``: the same MERGE on a table with deletion vectors
  (``delta.enableDeletionVectors``): an updated row is marked deleted in its file's vector and
  written again in a new file, so the MERGE writes what the batch touched, not the files that
  hold it.

Printed per batch: ``latest``'s rows and each MERGE's seconds. At the end, each table read
whole by ``revise query``'s engine (delta-rs' DataFusion), its seconds, and a check that the
three tables hold the same windows at the same revisions. A MERGE whose seconds stay flat
while the rows grow is what issue 42's item 2 asks of ``latest``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["main"]

_T0 = 1_700_006_400_000  # midnight UTC: every record of the run falls in one daily window
_DESIGNS = ("revise", "spark-cow", "spark-dv")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the three designs on the same revisions; print one line per batch."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_latest_designs",
                                description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--records", type=int, default=100_000, help="records per batch")
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--designs", default=",".join(_DESIGNS),
                   help=f"comma-separated, of {', '.join(_DESIGNS)} (revise always runs)")
    args = p.parse_args(argv)
    args.designs = ["revise", *(d for d in args.designs.split(",") if d in _DESIGNS[1:])]

    from revise.spark.session import spark_session

    spark = spark_session("bench-latest-designs", ui=False)
    work = Path(tempfile.mkdtemp(prefix="revise-bench-designs-"))
    try:
        _run(spark, args, work)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _run(spark: Any, args: argparse.Namespace, work: Path) -> None:
    from revise.config import EngineConfig, WindowSpec
    from revise.engine import Engine, InputBatch
    from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA
    from sinks.delta_log import read_snapshot
    from sinks.delta_tables import DeltaTables
    from sinks.latest_merge import highest_per_window

    engine = Engine(EngineConfig(WindowSpec.parse("tumbling:24h"), 3_600_000, query_id="bench"))
    rng = np.random.default_rng(7)
    names = np.array([f"key-{i:07d}" for i in range(args.keys)], dtype=object)
    tables = DeltaTables(str(work / "revise")).ensure()
    rs_latest = tables.table_path("latest")
    paths = {d: str(work / d) for d in args.designs if d != "revise"}
    for design, path in paths.items():
        dv = "true" if design == "spark-dv" else "false"
        spark.sql(f"CREATE TABLE delta.`{path}` USING delta "
                  f"TBLPROPERTIES ('delta.enableDeletionVectors' = '{dv}') "
                  f"AS SELECT * FROM delta.`{rs_latest}` LIMIT 0")
    late, dead = LATE_SCHEMA.empty_table(), DEAD_LETTER_SCHEMA.empty_table()
    print(f"{args.keys:,} keys, {args.records:,} records a batch into one daily window; "
          "MERGE seconds per design")
    print(f"{'batch':>5} {'latest rows':>11} " + " ".join(f"{d:>10}" for d in args.designs))
    for b in range(args.batches):
        ts = _T0 + rng.integers(0, 3_600_000, args.records)
        batch = InputBatch.from_arrays(names[rng.integers(0, args.keys, args.records)], ts,
                                       rng.random(args.records))
        revisions = engine.process(batch, watermark_ms=0, batch_id=b,
                                   now_ms=int(time.time() * 1000)).revisions.to_arrow()
        tables.write_batch("bench", b, revisions, late, dead)
        seconds = {"revise": tables.last_timings.latest if tables.last_timings else 0.0}
        if paths:
            source = spark.createDataFrame(highest_per_window(revisions)).cache()
            source.count()  # built before the clock starts, as revise's tasks hand it over
            source.createOrReplaceTempView("source")
            for design, path in paths.items():
                t0 = time.perf_counter()
                spark.sql(_spark_merge(path))
                seconds[design] = time.perf_counter() - t0
            source.unpersist()
        files = read_snapshot(rs_latest).files
        physical = sum(f.num_records or 0 for f in files)
        rows = physical - sum(f.deletion_vector["cardinality"] for f in files
                              if f.deletion_vector)
        print(f"{b:>5} {rows:>11,} " + " ".join(f"{seconds[d]:>9.2f}s" for d in args.designs)
              + f"   revise: {len(files)} files, {physical:,} rows held", flush=True)
    _read_back(spark, {"revise": rs_latest, **paths})


def _spark_merge(path: str) -> str:
    """The MERGE of ``sinks.latest_merge._merge_rows`` as Spark SQL, from view ``source``."""
    from revise.vocab import LATEST_KEY

    on = " AND ".join(f"t.{c} = s.{c}" for c in LATEST_KEY)
    return (f"MERGE INTO delta.`{path}` t USING source s ON {on} "
            "WHEN MATCHED AND s.revision > t.revision AND s.retracted THEN DELETE "
            "WHEN MATCHED AND s.revision > t.revision THEN UPDATE SET * "
            "WHEN NOT MATCHED AND NOT s.retracted THEN INSERT *")


def _read_back(spark: Any, paths: dict[str, str]) -> None:
    """Read each table whole with delta-rs' DataFusion (``revise query``'s engine); compare."""
    from deltalake import DeltaTable, QueryBuilder

    from revise.vocab import LATEST_KEY

    keys = ", ".join(LATEST_KEY)
    sums = {}
    for design, path in paths.items():
        t0 = time.perf_counter()
        qb = QueryBuilder().register("latest", DeltaTable(path))
        got = qb.execute(f"SELECT count(*) AS n, sum(revision) AS r, (SELECT count(*) FROM "
                         f"(SELECT DISTINCT {keys} FROM latest)) AS w FROM latest").read_all()
        took = time.perf_counter() - t0
        n, r, w = (got.column(c)[0].as_py() for c in ("n", "r", "w"))
        files = len(DeltaTable(path).file_uris())
        print(f"{design:>10}: read whole {took:.2f}s, {n:,} rows, {w:,} windows, {files} files")
        sums[design] = (n, r, w)
    if len(set(sums.values())) != 1:
        print(f"MISMATCH: {sums}")
        raise SystemExit(1)


if __name__ == "__main__":
    raise SystemExit(main())
