"""Both query engines give the same answers over a real run's Delta tables (issue 14).

One bounded run (real Kafka, real Spark job, real Delta tables; revision mode with late and bad
records, 100 records per micro-batch so the tables have many versions) feeds every test. Each
query runs on Spark (``revise.query.run_query``, the session fixture) and in-process
(``revise.query.local.run_query_local``) and the two pandas frames must be equal:

- same column names in the same order;
- same dtypes, compared as they come (no normalisation is needed: both engines map Delta
  ``string`` to pandas ``object``, ``long``/``int`` to ``int64``/``int32``, a nullable integer
  column holding nulls to ``float64``, ``count(*)`` to ``int64``, ``avg`` to ``float64``);
- same rows: in order where the SQL has an ORDER BY, else after sorting both by every column;
  doubles to 1e-9 relative (an aggregate's summation order may differ).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pytest
from integration_support import QueryRun

from revise.cli import main
from revise.errors import ConfigError
from revise.query import run_query
from revise.query.local import (
    COMPARISONS_SCHEMA,
    append_frame,
    commit_times,
    read_table,
    run_query_local,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.delta]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def run(query_run: QueryRun) -> QueryRun:
    """The shared run (tests/integration/conftest.py)."""
    return query_run


def assert_same(spark_frame: pd.DataFrame, local_frame: pd.DataFrame, *, ordered: bool) -> None:
    """The module docstring's equality: names, dtypes, rows (sorted unless ``ordered``)."""
    assert list(local_frame.columns) == list(spark_frame.columns)
    assert local_frame.dtypes.astype(str).tolist() == spark_frame.dtypes.astype(str).tolist()
    assert len(local_frame) == len(spark_frame)
    if not ordered and len(spark_frame):
        cols = list(spark_frame.columns)
        spark_frame = spark_frame.sort_values(cols, na_position="first")
        local_frame = local_frame.sort_values(cols, na_position="first")
    pd.testing.assert_frame_equal(local_frame.reset_index(drop=True),
                                  spark_frame.reset_index(drop=True),
                                  check_exact=False, rtol=1e-9)


QUERIES: list[tuple[str, bool]] = [
    ("SELECT * FROM final_windows", False),
    ("SELECT * FROM provisional_windows", False),
    ("SELECT * FROM revision_history", False),
    ("SELECT * FROM late_records", False),
    ("SELECT * FROM dead_letters", False),
    ("SELECT * FROM latest", False),
    ("SELECT timing, count(*) AS n, sum(count) AS records, avg(mean) AS avg_mean, "
     "min(revision) AS lo, max(revision) AS hi FROM revision_history GROUP BY timing "
     "ORDER BY timing", True),
    ("SELECT key, count(*) AS windows, sum(sum) AS total FROM final_windows "
     "WHERE count >= 2 AND key <> 'k00001' GROUP BY key HAVING count(*) > 1 ORDER BY key", True),
    ("SELECT h.key, h.window_start_ms, h.revision, h.timing, h.count AS rev_count, "
     "f.count AS final_count, f.count - h.count AS missing FROM revision_history h "
     "JOIN final_windows f ON h.query_id = f.query_id AND h.key = f.key "
     "AND h.window_start_ms = f.window_start_ms AND h.window_end_ms = f.window_end_ms "
     "WHERE NOT h.is_final ORDER BY h.key, h.window_start_ms, h.revision", True),
    ("SELECT key, ts_ms, lateness_ms, reason FROM late_records "
     "ORDER BY lateness_ms DESC, key, ts_ms LIMIT 7", True),
    ("SELECT reason, count(*) AS n FROM dead_letters GROUP BY reason ORDER BY n DESC, reason",
     True),
    ("SELECT (SELECT count(*) FROM final_windows) AS f, (SELECT count(*) FROM late) AS l, "
     "(SELECT max(batch_id) FROM revisions) AS b", True),
    ("SELECT key, revision, prev_count, prev_mean FROM revision_history "
     "WHERE revision = 0 ORDER BY key, window_start_ms", True),
]


@pytest.mark.parametrize(("sql", "ordered"), QUERIES, ids=range(len(QUERIES)))
def test_same_answer_on_both_engines(run: QueryRun, spark: SparkSession, sql: str,
                                     ordered: bool) -> None:
    spark_frame = run_query(sql, run.delta, spark=spark)
    local_frame = run_query_local(sql, run.delta)
    assert len(spark_frame.columns) > 0
    assert_same(spark_frame, local_frame, ordered=ordered)


TT_SQL = [
    ("SELECT count(*) AS n FROM final_windows", True),
    ("SELECT * FROM revision_history", False),
    ("SELECT * FROM latest", False),
    ("SELECT count(*) AS l, max(batch_id) AS b FROM late_records", True),
    ("SELECT count(*) AS d FROM dead_letters", True),
]


def test_time_travel_by_version_same_on_both(run: QueryRun, spark: SparkSession) -> None:
    versions = [v for v, _ in commit_times(f"{run.delta}/latest")]
    assert len(versions) >= 3
    picked = sorted({versions[0], versions[len(versions) // 2], versions[-1]})
    counts = []
    for v in picked:
        for sql, ordered in TT_SQL:
            assert_same(run_query(sql, run.delta, spark=spark, version=v),
                        run_query_local(sql, run.delta, version=v), ordered=ordered)
        counts.append(len(run_query_local("SELECT * FROM revision_history", run.delta,
                                          version=v)))
    assert counts[0] == 0 and counts == sorted(counts) and counts[-1] > 0


def _ts(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def test_time_travel_by_timestamp_same_on_both(run: QueryRun, spark: SparkSession) -> None:
    times = {t: commit_times(f"{run.delta}/{t}") for t in
             ("revisions", "latest", "late", "dead_letter")}
    lo = max(c[0][1] for c in times.values())
    hi = min(c[-1][1] for c in times.values())
    inside = [ms for _, ms in times["latest"] if lo <= ms <= hi]
    assert inside, times
    # a commit's exact time, a moment between commits, and the earliest time every table has
    points = sorted({inside[len(inside) // 2], inside[len(inside) // 2] + 1, lo})
    seen = set()
    for ms in points:
        for sql, ordered in TT_SQL:
            assert_same(run_query(sql, run.delta, spark=spark, timestamp=_ts(ms)),
                        run_query_local(sql, run.delta, timestamp=_ts(ms)), ordered=ordered)
        seen.add(len(run_query_local("SELECT * FROM revisions", run.delta, timestamp=_ts(ms))))
    assert len(seen) >= 1
    # outside the history: both engines refuse, with a usage error naming the point
    for ms in (lo - 3_600_000, hi + 3_600_000):
        with pytest.raises(ConfigError, match=r"at timestamp"):
            run_query("SELECT 1", run.delta, spark=spark, timestamp=_ts(ms))
        with pytest.raises(ConfigError, match=r"at timestamp"):
            run_query_local("SELECT 1", run.delta, timestamp=_ts(ms))


KNOWN_SQL = [
    ("SELECT * FROM final_windows", False),
    ("SELECT * FROM provisional_windows", False),
    ("SELECT * FROM latest", False),
    ("SELECT * FROM revision_history", False),
    ("SELECT * FROM late_records", False),
    ("SELECT count(*) AS d FROM dead_letters", True),
]


def _known_by_hand(revs: pd.DataFrame, late: pd.DataFrame, column: str,
                   at_ms: int) -> dict[str, set[tuple[object, ...]]]:
    """What was known at ``column <= at_ms``, computed with plain Python over every row."""
    top: dict[tuple[object, ...], tuple[int, bool, bool]] = {}
    known_batch = -1
    for r in revs.itertuples(index=False):
        if getattr(r, column) > at_ms:
            continue
        known_batch = max(known_batch, int(r.batch_id))
        w = (r.key, int(r.window_start_ms), int(r.window_end_ms))
        if w not in top or int(r.revision) > top[w][0]:
            top[w] = (int(r.revision), bool(r.is_final), bool(r.retracted))
    live = {(*w, rev): final for w, (rev, final, retracted) in top.items() if not retracted}
    if column == "watermark_ms":
        known_late = late[late["watermark_ms"] <= at_ms]
    else:
        known_late = late[late["batch_id"] <= known_batch]
    return {"final_windows": {w for w, final in live.items() if final},
            "provisional_windows": {w for w, final in live.items() if not final},
            "revision_history": {(r.key, int(r.window_start_ms), int(r.window_end_ms),
                                  int(r.revision)) for r in revs.itertuples(index=False)
                                 if getattr(r, column) <= at_ms},
            "late_records": {(k, int(ts), int(ws)) for k, ts, ws in
                             known_late[["key", "ts_ms", "window_start_ms"]].itertuples(
                                 index=False)}}


@pytest.mark.parametrize(("column", "option"), [("emitted_at_ms", "known_at"),
                                                ("watermark_ms", "watermark")])
def test_what_was_known_when_same_on_both_and_as_computed_by_hand(
        run: QueryRun, spark: SparkSession, column: str, option: str) -> None:
    revs = read_table(f"{run.delta}/revisions")
    late = read_table(f"{run.delta}/late")
    points = sorted(set(revs[column].astype(int)))
    assert len(points) >= 3, points
    # before the first revision's point, between two points, and the last one
    picked = [points[0] - 1, points[len(points) // 2] - 1, points[-1]]
    seen = []
    for at in picked:
        point = {option: at}
        for sql, ordered in KNOWN_SQL:
            assert_same(run_query(sql, run.delta, spark=spark, **point),
                        run_query_local(sql, run.delta, **point), ordered=ordered)
        expected = _known_by_hand(revs, late, column, at)
        for view in ("final_windows", "provisional_windows", "revision_history"):
            got = run_query_local(f"SELECT key, window_start_ms, window_end_ms, revision "
                                  f"FROM {view}", run.delta, **point)
            assert set(got.itertuples(index=False, name=None)) == expected[view], (view, at)
        got = run_query_local("SELECT key, ts_ms, window_start_ms FROM late_records",
                              run.delta, **point)
        assert set(got.itertuples(index=False, name=None)) == expected["late_records"], at
        seen.append(tuple(len(expected[v]) for v in expected))
    # nothing known before the first point; some windows open between; all final at the end
    assert seen[0] == (0, 0, 0, 0)
    assert seen[1][1] > 0 and seen[1][2] < len(revs)
    assert seen[2][1] == 0 and seen[2][2] == len(revs) and seen[2][3] > 0
    # the last point's latest is the Delta latest table (the run is over)
    assert_same(run_query_local("SELECT * FROM latest", run.delta),
                run_query_local("SELECT * FROM latest", run.delta,
                                **{option: picked[-1]}), ordered=False)


def _cleaned_root(run: QueryRun, root: str) -> None:
    """A root whose logs delta-rs cleaned up: 45 one-row batches of the run's revisions, a
    1 h log retention, and every file up to the Delta checkpoint at version 19 made older
    than that (``latest``'s an hour older than ``revisions``'), so the checkpoints at 29
    and 39 delete their commits below 19."""
    import os
    import time

    from deltalake import DeltaTable

    from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA
    from sinks.delta_tables import DeltaTables

    # Every one-row batch must change latest, or its MERGE commits nothing and latest's
    # versions stop following the batches (the files' order varies between runs): revision 0
    # of every window first (inserts), then revision 1 of each (updates), and so on.
    rows = DeltaTable(f"{run.delta}/revisions").to_pyarrow_table().sort_by(
        [("revision", "ascending"), ("key", "ascending"), ("window_start_ms", "ascending")])
    assert rows.num_rows >= 45
    tables = DeltaTables(root, log_retention_ms=3_600_000).ensure()
    late, dead = LATE_SCHEMA.empty_table(), DEAD_LETTER_SCHEMA.empty_table()
    for b in range(45):
        if b == 25:
            for table, age_s in (("latest", 3 * 3_600), ("revisions", 2 * 3_600)):
                then = time.time() - age_s
                for f in (Path(root) / table / "_delta_log").glob("0*"):
                    if int(f.name[:20]) <= 19:
                        os.utime(f, (then, then))
        tables.write_batch("q", b, rows.slice(b, 1), late, dead)
        tables.flush()  # one MERGE into latest per batch
    # latest has one version more: its creation, then its deletion vectors' protocol.
    assert (DeltaTable(f"{root}/latest").version()
            == DeltaTable(f"{root}/revisions").version() + 1)
    # Commit times are the log files' mtimes, stamped by the kernel's coarse clock: batch b+1's
    # append could share latest's version b+1 time. Restamp the versions the test reads, in
    # the order they were written (batch b's append, then its MERGE), 1 s apart.
    base = time.time() - 600
    for table, offset in (("revisions", 0.0), ("latest", 0.5)):
        for f in (Path(root) / table / "_delta_log").glob("0*.json"):
            version = int(f.name[:20])
            if version >= 20:
                os.utime(f, (base + version + offset, base + version + offset))


def test_time_travel_behind_a_cleaned_log_is_refused_alike_on_both(
        run: QueryRun, spark: SparkSession, tmp_path: Path) -> None:
    root = str(tmp_path / "cleaned")
    _cleaned_root(run, root)
    for table in ("latest", "revisions"):
        assert commit_times(f"{root}/{table}")[0][0] == 19, table  # 0..18 deleted
    # latest keeps version 19, but revisions has nothing kept from that moment
    refused = r"revisions keeps no version as old as latest version 19 .*oldest version kept is 19"
    with pytest.raises(ConfigError, match=refused):
        run_query("SELECT 1", root, spark=spark, version=19)
    with pytest.raises(ConfigError, match=refused):
        run_query_local("SELECT 1", root, version=19)
    # within the retention: both engines read the cleaned tables, the same rows
    for sql, ordered in TT_SQL:
        assert_same(run_query(sql, root, spark=spark, version=30),
                    run_query_local(sql, root, version=30), ordered=ordered)
    assert len(run_query_local("SELECT * FROM revision_history", root, version=30)) == 30


def _cli(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capfd.readouterr()
    code = main(["query", *args])
    out, err = capfd.readouterr()
    return code, out, err


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_cli_prints_the_same_on_both_engines(run: QueryRun, capfd: pytest.CaptureFixture[str],
                                             fmt: str) -> None:
    sql = ("SELECT key, window_start_ms, revision, timing, count, mean FROM revision_history "
           "ORDER BY key, window_start_ms, revision LIMIT 20")
    outs = []
    for engine in ("spark", "datafusion"):
        code, out, err = _cli(capfd, sql, "--delta-path", run.delta, "--format", fmt,
                              "--engine", engine)
        assert code == 0, err
        outs.append(out)
    assert outs[0] == outs[1]
    assert len(outs[1].strip().splitlines()) >= 20


def _query_in_fresh_process(delta: str, absent: str) -> None:
    """``revise query`` (default engine) in a new interpreter; ``absent`` must not be imported."""
    code = (
        "import sys; from revise.cli import main; "
        f"rc = main(['query', 'SELECT count(*) AS n FROM revision_history', '--delta-path', "
        f"{delta!r}, '--format', 'json']); "
        f"assert rc == 0; assert {absent!r} not in sys.modules, '{absent} was imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["n"] == len(read_table(f"{delta}/revisions"))


def test_default_engine_starts_no_jvm(run: QueryRun) -> None:
    _query_in_fresh_process(run.delta, "pyspark")


def test_default_engine_loads_no_kafka_client(run: QueryRun) -> None:
    # a cold `revise query` pays for no Kafka client (librdkafka) it does not use
    _query_in_fresh_process(run.delta, "confluent_kafka")


@pytest.mark.parametrize("sql", ["SELEC nonsense", "SELECT * FROM no_such_view",
                                 "SELECT no_such_column FROM final_windows"])
def test_local_engine_bad_sql_exit_2_naming_the_views(
    run: QueryRun, capfd: pytest.CaptureFixture[str], sql: str
) -> None:
    code, out, err = _cli(capfd, sql, "--delta-path", run.delta)
    assert code == 2, err
    assert "final_windows" in err and "dead_letters" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 3
    assert out == ""


def test_local_engine_path_and_time_travel_errors_exit_2(
    run: QueryRun, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(capfd, "SELECT 1", "--delta-path", str(tmp_path / "nope"))
    assert code == 2 and "does not exist" in err and "revise run" in err
    (tmp_path / "empty").mkdir()
    code, _, err = _cli(capfd, "SELECT 1", "--delta-path", str(tmp_path / "empty"))
    assert code == 2 and "no revise Delta tables" in err
    code, _, err = _cli(capfd, "SELECT 1", "--delta-path", run.delta, "--as-of-version", "100000")
    assert code == 2 and "version 100000" in err and "DESCRIBE HISTORY" in err
    code, _, err = _cli(capfd, "SELECT 1", "--delta-path", run.delta, "--as-of-version", "1",
                        "--as-of-timestamp", "2026-01-01 00:00:00")
    assert code == 2 and "not both" in err
    code, _, err = _cli(capfd, "SELECT 1", "--delta-path", run.delta, "--as-of-timestamp",
                        "yesterday")
    assert code == 2 and "'2026-01-01 10:00:00'" in err
    for e in (err,):
        assert "Traceback" not in e and len(e.strip().splitlines()) <= 3


def test_compare_reads_and_writes_without_spark(run: QueryRun, spark: SparkSession,
                                                tmp_path: Path) -> None:
    # read: what compare's _read_delta gets from Spark, filtered to the run's query id
    spark_revs = spark.read.format("delta").load(f"{run.delta}/revisions").toPandas()
    mine = read_table(f"{run.delta}/revisions", query_id=run.query_id)
    assert len(mine) == len(spark_revs) > 0
    assert_same(spark_revs, mine, ordered=False)
    assert read_table(f"{run.delta}/revisions", query_id="other").empty
    # write: compare's comparisons table, read back by Spark with compare's schema
    schema = COMPARISONS_SCHEMA
    rows = pd.DataFrame({"run_id": ["r1", "r1"], "created_at_ms": [1, 1],
                         "mode": ["revision", "watermark"], "section": ["volume"] * 2,
                         "metric": ["revisions", "revisions"], "value": [3.0, None]})
    path = str(tmp_path / "comparisons")
    append_frame(path, rows, schema)
    append_frame(path, rows.assign(run_id="r2"), schema)
    back = spark.read.format("delta").load(path)
    assert back.schema.simpleString() == ("struct<run_id:string,created_at_ms:bigint,mode:string,"
                                          "section:string,metric:string,value:double>")
    got = pd.DataFrame(back.orderBy("run_id", "mode").toPandas())
    assert got["run_id"].tolist() == ["r1", "r1", "r2", "r2"]
    assert got["value"].isna().tolist() == [False, True, False, True]
