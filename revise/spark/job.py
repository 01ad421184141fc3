"""The streaming job: Kafka in, revisions out, on Spark Structured Streaming.

The query, stage by stage::

    Kafka source (read_committed, maxOffsetsPerTrigger)   control files (close-all commands)
            │ parse + validate in the JVM (revise.spark.parse)       │
            └──────────────── union ─────────────────────────────────┘
                      │ event_time = ts (0 for bad input and commands)
                      │ withWatermark(event_time, watermark_delay)  → Spark's global watermark
                      │ shard = pmod(xxhash64(key), shards)
                      ▼
      groupBy(shard).applyInPandasWithState(ProcessingTimeTimeout)   — the revision engine,
                      │  one call per shard per micro-batch, engine snapshot in the state
                      │  store (RocksDB), so Spark's checkpoint covers it; its output is
                      │  one Arrow IPC chunk per shard and kind (revision / late / dead)
                      ▼
      foreachBatch(BatchCommitter)  — one Kafka transaction + idempotent Delta writes per batch

Why these choices (checked on Spark 4.2, pinned by tests/integration/test_spark_semantics.py):

- The watermark is Spark's, computed from every partition's accepted records, identical for
  all shards (``state.getCurrentWatermarkMs()``). With a processing-time timeout Spark does not
  drop rows behind the watermark: the engine sees every late record and decides itself.
- A processing-time timeout of 1 ms makes Spark call every shard that holds open windows in
  every micro-batch, including micro-batches without new data, so windows close as the
  watermark advances even for keys that receive nothing.
- Such a query never runs out of micro-batches, so ``availableNow`` would never end. A bounded
  run (``--once``) instead records the input's end offsets at start, runs until the query has
  read them, then drops a close-all command file into the control source; the micro-batch
  that reads it closes every window (one FINAL each) and the job stops. The command is part of
  the checkpointed input, so a crash and restart replays it exactly.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from revise.config import EngineConfig
from revise.engine import Engine, InputBatch
from revise.errors import ConfigError, ReviseError
from revise.jobconfig import JobConfig
from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA, REVISION_SCHEMA
from revise.spark.parse import classify
from revise.spark.session import spark_session
from sinks.delta_tables import TABLE_NAMES, DeltaTables
from sinks.kafka_changelog import ChangelogConfig, ProducerFencedError, TransactionalChangelog

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.streaming.state import GroupState

__all__ = ["JobError", "JobResult", "preflight", "run_job"]

log = logging.getLogger("revise.job")

CLOSE_ALL = "close_all"

# The stateful operator's output: per shard and micro-batch, one row per kind of output
# (revision, late, dead) holding its rows as one Arrow IPC stream. Spark moves a few large
# binary values instead of converting every revision row pandas → Arrow → Spark rows → Arrow
# on the way to the driver, which collects them anyway (Kafka and Delta are written from there).
KIND_SCHEMAS: dict[str, pa.Schema] = {
    "revision": REVISION_SCHEMA,
    "late": LATE_SCHEMA,
    "dead": DEAD_LETTER_SCHEMA,
}
_OUTPUT_DDL = "kind STRING, rows BIGINT, payload BINARY"
_CHUNK_ROWS = 250_000  # rows per IPC chunk (~120 MB of revisions at most)
# The accepted records' columns, in InputBatch.from_arrays order, with their numpy types.
_INPUT_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("key", object), ("ts_ms", np.int64), ("value", np.float64), ("partition", np.int32),
    ("offset", np.int64),
)
_STATE_DDL = "snapshot BINARY"


class JobError(ReviseError, RuntimeError):
    """The streaming query failed; the message carries Spark's reason."""


@dataclass(slots=True)
class JobResult:
    """What a run did (the driver's view)."""

    query_id: str
    batches: int = 0
    input_records: int = 0
    revisions: int = 0
    late: int = 0
    dead_letters: int = 0
    skipped_batches: int = 0
    first_revision_s: float | None = None
    seconds: float = 0.0
    commit_seconds: float = 0.0
    collect_seconds: float = 0.0
    kafka_seconds: float = 0.0
    delta_seconds: float = 0.0
    delta_table_seconds: dict[str, float] = field(default_factory=dict)
    last_watermark_ms: int = 0
    stopped_by_signal: bool = False
    progress: list[dict[str, Any]] = field(default_factory=list)


# --------------------------------------------------------------------------- the query


def build_stream(spark: SparkSession, cfg: JobConfig, control_dir: str) -> DataFrame:
    """The streaming DataFrame of the whole job up to (not including) the sink."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", cfg.bootstrap_servers)
        .option("subscribe", cfg.input_topic)
        .option("startingOffsets", cfg.starting_offsets)
        .option("kafka.isolation.level", "read_committed")
        .option("failOnDataLoss", "true")
        .option("includeHeaders", "false")
    )
    if cfg.max_records_per_batch:
        reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_records_per_batch))
    value_required = any(a != "count" for a in cfg.engine.aggs)
    data = classify(
        reader.load(),
        key_field=cfg.key_field,
        ts_field=cfg.ts_field,
        value_field=cfg.value_field,
        value_required=value_required,
    ).select(
        "key", "ts_ms", "value", "partition", "offset", "reason",
        F.when(F.col("reason").isNotNull(), F.col("raw_value")).alias("raw_value"),
        F.lit(None).cast("string").alias("command"),
        F.when(
            F.col("reason").isNull(), F.expr(f"pmod(xxhash64(key), {cfg.shards})")
        ).otherwise(F.expr(f"pmod(offset, {cfg.shards})")).cast("int").alias("shard"),
    )
    control = (
        spark.readStream.schema("command STRING, shard INT")
        .json(control_dir)
        .select(
            F.lit(None).cast("string").alias("key"),
            F.lit(None).cast("bigint").alias("ts_ms"),
            F.lit(None).cast("double").alias("value"),
            F.lit(None).cast("int").alias("partition"),
            F.lit(None).cast("bigint").alias("offset"),
            F.lit(None).cast("string").alias("reason"),
            F.lit(None).cast("string").alias("raw_value"),
            "command",
            "shard",
        )
    )
    events = (
        data.unionByName(control)
        .withColumn(
            "event_time",
            F.expr("timestamp_millis(CASE WHEN reason IS NULL AND command IS NULL "
                   "THEN ts_ms ELSE 0 END)"),
        )
        .withWatermark("event_time", f"{cfg.engine.watermark_delay_ms} milliseconds")
    )
    fn = make_state_fn(cfg.engine, cfg.input_topic)
    return events.groupBy("shard").applyInPandasWithState(
        fn, _OUTPUT_DDL, _STATE_DDL, "Update", GroupStateTimeout.ProcessingTimeTimeout
    )


def make_state_fn(
    engine_cfg: EngineConfig, topic: str
) -> Callable[[Any, Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]:
    """The per-shard function Spark calls once per micro-batch for each shard with data or state.

    It restores the shard's engine from its snapshot, applies the batch's records against the
    watermark Spark gives (the same for every shard), handles a close-all command, emits the
    revisions, too-late records and dead letters as one row per kind holding an Arrow IPC
    stream (``kind``, ``rows``, ``payload``; :func:`decode_output` reads them back), and
    stores the new snapshot — or drops the state when no window is open.
    """

    def fn(key: Any, pdfs: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId") or 0) if ctx else 0
        watermark_ms = max(0, int(state.getCurrentWatermarkMs()))
        now_ms = int(state.getCurrentProcessingTimeMs())
        frames = [p for p in pdfs if len(p)]
        engine = Engine.build(engine_cfg, state.get[0] if state.exists else None)
        outputs: dict[str, list[pa.Table]] = {k: [] for k in KIND_SCHEMAS}
        close_all = False
        batch = InputBatch.empty(topic)
        if frames:
            command = np.concatenate([f["command"].notna().to_numpy() for f in frames])
            bad = np.concatenate([f["reason"].notna().to_numpy() for f in frames]) & ~command
            close_all = bool(command.any())
            good = ~bad & ~command
            if good.all():
                # The usual case: numpy concatenation, cheaper than pd.concat + a mask.
                columns = {
                    name: np.concatenate([f[name].to_numpy(dtype=dtype) for f in frames])
                    for name, dtype in _INPUT_COLUMNS
                }
            else:
                rows = pd.concat(frames, ignore_index=True)
                if bad.any():
                    outputs["dead"].append(_dead_letters(rows[bad], topic, batch_id))
                g = rows[good]  # bad rows have null ts/value: select before typing
                columns = {name: g[name].to_numpy(dtype=dtype) for name, dtype in _INPUT_COLUMNS}
            batch = InputBatch.from_arrays(
                columns["key"], columns["ts_ms"], columns["value"], columns["partition"],
                columns["offset"], topic=topic,
            )
        out = engine.process(batch, watermark_ms=watermark_ms, batch_id=batch_id, now_ms=now_ms)
        outputs["revision"].append(out.revisions.to_arrow())
        outputs["late"].append(out.late.to_arrow())
        if close_all:
            last = watermark_ms
            if out.max_accepted_ts_ms is not None:
                last = max(last, out.max_accepted_ts_ms - engine_cfg.watermark_delay_ms)
            closed = engine.close_all(watermark_ms=last, batch_id=batch_id, now_ms=now_ms)
            outputs["revision"].append(closed.revisions.to_arrow())
        if engine.open_windows:
            state.update((engine.snapshot(),))
            state.setTimeoutDuration(1)
        elif engine.sealed:
            # Nothing open, but closed-by-close-all windows must stay closed: keep the
            # (tiny) snapshot that remembers it, without a timeout.
            state.update((engine.snapshot(),))
        elif state.exists:
            state.remove()
        chunks = encode_output(outputs)
        if chunks is not None:
            yield chunks

    return fn


def encode_output(outputs: Mapping[str, Sequence[pa.Table]]) -> pd.DataFrame | None:
    """A shard's output tables by kind → the operator's rows (None when all are empty).

    One row per kind and chunk of at most ``_CHUNK_ROWS`` rows: ``kind``, ``rows``, ``payload``
    (an Arrow IPC stream with the kind's schema). :func:`decode_output` is the inverse.
    """
    chunks: list[tuple[str, int, bytes]] = []
    for kind, tables in outputs.items():
        if not any(t.num_rows for t in tables):
            continue
        table = pa.concat_tables(tables).cast(KIND_SCHEMAS[kind])
        # Bounded chunks: one Spark binary value stays far below its 2 GB limit.
        for start in range(0, table.num_rows, _CHUNK_ROWS):
            chunks.append((kind, *_ipc(table.slice(start, _CHUNK_ROWS))))
    if not chunks:
        return None
    return pd.DataFrame({
        "kind": [k for k, _n, _b in chunks],
        "rows": [n for _k, n, _b in chunks],
        "payload": [b for _k, _n, b in chunks],
    })


def _ipc(table: pa.Table) -> tuple[int, bytes]:
    """``(rows, Arrow IPC stream bytes)`` of one output table."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return table.num_rows, sink.getvalue().to_pybytes()


def decode_output(collected: pa.Table) -> dict[str, pa.Table]:
    """The stateful operator's collected chunks → one table per kind (empty ones included).

    Chunks keep their order (the order Spark collected them in); rows inside a chunk keep the
    engine's emission order, so one window's revisions of a batch stay in revision order.
    """
    parts: dict[str, list[pa.Table]] = {k: [] for k in KIND_SCHEMAS}
    kinds = collected.column("kind").to_pylist()
    payloads = collected.column("payload")
    for i, kind in enumerate(kinds):
        buf = payloads[i].as_buffer()
        parts[kind].append(pa.ipc.open_stream(buf).read_all())
    return {
        k: pa.concat_tables(v) if v else KIND_SCHEMAS[k].empty_table()
        for k, v in parts.items()
    }


def _dead_letters(rows: pd.DataFrame, topic: str, batch_id: int) -> pa.Table:
    n = len(rows)
    return pa.table(
        {
            "raw_value": pa.array(rows["raw_value"].tolist(), pa.string()),
            "reason": pa.array(rows["reason"].tolist(), pa.string()),
            "topic": pa.array([topic] * n, pa.string()),
            "partition": pa.array(rows["partition"].to_numpy(dtype=np.int32)),
            "offset": pa.array(rows["offset"].to_numpy(dtype=np.int64)),
            "batch_id": pa.array(np.full(n, batch_id, dtype=np.int64)),
        },
        schema=DEAD_LETTER_SCHEMA,
    )


# --------------------------------------------------------------------------- the commit


CrashHook = Callable[[str, int], None]


def _crash_hook_from_env() -> CrashHook | None:
    """``REVISE_CRASH_AT=<point>:<batch_id>`` SIGKILLs this process at that point (tests only).

    Points: ``before_kafka`` (after collecting, nothing written), ``before_kafka_commit``
    (inside the transaction, before commit), ``after_kafka`` (Kafka committed, Delta not
    written), ``during_delta`` (between the Delta tables), ``after_delta`` (everything written,
    Spark has not recorded the batch).
    """
    spec = os.environ.get("REVISE_CRASH_AT")
    if not spec:
        return None
    point, _, batch = spec.partition(":")
    target = int(batch or 0)

    def hook(at: str, batch_id: int) -> None:
        if at == point and batch_id >= target:
            log.warning("REVISE_CRASH_AT: killing the job at %s of batch %d", at, batch_id)
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


class BatchCommitter:
    """The ``foreachBatch`` sink: commits each micro-batch exactly once to Kafka and Delta."""

    def __init__(
        self,
        cfg: JobConfig,
        changelog: TransactionalChangelog,
        tables: DeltaTables,
        result: JobResult,
        crash_hook: CrashHook | None = None,
    ) -> None:
        self.cfg = cfg
        self.changelog = changelog
        self.tables = tables
        self.result = result
        self.crash_hook = crash_hook
        self.started = time.monotonic()
        self.last_batch_id: int | None = None
        self.error: BaseException | None = None

    def _crash(self, point: str, batch_id: int) -> None:
        if self.crash_hook is not None:
            self.crash_hook(point, batch_id)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Commit micro-batch ``batch_id``; a replay after a crash changes nothing.

        The sequence (the same numbers mark the code):

        1. Compute the batch and collect it to the driver (the stateful operator's Arrow
           chunks, decoded into revisions, too-late records and dead letters); stamp
           ``emitted_at_ms`` with the wall clock, once, so Kafka and Delta carry one value.
        2. Kafka, one transaction (``TransactionalChangelog.commit_batch``): skip if the
           progress topic already holds this batch (a replay; the revisions are re-stamped with
           the ``emitted_at_ms`` the committed marker carries, so Delta gets what Kafka has);
           else begin → produce revisions, too-late records, dead letters → produce the
           progress marker (query_id, batch_id, emitted_at_ms) → commit. On any error the
           transaction is aborted and the error raised, which fails the query loudly; a fenced
           producer (another instance took over this query id) raises ``ProducerFencedError``.
        3. Delta (``DeltaTables.write_batch``, from the same Arrow tables): append
           ``revisions``, ``late``, ``dead_letter`` and MERGE ``latest``, each tagged with the
           app transaction (revise-<query_id>, batch_id) so a replayed batch is a no-op.
        4. Return: Spark records the batch in its commit log. A crash anywhere before this
           replays the batch with the same offsets and state, so the same revisions, and
           steps 2 and 3 turn the replay into no-ops where they already happened.
        """
        t0 = time.monotonic()
        try:
            # 1. compute, collect, decode, stamp
            out = decode_output(df.toArrow())
            self.result.collect_seconds += time.monotonic() - t0
            emitted_at = int(time.time() * 1000)
            revisions = _stamp(out["revision"], emitted_at)
            late, dead = out["late"], out["dead"]
            if not (revisions.num_rows or late.num_rows or dead.num_rows):
                self._account(batch_id, out, None, t0, 0.0, 0.0)
                return
            self._crash("before_kafka", batch_id)
            # 2. Kafka: one transaction, skipped when this batch is already committed
            tk = time.monotonic()
            committed = self.changelog.commit_batch(
                batch_id, revisions, late, dead, emitted_at_ms=emitted_at,
                before_commit=lambda: self._crash("before_kafka_commit", batch_id),
            )
            if committed.skipped and committed.emitted_at_ms is not None:
                revisions = _stamp(revisions, committed.emitted_at_ms)
            kafka_s = time.monotonic() - tk
            self._crash("after_kafka", batch_id)
            # 3. Delta: idempotent per (query_id, batch_id)
            td = time.monotonic()
            self.tables.write_batch(
                self.cfg.query_id, batch_id, revisions, late, dead,
                after_table=lambda t: self._crash("during_delta", batch_id) if t == "revisions"
                else None,
            )
            delta_s = time.monotonic() - td
            timings = self.tables.last_timings
            if timings is not None:
                per = self.result.delta_table_seconds
                for name in TABLE_NAMES:
                    per[name] = per.get(name, 0.0) + getattr(timings, name)
            self._crash("after_delta", batch_id)
            self._account(batch_id, out, committed.skipped, t0, kafka_s, delta_s)
        except BaseException as exc:
            self.error = exc
            raise
        # 4. return → Spark commits the batch

    def _account(
        self, batch_id: int, out: dict[str, pa.Table], skipped: bool | None, t0: float,
        kafka_s: float, delta_s: float,
    ) -> None:
        r = self.result
        r.batches += 1
        self.last_batch_id = batch_id
        revisions = out["revision"]
        r.revisions += revisions.num_rows
        r.late += out["late"].num_rows
        r.dead_letters += out["dead"].num_rows
        if revisions.num_rows:
            if r.first_revision_s is None:
                r.first_revision_s = time.monotonic() - self.started
            wm = pc.max(revisions.column("watermark_ms")).as_py()
            if wm is not None:
                r.last_watermark_ms = max(r.last_watermark_ms, int(wm))
        if skipped:
            r.skipped_batches += 1
        r.kafka_seconds += kafka_s
        r.delta_seconds += delta_s
        r.commit_seconds += time.monotonic() - t0


def _stamp(revisions: pa.Table, emitted_at: int) -> pa.Table:
    """``revisions`` with ``emitted_at_ms`` set to ``emitted_at`` on every row."""
    i = revisions.schema.get_field_index("emitted_at_ms")
    column = pa.array(np.full(revisions.num_rows, emitted_at, dtype=np.int64))
    return revisions.set_column(i, revisions.schema.field(i), column)


# --------------------------------------------------------------------------- running it


def _check_checkpoint(cfg: JobConfig) -> None:
    """Refuse a checkpoint written under settings that change the state's meaning."""
    path = Path(cfg.checkpoint)
    meta = path / "revise-job.json"
    want = cfg.fingerprint()
    if meta.is_file():
        have = json.loads(meta.read_text())
        diff = {k: (have.get(k), v) for k, v in want.items() if have.get(k) != v}
        if diff:
            lines = ", ".join(
                f"{k}: checkpoint has {a!r}, asked {b!r}" for k, (a, b) in diff.items()
            )
            msg = (
                f"--checkpoint {cfg.checkpoint} belongs to a job with other settings ({lines}); "
                "use the original settings or a new --checkpoint (and --query-id)"
            )
            raise ConfigError(msg)
    else:
        path.mkdir(parents=True, exist_ok=True)
        meta.write_text(json.dumps(want, indent=2))


def _end_offsets(cfg: JobConfig) -> dict[int, int]:
    """The input topic's committed end offset per partition, as a read_committed reader sees."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": cfg.bootstrap_servers,
        "group.id": f"revise-offsets-{uuid.uuid4().hex[:8]}",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
    })
    try:
        md = consumer.list_topics(cfg.input_topic, timeout=30)
        topic = md.topics.get(cfg.input_topic)
        if topic is None or topic.error is not None:
            msg = (
                f"--input-topic {cfg.input_topic!r} does not exist on {cfg.bootstrap_servers}; "
                "create it or produce to it first (revise generate)"
            )
            raise ConfigError(msg)
        ends = {}
        for p in topic.partitions:
            _lo, hi = consumer.get_watermark_offsets(TopicPartition(cfg.input_topic, p), timeout=30)
            ends[p] = hi
        return ends
    finally:
        consumer.close()


def _source_offsets(progress: dict[str, Any], index: int) -> Any:
    sources = progress.get("sources") or []
    if len(sources) <= index:
        return None
    raw = sources[index].get("endOffset")
    if raw is None:
        return None
    return json.loads(raw) if isinstance(raw, str) else raw


def _ensure_topics(cfg: JobConfig) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cfg.bootstrap_servers})
    md = admin.list_topics(timeout=30)
    if cfg.input_topic not in md.topics:
        msg = (
            f"--input-topic {cfg.input_topic!r} does not exist on {cfg.bootstrap_servers}; "
            "create it or produce to it first (revise generate)"
        )
        raise ConfigError(msg)
    n_in = max(1, len(md.topics[cfg.input_topic].partitions))
    want = [t for t in (cfg.changelog_topic, cfg.late_topic, cfg.dead_letter_topic)
            if t and t not in md.topics]
    if want:
        futures = admin.create_topics([NewTopic(t, num_partitions=n_in) for t in want])
        for f in futures.values():
            try:
                f.result(30)
            except Exception as exc:  # noqa: BLE001 - a concurrent creation is fine
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise


def preflight(cfg: JobConfig) -> None:
    """Run the checks that need no Spark, before Spark starts.

    The input topic must exist (missing output topics are created) and the checkpoint, if
    any, must have been written with these settings.

    Raises:
        ConfigError: Either check failed (the CLI exits 2).
    """
    _ensure_topics(cfg)
    _check_checkpoint(cfg)


def run_job(
    cfg: JobConfig,
    *,
    spark: SparkSession | None = None,
    stop_event: threading.Event | None = None,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    crash_hook: CrashHook | None = None,
    timeout_s: float | None = None,
) -> JobResult:
    """Run the job until stopped (or, with ``cfg.once``, until the input at start is done).

    Args:
        cfg: The job's configuration.
        spark: A session to use; the project's default session when None.
        stop_event: Set it to stop cleanly (the CLI sets it on SIGINT/SIGTERM).
        on_progress: Called with each new Spark progress report (a dict).
        crash_hook: Test hook called at the commit's checkpoints (see ``REVISE_CRASH_AT``).
        timeout_s: Give up (JobError) after this long; None: no limit.

    Raises:
        ConfigError: The input topic is missing or the checkpoint belongs to other settings.
        ProducerFencedError: Another instance with the same query id took over.
        JobError: The streaming query failed.
    """
    t_start = time.monotonic()
    preflight(cfg)
    ends = _end_offsets(cfg) if cfg.once else None
    spark = spark or spark_session(f"revise-{cfg.query_id}")
    control_dir = str(Path(cfg.checkpoint) / "control")
    Path(control_dir).mkdir(parents=True, exist_ok=True)
    tables = DeltaTables(cfg.delta_path).ensure()
    result = JobResult(cfg.query_id)
    changelog = TransactionalChangelog(ChangelogConfig(
        bootstrap_servers=cfg.bootstrap_servers,
        query_id=cfg.query_id,
        changelog_topic=cfg.changelog_topic,
        late_topic=cfg.late_topic,
        dead_letter_topic=cfg.dead_letter_topic,
        progress_topic=cfg.progress_topic,
        transactional=cfg.transactional,
    )).open()
    committer = BatchCommitter(cfg, changelog, tables, result,
                               crash_hook or _crash_hook_from_env())
    stream = build_stream(spark, cfg, control_dir)
    query = (
        stream.writeStream.outputMode("update")
        .queryName(f"revise_{cfg.query_id}".replace("-", "_").replace(".", "_"))
        .option("checkpointLocation", str(Path(cfg.checkpoint) / "spark"))
        .trigger(processingTime=f"{cfg.effective_trigger_ms} milliseconds")
        .foreachBatch(committer)
        .start()
    )
    try:
        _drive(query, cfg, ends, control_dir, stop_event, on_progress, result, timeout_s, t_start)
    except JobError as exc:
        clearer = _commit_failure(cfg, committer.error)
        if clearer is None:
            raise
        raise clearer from exc
    finally:
        if query.isActive:
            query.stop()
        changelog.close()
    if committer.error is not None and isinstance(committer.error, ProducerFencedError):
        raise committer.error
    result.seconds = time.monotonic() - t_start
    return result


def _commit_failure(cfg: JobConfig, error: BaseException | None) -> ReviseError | None:
    """The committer's own error, clearer than Spark's wrapped copy of it (None: none).

    A failure inside ``foreachBatch`` reaches the driver as a Py4J-wrapped Python traceback;
    the committer keeps the original, whose message (a ``DeltaWriteError``, a Kafka
    ``ChangelogError``, an ``OSError`` such as a full disk) says what failed and where.
    """
    if error is None or isinstance(error, ProducerFencedError):
        return None
    if isinstance(error, ReviseError):
        return error
    reason = _root_cause(str(error)) or type(error).__name__
    msg = f"committing a micro-batch failed ({reason}); fix the cause and restart to replay it"
    return JobError(_disk_full_hint(cfg, str(error)) or msg)


def _root_cause(text: str) -> str:
    """The innermost ``Caused by:`` of a Java/Py4J error text, else its first line."""
    causes = [ln.split("Caused by:", 1)[1].strip() for ln in text.splitlines()
              if ln.lstrip().startswith("Caused by:")]
    if causes:
        return causes[-1]
    lines = text.strip().splitlines()
    return lines[0] if lines else ""


def _disk_full_hint(cfg: JobConfig, text: str) -> str | None:
    """Name the folder whose filesystem is full when the error says a device has no space."""
    if "No space left on device" not in text:
        return None
    full = []
    for flag, path in (("--checkpoint", cfg.checkpoint), ("--delta-path", cfg.delta_path)):
        with contextlib.suppress(OSError):
            if shutil.disk_usage(path).free < 16 * 1024 * 1024:
                full.append(f"{flag} {path}")
    where = " and ".join(full) or f"--checkpoint {cfg.checkpoint} or --delta-path {cfg.delta_path}"
    return (
        f"no space left on the filesystem of {where} (< 16 MiB free); the running micro-batch "
        "was not committed: free space there and restart, the batch is redone"
    )


def _failure_message(cfg: JobConfig, text: str) -> str:
    """What to tell the user about a failed query, given Spark's exception text.

    A deleted input topic shows up in Spark only as ``UnknownTopicOrPartitionException``
    (or as lost partitions); say which topic, that committed batches are safe, and the fix.
    """
    first = _root_cause(text)
    hint = _disk_full_hint(cfg, text)
    if hint is not None:
        return hint
    if "UnknownTopicOrPartition" in text or not _input_topic_exists(cfg):
        return (
            f"--input-topic {cfg.input_topic!r} was deleted (or lost partitions) while the job "
            f"ran ({first}); every committed micro-batch is intact and the uncommitted one is "
            "redone on restart: restore the topic with its records (same partitions and "
            "offsets) and restart, or start over with a new --checkpoint and --query-id"
        )
    return f"the streaming query failed: {first}"


def _input_topic_exists(cfg: JobConfig) -> bool:
    """True when the broker lists the input topic (or cannot be asked: then assume it does)."""
    from confluent_kafka.admin import AdminClient

    try:
        md = AdminClient({"bootstrap.servers": cfg.bootstrap_servers}).list_topics(timeout=10)
    except Exception:  # noqa: BLE001 - an unreachable broker is not a deleted topic
        return True
    topic = md.topics.get(cfg.input_topic)
    return topic is not None and topic.error is None


def _drive(
    query: StreamingQuery,
    cfg: JobConfig,
    ends: dict[int, int] | None,
    control_dir: str,
    stop_event: threading.Event | None,
    on_progress: Callable[[dict[str, Any]], None] | None,
    result: JobResult,
    timeout_s: float | None,
    t_start: float,
) -> None:
    """Watch the query: report progress, honour stop requests, and finish a bounded run."""
    last_id = -1
    close_file: Path | None = None
    control_before: int = -1

    def absorb() -> dict[str, Any] | None:
        nonlocal last_id
        newest = None
        for progress in query.recentProgress:
            bid = progress.get("batchId")
            if bid is None or bid <= last_id:
                continue
            last_id = bid
            newest = progress
            result.input_records += int(progress.get("numInputRows") or 0)
            result.progress.append(progress)
            if on_progress is not None:
                on_progress(progress)
        return newest

    while True:
        exc = query.exception()
        if exc is not None:
            text = str(exc)
            if "ProducerFencedError" in text or "fenced" in text.lower():
                msg = (
                    f"this instance of query {cfg.query_id!r} was fenced: another instance "
                    "with the same --query-id took over; this one stops"
                )
                raise ProducerFencedError(msg)
            raise JobError(_failure_message(cfg, text.strip() or repr(exc)))
        if not query.isActive:
            absorb()
            return
        absorb()
        progress = query.lastProgress
        if stop_event is not None and stop_event.is_set():
            result.stopped_by_signal = True
            _stop_between_batches(query)
            absorb()
            return
        if timeout_s is not None and time.monotonic() - t_start > timeout_s:
            query.stop()
            msg = f"the job did not finish within {timeout_s:.0f}s"
            raise JobError(msg)
        if ends is not None and (progress or not any(ends.values())):
            if close_file is None:
                read = (_source_offsets(progress or {}, 0) or {}).get(cfg.input_topic, {})
                done = all(int(read.get(str(p), 0)) >= hi for p, hi in ends.items() if hi > 0)
                if done:
                    ctl = _source_offsets(progress or {}, 1)
                    control_before = int(ctl["logOffset"]) if ctl else -1
                    close_file = _write_close_all(control_dir, cfg.shards)
            elif progress:
                ctl = _source_offsets(progress, 1)
                if ctl is not None and int(ctl["logOffset"]) > control_before:
                    # The micro-batch that read the close-all command has committed.
                    _stop_between_batches(query)
                    absorb()
                    return
        time.sleep(0.2)


def _stop_between_batches(query: StreamingQuery, wait_s: float = 30.0) -> None:
    """Stop the query right after a micro-batch has committed (or after ``wait_s``).

    Stopping in the middle of a batch is safe (the batch is replayed on restart) but makes
    Spark log an interrupted batch; between batches it is silent. The processing-time
    timeout makes Spark run no-data micro-batches back to back (trigger 0 under ``--once``),
    so the trigger is almost never seen inactive: the moment just after a batch reports its
    progress (its commit log is written then) is the gap to aim for.
    """
    deadline = time.monotonic() + wait_s

    def last_batch() -> Any:
        progress = query.lastProgress
        return progress.get("batchId") if progress else None

    last = last_batch()
    while time.monotonic() < deadline and query.isActive:
        if not query.status.get("isTriggerActive", False):
            break
        if last_batch() != last:
            break
        time.sleep(0.02)
    query.stop()


def _write_close_all(control_dir: str, shards: int) -> Path:
    """Drop one close-all command per shard into the control source (atomic rename)."""
    name = f"close-{int(time.time() * 1000)}-{uuid.uuid4().hex[:6]}.json"
    tmp = Path(control_dir) / f".{name}.tmp"
    tmp.write_text("".join(json.dumps({"command": CLOSE_ALL, "shard": s}) + "\n"
                           for s in range(shards)))
    final = Path(control_dir) / name
    os.replace(tmp, final)
    return final
