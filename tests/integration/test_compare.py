"""``revise compare`` end to end on a small generated input (real Kafka, Spark, Delta).

Runs the CLI in-process (reusing the session's Spark) and checks what a user gets: the
side-by-side table on stdout, ``comparison.json`` whose figures agree with the runs' Delta
tables and with each other, three valid PNG images, and the ``comparisons`` Delta table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from revise.cli import main

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.delta, pytest.mark.slow]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def compared(
    kafka_bootstrap: str, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, Any], str]:
    out = tmp_path_factory.mktemp("compare") / "out"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main([
            "compare", "--bootstrap-servers", kafka_bootstrap,
            "--events", "300", "--keys", "3", "--seed", "5", "--disorder", "500ms",
            "--late-fraction", "0.12", "--late-by", "1s", "--bad-fraction", "0.02",
            "--window", "tumbling:1s", "--grace", "500ms", "--max-records-per-batch", "150",
            "--shards", "2", "--timeout", "4m", "--output", str(out),
            "--sweep", "--sweep-grace", "1,4", "--sweep-delay", "0ms,200ms",
            "--sweep-min-change", "0.25", "--sweep-every", "1s", "--target-accuracy", "0.5",
        ])
    assert code == 0
    doc = json.loads((out / "comparison.json").read_text())
    return out, doc, buf.getvalue()


def test_table_on_stdout(compared: tuple[Path, dict[str, Any], str]) -> None:
    _, doc, stdout = compared
    header = next(line for line in stdout.splitlines() if "revision" in line
                  and "watermark" in line)
    assert header.split() == ["revision", "watermark"]
    for label in ("windows closed", "revisions per window", "first result, event time",
                  "final value, event time", "too-late records", "windows exact at window end",
                  "what a larger grace would have kept"):
        assert label in stdout
    assert str(doc["modes"]["revision"]["volume"]["revisions"]) in stdout


def test_figures_agree_with_the_delta_tables(
    compared: tuple[Path, dict[str, Any], str], spark: SparkSession
) -> None:
    _, doc, _ = compared
    rev, wm = doc["modes"]["revision"], doc["modes"]["watermark"]
    for mode, m in (("revision", rev), ("watermark", wm)):
        path = doc["settings"]["delta_paths"][mode]
        n = spark.read.format("delta").load(f"{path}/revisions").count()
        finals = spark.read.format("delta").load(f"{path}/revisions").where("is_final").count()
        late = spark.read.format("delta").load(f"{path}/late").count()
        assert m["volume"]["revisions"] == n
        assert m["volume"]["windows"] == finals
        assert m["too_late_records"] == late
        assert m["volume"]["input_records"] == 300
        assert m["dead_letters"] > 0
        assert m["volume"]["bytes_per_input"] > 0
    # same input, same acceptance: same windows and too-late records in both modes
    assert rev["volume"]["windows"] == wm["volume"]["windows"] > 0
    assert rev["too_late_records"] == wm["too_late_records"] > 0
    # watermark mode: one revision per window, first result = final value = FINAL
    assert wm["revisions_per_window"] == {"1": wm["volume"]["windows"]}
    lat = wm["latency_event_ms"]
    assert lat["first_result"] == lat["final_value"] == lat["final_revision"]
    # revision mode answers earlier, never later, and writes more
    rl = rev["latency_event_ms"]
    assert rl["first_result"]["p50"] <= lat["first_result"]["p50"]
    assert rl["first_result"]["mean"] < lat["first_result"]["mean"]
    per_window = [w for w in doc["windows"] if w["mode"] == "revision"]
    assert all(w["first_latency_ms"] <= w["final_value_latency_ms"] <= w["final_latency_ms"]
               for w in per_window)
    assert rl["final_value"]["p95"] <= rl["final_revision"]["p95"]
    assert rev["volume"]["revisions"] > wm["volume"]["revisions"]
    assert sum(int(k) * v for k, v in rev["revisions_per_window"].items()) == \
        rev["volume"]["revisions"]
    # accuracy: exact once the FINAL is out; revision mode never behind watermark mode
    acc_r, acc_w = doc["accuracy_over_time"]["revision"], doc["accuracy_over_time"]["watermark"]
    assert acc_r[-1]["share_exact"] == acc_w[-1]["share_exact"] == 1.0
    assert all(r["share_exact"] >= w["share_exact"] for r, w in zip(acc_r, acc_w, strict=True))
    # the offline what-if at grace x1 reproduces the run; more grace keeps more records
    g = {row["factor"]: row for row in doc["grace_what_if"]}
    assert g[1.0]["too_late"] == rev["too_late_records"]
    assert g[1.0]["finals_changed"] == 0
    assert g[4.0]["too_late"] <= g[2.0]["too_late"] <= g[1.0]["too_late"]
    # wall clock is not measured without --rate
    assert rev["latency_wall_ms"]["first_result"]["n"] == 0
    assert len(doc["windows"]) == 2 * rev["volume"]["windows"]


def test_plots_are_valid_pngs(compared: tuple[Path, dict[str, Any], str]) -> None:
    import matplotlib.image as mpimg

    out, doc, _ = compared
    for name in ("latency_cdf.png", "accuracy_over_time.png", "revisions_per_window.png"):
        path = out / name
        assert path.read_bytes()[:8] == PNG_MAGIC
        img = mpimg.imread(path)
        assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
        assert img.std() > 0.01  # not a blank canvas
        assert str(path) in doc["files"]["plots"]


def test_sweep_replays_the_run_and_recommends(
    compared: tuple[Path, dict[str, Any], str], spark: SparkSession
) -> None:
    out, doc, stdout = compared
    sweep = {row["label"]: row for row in doc["sweep"]}
    # 2 graces x 2 delays x (watermark, every change, min-change 0.25, every 1s)
    assert len(sweep) == 16
    rev, wm = doc["modes"]["revision"], doc["modes"]["watermark"]
    # the run's own settings, replayed offline on its micro-batches, reproduce it
    own_r = sweep["revision grace=500ms delay=0ms"]
    own_w = sweep["watermark grace=500ms delay=0ms"]
    assert own_r["windows"] == own_w["windows"] == rev["volume"]["windows"]
    assert own_r["too_late"] == own_w["too_late"] == rev["too_late_records"]
    assert own_r["revisions_per_window"] == pytest.approx(
        rev["volume"]["revisions_per_window"])
    assert own_r["first_latency_p50_ms"] == rev["latency_event_ms"]["first_result"]["p50"]
    assert own_w["first_latency_p50_ms"] == wm["latency_event_ms"]["first_result"]["p50"]
    policy = sweep["revision grace=500ms delay=0ms min-change=0.25"]
    paced = sweep["revision grace=500ms delay=0ms every=1s"]
    # a policy never emits more (strictly fewer on larger inputs: tests/revise/test_compare_sweep)
    assert policy["revisions_per_window"] <= own_r["revisions_per_window"]
    assert paced["revisions_per_window"] <= own_r["revisions_per_window"]
    assert policy["too_late"] == own_r["too_late"]
    # frontier and recommendation: the fastest frontier setting reaching 0.5, or, when none
    # does, a line that says so and names the most accurate
    assert any(r["on_frontier"] for r in sweep.values())
    assert doc["recommendation"] in stdout
    reach = [r for r in sweep.values() if r["on_frontier"] and r["accuracy"] >= 0.5]
    if reach:
        best = min(reach, key=lambda r: (r["first_latency_p50_ms"], r["revisions_per_window"]))
        assert doc["recommendation"].startswith(f"for accuracy >= 0.5: {best['label']} (")
    else:
        best = max(sweep.values(), key=lambda r: r["accuracy"])
        assert doc["recommendation"].startswith("no setting reaches accuracy 0.5; the most "
                                                f"accurate is {best['label']} (")
    chosen = [best]
    png = out / "sweep.png"
    assert png.read_bytes()[:8] == PNG_MAGIC and str(png) in doc["files"]["plots"]
    # its rows in the comparisons table
    rows = spark.read.format("delta").load(doc["files"]["comparisons_table"]).toPandas()
    mine = rows[(rows["run_id"] == doc["run_id"]) & (rows["section"] == "sweep")]
    assert len(mine) == 16 * 6
    got = dict(zip(mine["metric"], mine["value"], strict=True))
    assert got["revision grace=500ms delay=0ms: accuracy"] == pytest.approx(own_r["accuracy"])
    assert got[f"{chosen[0]['label']}: recommended"] == 1.0


def test_comparisons_delta_table(
    compared: tuple[Path, dict[str, Any], str], spark: SparkSession
) -> None:
    _, doc, _ = compared
    table = spark.read.format("delta").load(doc["files"]["comparisons_table"])
    # written by delta-rs from the compare process; Spark reads it with the declared types
    assert [(f.name, f.dataType.simpleString()) for f in table.schema] == [
        ("run_id", "string"), ("created_at_ms", "bigint"), ("mode", "string"),
        ("section", "string"), ("metric", "string"), ("value", "double")]
    rows = table.toPandas()
    mine = rows[rows["run_id"] == doc["run_id"]]
    assert set(mine["mode"]) == {"revision", "watermark", "both"}
    got = {(m, s, k): v for m, s, k, v
           in mine[["mode", "section", "metric", "value"]].itertuples(index=False)}
    assert len(got) == len(mine)  # one row per (mode, section, metric) of a run
    assert got[("revision", "volume", "revisions")] == \
        doc["modes"]["revision"]["volume"]["revisions"]
    assert got[("watermark", "latency_event_ms", "first_result_p50")] == \
        doc["modes"]["watermark"]["latency_event_ms"]["first_result"]["p50"]
    assert got[("both", "grace_what_if", "too_late_at_grace_x1")] == \
        doc["modes"]["revision"]["too_late_records"]


def test_compare_reads_nested_fields_of_an_existing_topic(
    kafka_bootstrap: str, new_topic: Any, spark: SparkSession, tmp_path: Path
) -> None:
    """Issue 13 through compare: dotted paths, ISO-8601 time and FN(FIELD) on an input topic.

    Both modes must accept exactly the records the job's parser accepts (a zone-less time is
    a dead letter), and every window's first-result latency must be computed, which needs each
    accepted record's key and event time read with the same rules as the job.
    """
    import datetime as dt

    from confluent_kafka import Producer

    topic = new_topic("cmp-nested", partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    base = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    windows: set[tuple[str, int]] = set()
    for i in range(240):
        # event time advances 25 ms per record, with every 15th record 1.2 s behind
        t = base + dt.timedelta(milliseconds=25 * i - (1_200 if i % 15 == 14 else 0))
        user = f"u{i % 4}"
        at = t.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        if i % 40 == 39:
            at = at[:-1]  # no zone: a dead letter
        else:
            windows.add((user, int(t.timestamp() * 1000) // 1000))
        payload = {"ev": {"user": user, "at": at, "ms": float(i % 17)}}
        producer.produce(topic, json.dumps(payload).encode())
    producer.flush(30)

    out = tmp_path / "out"
    code = main([
        "compare", "--bootstrap-servers", kafka_bootstrap, "--input-topic", topic,
        "--key-field", "ev.user", "--ts-field", "ev.at", "--ts-format", "iso8601",
        "--aggs", "count,p99(ev.ms)", "--window", "tumbling:1s", "--grace", "2s",
        "--max-records-per-batch", "80", "--shards", "2", "--timeout", "4m",
        "--output", str(out),
    ])
    assert code == 0
    doc = json.loads((out / "comparison.json").read_text())
    assert doc["settings"]["accuracy_fields"] == ["count", "p99_ev_ms"]
    for mode in ("revision", "watermark"):
        m = doc["modes"][mode]
        assert m["volume"]["input_records"] == 240
        assert m["dead_letters"] == 6
        assert m["too_late_records"] == 0  # grace 2 s covers the 1.2 s stragglers
        assert m["volume"]["windows"] == len(windows)
        # every window's first record was found among the parsed arrivals
        assert m["latency_event_ms"]["first_result"]["n"] == len(windows)
        finals = spark.read.format("delta").load(
            f"{doc['settings']['delta_paths'][mode]}/revisions").where("is_final")
        assert {r["key"] for r in finals.select("key").collect()} == {"u0", "u1", "u2", "u3"}
        assert "p99_ev_ms" in finals.columns
