"""The demo: the whole pipeline end to end, nothing to configure (``revise demo``).

Starts the embedded broker if none is running, creates fresh topics, generates an out-of-order
stream with late and malformed records, runs the job in revision mode with ``--once``, and
prints what a newcomer wants to see: events in, revisions out, windows closed, late and dead
records, an exactly-once check of the committed changelog against Delta, one window's revision
lineage (EARLY → LATE → FINAL), where the tables are and a ``revise query`` to try.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from pathlib import Path

from revise.config import EngineConfig, WindowSpec
from revise.generate import GeneratorConfig, generate, produce
from revise.jobconfig import DeltaOutput, JobConfig, KafkaIO, SparkTuning
from revise.kafka import KafkaSettings

__all__ = ["run_demo"]


def _home() -> Path:
    root = os.environ.get("REVISE_HOME")
    return Path(root).expanduser() if root else Path.home() / ".revise"


def _rule(title: str) -> None:
    print(f"\n── {title} " + "─" * max(0, 76 - len(title)))


# Longer than ~60 lines: the demo's numbered sections print in order; it is a script.
def run_demo(
    *, events: int = 20_000, keys: int = 50, seed: int = 7, out: Path | None = None,
    kafka: KafkaSettings | None = None,
) -> int:
    """Run the demo; returns 0 when the exactly-once check holds, 1 otherwise.

    ``kafka``: the Kafka cluster and client settings (SASL, TLS …) to use; None: the embedded
    broker (started if needed), plaintext.
    """
    from revise.infra import broker
    from revise.spark.driver import run_job
    from revise.spark.session import spark_session
    from sinks.kafka import decode_revision, read_committed

    t0 = time.monotonic()
    run = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:4]
    out = (out or _home() / "demo" / run).resolve()
    _rule("1. broker")
    if kafka is None or kafka.bootstrap_servers is None:
        cluster = broker.status() or broker.start()
        kafka = (kafka or KafkaSettings(None)).with_bootstrap(cluster.bootstrap_servers)
        print(f"Apache Kafka (KRaft) at {cluster.bootstrap_servers}, pid {cluster.pids[0]}, "
              f"data in {cluster.home}")
    else:
        print(f"Apache Kafka at {kafka.bootstrap_servers} ({kafka.origin})")
    bootstrap = str(kafka.bootstrap_servers)

    _rule("2. input: an out-of-order stream")
    gen = GeneratorConfig(events=events, keys=keys, seed=seed, disorder_ms=3_000,
                          late_fraction=0.03, late_by_ms=8_000, bad_fraction=0.01, step_ms=10)
    stream = generate(gen)
    topic = f"demo-input-{run}"
    produce(stream, bootstrap_servers=bootstrap, topic=topic, partitions=4, kafka=kafka)
    kinds = Counter(int(k) for k in stream.kind)
    span_s = (int(stream.ts_ms.max()) - int(stream.ts_ms.min())) / 1000 if len(stream) else 0
    print(f"{len(stream)} events over {keys} keys, {span_s:.0f}s of event time, to topic {topic}")
    print(f"  {kinds[0]} in order (disorder up to 3s), {kinds[1]} delayed by a heavy tail "
          f"(8s × Pareto), {kinds[2]} malformed")
    for p in stream.payloads[:2]:
        print(f"  e.g. {p.decode()}")

    _rule("3. the job: revision mode, tumbling 10s windows, grace 5s")
    engine = EngineConfig(window=WindowSpec.parse("tumbling:10s"), grace_ms=5_000,
                          query_id=f"demo-{run}")
    cfg = JobConfig(
        kafka=KafkaIO(bootstrap_servers=bootstrap, input_topic=topic,
                      changelog_topic=f"demo-changelog-{run}", late_topic=f"demo-late-{run}",
                      dead_letter_topic=f"demo-dead-letters-{run}", settings=kafka),
        delta=DeltaOutput(path=str(out / "delta")), checkpoint=str(out / "checkpoint"),
        engine=engine, once=True,
        spark=SparkTuning(max_records_per_batch=max(1000, events // 4), shards=4),
    )
    print(f"revise run --once --window tumbling:10s --grace 5s --query-id {engine.query_id} "
          f"--max-records-per-batch {cfg.spark.max_records_per_batch}")
    # A run of seconds: the driver JVM's quick C1 compiler alone (57 s -> 43 s for the whole
    # demo here, docs/lab/benchmarks-diary.md, *Start-up*); a long job wants the default, C2.
    spark = spark_session("revise-demo",
                          extra_conf={"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"})
    result = run_job(
        cfg, spark=spark,
        on_progress=lambda p: print(
            f"  batch {p['batchId']:>3}: {p['numInputRows']:>6} records, "
            f"watermark {(p.get('eventTime') or {}).get('watermark', '-')}"
        ) if p.get("numInputRows") else None,
    )
    print(f"done in {result.seconds:.0f}s: {result.batches} micro-batches")

    _rule("4. what came out")
    from revise.query.views import register_views

    register_views(spark, cfg.delta.path)
    finals = spark.sql("SELECT count(*) AS n FROM final_windows").collect()[0]["n"]
    timing = {r["timing"]: r["n"] for r in spark.sql(
        "SELECT timing, count(*) AS n FROM revision_history GROUP BY timing").collect()}
    n_rev = sum(timing.values())
    print(f"events in        {len(stream)}")
    print(f"revisions out    {n_rev}  (EARLY {timing.get('EARLY', 0)}, LATE "
          f"{timing.get('LATE', 0)}, FINAL {timing.get('FINAL', 0)})")
    print(f"windows closed   {finals}  ({n_rev / max(finals, 1):.2f} revisions per window)")
    n_late = spark.sql("SELECT count(*) AS n FROM late_records").collect()[0]["n"]
    print(f"too-late records {n_late}  (arrived after window end + grace: kept, not dropped)")
    dead = spark.sql("SELECT reason, count(*) AS n FROM dead_letters GROUP BY reason "
                     "ORDER BY n DESC").collect()
    print(f"dead letters     {sum(r['n'] for r in dead)}")
    for r in dead[:6]:
        print(f"    {r['n']:>4}  {r['reason']}")

    _rule("5. exactly-once: the committed changelog vs Delta")
    msgs = read_committed(bootstrap, cfg.kafka.changelog_topic, timeout_s=60,
                          client_config=kafka.consumer_conf())
    kafka_ids: Counter[tuple[str, int, int, int]] = Counter()
    for m in msgs:
        rev = decode_revision(m.value() or b"")
        kafka_ids[(rev.key, rev.window_start_ms, rev.window_end_ms, rev.revision)] += 1
    delta_ids = Counter(
        (r["key"], r["window_start_ms"], r["window_end_ms"], r["revision"])
        for r in spark.sql(
            "SELECT key, window_start_ms, window_end_ms, revision FROM revision_history"
        ).collect()
    )
    dup_k = sum(1 for c in kafka_ids.values() if c > 1)
    dup_d = sum(1 for c in delta_ids.values() if c > 1)
    same = set(kafka_ids) == set(delta_ids)
    print(f"changelog (read_committed): {len(msgs)} revisions, {dup_k} duplicated")
    print(f"Delta revisions:            {sum(delta_ids.values())} revisions, {dup_d} duplicated")
    print(f"same revisions in both:     {'yes' if same else 'NO'}")
    ok = same and dup_k == 0 and dup_d == 0

    _rule("6. one window's lineage")
    pick = spark.sql(
        "SELECT key, window_start_ms, window_end_ms, count(*) AS n, "
        "sum(CASE WHEN timing = 'LATE' THEN 1 ELSE 0 END) AS n_late_revs FROM revision_history "
        "GROUP BY key, window_start_ms, window_end_ms HAVING n_late_revs > 0 "
        "ORDER BY n DESC, key, window_start_ms LIMIT 1"
    ).collect()
    if pick:
        k, s, e = pick[0]["key"], pick[0]["window_start_ms"], pick[0]["window_end_ms"]
        print(f"key {k}, window [{s}, {e})")
        print(f"  {'rev':>3} {'timing':<6} {'final':<5} {'count':>5} {'prev':>5} {'sum':>10} "
              f"{'n_late':>6} {'watermark - end':>15} batch")
        for r in spark.sql(
            f"SELECT * FROM revision_history WHERE key = '{k}' AND window_start_ms = {s} "
            "ORDER BY revision"
        ).collect():
            prev = "-" if r["prev_count"] is None else r["prev_count"]
            print(f"  {r['revision']:>3} {r['timing']:<6} {r['is_final']!s:<5} {r['count']:>5} "
                  f"{prev!s:>5} {r['sum']:>10.2f} {r['n_late']:>6} "
                  f"{r['watermark_ms'] - e:>13}ms {r['batch_id']:>5}")

    _rule("7. try it")
    print(f"Delta tables: {cfg.delta.path}/{{revisions,latest,late,dead_letter}}")
    print(f"Changelog topic: {cfg.kafka.changelog_topic} on {bootstrap}")
    print(f'revise query "SELECT timing, count(*) FROM revision_history GROUP BY timing" '
          f"--delta-path {cfg.delta.path}")
    print(f"\n{'OK' if ok else 'FAILED'}: demo finished in {time.monotonic() - t0:.0f}s")
    return 0 if ok else 1
