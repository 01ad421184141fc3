"""Broker failure: one node of a 3-node Kafka cluster SIGKILLed while the job runs and input flows.

1. ``broker.start(home, nodes=3)``; every topic revise creates or uses (input, changelog, late,
   dead letters, ``_revise_progress``, the transaction state log, consumer offsets when present)
   must have 3 replicas and ``min.insync.replicas=2``; the job's own topics inherit both from the
   broker defaults (``default.replication.factor``, ``min.insync.replicas``), the internal ones
   from ``transaction.state.log.*`` / ``offsets.topic.*``. Checked with ``describe_configs`` and
   the metadata's replica lists.
2. The job runs unbounded while a producer thread writes input at a steady rate.
3. The node leading the changelog's partition 0 is SIGKILLed mid-run (its pid is in
   ``cluster.json``); input keeps flowing; with 2 of 3 replicas in sync, produce and transactional
   commits still meet ``min.insync.replicas`` and the job must ride it out: no exit, and two
   more micro-batches commit while the node is down.
4. ``broker.restart_node`` brings the node back; within a bounded time every partition's ISR is
   all 3 replicas again (the cluster healed).
5. Input stops; SIGTERM stops the job cleanly; a ``--once`` run on the same checkpoint closes
   every window; ``check_run``: read_committed changelog = Delta revisions, nothing lost or
   duplicated, every FINAL equal to the batch oracle.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest
from integration_support import CliRun, JobSetup, check_run

from benchmarks.chaos import create_topics
from revise.generate import EventStream, GeneratorConfig, generate, produce
from revise.infra import broker
from sinks.kafka import PROGRESS_TOPIC

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.delta, pytest.mark.slow]

RUN_TIMEOUT_S = 300
HEAL_TIMEOUT_S = 120
RIDE_OUT_S = 180  # micro-batches must go on without the broker within this (s)


def _slice(s: EventStream, a: int, b: int) -> EventStream:
    return EventStream(s.keys[a:b], s.ts_ms[a:b], s.values[a:b], s.kind[a:b], s.payloads[a:b])


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _replication(bootstrap: str, topics: list[str]) -> dict[str, tuple[set[int], str]]:
    """Per topic: the replica counts of its partitions and its min.insync.replicas."""
    from confluent_kafka.admin import ConfigResource

    admin = _admin(bootstrap)
    md = admin.list_topics(timeout=30)
    res = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    configs = {r.name: f.result(30) for r, f in admin.describe_configs(res).items()}
    return {t: ({len(p.replicas) for p in md.topics[t].partitions.values()},
                configs[t]["min.insync.replicas"].value) for t in topics}


def _under_replicated(bootstrap: str, topics: list[str]) -> list[str]:
    md = _admin(bootstrap).list_topics(timeout=30)
    return [f"{t}/{p.id} isr={p.isrs}" for t in topics
            for p in md.topics[t].partitions.values() if len(p.isrs) < 3]


def test_sigkill_of_one_broker_mid_run_then_it_heals_and_exactly_once_holds(tmp_path: Path):
    home = tmp_path / "cluster"
    cluster = broker.start(home, nodes=3)
    run: CliRun | None = None
    try:
        bootstrap = cluster.bootstrap_servers
        tag = uuid.uuid4().hex[:8]
        setup = JobSetup(
            bootstrap=bootstrap, input_topic=f"bf-in-{tag}", changelog_topic=f"bf-cl-{tag}",
            late_topic=f"bf-late-{tag}", dead_letter_topic=f"bf-dead-{tag}",
            query_id=f"bf-{tag}", delta_path=str(tmp_path / "delta"),
            checkpoint=str(tmp_path / "checkpoint"), workdir=tmp_path,
            max_records_per_batch=200,
        )
        # the input exists before the job; its outputs are left to the job to create
        create_topics(bootstrap, [setup.input_topic], partitions=2)
        stream = generate(GeneratorConfig(events=2_600, keys=10, seed=9, disorder_ms=2_000,
                                          late_fraction=0.04, late_by_ms=3_000,
                                          bad_fraction=0.03))
        produce(_slice(stream, 0, 600), bootstrap_servers=bootstrap, topic=setup.input_topic)
        unbounded = [a for a in setup.cli_args() if a != "--once"]
        run = CliRun(unbounded, cwd=tmp_path, log=tmp_path / "unbounded.log")
        assert run.wait_for("batch=1 ", RUN_TIMEOUT_S), run.tail()

        # 1. replication of everything revise uses
        topics = [setup.input_topic, setup.changelog_topic, setup.late_topic,
                  setup.dead_letter_topic, PROGRESS_TOPIC, "__transaction_state"]
        present = _admin(bootstrap).list_topics(timeout=30).topics
        topics += [t for t in ("__consumer_offsets",) if t in present]
        assert _replication(bootstrap, topics) == {t: ({3}, "2") for t in topics}

        # 2. input flows at a steady rate (~40 records/s for 50 s)
        errors: list[BaseException] = []

        def feed() -> None:
            try:
                produce(_slice(stream, 600, len(stream)), bootstrap_servers=bootstrap,
                        topic=setup.input_topic, rate=40)
            except BaseException as exc:  # noqa: BLE001 - reported by the test thread
                errors.append(exc)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        time.sleep(5)

        # 3. SIGKILL the leader of the changelog's partition 0
        md = _admin(bootstrap).list_topics(timeout=30)
        victim = md.topics[setup.changelog_topic].partitions[0].leader
        pid = next(n.pid for n in cluster.nodes if n.node_id == victim)
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        seen = run.log().count("batch=")
        deadline = time.monotonic() + RIDE_OUT_S
        while run.log().count("batch=") <= seen + 1 and time.monotonic() < deadline:
            assert run.proc.poll() is None, f"the job died with the broker:\n{run.tail()}"
            time.sleep(1)
        assert run.log().count("batch=") > seen + 1, "no micro-batch completed without the broker"
        assert run.proc.poll() is None, f"the job died with the broker:\n{run.tail()}"

        # 4. restart it; every partition's ISR back to 3 within a bound
        broker.restart_node(victim, home)
        deadline = time.monotonic() + HEAL_TIMEOUT_S
        while (lagging := _under_replicated(bootstrap, topics)) and time.monotonic() < deadline:
            time.sleep(1)
        assert not lagging, f"not healed {HEAL_TIMEOUT_S}s after the restart: {lagging[:5]}"
        healed_s = time.monotonic() - killed_at

        # 5. input done; stop cleanly; close every window with a bounded run
        feeder.join(120)
        assert not feeder.is_alive() and not errors, errors
        os.kill(run.proc.pid, signal.SIGTERM)
        assert run.wait(RUN_TIMEOUT_S) == 0, run.tail()
        final = CliRun(setup.cli_args(), cwd=tmp_path, log=tmp_path / "once.log")
        assert final.wait(RUN_TIMEOUT_S) == 0, final.tail()
        report = check_run(setup)
        assert report.windows > 10 and report.too_late > 0 and report.dead > 0, report
        print(f"node {victim} killed; healed {healed_s:.0f}s after the kill; {report}")
    finally:
        if run is not None:
            run.signal_group(signal.SIGKILL)
        broker.stop(home)
