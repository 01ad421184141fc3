"""What was known when (``--as-known-at`` / ``--as-of-watermark``) over hand-built tables.

The tables are real Delta tables written by the job's own writer (``sinks.delta_tables``)
under ``tmp_path``: four micro-batches of revisions (one ``emitted_at_ms`` and watermark per
batch) with a session whose bounds are retracted, windows that turn final, too-late records
and dead letters. Each point in time must show exactly the revisions known then; the
in-process engine answers every case, Spark the same cases (marked ``spark``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from revise.cli import main
from revise.errors import ConfigError
from revise.query.known import known_point
from revise.query.local import run_query_local
from revise.records import (
    DEAD_LETTER_SCHEMA,
    LATE_SCHEMA,
    REVISION_SCHEMA,
    DeadLetter,
    LateRecord,
    Revision,
)
from sinks.delta_tables import DeltaTables

pytestmark = pytest.mark.delta

_BASE = Revision(
    query_id="q", mode="revision", key="a", window_start_ms=0, window_end_ms=1_000, revision=0,
    timing="EARLY", is_final=False, retracted=False, count=1, sum=1.0, min=1.0, max=1.0,
    mean=1.0, prev_count=None, prev_sum=None, prev_min=None, prev_max=None, prev_mean=None,
    n_late=0, max_lateness_ms=0, watermark_ms=0, batch_id=0, emitted_at_ms=0,
    completeness=0.5, est_count=2.0, est_sum=2.0,
)
# batch → (emitted_at_ms, watermark_ms)
_BATCHES = {0: (1_000, 100), 1: (2_000, 900), 2: (3_000, 1_500), 3: (4_000, 2_500)}


def _rev(batch: int, key: str, start: int, end: int, rev: int, *, timing: str = "EARLY",
         retracted: bool = False, count: int = 1) -> Revision:
    emitted, wm = _BATCHES[batch]
    completeness = 1.0 if timing == "FINAL" else 0.5
    return replace(_BASE, key=key, window_start_ms=start, window_end_ms=end, revision=rev,
                   timing=timing, is_final=timing == "FINAL", retracted=retracted, count=count,
                   sum=float(count), watermark_ms=wm, batch_id=batch, emitted_at_ms=emitted,
                   completeness=completeness, est_count=count / completeness,
                   est_sum=count / completeness)


def _late(batch: int, ts: int) -> LateRecord:
    wm = _BATCHES[batch][1]
    return LateRecord(key="a", ts_ms=ts, value=1.0, window_start_ms=0, window_end_ms=1_000,
                      watermark_ms=wm, lateness_ms=wm - ts, reason="too late: window closed",
                      batch_id=batch, topic="in", partition=0, offset=ts)


def _dead(batch: int) -> DeadLetter:
    return DeadLetter(raw_value="{oops", reason="invalid JSON", topic="in", partition=0,
                      offset=100 + batch, batch_id=batch)


REVISIONS = {
    0: [_rev(0, "a", 0, 1_000, 0), _rev(0, "s", 0, 300, 0)],
    # session s grows: [0, 300) is retracted, the lineage goes on as [0, 600)
    1: [_rev(1, "a", 0, 1_000, 1, count=2), _rev(1, "s", 0, 300, 1, retracted=True),
        _rev(1, "s", 0, 600, 2, count=2), _rev(1, "b", 1_000, 2_000, 0)],
    2: [_rev(2, "a", 0, 1_000, 2, timing="FINAL", count=2)],
    3: [_rev(3, "b", 1_000, 2_000, 1, timing="FINAL"),
        _rev(3, "s", 0, 600, 3, timing="FINAL", count=2)],
}
LATE = {1: [_late(1, 50)], 2: [_late(2, 60), _late(2, 70)]}
DEAD = {2: [_dead(2)]}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("known") / "delta")
    tables = DeltaTables(path).ensure()
    for batch, revs in REVISIONS.items():
        tables.write_batch(
            "q", batch, pa.Table.from_pylist([r.to_row() for r in revs], REVISION_SCHEMA),
            pa.Table.from_pylist([r.to_row() for r in LATE.get(batch, [])], LATE_SCHEMA),
            pa.Table.from_pylist([d.to_row() for d in DEAD.get(batch, [])], DEAD_LETTER_SCHEMA))
    tables.flush()
    return path


Query = Callable[..., pd.DataFrame]


@pytest.fixture(params=["datafusion", pytest.param("spark", marks=pytest.mark.spark)])
def query(request: pytest.FixtureRequest, root: str) -> Query:
    """``query(sql, **point)`` on one engine over the hand-built tables."""
    if request.param == "spark":
        from revise.query import run_query

        spark = request.getfixturevalue("spark")
        return lambda sql, **point: run_query(sql, root, spark=spark, **point)
    return lambda sql, **point: run_query_local(sql, root, **point)


def _windows(query: Query, view: str, **point: Any) -> set[tuple[str, int, int, int]]:
    frame = query(f"SELECT key, window_start_ms, window_end_ms, revision FROM {view}", **point)
    return {(str(k), int(s), int(e), int(r)) for k, s, e, r in frame.itertuples(index=False)}


# known_at (emission ms) → (final_windows, provisional_windows, revisions known, late, dead)
EXPECTED: dict[int, tuple[set[tuple[str, int, int, int]], set[tuple[str, int, int, int]],
                          int, int, int]] = {
    999: (set(), set(), 0, 0, 0),  # nothing emitted yet: no window known
    1_000: (set(), {("a", 0, 1_000, 0), ("s", 0, 300, 0)}, 2, 0, 0),
    # s's [0, 300) is retracted by then; b is new; a is still provisional
    2_999: (set(), {("a", 0, 1_000, 1), ("s", 0, 600, 2), ("b", 1_000, 2_000, 0)}, 6, 1, 0),
    # a final at 3000, provisional at 2999
    3_000: ({("a", 0, 1_000, 2)}, {("s", 0, 600, 2), ("b", 1_000, 2_000, 0)}, 7, 3, 1),
    10_000: ({("a", 0, 1_000, 2), ("s", 0, 600, 3), ("b", 1_000, 2_000, 1)}, set(), 9, 3, 1),
}
# the same moments by watermark
BY_WATERMARK = {99: 999, 100: 1_000, 1_499: 2_999, 1_500: 3_000, 2_500: 10_000}


def _answer(query: Query, **point: Any) -> tuple[Any, ...]:
    counts = query("SELECT (SELECT count(*) FROM revision_history) AS r, "
                   "(SELECT count(*) FROM late_records) AS l, "
                   "(SELECT count(*) FROM dead_letters) AS d", **point)
    r, late, dead = (int(x) for x in counts.iloc[0])
    return (_windows(query, "final_windows", **point),
            _windows(query, "provisional_windows", **point), r, late, dead)


@pytest.mark.parametrize("at", sorted(EXPECTED))
def test_known_at_emission_time(query: Query, at: int) -> None:
    assert _answer(query, known_at=at) == EXPECTED[at]
    # latest is the union of the two views; the raw table names show the same moment
    both = EXPECTED[at][0] | EXPECTED[at][1]
    assert _windows(query, "latest", known_at=at) == both
    assert len(query("SELECT * FROM revisions", known_at=at)) == EXPECTED[at][2]


@pytest.mark.parametrize("wm", sorted(BY_WATERMARK))
def test_as_of_watermark(query: Query, wm: int) -> None:
    expected = EXPECTED[BY_WATERMARK[wm]]
    assert _answer(query, watermark=wm) == expected
    assert _answer(query, watermark=str(wm))[:2] == expected[:2]  # integer text, as the CLI


def test_latest_at_the_end_is_the_latest_table_with_every_column(query: Query,
                                                                 root: str) -> None:
    now = run_query_local("SELECT * FROM latest", root)
    known = query("SELECT * FROM latest", known_at=10**13)
    assert list(known.columns) == list(now.columns) == REVISION_SCHEMA.names
    cols = ["key", "window_start_ms", "window_end_ms"]
    pd.testing.assert_frame_equal(known.sort_values(cols).reset_index(drop=True),
                                  now.sort_values(cols).reset_index(drop=True))
    one = query("SELECT * FROM provisional_windows WHERE key = 'a'", known_at=2_000)
    assert one[["revision", "count", "emitted_at_ms"]].values.tolist() == [[1, 2, 2_000]]


def test_known_at_takes_times_like_as_of_timestamp() -> None:
    epoch = "1970-01-01"
    assert known_point(known_at=f"{epoch} 00:00:02.999") == known_point(known_at=2_999)
    assert known_point(known_at=f"{epoch}T01:00:03+01:00") == known_point(known_at="3000")
    assert known_point(watermark="-5") is not None and known_point() is None
    with pytest.raises(ConfigError, match="'2026-01-01 10:00:00'"):
        known_point(known_at="yesterday")
    with pytest.raises(ConfigError, match="epoch ms"):
        known_point(watermark="10s")


def _cli(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capfd.readouterr()
    code = main(["query", *args])
    out, err = capfd.readouterr()
    return code, out, err


def test_cli_points_and_their_exclusions(root: str, capfd: pytest.CaptureFixture[str]) -> None:
    sql = "SELECT key, revision FROM final_windows ORDER BY key"
    code, out, _ = _cli(capfd, sql, "--delta-path", root, "--as-known-at",
                        "1970-01-01 00:00:03", "--format", "csv")
    assert (code, out.split()) == (0, ["key,revision", "a,2"])
    code, out, _ = _cli(capfd, sql, "--delta-path", root, "--as-of-watermark", "2500",
                        "--format", "csv")
    assert (code, out.split()) == (0, ["key,revision", "a,2", "b,1", "s,3"])
    pairs = [("--as-known-at", "3000"), ("--as-of-watermark", "1500"),
             ("--as-of-version", "1"), ("--as-of-timestamp", "2026-01-01 00:00:00")]
    for i, first in enumerate(pairs):
        for second in pairs[i + 1:]:
            code, out, err = _cli(capfd, sql, "--delta-path", root, *first, *second)
            assert code == 2 and out == "", (first, second, err)
            assert first[0] in err and second[0] in err and "not both" in err
            assert "Traceback" not in err and len(err.strip().splitlines()) <= 3
    code, _, err = _cli(capfd, sql, "--delta-path", root, "--as-of-watermark", "soon")
    assert code == 2 and "--as-of-watermark" in err


@pytest.mark.parametrize("wm", [100, 900, 1_500])
def test_read_sql_answers_as_the_query_it_wraps(root: str, wm: int) -> None:
    """``revise.read_sql``'s ``as_of_watermark`` is ``--as-of-watermark``: the same rows."""
    import revise

    sql = "SELECT key, window_start_ms, revision FROM latest ORDER BY key, window_start_ms"
    got = revise.read_sql(sql, root, as_of_watermark=wm)
    assert got.equals(run_query_local(sql, root, watermark=wm))
    assert len(got) == len(_windows(lambda s, **p: run_query_local(s, root, **p), "latest",
                                    watermark=wm))
    with pytest.raises(ConfigError, match="at most one|only one|one of"):
        revise.read_sql(sql, root, as_of_watermark=wm, as_of_version=0)
