"""The input parse (``revise.spark.parse.classify``) alone, against another tree's.

Run from the repository root::

    python -m benchmarks.bench_parse [--records 1000000] [--rounds 7] [--baseline DIR]
        [--sql-only] [--fields]

``--records`` generated records (:mod:`revise.generate`: 1,000 keys, 1% late, ``--bad``
malformed ones) are cached in a local Spark session (2 partitions, the Kafka source's
columns); each round then runs ``classify`` over them into Spark's ``noop`` sink, once for
this tree and, with ``--baseline``, once for the ``revise/spark/parse.py`` of ``DIR`` (a
``git worktree`` of an older build), and with ``--sql-only`` once for this tree without its
Java path (``classify(..., fast=False)``), alternating so that the machine's drift hits all
alike. Before timing, all must give the same rows (a difference is printed and the run fails).
``--fields`` times ``revise.spark.fields.classify_fields`` instead (with the spec of ``--aggs
sum(value),max(value)``, one numeric field; ``--baseline``'s ``revise/spark/fields.py``).

Printed: each round's seconds, then the median over rounds after the first (the JVM's
warm-up) and the ratio baseline ÷ this tree. docs/BENCHMARKS.md has results.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

from revise.generate import GeneratorConfig, generate

__all__ = ["main"]


def _module_at(path: Path) -> ModuleType:
    """The parse module of another tree, imported from its file."""
    spec = importlib.util.spec_from_file_location("baseline_parse", path)
    if spec is None or spec.loader is None:
        msg = f"cannot import {path}"
        raise SystemExit(msg)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _frame(spark: Any, records: int, bad: float) -> Any:
    """The generated records as the Kafka source's rows, cached on 2 partitions."""
    stream = generate(GeneratorConfig(events=records, keys=1000, late_fraction=0.01,
                                      bad_fraction=bad, disorder_ms=2000))
    rows = [(p, "bench", i % 4, i, None) for i, p in enumerate(stream.payloads)]
    df = spark.createDataFrame(
        rows, "value binary, topic string, partition int, offset bigint, timestamp timestamp")
    df = df.repartition(2).cache()
    df.count()
    return df


def _same(first: Any, second: Any) -> bool:
    """Whether two classified frames hold the same rows (NaN equal to NaN)."""
    return bool(first.exceptAll(second).isEmpty() and second.exceptAll(first).isEmpty())


def main(argv: list[str] | None = None) -> int:
    """Entry point: time ``classify`` of this tree (and of ``--baseline``'s)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_parse", description=__doc__)
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--bad", type=float, default=0.0, help="share of malformed records")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--baseline", metavar="DIR",
                   help="a tree whose revise/spark/parse.py to time beside this one")
    p.add_argument("--sql-only", action="store_true",
                   help="also time this tree's parse without its Java path")
    p.add_argument("--fields", action="store_true",
                   help="time revise.spark.fields.classify_fields (one numeric field)")
    args = p.parse_args(argv)

    from revise.spark import parse
    from revise.spark.session import spark_session

    spark = spark_session("bench-parse", ui=False, shuffle_partitions=2)
    df = _frame(spark, args.records, args.bad)
    from revise.inputspec import InputSpec
    from revise.spark import fields

    spec = InputSpec(numeric_fields=("value",))
    mine = partial(fields.classify_fields, spec=spec) if args.fields else parse.classify
    builds: dict[str, Callable[[Any], Any]] = {"this": mine}
    if args.sql_only:
        builds["sql-only"] = partial(mine, fast=False)
    if args.baseline:
        other = _module_at(Path(args.baseline) / "revise/spark"
                           / ("fields.py" if args.fields else "parse.py"))
        builds["baseline"] = (partial(other.classify_fields, spec=spec) if args.fields
                              else other.classify)
    for name, build in builds.items():
        if name != "this" and not _same(mine(df), build(df)):
            print(f"this tree and {name} classify the records differently", file=sys.stderr)
            return 1
    seconds: dict[str, list[float]] = {name: [] for name in builds}
    for rnd in range(args.rounds):
        for name, build in builds.items():
            t0 = time.perf_counter()
            build(df).write.format("noop").mode("overwrite").save()
            seconds[name].append(time.perf_counter() - t0)
            print(f"round {rnd} {name}: {seconds[name][-1]:.2f} s", flush=True)
    medians = {name: statistics.median(s[1:] or s) for name, s in seconds.items()}
    for name, median in medians.items():
        print(f"{name}: median {median:.2f} s for {args.records:,} records "
              f"({args.records / median:,.0f} records/s)")
    for name in builds:
        if name != "this":
            print(f"{name} / this: {medians[name] / medians['this']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
