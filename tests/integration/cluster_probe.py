"""A Spark driver (run as a script) whose executors must import ``windows`` and ``revise.engine``.

``python cluster_probe.py MASTER OUT.json`` starts the project's session on MASTER, runs
:func:`summarize` per key with ``applyInPandas`` on a small fixed input, and writes the rows plus
where each executor found the packages. :func:`summarize` is pure; the test computes it in its
own process too and compares. Run as ``__main__``, the function is pickled by value, so the
executors need nothing of this file, only the packages it imports inside.
"""

from __future__ import annotations

import json
import sys

import pandas as pd

WINDOW_MS = 10_000
OUT_COLUMNS = ("key", "window_start_ms", "count", "sum", "n_revisions", "assigned",
               "revise_file", "windows_file", "executable")
OUT_DDL = ("key string, window_start_ms long, count long, sum double, n_revisions long, "
           "assigned long, revise_file string, windows_file string, executable string")


def probe_input() -> pd.DataFrame:
    """12 keys x 50 events, event times spread over 60 s, deterministic values."""
    rows = [(f"k{k:02d}", (i * 7_919 + k * 1_013) % 60_000, float((i * 31 + k) % 17))
            for k in range(12) for i in range(50)]
    return pd.DataFrame(rows, columns=["key", "ts", "value"])


def summarize(pdf: pd.DataFrame) -> pd.DataFrame:
    """One key's records → its FINAL per tumbling 10 s window, through the revision engine.

    The records go through ``revise.local.run_batches`` in two micro-batches (so there are
    EARLY revisions before the FINALs); ``windows.TumblingAssigner`` counts the assignments.
    Columns: see ``OUT_COLUMNS`` (the three last say where the code came from).
    """
    import numpy as np

    import revise.engine
    import windows
    from revise.config import EngineConfig, WindowSpec
    from revise.local import run_batches

    cfg = EngineConfig(window=WindowSpec.parse("tumbling:10s"), grace_ms=0, query_id="probe")
    half = len(pdf) // 2
    batches = [revise.engine.InputBatch.from_arrays(
        part["key"].to_numpy(object), part["ts"].to_numpy(np.int64),
        part["value"].to_numpy(np.float64)) for part in (pdf.iloc[:half], pdf.iloc[half:])]
    revs = pd.concat([o.revisions.to_arrow().to_pandas() for o in run_batches(cfg, batches)])
    finals = revs[revs["is_final"]].sort_values("window_start_ms")
    starts = windows.TumblingAssigner(WINDOW_MS).assign(pdf["ts"].to_numpy(np.int64)).start_ms
    return pd.DataFrame({
        "key": finals["key"].to_numpy(),
        "window_start_ms": finals["window_start_ms"].to_numpy(np.int64),
        "count": finals["count"].to_numpy(np.int64),
        "sum": finals["sum"].to_numpy(np.float64),
        "n_revisions": [int((revs["window_start_ms"] == s).sum())
                        for s in finals["window_start_ms"]],
        "assigned": [int((starts == s).sum()) for s in finals["window_start_ms"]],
        "revise_file": revise.engine.__file__,
        "windows_file": windows.__file__,
        "executable": sys.executable,
    }, columns=list(OUT_COLUMNS))


def main(master: str, out: str) -> None:
    """Run :func:`summarize` on ``master`` and write rows and the shipped zip to ``out``."""
    from revise.spark.session import spark_session

    spark = spark_session("revise-cluster-probe", master=master, ui=False,
                          shuffle_partitions=4)
    try:
        df = spark.createDataFrame(probe_input())
        rows = df.groupBy("key").applyInPandas(summarize, OUT_DDL).toPandas()
        shipped = spark.sparkContext._python_includes
        with open(out, "w") as f:
            json.dump({"rows": rows.to_dict("records"), "master": spark.sparkContext.master,
                       "python_includes": list(shipped or [])}, f)
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
