"""The real systems come up and behave: the embedded broker, the JVM artifacts, Spark + Kafka."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from revise.errors import InfraError
from revise.infra import broker, jars
from revise.infra.procs import MALLOC_ARENAS_ENV, jvm_options, pid_alive

pytestmark = [pytest.mark.kafka]


def _consume_all(bootstrap: str, topic: str, n: int, timeout_s: float = 30) -> list[bytes]:
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"g-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
    })
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
    finally:
        c.close()
    return got


def test_jars_resolved_once_and_quick() -> None:
    t0 = time.monotonic()
    folders = jars.resolve_all()
    assert time.monotonic() - t0 < 5, "a second resolution must not call Maven"
    names = {p.name for p in folders["spark"].glob("*.jar")}
    assert any(n.startswith("spark-sql-kafka-0-10_2.13-4.2.0") for n in names)
    assert any(n.startswith("delta-spark_4.2_2.13-") for n in names)
    assert any(n.startswith("kafka_2.13-4.") for n in (p.name for p in jars.classpath("kafka")))


def test_revise_jar_compiled_once_and_named_by_its_sources(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("REVISE_JVM_DIR", str(tmp_path))
    jar = jars.build_revise_jar()
    assert jar.parent == tmp_path / "revise" and jar.name.startswith("revise-jvm-")
    with zipfile.ZipFile(jar) as z:
        assert "revise/jvm/FastParse.class" in z.namelist()
        assert not [n for n in z.namelist() if n.startswith(jars.LOCAL_FILES_CLASSES)]
    # LocalFiles alone in its own jar (the driver's class path), named by the same sources
    fs_jar = jars.local_files_jar_path()
    assert fs_jar.parent == jar.parent and fs_jar.name == jar.name.replace("-jvm-", "-fs-")
    with zipfile.ZipFile(fs_jar) as z:
        assert sorted(z.namelist()) == ["META-INF/MANIFEST.MF", "revise/jvm/LocalFiles$Raw.class",
                                        "revise/jvm/LocalFiles.class"]
    built = jar.stat().st_mtime_ns
    assert jars.build_revise_jar() == jar and jar.stat().st_mtime_ns == built
    # Changed sources: a new name (a cluster never keeps a stale copy); the old jar stays for
    # a job that may still serve it.
    sources = jars._java_sources()
    changed = [(rel, text + b"\n// changed\n") for rel, text in sources]
    monkeypatch.setattr(jars, "_java_sources", lambda: changed)
    again = jars.build_revise_jar()
    assert again != jar and again.is_file() and jar.is_file()
    assert sorted(p.name for p in jar.parent.iterdir()) == sorted(
        [jar.name, again.name, fs_jar.name, jars.local_files_jar_path().name])
    # Sources that do not compile say why.
    monkeypatch.setattr(jars, "_java_sources", lambda: [("revise/jvm/Bad.java", b"class {")])
    with pytest.raises(InfraError, match="javac could not compile"):
        jars.build_revise_jar()


def test_broker_lifecycle_keeps_data(tmp_path: Path) -> None:
    home = tmp_path / "b"
    cluster = broker.start(home)
    try:
        assert broker.status(home) == cluster
        again = broker.start(home)
        assert again.pids == cluster.pids, "starting twice must reuse the running broker"
        topic = f"persist-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True})
        for i in range(5):
            p.produce(topic, f"v{i}".encode())
        assert p.flush(30) == 0
        stopped = broker.stop(home)
        assert stopped is not None
        assert broker.status(home) is None
        for pid in cluster.pids:
            assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
        restarted = broker.start(home)
        assert restarted.bootstrap_servers == cluster.bootstrap_servers
        assert sorted(_consume_all(restarted.bootstrap_servers, topic, 5)) == [
            f"v{i}".encode() for i in range(5)
        ]
        assert (home / "node-1" / "broker.log").stat().st_size > 0
        # $REVISE_JVM_OPTIONS (the suite sets it, tests/conftest.py) reach the broker's JVM
        args = Path(f"/proc/{restarted.pids[0]}/cmdline").read_bytes().decode().split("\0")
        wanted = jvm_options()
        assert wanted and all(opt in args for opt in wanted), (wanted, args)
        assert _environ(restarted.pids[0]).get(MALLOC_ARENAS_ENV) == _arenas()
    finally:
        broker.stop(home)


def _environ(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
    return dict(e.split("=", 1) for e in entries if "=" in e)


def _arenas() -> str:
    """The malloc arena cap revise gives its JVMs: this process's value when set, else 2."""
    from revise.infra.procs import MALLOC_ARENAS

    return os.environ.get(MALLOC_ARENAS_ENV, MALLOC_ARENAS)


def test_given_or_embedded_starts_a_broker_only_when_none_is_given(tmp_path: Path) -> None:
    home = tmp_path / "b"
    with broker.given_or_embedded("example.invalid:9092", home) as given:
        assert given == "example.invalid:9092"
        assert broker.status(home) is None
    with broker.given_or_embedded(None, home) as embedded:
        cluster = broker.status(home)
        assert cluster is not None and embedded == cluster.bootstrap_servers
    assert broker.status(home) is None  # stopped after the block
    for pid in cluster.pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()


def test_broker_errors_are_clear(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(broker.BrokerError, match=f"port {port} .* in use"):
            broker.start(tmp_path / "taken", port=port)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.geteuid() == 0:
            # root writes anywhere: make the home a file instead, which nobody can write into
            blocker = tmp_path / "file-home"
            blocker.write_text("x")
            with pytest.raises(broker.BrokerError, match="not writable"):
                broker.start(blocker / "sub")
        else:
            with pytest.raises(broker.BrokerError, match="not writable"):
                broker.start(ro / "sub")
    finally:
        ro.chmod(0o700)


def test_missing_java_is_reported(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)
    env["REVISE_HOME"] = str(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "revise", "broker", "start"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Java is not installed" in proc.stderr


def _broker_cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m revise broker ARGS --home ROOT`` (the broker's folder is ROOT/broker)."""
    cmd = [sys.executable, "-m", "revise", "broker", *args, "--home", str(root)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=False)


def _sigkill(pid: int) -> None:
    """SIGKILL ``pid`` and wait until it is gone (or a zombie)."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while pid_alive(pid):
        assert time.monotonic() < deadline, f"{pid} survived SIGKILL"
        time.sleep(0.05)


def _nodes(out: str) -> dict[int, tuple[str, int]]:
    """``node.<id>=up|down port=P pid=N`` lines of status/start: id -> (state, pid)."""
    found = {}
    for line in out.splitlines():
        if line.startswith("node."):
            head, _port, pid = line.split()
            node, state = head.removeprefix("node.").split("=")
            found[int(node)] = (state, int(pid.removeprefix("pid=")))
    return found


def test_cli_broker_status_start_stop(tmp_path: Path) -> None:
    home = tmp_path / "cli"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return _broker_cli(home, *args)

    assert cli("status").stdout.strip() == "not running"
    started = cli("start")
    try:
        assert started.returncode == 0, started.stderr
        assert "bootstrap=127.0.0.1:" in started.stdout
        status = cli("status")
        assert status.returncode == 0
        pids = [out.split("pids=")[1].split()[0] for out in (status.stdout, started.stdout)]
        assert pids[0] == pids[1]
        assert status.stdout == started.stdout
        assert _nodes(status.stdout) == {1: ("up", int(pids[0]))}
    finally:
        stopped = cli("stop")
    assert stopped.stdout.strip() == "stopped"
    assert cli("status").stdout.strip() == "not running"


@pytest.mark.slow
def test_three_broker_cluster_replicates_commits_and_reports_a_dead_node(tmp_path: Path) -> None:
    """Transactions on 3 nodes; then a SIGKILLed node: ``revise broker status`` exits 4 and
    names the nodes up and down, ``start`` starts the dead node again, ``stop`` stops the
    survivors of another kill, and status exits 3."""
    root = tmp_path / "root"
    home = root / "broker"
    cluster = broker.start(home, nodes=3)
    try:
        assert len(cluster.nodes) == 3
        bs = cluster.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs})
        topic = f"rf3-{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(60)
        md = admin.list_topics(topic, timeout=30)
        assert len(md.brokers) == 3
        assert all(len(p.replicas) == 3 for p in md.topics[topic].partitions.values())
        p = Producer({"bootstrap.servers": bs, "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"})
        p.init_transactions(60)
        p.begin_transaction()
        p.produce(topic, b"committed")
        p.commit_transaction(60)
        assert _consume_all(bs, topic, 1, timeout_s=60) == [b"committed"]

        n1, n2, n3 = cluster.nodes
        _sigkill(n2.pid)
        degraded = _broker_cli(root, "status")
        assert degraded.returncode == 4, degraded
        assert _nodes(degraded.stdout) == {1: ("up", n1.pid), 2: ("down", n2.pid),
                                           3: ("up", n3.pid)}
        assert degraded.stdout.startswith(
            f"degraded bootstrap=127.0.0.1:{n1.port},127.0.0.1:{n3.port} ")
        assert "degraded: node 1,3 up, node 2 down" in degraded.stdout
        assert "--nodes 3 starts the down nodes again" in degraded.stderr
        assert broker.status(home) is None  # what the other commands use: not a whole cluster

        wrong = _broker_cli(root, "start")  # --nodes 1
        assert wrong.returncode == 1 and "degraded (nodes 1,3 up, 2 down)" in wrong.stderr, wrong
        healed = _broker_cli(root, "start", "--nodes", "3")
        assert healed.returncode == 0, healed.stderr[-3000:]
        nodes = _nodes(healed.stdout)
        assert nodes[1] == ("up", n1.pid) and nodes[3] == ("up", n3.pid), nodes
        assert nodes[2][0] == "up" and nodes[2][1] != n2.pid and pid_alive(nodes[2][1])
        assert _broker_cli(root, "status").returncode == 0
        assert len(AdminClient({"bootstrap.servers": bs}).list_topics(timeout=30).brokers) == 3

        _sigkill(n1.pid)
        assert _nodes(_broker_cli(root, "status").stdout)[1][0] == "down"
        stopped = _broker_cli(root, "stop")
        assert stopped.returncode == 0 and stopped.stdout.strip() == "stopped", stopped
        assert not pid_alive(nodes[2][1]) and not pid_alive(n3.pid)
        gone = _broker_cli(root, "status")
        assert gone.returncode == 3 and gone.stdout.strip() == "not running", gone
    finally:
        broker.stop(home)


@pytest.mark.spark
def test_spark_streams_kafka_read_committed(spark, kafka_bootstrap, new_topic, tmp_path) -> None:  # type: ignore[no-untyped-def]
    topic = new_topic("rc", partitions=2)
    p = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"tx-{topic}"})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, f"ok{i}".encode())
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"aborted")
    p.abort_transaction(30)
    df = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .load()
        .selectExpr("CAST(value AS STRING) AS v")
    )
    q = (df.writeStream.format("memory").queryName(f"rc_{uuid.uuid4().hex[:8]}")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    rows = sorted(r.v for r in spark.sql(f"SELECT v FROM {q.name}").collect())
    assert rows == ["ok0", "ok1", "ok2"]


def test_the_spark_jvm_runs_with_revise_jvm_options(spark) -> None:  # type: ignore[no-untyped-def]
    """revise's JIT thresholds, then $REVISE_JVM_OPTIONS (set for the suite by
    tests/conftest.py), reach the driver JVM, which runs with them."""
    from revise.spark.session import JIT_OPTIONS

    jvm = spark.sparkContext._jvm
    args = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    wanted = jvm_options()
    assert wanted and all(opt in args for opt in wanted), (wanted, args)
    assert args.index(JIT_OPTIONS[0]) < args.index(wanted[0]), args
    diagnostic = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    scaling = diagnostic.getVMOption("CompileThresholdScaling")
    assert float(scaling.getValue()) == float(JIT_OPTIONS[0].partition("=")[2]), scaling


def test_the_spark_driver_jvm_maps_the_class_archive(spark) -> None:  # type: ignore[no-untyped-def]
    """``make install`` trains the driver's class archive (revise.infra.cds) and every session
    revise starts maps it: the JVM accepted it (one it rejects is unmapped)."""
    from revise.infra import cds

    archive = cds.archive_path()
    assert archive.is_file(), "no class archive: run python -m revise.infra.cds (make install)"
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    assert str(archive) in Path(f"/proc/{pid}/maps").read_text()


def test_the_spark_driver_jvm_caps_its_malloc_arenas(spark) -> None:  # type: ignore[no-untyped-def]
    """revise.infra.procs.MALLOC_ARENAS: in the driver JVM's environment, and the executors'."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    assert _environ(pid).get(MALLOC_ARENAS_ENV) == _arenas()
    conf = spark.sparkContext.getConf()
    assert conf.get(f"spark.executorEnv.{MALLOC_ARENAS_ENV}") == _arenas()




@pytest.mark.spark
def test_local_python_workers_are_forked_by_revises_daemon(spark) -> None:  # type: ignore[no-untyped-def]
    """revise.spark.pydaemon forks a local master's workers, importing the installed pyspark.

    Not from Spark's archives (pyspark.zip, py4j's, the spark-core jar, all inside the
    installed package here), which every worker's first task would read again
    (``importlib.invalidate_caches``).
    """
    installed = str(Path(pyspark.__file__).parent)

    def facts(rows: Iterator[Any]) -> Iterator[Any]:  # runs in the worker, pickled by value
        import os as w_os
        import sys as w_sys
        from pathlib import Path as WPath

        import pandas as pd
        import pyspark as w_pyspark

        for _ in rows:
            parent = WPath(f"/proc/{w_os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ")
            yield pd.DataFrame({
                "parent": [parent.decode()],
                "pyspark": [w_pyspark.__file__],
                "archives": [sum(p.startswith(installed + w_os.sep) for p in w_sys.path)],
                "arenas": [w_os.environ.get("MALLOC_ARENA_MAX")],
            })

    rows = (spark.range(2, numPartitions=2)
            .mapInPandas(facts, "parent string, pyspark string, archives int, arenas string")
            .collect())
    assert len(rows) == 2
    for row in rows:
        assert "-m revise.spark.pydaemon pyspark.worker" in row.parent
        assert row.pyspark == pyspark.__file__
        assert row.archives == 0
        assert row.arenas == _arenas()  # the driver JVM's environment, inherited
