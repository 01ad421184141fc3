"""``revise query`` and the views, against a real run's Delta tables (real Kafka, Spark, Delta).

One small bounded run (revision mode, late and bad records) feeds every test of the module.
The CLI runs in-process (``revise.cli.main``) so it reuses the session's Spark; ``capfd``
sees the file descriptors, so a JVM stack trace would show up there too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from integration_support import QueryRun

from revise.cli import main

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.delta]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def run(query_run: QueryRun) -> QueryRun:
    """The shared run (tests/integration/conftest.py)."""
    return query_run


def _query(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capfd.readouterr()
    code = main(["query", *args])
    out, err = capfd.readouterr()
    return code, out, err


def test_views_answer_in_every_format(run: QueryRun, capfd: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _query(capfd, "SELECT count(*) AS n FROM revision_history",
                          "--delta-path", run.delta)
    assert code == 0
    assert out.split() == ["n", str(run.revisions)]
    code, out, _ = _query(capfd, "SELECT count(*) AS n FROM late_records", "--delta-path",
                          run.delta, "--format", "csv")
    assert (code, out.strip().splitlines()) == (0, ["n", str(run.late)])
    code, out, _ = _query(
        capfd, "SELECT (SELECT count(*) FROM final_windows) AS f, "
        "(SELECT count(*) FROM provisional_windows) AS p, "
        "(SELECT count(*) FROM dead_letters) AS d", "--delta-path", run.delta, "--format", "json")
    assert code == 0
    import json

    row = json.loads(out)
    assert row["f"] > 0 and row["p"] == 0 and row["d"] > 0  # a bounded run closes everything
    # completeness and the estimated finals (SPEC §4) reach the views, on either engine
    for engine in ((), ("--engine", "spark")):
        code, out, _ = _query(
            capfd, "SELECT (SELECT count(*) FROM final_windows WHERE completeness = 1.0 "
            "AND est_count = count AND est_sum = sum) AS f, "
            "(SELECT count(*) FROM revision_history WHERE timing = 'EARLY' AND completeness "
            "> 0 AND completeness < 1 AND abs(est_count * completeness - count) < 1e-6) AS e, "
            "(SELECT count(*) FROM revision_history WHERE completeness < 0 OR completeness > 1)"
            " AS bad", "--delta-path", run.delta, "--format", "json", *engine)
        got = json.loads(out)
        assert code == 0 and got["f"] == row["f"] and got["e"] > 0 and got["bad"] == 0, engine


def test_bad_sql_and_unknown_view_exit_2_naming_the_views(
    run: QueryRun, capfd: pytest.CaptureFixture[str]
) -> None:
    for sql in ("SELEC nonsense", "SELECT * FROM no_such_view"):
        code, out, err = _query(capfd, sql, "--delta-path", run.delta)
        assert code == 2, err
        assert "final_windows" in err and "dead_letters" in err
        assert "Traceback" not in err and not re.search(r"^\s+at (org|java|scala)\.", err, re.M)
        assert len(err.strip().splitlines()) <= 3
        assert out == ""


def test_missing_delta_path_exit_2_with_hint(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _query(capfd, "SELECT 1", "--delta-path", str(tmp_path / "nope"))
    assert code == 2
    assert "does not exist" in err and "revise run" in err
    (tmp_path / "empty").mkdir()
    code, _, err = _query(capfd, "SELECT 1", "--delta-path", str(tmp_path / "empty"))
    assert code == 2 and "no revise Delta tables" in err


def test_time_travel_and_report_at_time_t(
    run: QueryRun, spark: SparkSession, capfd: pytest.CaptureFixture[str]
) -> None:
    # version 0 of latest is its creation: nothing reported yet
    code, out, _ = _query(capfd, "SELECT count(*) AS n FROM final_windows", "--delta-path",
                          run.delta, "--as-of-version", "0", "--format", "csv")
    assert (code, out.split()) == (0, ["n", "0"])
    code, _, err = _query(capfd, "SELECT 1", "--delta-path", run.delta, "--as-of-version",
                          "100000")
    assert code == 2 and "version 100000" in err
    # what did we report for a window with several revisions at the time of its revision 0?
    w = spark.sql(
        f"SELECT key, window_start_ms, min(emitted_at_ms) AS t FROM delta.`{run.delta}/revisions` "
        "GROUP BY key, window_start_ms HAVING count(DISTINCT emitted_at_ms) > 1 "
        "ORDER BY key, window_start_ms LIMIT 1").first()
    assert w is not None
    code, out, _ = _query(
        capfd, "SELECT revision FROM revision_history WHERE key = '" + w["key"] + "' AND "
        f"window_start_ms = {w['window_start_ms']} AND emitted_at_ms <= {w['t']} "
        "ORDER BY revision DESC LIMIT 1", "--delta-path", run.delta, "--format", "csv")
    assert (code, out.split()) == (0, ["revision", "0"])


def test_querying_doc_deltalake_snippet_runs(run: QueryRun, spark: SparkSession,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "docs" / "QUERYING.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    snippet = next(b for b in blocks if "from deltalake import DeltaTable" in b)
    monkeypatch.setenv("REVISE_DELTA_PATH", run.delta)
    ns: dict[str, object] = {}
    exec(compile(snippet, "docs/QUERYING.md", "exec"), ns)
    history = ns["history"]
    assert len(history) == run.revisions  # type: ignore[arg-type]
    assert len(ns["late_records"]) == run.late  # type: ignore[arg-type]
    spark_finals = spark.sql(
        f"SELECT count(*) FROM delta.`{run.delta}/latest` WHERE is_final").first()[0]
    assert len(ns["final_windows"]) == spark_finals  # type: ignore[arg-type]
    assert len(ns["latest_v0"]) == 0  # type: ignore[arg-type]
    assert ns["reported"]["revision"].tolist() == [0]  # type: ignore[index]
