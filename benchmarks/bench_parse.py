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

``--plan N`` times Spark's planning instead of the run: each round plans every build's frame
``N`` times, as a streaming job does at every micro-batch (a new ``QueryExecution`` of the
analyzed plan: analysis, optimization, physical planning and whole-stage code generation,
``toRdd``), and prints the median ms of one planning. Beside ``classify`` it plans
``java-only``, the Java UDF's columns alone with no reason: what a parse whose diagnosis
Spark does not see would cost to plan (on clean input, ``--bad 0``, it must give the same
rows).
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


def _java_only(raw: Any) -> Any:
    """The Java UDF's columns alone: the records it is sure of, no reason, no SQL path."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    from revise.spark.parse import FAST_PARSE_UDF, java_fields

    c = F.col
    return raw.select(
        c("value").cast(StringType()).alias("raw_value"), "topic", "partition", "offset",
        java_fields(raw.sparkSession, FAST_PARSE_UDF, "key", "ts", "value", True),
    ).select("raw_value", "topic", "partition", "offset",
             F.lit(None).cast(StringType()).alias("reason"), c("_f.key").alias("key"),
             c("_f.ts").alias("ts_ms"), c("_f.value").alias("value"))


def _planning_ms(frame: Any, plannings: int) -> float:
    """The median ms of planning ``frame`` afresh, ``plannings`` times (see the module)."""
    jvm = frame.sparkSession._jvm
    session = frame.sparkSession._jsparkSession
    mode = getattr(jvm.org.apache.spark.sql.execution,
                   "CommandExecutionMode$").__getattr__("MODULE$").ALL()
    plan = frame._jdf.queryExecution().analyzed()
    times = []
    for _ in range(plannings):
        t0 = time.perf_counter()
        session.sessionState().executePlan(plan, mode).toRdd()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


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
    p.add_argument("--plan", type=int, metavar="N",
                   help="time N plannings of each build a round, not its run, beside the "
                        "Java UDF's columns alone (java-only; not with --fields)")
    args = p.parse_args(argv)
    if args.plan is not None and args.fields:
        p.error("--plan times classify, not --fields")

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
    if args.plan is not None:
        builds["java-only"] = _java_only
    for name, build in builds.items():
        if name == "java-only" and args.bad:
            continue  # it has no reasons: bad records differ by design
        if name != "this" and not _same(mine(df), build(df)):
            print(f"this tree and {name} classify the records differently", file=sys.stderr)
            return 1
    if args.plan is not None:
        return _plan_rounds(builds, df, args.rounds, args.plan)
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


def _plan_rounds(builds: dict[str, Callable[[Any], Any]], df: Any, rounds: int,
                 plannings: int) -> int:
    """``--plan``: each build's median planning ms a round, then over the rounds after the first."""
    frames = {name: build(df) for name, build in builds.items()}
    ms: dict[str, list[float]] = {name: [] for name in frames}
    for rnd in range(rounds):
        for name, frame in frames.items():
            ms[name].append(_planning_ms(frame, plannings))
            print(f"round {rnd} {name}: planning {ms[name][-1]:.1f} ms", flush=True)
    medians = {name: statistics.median(m[1:] or m) for name, m in ms.items()}
    for name, median in medians.items():
        print(f"{name}: median planning {median:.1f} ms")
    print(f"this - java-only: {medians['this'] - medians['java-only']:.1f} ms a planning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
