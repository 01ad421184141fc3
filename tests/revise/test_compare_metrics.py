"""The figures of ``revise compare`` on a small fixed input, against hand-computed values.

The input (tumbling 10 s, grace 5 s), revision mode — three windows:

    window        rev  timing  watermark  count  sum  mean  emitted_at
    a [0,10000)     0  EARLY        4000      2   10   5.0        100
                    1  LATE        11000      3   18   6.0        200
                    2  FINAL       15000      3   18   6.0        300
    b [0,10000)     0  EARLY        2000      1    4   4.0        100
                    1  FINAL       15000      1    4   4.0        300
    a [10000,20000) 0  EARLY       12000      1    2   2.0        200
                    1  EARLY       15000      2    6   3.0        300
                    2  FINAL       25000      2    6   3.0        400

Watermark mode: only the three FINAL rows (revision 0).
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from revise.compare.metrics import (
    accuracy_over_time,
    percentiles,
    revisions_per_window,
    volume,
    wallclock_latency,
    window_summary,
)
from revise.compare.whatif import grace_what_if, replay_batches
from revise.config import EngineConfig, WindowSpec

ROWS = [
    # key, start, end, rev, timing, wm, count, sum, emitted
    ("a", 0, 10000, 0, "EARLY", 4000, 2, 10.0, 100),
    ("a", 0, 10000, 1, "LATE", 11000, 3, 18.0, 200),
    ("a", 0, 10000, 2, "FINAL", 15000, 3, 18.0, 300),
    ("b", 0, 10000, 0, "EARLY", 2000, 1, 4.0, 100),
    ("b", 0, 10000, 1, "FINAL", 15000, 1, 4.0, 300),
    ("a", 10000, 20000, 0, "EARLY", 12000, 1, 2.0, 200),
    ("a", 10000, 20000, 1, "EARLY", 15000, 2, 6.0, 300),
    ("a", 10000, 20000, 2, "FINAL", 25000, 2, 6.0, 400),
]


def _frame(rows: list[tuple[object, ...]], mode: str) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["key", "window_start_ms", "window_end_ms", "revision",
                                     "timing", "watermark_ms", "count", "sum", "emitted_at_ms"])
    df["mean"] = df["sum"] / df["count"]
    df["is_final"] = df["timing"] == "FINAL"
    df["retracted"] = False
    df["mode"] = mode
    return df.sample(frac=1.0, random_state=3)  # order must not matter


@pytest.fixture()
def revision_mode() -> pd.DataFrame:
    return _frame(ROWS, "revision")


@pytest.fixture()
def watermark_mode() -> pd.DataFrame:
    finals = [(*r[:3], 0, *r[4:]) for r in ROWS if r[4] == "FINAL"]
    return _frame(finals, "watermark")


def test_window_summary_latencies(revision_mode: pd.DataFrame) -> None:
    s = window_summary(revision_mode).set_index(["key", "window_start_ms"])
    assert s.loc[("a", 0), "n_revisions"] == 3
    # a[0,10000): first at wm 4000 → -6000; value final at rev 1 (wm 11000) → 1000; FINAL 5000
    assert s.loc[("a", 0), ["first_latency_ms", "final_value_latency_ms",
                            "final_latency_ms"]].tolist() == [-6000, 1000, 5000]
    # b: rev 0 already has the final value
    assert s.loc[("b", 0), ["first_latency_ms", "final_value_latency_ms",
                            "final_latency_ms"]].tolist() == [-8000, -8000, 5000]
    assert s.loc[("a", 10000), ["first_latency_ms", "final_value_latency_ms",
                                "final_latency_ms"]].tolist() == [-8000, -5000, 5000]
    assert s.loc[("a", 0), "final_value_emitted_at_ms"] == 200
    assert s.loc[("a", 10000), "count"] == 2


def test_watermark_mode_first_is_final(watermark_mode: pd.DataFrame) -> None:
    s = window_summary(watermark_mode)
    assert (s["first_latency_ms"] == s["final_latency_ms"]).all()
    assert (s["n_revisions"] == 1).all()
    assert sorted(s["first_latency_ms"]) == [5000, 5000, 5000]


def test_percentiles_by_hand(revision_mode: pd.DataFrame) -> None:
    s = window_summary(revision_mode)
    p = percentiles(s["first_latency_ms"])  # sorted [-8000, -8000, -6000]
    assert p.n == 3
    assert p.p50 == -8000
    assert p.p95 == pytest.approx(-8000 + 0.9 * 2000)  # rank 1.9
    assert p.p99 == pytest.approx(-8000 + 0.98 * 2000)
    assert p.mean == pytest.approx(-22000 / 3)
    q = percentiles(s["final_value_latency_ms"])  # sorted [-8000, -5000, 1000]
    assert q.p50 == -5000
    assert q.p95 == pytest.approx(-5000 + 0.9 * 6000)
    assert percentiles([]).p50 is None


def test_revisions_per_window_and_volume(revision_mode: pd.DataFrame) -> None:
    assert revisions_per_window(window_summary(revision_mode)) == {2: 1, 3: 2}
    v = volume(revision_mode, input_records=10, changelog_bytes=800)
    assert (v.revisions, v.windows) == (8, 3)
    assert v.revisions_per_input == pytest.approx(0.8)
    assert v.bytes_per_input == pytest.approx(80.0)
    assert v.revisions_per_window == pytest.approx(8 / 3)
    assert v.to_dict()["bytes_per_input"] == pytest.approx(80.0)


def test_accuracy_over_time_revision_mode(revision_mode: pd.DataFrame) -> None:
    acc = accuracy_over_time(revision_mode, [-8000, 0, 1000]).set_index("since_end_ms")
    # d=-8000: a[0,10k) no answer (1), b exact (0), a[10k,20k) count 1 of 2 (0.5)
    assert acc.loc[-8000, "rel_err_count"] == pytest.approx((1 + 0 + 0.5) / 3)
    assert acc.loc[-8000, "rel_err_sum"] == pytest.approx((1 + 0 + 4 / 6) / 3)
    assert acc.loc[-8000, "rel_err_mean"] == pytest.approx((1 + 0 + 1 / 3) / 3)
    assert acc.loc[-8000, "share_exact"] == pytest.approx(1 / 3)
    assert acc.loc[-8000, "share_answered"] == pytest.approx(2 / 3)
    # d=0: a[0,10k) rev 0 (count 2 of 3), the others exact
    assert acc.loc[0, "rel_err_count"] == pytest.approx((1 / 3) / 3)
    assert acc.loc[0, "rel_err_sum"] == pytest.approx((8 / 18) / 3)
    assert acc.loc[0, "share_exact"] == pytest.approx(2 / 3)
    assert acc.loc[0, "share_answered"] == 1.0
    # d=1000: a[0,10k) rev 1 is the final value
    assert acc.loc[1000, "rel_err_count"] == 0.0
    assert acc.loc[1000, "share_exact"] == 1.0


def test_accuracy_over_time_watermark_mode(watermark_mode: pd.DataFrame) -> None:
    acc = accuracy_over_time(watermark_mode, [0, 4999, 5000]).set_index("since_end_ms")
    assert acc.loc[0, "rel_err_count"] == 1.0  # nothing reported before the FINAL
    assert acc.loc[4999, "share_answered"] == 0.0
    assert acc.loc[5000, "share_exact"] == 1.0
    assert acc.loc[5000, "rel_err_mean"] == 0.0


def test_accuracy_ignores_aggregates_not_requested(revision_mode: pd.DataFrame) -> None:
    only_count = revision_mode.assign(sum=float("nan"), mean=float("nan"))
    acc = accuracy_over_time(only_count, [0]).iloc[0]
    assert math.isnan(acc["rel_err_sum"])
    assert acc["share_exact"] == pytest.approx(2 / 3)  # decided by count alone


def test_wallclock_latency_excludes_too_late_records(revision_mode: pd.DataFrame) -> None:
    arrivals = pd.DataFrame(
        [("a", 1000, 0, 0, 50), ("a", 2000, 0, 1, 60), ("a", 3000, 0, 2, 150),
         ("b", 5000, 1, 0, 70), ("a", 12000, 0, 3, 180), ("a", 13000, 0, 4, 250),
         ("a", 9000, 0, 5, 350)],  # too late for a[0,10000)
        columns=["key", "ts_ms", "partition", "offset", "arrival_ms"])
    late = pd.DataFrame([(0, 5, 0, 10000)],
                        columns=["partition", "offset", "window_start_ms", "window_end_ms"])
    w = wallclock_latency(window_summary(revision_mode), arrivals, late)
    w = w.set_index(["key", "window_start_ms"])
    assert w.loc[("a", 0), ["first_wall_ms", "final_wall_ms"]].tolist() == [100 - 50, 200 - 150]
    assert w.loc[("b", 0), ["first_wall_ms", "final_wall_ms"]].tolist() == [30, 30]
    assert w.loc[("a", 10000), ["first_wall_ms", "final_wall_ms"]].tolist() == [20, 50]


def test_wallclock_session_span() -> None:
    summary = pd.DataFrame([("a", 1000, 4000, 500, 600)],
                           columns=["key", "window_start_ms", "window_end_ms",
                                    "first_emitted_at_ms", "final_value_emitted_at_ms"])
    arrivals = pd.DataFrame([("a", 1000, 0, 0, 100), ("a", 2000, 0, 1, 200),
                             ("a", 3500, 0, 2, 300)],  # span [3500, 5500) is outside
                            columns=["key", "ts_ms", "partition", "offset", "arrival_ms"])
    w = wallclock_latency(summary, arrivals, arrivals.iloc[0:0], record_span_ms=2000)
    assert w.iloc[0][["first_wall_ms", "final_wall_ms"]].tolist() == [400, 400]


def test_grace_what_if_by_hand() -> None:
    cfg = EngineConfig(window=WindowSpec.parse("tumbling:10s"), grace_ms=5000)
    records = pd.DataFrame({"key": ["a", "a", "a"], "ts_ms": [5000, 15000, 9000],
                            "value": [1.0, 2.0, 3.0]})
    reference = pd.DataFrame([("a", 0, 10000, 1), ("a", 10000, 20000, 1)],
                             columns=["key", "window_start_ms", "window_end_ms", "count"])
    x1, x2, x4 = grace_what_if(cfg, replay_batches(records, batch_size=1), factors=(1, 2, 4),
                               reference_finals=reference)
    # grace 5s: t=9000 arrives at watermark 15000 ≥ 10000 + 5000 → too late; [0,10k) FINAL
    # at wm 15000 (+5000), [10k,20k) closed at the end with wm 15000 (-5000)
    assert (x1.grace_ms, x1.too_late, x1.windows, x1.finals_changed) == (5000, 1, 2, 0)
    assert x1.final_latency_p50_ms == 0.0
    # grace 10s and 20s: accepted, [0,10000) ends with count 2
    assert (x2.grace_ms, x2.too_late, x2.finals_changed) == (10000, 0, 1)
    assert (x4.grace_ms, x4.too_late, x4.finals_changed) == (20000, 0, 1)


def test_grace_what_if_follows_the_real_batch_split() -> None:
    cfg = EngineConfig(window=WindowSpec.parse("tumbling:10s"), grace_ms=5000)
    records = pd.DataFrame({"key": ["a", "a", "a"], "ts_ms": [5000, 15000, 9000],
                            "value": [1.0, 2.0, 3.0], "partition": [0, 0, 0],
                            "offset": [0, 1, 2]})
    # one batch: every record is judged at watermark 0 → none too late
    (one,) = grace_what_if(cfg, replay_batches(records.assign(batch=[4, 4, 4])), factors=(1,))
    assert one.too_late == 0
    # the third record in a later batch sees watermark 15000 → too late
    (two,) = grace_what_if(cfg, replay_batches(records.assign(batch=[4, 4, 7])), factors=(1,))
    assert two.too_late == 1


def test_first_batch_watermark_is_anchored(revision_mode: pd.DataFrame) -> None:
    from revise.compare.metrics import anchor_initial_watermark

    early = revision_mode.copy()
    early.loc[early["watermark_ms"] == 2000, "watermark_ms"] = 0  # b's rev 0 in batch 0
    s = window_summary(anchor_initial_watermark(early, 1000)).set_index("key")
    assert s.loc["b", "first_latency_ms"] == 1000 - 10000


def test_accuracy_on_the_first_requested_aggregate_of_the_fn_field_form(
        revision_mode: pd.DataFrame) -> None:
    from revise.aggspec import AggList
    from revise.compare.metrics import ACCURACY_FIELDS, accuracy_fields

    assert accuracy_fields(AggList.parse("count,sum,max")) == ACCURACY_FIELDS
    assert accuracy_fields(AggList.parse("count,p99(lat),distinct(u)")) == ("count", "p99_lat")
    assert accuracy_fields(AggList.parse("distinct(u),p50(lat)")) == ("distinct_u",)
    # p99 of the worked example's windows: the sum column stands in for it.
    p99 = revision_mode.drop(columns=["count", "mean"]).rename(columns={"sum": "p99_lat"})
    acc = accuracy_over_time(p99, [-8000, 0], ("p99_lat",)).set_index("since_end_ms")
    assert list(acc.columns) == ["rel_err_p99_lat", "share_exact", "share_answered"]
    assert acc.loc[-8000, "rel_err_p99_lat"] == pytest.approx((1 + 0 + 4 / 6) / 3)
    assert acc.loc[0, "share_exact"] == pytest.approx(2 / 3)
    summary = window_summary(p99, ("p99_lat",)).set_index(["key", "window_start_ms"])
    assert summary.loc[("a", 0), "final_value_latency_ms"] == 1000  # rev 1 has the final 18
    assert summary.loc[("a", 0), "p99_lat"] == 18.0


def test_keys_that_differ_after_a_nul_are_separate_windows() -> None:
    """Regression: pandas grouped object strings up to their first NUL ("b" → "a\\0b" was "a")."""
    rows = [("a\x00b", *r[1:]) if r[0] == "b" else r for r in ROWS]
    s = window_summary(_frame(rows, "revision")).set_index(["key", "window_start_ms"])
    assert s["n_revisions"].to_dict() == {("a", 0): 3, ("a\x00b", 0): 2, ("a", 10000): 3}
    acc = accuracy_over_time(_frame(rows, "revision"), [0]).iloc[0]
    # at each window's end: a[0,10000) rev 0 (count 2 of 3), a\0b rev 0 and a[10000,20000)
    # rev 1 already final
    assert (acc["share_answered"], acc["share_exact"]) == (1.0, pytest.approx(2 / 3))
