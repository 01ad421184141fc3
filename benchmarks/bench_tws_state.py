"""A window's state in ``transformWithStateInPandas``' MapState, against revise's snapshot.

Run: ``python -m benchmarks.bench_tws_state [--windows 87000] [--rows 12500] [--batches 3]``.

Issue 12 (item 1) names Spark 4's ``transformWithStateInPandas`` as a direction: its MapState
keeps each entry as its own RocksDB key, so a micro-batch would read and write only the windows
it touches. This measures the price of that in the Python API, on one shard (one group) with
``--windows`` open windows and batches of ``--rows`` records on random windows:

- ``tws``: the handler reads (``getValue``) and writes (``updateValue``) one MapState entry per
  record, the least a per-window layout needs. Each call is a round trip over the state
  server's socket; the figure is the handler's own time per record, Spark's overhead excluded.
- ``snapshot``: the same shard kept as one whole snapshot: ``Engine.build`` from it,
  ``process`` of the batch, ``snapshot()``, per record.

Both in this process, side by side; ``tws`` needs the ``protobuf`` package (a dependency of revise).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

__all__ = ["main"]

_DAY_MS = 86_400_000
_DAY0 = 1_700_000_000_000 // _DAY_MS * _DAY_MS


def _window_keys(rng: np.random.Generator, windows: int, rows: int) -> npt.NDArray[np.int64]:
    return rng.integers(0, windows, rows)


def snapshot_cost(windows: int, rows: int, batches: int) -> float:
    """µs per record of revise's snapshot path for one shard holding ``windows`` windows."""
    from revise.config import EngineConfig, WindowSpec
    from revise.engine import Engine, InputBatch

    cfg = EngineConfig(WindowSpec.parse("tumbling:24h"), 3_600_000)
    rng = np.random.default_rng(7)
    names = np.array([f"key-{i:07d}" for i in range(windows)], dtype=object)

    def batch(idx: npt.NDArray[np.int64]) -> InputBatch:
        n = len(idx)
        return InputBatch.from_arrays(names[idx], _DAY0 + rng.integers(0, 3_600_000, n),
                                      rng.random(n))

    engine = Engine(cfg)
    engine.process(batch(np.arange(windows)), watermark_ms=_DAY0, batch_id=0, now_ms=0)
    snap = engine.snapshot()
    best = float("inf")
    for b in range(batches):
        one = batch(_window_keys(rng, windows, rows))
        t0 = time.perf_counter()
        engine = Engine.build(cfg, snap)
        engine.process(one, watermark_ms=_DAY0, batch_id=b + 1, now_ms=0)
        snap = engine.snapshot()
        best = min(best, time.perf_counter() - t0)
    return best / rows * 1e6


def tws_cost(windows: int, rows: int, batches: int, work: Path) -> list[float]:
    """µs per record of per-window MapState get+update, one per batch after the first.

    The first batch writes every window (``windows`` puts); the next ``batches`` each touch
    ``rows`` random windows, all of which exist.
    """
    from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

    from revise.spark.session import spark_session

    spark = spark_session("bench-tws-state", ui=False)
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    src = work / "input"
    src.mkdir(parents=True)
    rng = np.random.default_rng(7)
    sizes = [windows] + [rows] * batches
    for b, n in enumerate(sizes):
        w = np.arange(n) if b == 0 else _window_keys(rng, windows, n)
        pd.DataFrame({"shard": np.zeros(n, dtype=np.int64), "w": w.astype(np.int64),
                      "v": rng.random(n)}).to_parquet(src / f"b{b:03d}.parquet")

    class PerWindow(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            self.m = handle.getMapState("windows", "w LONG", "count LONG, sum DOUBLE")

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                            timerValues: Any) -> Iterator[pd.DataFrame]:
            t0 = time.perf_counter()
            n = 0
            for frame in rows:
                for w, v in zip(frame["w"].tolist(), frame["v"].tolist(), strict=True):
                    cur = self.m.getValue((w,))
                    self.m.updateValue((w,), (1, v) if cur is None else (cur[0] + 1, cur[1] + v))
                    n += 1
            yield pd.DataFrame({"n": [n], "seconds": [time.perf_counter() - t0]})

        def close(self) -> None:
            pass

    per_row: list[float] = []

    def collect(frame: Any, batch_id: int) -> None:
        for r in frame.collect():
            if batch_id > 0:  # batch 0 loads the windows
                per_row.append(r["seconds"] / max(r["n"], 1) * 1e6)

    stream = (spark.readStream.schema("shard LONG, w LONG, v DOUBLE")
              .option("maxFilesPerTrigger", 1).parquet(str(src)))
    out = stream.groupBy("shard").transformWithStateInPandas(
        statefulProcessor=PerWindow(), outputStructType="n LONG, seconds DOUBLE",
        outputMode="Update", timeMode="None")
    query = (out.writeStream.foreachBatch(collect).outputMode("update")
             .option("checkpointLocation", str(work / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    spark.stop()
    return per_row


def main(argv: Sequence[str] | None = None) -> int:
    """Measure both paths and print µs per record and ms per shard and batch."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_tws_state",
                                description=__doc__.splitlines()[0])
    p.add_argument("--windows", type=int, default=87_000,
                   help="open windows in the shard (the 1M-key daily workload's ~110k / 8 shards)")
    p.add_argument("--rows", type=int, default=12_500, help="records per micro-batch")
    p.add_argument("--batches", type=int, default=3)
    args = p.parse_args(argv)
    try:
        import google.protobuf  # noqa: F401  (transformWithStateInPandas' state client)
    except ImportError:
        print("needs protobuf: pip install -e .", file=sys.stderr)
        return 2
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    snap_us = snapshot_cost(args.windows, args.rows, args.batches)
    work = Path(tempfile.mkdtemp(prefix="revise-bench-tws-"))
    try:
        tws_us = tws_cost(args.windows, args.rows, args.batches, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    shard_ms = args.rows / 1000
    print(f"one shard, {args.windows:,} open windows, {args.rows:,} records per batch")
    print(f"snapshot (restore + process + snapshot): {snap_us:7.2f} µs/record "
          f"= {snap_us * shard_ms:7.1f} ms per shard and batch")
    for b, us in enumerate(tws_us, start=1):
        print(f"transformWithStateInPandas MapState, batch {b}: {us:7.2f} µs/record "
              f"= {us * shard_ms:7.1f} ms per shard and batch")
    if tws_us:
        print(f"MapState / snapshot: {min(tws_us) / snap_us:.1f}x (best batch)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
