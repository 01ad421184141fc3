"""What the end-to-end tests share: the job's setup, the input as Kafka holds it, the job's real
micro-batch split (from Spark's offset log), the batch oracle over that split, and one checker of
every SPEC §4–6 promise about the outputs a ``read_committed`` consumer and a Delta reader see.

The oracle is ``tests/revise/oracle.py`` (plain Python loops over SPEC §3–4), fed with the input
records split exactly as the job split them: Spark's offset log (``<checkpoint>/spark/offsets/N``)
holds each micro-batch's Kafka end offsets and the watermark Spark used for it, so the test
replays the same batches (a different split would legitimately give other revisions).
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import oracle
import orjson
import pyarrow as pa
from cli_runs import CliRun
from deltalake import DeltaTable
from input_records import Input, InputRecord, Parser, parse_good, parse_plain, rid

from revise.aggspec import AggList
from revise.checkpoint import COMMITS_LOG, OFFSETS_LOG, SOURCES_DIR, spark_dir, spark_log_dir
from revise.config import EngineConfig, WindowSpec
from revise.jobconfig import (
    DeltaOutput,
    InputFields,
    JobConfig,
    KafkaIO,
    SparkTuning,
    parse_ts_format,
)
from revise.records import revision_schema
from sinks.kafka import (
    decode_dead_letter,
    decode_late,
    decode_revision,
    decode_revision_row,
    read_committed,
)

__all__ = ["REPO", "CliRun", "Input", "InputRecord", "JobSetup", "Outputs", "Parser",
           "QueryRun", "Report", "check_run", "parse_good", "parse_plain", "read_delta",
           "replay", "rid", "spark_batches"]

REPO = Path(__file__).resolve().parents[2]
WINDOW = tuple[str, int, int]


# --------------------------------------------------------------------------- setup


@dataclass(frozen=True)
class QueryRun:
    """A finished bounded run whose Delta tables the query tests read (never write)."""

    delta: str
    query_id: str
    revisions: int
    late: int


@dataclass
class JobSetup:
    """One job's topics, ids and folders, and its engine settings."""

    bootstrap: str
    input_topic: str
    changelog_topic: str
    late_topic: str
    dead_letter_topic: str
    query_id: str
    delta_path: str
    checkpoint: str
    workdir: Path
    window: str = "tumbling:2s"
    grace_ms: int = 3_000
    delay_ms: int = 0
    mode: str = "revision"
    shards: int = 2
    max_records_per_batch: int | None = 500
    # confluent-kafka settings (SASL, TLS …) of every test client; empty: plaintext.
    client_config: dict[str, Any] = field(default_factory=dict)
    # --aggs and the field options (SPEC §7); None / defaults: today's options.
    aggs: str | None = None
    key_field: str = "key"
    ts_field: str = "ts"
    ts_format: str = "epoch_ms"
    # --emit-min-change / --emit-every (SPEC §7); None: every change is emitted.
    emit_min_change: float | None = None
    emit_every_ms: int | None = None

    def agg_list(self) -> AggList:
        return AggList.parse(self.aggs or "count,sum,min,max,mean")

    def engine_config(self) -> EngineConfig:
        aggs = self.agg_list()
        return EngineConfig(
            window=WindowSpec.parse(self.window), grace_ms=self.grace_ms,
            watermark_delay_ms=self.delay_ms, mode=self.mode,  # type: ignore[arg-type]
            query_id=self.query_id, aggs=aggs,
            emit_min_change=self.emit_min_change, emit_every_ms=self.emit_every_ms,
        )

    def job_config(self) -> JobConfig:
        return JobConfig(
            kafka=KafkaIO(bootstrap_servers=self.bootstrap, input_topic=self.input_topic,
                          changelog_topic=self.changelog_topic, late_topic=self.late_topic,
                          dead_letter_topic=self.dead_letter_topic),
            delta=DeltaOutput(path=self.delta_path),
            checkpoint=self.checkpoint, engine=self.engine_config(), once=True,
            spark=SparkTuning(max_records_per_batch=self.max_records_per_batch,
                              shards=self.shards),
            input=InputFields(key_field=self.key_field, ts_field=self.ts_field,
                              ts_format=parse_ts_format(self.ts_format)),
        )

    def cli_args(self) -> list[str]:
        args = [
            "run", "--bootstrap-servers", self.bootstrap, "--input-topic", self.input_topic,
            "--changelog-topic", self.changelog_topic, "--late-topic", self.late_topic,
            "--dead-letter-topic", self.dead_letter_topic, "--delta-path", self.delta_path,
            "--checkpoint", self.checkpoint, "--query-id", self.query_id, "--mode", self.mode,
            "--window", self.window, "--grace", f"{self.grace_ms}ms",
            "--watermark-delay", f"{self.delay_ms}ms", "--shards", str(self.shards), "--once",
        ]
        if self.max_records_per_batch:
            args += ["--max-records-per-batch", str(self.max_records_per_batch)]
        if self.aggs:
            args += ["--aggs", self.aggs]
        args += ["--key-field", self.key_field, "--ts-field", self.ts_field,
                 "--ts-format", self.ts_format]
        if self.emit_min_change is not None:
            args += ["--emit-min-change", str(self.emit_min_change)]
        if self.emit_every_ms is not None:
            args += ["--emit-every", f"{self.emit_every_ms}ms"]
        return args

    def produce(self, payloads: Iterable[bytes], keys: Iterable[str | None] | None = None,
                partition: int | None = None) -> None:
        """Write raw values in order (keyed, or all to one partition), idempotently."""
        from confluent_kafka import Producer

        p = Producer({**self.client_config, "bootstrap.servers": self.bootstrap,
                      "enable.idempotence": True, "linger.ms": 5})
        ks = list(keys) if keys is not None else None
        for i, v in enumerate(payloads):
            kw: dict[str, Any] = {}
            if partition is not None:
                kw["partition"] = partition
            if ks is not None and ks[i] is not None:
                kw["key"] = ks[i].encode()
            p.produce(self.input_topic, value=v, **kw)
        assert p.flush(30) == 0


# --------------------------------------------------------------------------- the job's split


@dataclass(frozen=True)
class SparkBatch:
    """One entry of Spark's offset log."""

    batch_id: int
    watermark_ms: int
    kafka_end: dict[int, int]
    control: int | None  # logOffset of the close-all command source, None before any file
    # batchTimestampMs: when Spark triggered the batch (not compared: runs differ in it)
    timestamp_ms: int = field(default=0, compare=False)


def spark_batches(checkpoint: str, topic: str) -> list[SparkBatch]:
    """Spark's offset log, batch by batch (only batches Spark also committed)."""
    committed = {int(p.name) for p in spark_log_dir(checkpoint, COMMITS_LOG).iterdir()
                 if p.name.isdigit()}
    out = []
    for p in sorted(spark_log_dir(checkpoint, OFFSETS_LOG).iterdir(),
                    key=lambda p: int(p.name) if p.name.isdigit() else -1):
        if not p.name.isdigit() or int(p.name) not in committed:
            continue
        lines = p.read_text().splitlines()
        meta = json.loads(lines[1])
        kafka = json.loads(lines[2]) if lines[2] != "-" else {}
        ctl = json.loads(lines[3]) if len(lines) > 3 and lines[3] != "-" else None
        out.append(SparkBatch(
            int(p.name), int(meta["batchWatermarkMs"]),
            {int(k): int(v) for k, v in kafka.get(topic, {}).items()},
            None if ctl is None else int(ctl["logOffset"]), int(meta["batchTimestampMs"]),
        ))
    ids = [b.batch_id for b in out]
    assert ids == list(range(len(ids))), f"offset log has gaps: {ids}"
    return out


@dataclass
class Replay:
    """The oracle over the job's own split."""

    batches: list[SparkBatch]
    data: list[list[oracle.Rec]]
    close_batch_id: int
    truth: oracle.Truth

    def final_batch_id(self, window: WINDOW) -> int:
        i = self.truth.close_batch[window]
        return self.batches[i].batch_id if i < len(self.data) else self.close_batch_id


def control_commands(checkpoint: str, batches: list[SparkBatch]) -> list[list[str]]:
    """The control commands each batch read: the files of its control source's log entries."""
    log_dir = spark_dir(checkpoint) / SOURCES_DIR / "1"
    out: list[list[str]] = []
    before = -1
    for b in batches:
        now = before if b.control is None else b.control
        commands = []
        for entry in range(before + 1, now + 1):
            for line in (log_dir / str(entry)).read_text().splitlines()[1:]:
                path = json.loads(line)["path"].removeprefix("file://")
                commands += [json.loads(c)["command"] for c in Path(path).read_text().splitlines()]
        out.append(commands)
        before = now
    return out


def closes(commands: list[str], kafka_end: dict[int, int]) -> bool:
    """SPEC §3's bounded close, as revise's driver asks for it: a plain ``close_all``, or
    ``close_all_at:{offsets}`` in a batch whose input reaches every one of those offsets."""
    for c in commands:
        if c == "close_all":
            return True
        if c.startswith("close_all_at:"):
            until = json.loads(c.removeprefix("close_all_at:"))
            if all(kafka_end.get(int(p), 0) >= o for p, o in until.items() if o > 0):
                return True
    return False


def replay(setup: JobSetup, inp: Input) -> Replay:
    """Split the input as Spark's offset log says and run the batch oracle over it.

    The batch that closes (reads a close-all command that takes effect) applies its own input
    first, if it read any: it is the last batch of the oracle's split.
    """
    assert inp.records, f"read no input back from {setup.input_topic} (deleted by retention?)"
    batches = spark_batches(setup.checkpoint, setup.input_topic)
    commands = control_commands(setup.checkpoint, batches)
    close = next(i for i, b in enumerate(batches) if closes(commands[i], b.kafka_end))
    data_batches = batches[:close + 1]
    prev: dict[int, int] = defaultdict(int)
    split: list[list[oracle.Rec]] = []
    for b in data_batches:
        recs = [r for (p, o), r in inp.good.items() if prev[p] <= o < b.kafka_end.get(p, prev[p])]
        split.append(sorted(recs, key=lambda r: r.rid))
        prev.update(b.kafka_end)
    # Everything was read by the batch that closed.
    ends = Counter()
    for r in inp.records:
        ends[r.partition] = max(ends[r.partition], r.offset + 1)
    assert {p: prev[p] for p in ends} == dict(ends), "the close-all came before the input's end"
    truth = oracle.compute(setup.engine_config(), split)
    # The watermark is global: Spark's watermark of every batch is the max event time of all
    # earlier batches (every partition, every shard) minus the delay.
    assert [b.watermark_ms for b in data_batches] == truth.watermarks
    return Replay(batches, split, batches[close].batch_id, truth)


# --------------------------------------------------------------------------- the outputs


def read_delta(path: str, table: str) -> list[dict[str, Any]]:
    """A Delta table's rows as delta-rs reads them (``scan``: ``latest``'s deletion vectors
    applied; ``to_pyarrow_table`` refuses a table with them)."""
    return pa.table(DeltaTable(f"{path}/{table}").scan()).to_pylist()


@dataclass
class Outputs:
    kafka_revisions: list[tuple[int, int, dict[str, Any]]]  # (partition, offset, row)
    kafka_late: list[dict[str, Any]]
    kafka_dead: list[dict[str, Any]]
    revisions: list[dict[str, Any]]
    latest: list[dict[str, Any]]
    late: list[dict[str, Any]]
    dead: list[dict[str, Any]]

    @staticmethod
    def read(setup: JobSetup) -> Outputs:
        def topic(t: str) -> list[Any]:
            return read_committed(setup.bootstrap, t, timeout_s=60,
                                  client_config=setup.client_config)

        msgs = topic(setup.changelog_topic)
        aggs = setup.agg_list()
        schema = revision_schema(aggs)

        def decode(value: bytes) -> dict[str, Any]:
            if aggs.bare:
                return decode_revision(value).to_row()
            return decode_revision_row(value, schema)

        revs = [(m.partition(), m.offset(), decode(m.value())) for m in msgs]
        for (_p, _o, row), m in zip(revs, msgs, strict=True):
            key = orjson.loads(m.key())  # the window, so compaction keeps its latest revision
            assert key == {k: row[k] for k in ("key", "window_start_ms", "window_end_ms")}, key
        return Outputs(
            revs,
            [decode_late(m.value()).to_row() for m in topic(setup.late_topic)],
            [decode_dead_letter(m.value()).to_row() for m in topic(setup.dead_letter_topic)],
            read_delta(setup.delta_path, "revisions"),
            read_delta(setup.delta_path, "latest"),
            read_delta(setup.delta_path, "late"),
            read_delta(setup.delta_path, "dead_letter"),
        )


def _ident(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["query_id"], row["key"], row["window_start_ms"], row["window_end_ms"],
            row["revision"])


def _window(row: dict[str, Any]) -> WINDOW:
    return (row["key"], row["window_start_ms"], row["window_end_ms"])


def _comparable(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted(row.items()))


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


@dataclass
class Report:
    windows: int = 0
    revisions: int = 0
    late_revisions: int = 0
    retracted: int = 0
    too_late: int = 0
    dead: int = 0
    notes: list[str] = field(default_factory=list)


# Longer than ~60 lines: one promise after another, each a few asserts, over shared tables.
def check_run(setup: JobSetup, parse: Parser = parse_plain,
              expected: Callable[[list[dict[Any, Any]]], dict[str, Any]] | None = None) -> Report:
    """Every SPEC §4–7 promise about a finished ``--once`` run; returns what it saw.

    Kafka and Delta must agree on every field, ``emitted_at_ms`` included, also after crashes
    and restarts: a replay that finds its batch committed in Kafka stamps Delta with the
    ``emitted_at_ms`` recorded in the committed progress marker.

    The ``FN(FIELD)`` form (``setup.aggs``) needs ``parse`` (the input rules of the run's
    field options, giving each good record's aggregated fields) and ``expected`` (the batch
    computation: the records' fields → every aggregate column); each FINAL must equal it over
    the window's accepted records (percentiles and distinct exactly, sums and means within
    1e-9). Sessions are checked in the bare form only.
    """
    inp = Input.read(setup.bootstrap, setup.input_topic, setup.client_config, parse)
    rep = replay(setup, inp)
    out = Outputs.read(setup)
    cfg = setup.engine_config()
    grace = cfg.grace_ms
    session = cfg.window.kind == "session"
    bare = cfg.aggs.bare
    AGGS = cfg.aggs.columns
    assert bare or (expected is not None and not session), "FN(FIELD) needs expected()"
    report = Report()

    # -- exactly once: no duplicates, Kafka == Delta ----------------------------------------
    kafka_rows = [row for _p, _o, row in out.kafka_revisions]
    dup_k = [k for k, n in Counter(map(_ident, kafka_rows)).items() if n > 1]
    dup_d = [k for k, n in Counter(map(_ident, out.revisions)).items() if n > 1]
    assert not dup_k, f"duplicate revisions in the changelog: {dup_k[:5]}"
    assert not dup_d, f"duplicate revisions in Delta: {dup_d[:5]}"
    assert sorted(_comparable(r) for r in kafka_rows) == sorted(
        _comparable(r) for r in out.revisions), "changelog and Delta revisions differ"
    assert {r["query_id"] for r in kafka_rows} == {setup.query_id}
    assert {r["mode"] for r in kafka_rows} == {setup.mode}
    report.revisions = len(kafka_rows)

    # -- one window's revisions: one partition, increasing order ----------------------------
    where: dict[WINDOW, set[int]] = defaultdict(set)
    last_rev: dict[WINDOW, int] = {}
    for p, _o, row in sorted(out.kafka_revisions, key=lambda t: (t[0], t[1])):
        w = _window(row)
        where[w].add(p)
        assert row["revision"] > last_rev.get(w, -1), f"{w} out of order in the changelog"
        last_rev[w] = row["revision"]
    assert all(len(ps) == 1 for ps in where.values()), "a window's revisions span partitions"

    # -- per window: dense, one FINAL last, timing consistent -------------------------------
    by_window: dict[WINDOW, list[dict[str, Any]]] = defaultdict(list)
    for row in out.revisions:
        by_window[_window(row)].append(row)
    finals: dict[WINDOW, dict[str, Any]] = {}
    retracted_rows = [r for r in out.revisions if r["retracted"]]
    for w, rows in by_window.items():
        rows.sort(key=lambda r: r["revision"])
        revs = [r["revision"] for r in rows]
        assert revs == list(range(revs[0], revs[-1] + 1)), f"{w}: revisions not dense: {revs}"
        if revs[0] != 0:
            # a session lineage continues from the bounds it retracted in the same batch
            assert session, f"{w}: first revision is {revs[0]}"
            assert any(r["key"] == w[0] and r["revision"] == revs[0] - 1
                       and r["batch_id"] == rows[0]["batch_id"]
                       and w[1] <= r["window_start_ms"] and r["window_end_ms"] <= w[2]
                       for r in retracted_rows), f"{w}: rev {revs[0]} continues no lineage"
        flags = [r["is_final"] for r in rows]
        assert flags == [r["timing"] == "FINAL" for r in rows]
        if rows[-1]["retracted"]:
            assert session and not any(flags), f"{w}: retracted bounds with a FINAL"
            assert [r["retracted"] for r in rows] == [False] * (len(rows) - 1) + [True]
            report.retracted += 1
            continue
        assert flags == [False] * (len(rows) - 1) + [True], f"{w}: FINAL not exactly once, last"
        assert not any(r["retracted"] for r in rows)
        finals[w] = rows[-1]
        for prev, row in zip(rows, rows[1:], strict=False):
            if not session:  # (session prev_* after a merge hold the merged lineages)
                for a in AGGS:
                    assert _same(row[f"prev_{a}"], prev[a]), f"{w}: prev_{a}"
        for row in rows:
            wm, end = row["watermark_ms"], w[2]
            if row["timing"] == "EARLY":
                assert wm < end, f"{w}: EARLY at watermark {wm}"
            elif row["timing"] == "LATE":
                assert end <= wm < end + grace, f"{w}: LATE at watermark {wm}"
                report.late_revisions += 1
        if setup.mode == "watermark":
            assert len(rows) == 1 and rows[0]["revision"] == 0, f"{w}: {revs} in watermark mode"
            assert all(rows[0][f"prev_{a}"] is None for a in AGGS)
        elif rows[0]["revision"] == 0:
            assert all(rows[0][f"prev_{a}"] is None for a in AGGS), f"{w}: prev_* at rev 0"
    report.windows = len(finals)

    # -- FINAL == the batch oracle over the job's split -------------------------------------
    truth = rep.truth
    assert set(finals) == set(truth.windows), (
        f"windows differ: missing {sorted(set(truth.windows) - set(finals))[:5]}, "
        f"extra {sorted(set(finals) - set(truth.windows))[:5]}"
    )
    for w, t in truth.windows.items():
        f = finals[w]
        vals = t.values
        want = {"count": len(vals), "sum": math.fsum(vals), "min": min(vals), "max": max(vals),
                "mean": math.fsum(vals) / len(vals)} if bare else {"count": len(vals)}
        for a in AGGS if bare else ("count",) if "count" in AGGS else ():
            assert _same(f[a], want[a]), f"{w}: FINAL {a}={f[a]}, oracle {want[a]}"
        assert f["n_late"] == t.n_late and f["max_lateness_ms"] == t.max_lateness, w
        assert f["batch_id"] == rep.final_batch_id(w), (
            f"{w}: FINAL in batch {f['batch_id']}, due in batch {rep.final_batch_id(w)}")
        due = truth.close_batch[w]
        want_wm = truth.watermarks[due] if due < len(rep.data) else truth.final_watermark
        assert f["watermark_ms"] == want_wm, w

    # -- too-late records: per (record, window), exactly the oracle's -----------------------
    def late_ids(rows: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
        return [(rid(r["partition"], r["offset"]), r["window_start_ms"], r["window_end_ms"])
                for r in rows]

    for rows, where_ in ((out.late, "Delta"), (out.kafka_late, "the late topic")):
        ids = late_ids(rows)
        assert len(ids) == len(set(ids)), f"duplicate late records in {where_}"
        assert set(ids) == truth.too_late, f"too-late records in {where_} differ from the oracle"
    by_rid = {r.rid: r for r in inp.good.values()}
    for r in out.late:
        rec = by_rid[rid(r["partition"], r["offset"])]
        assert (r["key"], r["ts_ms"], r["value"]) == (rec.key, rec.ts, rec.value)
        assert r["lateness_ms"] == r["watermark_ms"] - r["ts_ms"] > 0
        assert r["watermark_ms"] == truth.watermarks[r["batch_id"]]
        assert r["watermark_ms"] >= r["window_end_ms"] + grace
        assert r["topic"] == setup.input_topic and r["reason"]
    report.too_late = len(out.late)

    # -- accepted + too-late + bad = input ---------------------------------------------------
    assert len(inp.good) + len(inp.bad) == len(inp.records)
    size, adv = cfg.window.size_ms, cfg.window.advance_ms
    if session:
        pairs = len(inp.good)
    else:
        pairs = sum(len(oracle.windows_of(r.ts, size, adv)) for r in inp.good.values())
        # Accepted = every (record, window) of the good input not in Delta `late`: the batch
        # aggregate over it is each window's FINAL (independent of the split).
        rejected = set(late_ids(out.late))
        acc: dict[WINDOW, list[oracle.Rec]] = defaultdict(list)
        for r in inp.good.values():
            for s, e in oracle.windows_of(r.ts, size, adv):
                if (r.rid, s, e) not in rejected:
                    acc[(r.key, s, e)].append(r)
        assert set(acc) == set(finals)
        for w, recs in acc.items():
            if expected is not None:
                _check_columns(w, finals[w], expected([inp.fields[r.rid] for r in recs]))
                continue
            vals = [r.value for r in recs]
            assert finals[w]["count"] == len(vals)
            assert _same(finals[w]["sum"], math.fsum(vals))
            assert _same(finals[w]["min"], min(vals)) and _same(finals[w]["max"], max(vals))
    counts = ([f["count"] for f in finals.values()] if "count" in AGGS
              else [len(t.values) for t in truth.windows.values()])
    assert sum(counts) + len(out.late) == pairs
    assert len(out.dead) == len(inp.bad)

    # -- dead letters: every malformed record, with its reason and offset -------------------
    for rows, where_ in ((out.dead, "Delta"), (out.kafka_dead, "the dead-letter topic")):
        got = {(r["partition"], r["offset"]): r for r in rows}
        assert len(got) == len(rows) and set(got) == set(inp.bad), f"dead letters in {where_}"
        for key, r in got.items():
            raw = inp.bad[key]
            assert r["reason"], f"dead letter {key} without a reason"
            assert r["topic"] == setup.input_topic
            assert (r["raw_value"] or "") == (raw or b"").decode()
            if raw and raw.strip() and _invalid_json(raw):
                assert r["reason"] == "invalid JSON", r
    report.dead = len(out.dead)
    report.notes.append("reasons: " + ", ".join(sorted({r["reason"].split(":")[0]
                                                        for r in out.dead})))

    # -- completeness (SPEC §4): a share, 1.0 on the FINAL, est_* = aggregate / it ----------
    est_cols = [c for c in AGGS if c in ("count", "sum") or c.startswith("sum_")]
    for row in out.revisions:
        c = row["completeness"]
        assert 0.0 <= c <= 1.0, row
        for a in est_cols:
            est = row[f"est_{a}"]
            if row["is_final"] or setup.mode == "watermark":
                assert c == 1.0 and est == row[a], row
            elif c == 0:
                assert est is None, row
            else:
                assert _same(est, row[a] / c), row
    if setup.mode == "revision" and not session:
        assert any(0 < r["completeness"] < 1 for r in out.revisions), "no partial window"

    # -- latest: the highest revision of every window; retracted bounds removed -------------
    want_latest = {}
    for w, rows in by_window.items():
        top = rows[-1]
        if not top["retracted"]:
            want_latest[w] = _comparable(top)
    got_latest = {_window(r): _comparable(r) for r in out.latest}
    assert len(got_latest) == len(out.latest), "latest holds a window twice"
    assert got_latest == want_latest, "latest is not the highest revision of every window"
    return report


def _check_columns(w: WINDOW, final: dict[str, Any], want: dict[str, Any]) -> None:
    """A FINAL against the batch computation: ints, percentiles and maxima exactly."""
    for col, v in want.items():
        if col.startswith(("sum_", "mean_")):
            assert _same(final[col], v), f"{w}: FINAL {col}={final[col]}, batch {v}"
        else:
            assert final[col] == v, f"{w}: FINAL {col}={final[col]}, batch {v}"


def _invalid_json(raw: bytes) -> bool:
    try:
        json.loads(raw)
    except ValueError:
        return True
    return False
