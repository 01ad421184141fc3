"""Step 2 of a micro-batch alone: what the Kafka changelog costs one driver per revision.

Run: ``python -m benchmarks.bench_changelog [--batches 6] [--records 100000] [--keys 1000000]
[--window tumbling:24h] [--repeat 3] [--bootstrap HOST:PORT]``.

Revisions come from revise's own engine (``--records`` random records over ``--keys`` keys
per micro-batch, ``--window``, grace 1 h; the defaults are item 1's 1M-key daily workload of
issue 12, where nearly every record opens or revises its own window). Each micro-batch's
revisions then go, round-robin so that the machine's drift hits every variant alike, through:

- ``encode``: ``sinks.kafka.codec.encode_revisions`` only (Arrow kernels + orjson, no Kafka);
- ``eos``: ``TransactionalChangelog.commit_batch``, exactly-once, as the job's step 2 does
  (encoding one chunk ahead on a thread, produce, progress marker, commit);
- ``plain``: the same with ``transactional=False`` (an idempotent producer and a flush);
- ``produce`` / ``produce_batch``: already encoded keys and values into one transaction of a
  bare transactional producer with revise's producer settings, one ``Producer.produce`` call
  per message against one ``Producer.produce_batch`` call (confluent-kafka ≥ 2.12; a list of
  message dicts; librdkafka runs the partitioner per message), to see whether the per-message
  call is worth replacing.

Prints wall and CPU microseconds per revision for each (CPU = this process, librdkafka's
threads included; the broker is another process), the median over ``--repeat`` passes, and the
revisions per second one driver sustains on step 2 alone: ``1e6 / eos µs``. The embedded broker
(started here unless ``--bootstrap``) shares this machine's cores.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

__all__ = ["VARIANTS", "main"]

VARIANTS = ("encode", "eos", "plain", "produce", "produce_batch")
_T0 = 1_700_000_000_000


def _revisions(args: argparse.Namespace) -> list[pa.Table]:
    """Each micro-batch's revisions from revise's engine (random records, fixed seed)."""
    from revise.config import EngineConfig, WindowSpec
    from revise.engine import Engine, InputBatch

    spec = WindowSpec.parse(args.window)
    engine = Engine(EngineConfig(spec, 3_600_000, query_id="bench"))
    rng = np.random.default_rng(7)
    names = np.array([f"user-{i:07d}" for i in range(args.keys)], dtype=object)
    span_ms = 600_000  # ten minutes of event time a batch: all in one day's windows
    out = []
    for b in range(args.batches):
        ts = _T0 + b * span_ms + rng.integers(0, span_ms, args.records)
        batch = InputBatch.from_arrays(names[rng.integers(0, args.keys, args.records)], ts,
                                       rng.random(args.records) * 100)
        res = engine.process(batch, watermark_ms=_T0 + b * span_ms - 3_600_000, batch_id=b,
                             now_ms=int(time.time() * 1000))
        out.append(res.revisions.to_arrow())
    return out


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


class _Runner:
    """One producer per variant, opened once (as the job's is), and a fresh topic each."""

    def __init__(self, bootstrap: str, partitions: int) -> None:
        from confluent_kafka import Producer

        from sinks.kafka.admin import create_topics
        from sinks.kafka.changelog_config import DEFAULT_PRODUCER_CONFIG, ChangelogConfig
        from sinks.kafka.writer import TransactionalChangelog

        run = uuid.uuid4().hex[:8]
        self.topics = {v: f"bench-changelog-{v}-{run}" for v in VARIANTS}
        create_topics(bootstrap, self.topics.values(), partitions=partitions)
        self.logs = {
            v: TransactionalChangelog(ChangelogConfig(
                bootstrap, f"bench-{v}-{run}", self.topics[v], transactional=(v == "eos"),
                progress_topic=f"bench-progress-{run}")).open()
            for v in ("eos", "plain")
        }
        self.bare = Producer({**DEFAULT_PRODUCER_CONFIG, "bootstrap.servers": bootstrap,
                              "transactional.id": f"bench-bare-{run}"})
        self.bare.init_transactions(60)
        self.batch_id = 0

    def close(self) -> None:
        for log in self.logs.values():
            log.close()
        self.bare.flush(30)

    def run(self, variant: str, revisions: pa.Table,
            encoded: tuple[list[bytes], list[bytes]]) -> tuple[float, float]:
        from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA
        from sinks.kafka.codec import encode_revisions

        if variant == "encode":
            return _timed(lambda: encode_revisions(revisions))
        if variant in self.logs:
            self.batch_id += 1
            log, b = self.logs[variant], self.batch_id
            return _timed(lambda: log.commit_batch(
                b, revisions, LATE_SCHEMA.empty_table(), DEAD_LETTER_SCHEMA.empty_table(),
                emitted_at_ms=int(time.time() * 1000)))
        keys, values = encoded
        topic, p = self.topics[variant], self.bare

        def bare() -> None:
            p.begin_transaction()
            if variant == "produce":
                for k, v in zip(keys, values, strict=True):
                    while True:
                        try:
                            p.produce(topic, v, k)
                            break
                        except BufferError:
                            p.poll(0.05)
            else:
                messages = [{"key": k, "value": v} for k, v in zip(keys, values, strict=True)]
                queued = p.produce_batch(topic, messages)
                if queued != len(messages):
                    msg = f"produce_batch queued {queued} of {len(messages)} messages"
                    raise RuntimeError(msg)
            p.commit_transaction(60)

        return _timed(bare)


def _passes(runner: _Runner, batches: list[pa.Table],
            repeat: int) -> dict[str, list[tuple[float, float]]]:
    """Per variant, (wall, CPU) µs a revision of each pass over ``batches``, round-robin."""
    from sinks.kafka.codec import encode_revisions

    n = sum(t.num_rows for t in batches)
    per: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
    try:
        for pass_ in range(repeat):
            totals = dict.fromkeys(VARIANTS, (0.0, 0.0))
            for i, revisions in enumerate(batches):
                encoded = encode_revisions(revisions)
                shift = (pass_ + i) % len(VARIANTS)
                for variant in VARIANTS[shift:] + VARIANTS[:shift]:
                    wall, cpu = runner.run(variant, revisions, encoded)
                    w, c = totals[variant]
                    totals[variant] = (w + wall, c + cpu)
            for v, (w, c) in totals.items():
                per[v].append((w / n * 1e6, c / n * 1e6))
            print(f"pass {pass_ + 1}: " + ", ".join(
                f"{v} {per[v][-1][0]:.2f}" for v in VARIANTS) + " µs/revision (wall)",
                flush=True)
    finally:
        runner.close()
    return per


def main(argv: Sequence[str] | None = None) -> int:
    """Build the revisions, then time each variant on each micro-batch; print the figures."""
    from revise.infra import broker
    from sinks.kafka.codec import encode_revisions

    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_changelog",
                                description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=6)
    p.add_argument("--records", type=int, default=100_000, help="input records per batch")
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--window", default="tumbling:24h")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--repeat", type=int, default=3, help="passes over all batches")
    p.add_argument("--bootstrap", default=None, help="an existing broker (default: embedded)")
    args = p.parse_args(argv)

    batches = _revisions(args)
    n = sum(t.num_rows for t in batches)
    nbytes = sum(sum(len(v) for v in encode_revisions(t)[1]) for t in batches[:1])
    print(f"{len(batches)} micro-batches, {n} revisions "
          f"(~{nbytes / max(batches[0].num_rows, 1):.0f} bytes a value), "
          f"{args.keys} keys, {args.window}; {args.repeat} passes", flush=True)
    work = Path(tempfile.mkdtemp(prefix="revise-bench-changelog-"))
    try:
        with broker.given_or_embedded(args.bootstrap, work / "broker") as bootstrap:
            per = _passes(_Runner(bootstrap, args.partitions), batches, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"| variant | wall µs / revision (median of {args.repeat}) | CPU µs / revision |")
    print("|---|---:|---:|")
    med = {v: (statistics.median(w for w, _ in per[v]), statistics.median(c for _, c in per[v]))
           for v in VARIANTS}
    for v in VARIANTS:
        print(f"| {v} | {med[v][0]:.2f} | {med[v][1]:.2f} |")
    print()
    print(f"exactly-once vs plain: {med['eos'][0] / med['plain'][0]:.2f}x the wall time; "
          f"produce_batch / produce: {med['produce_batch'][0] / med['produce'][0]:.2f}x")
    print(f"step 2 alone sustains ~{1e6 / med['eos'][0]:,.0f} revisions/s on one driver")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
