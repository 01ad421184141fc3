"""One node of the embedded Kafka broker: its configuration files, its storage, its process.

A node lives in ``<home>/node-<id>/``: ``server.properties`` (KRaft combined mode, broker +
controller; the internal topics' replication factor and min ISR follow the node count; in
secure mode the listeners of :mod:`revise.infra.secure`, written owner-only),
``log4j2.properties``, ``data/`` (the log directory, formatted once with the cluster id) and
``broker.log``. :func:`write_node` writes and formats them, :func:`launch_node` starts the JVM;
:func:`node_args` is the command line that tells a node's process from any other.
The cluster (``cluster.json``, start, stop, restart) is :mod:`revise.infra.broker`'s.
"""

from __future__ import annotations

import base64
import os
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from revise.errors import InfraError, SetupError
from revise.infra import secure as _secure_mod
from revise.infra.jars import classpath
from revise.infra.procs import cap_malloc_arenas, java, jvm_options, selects_collector

__all__ = ["BrokerError", "BrokerNode", "BrokerSetupError", "check_writable", "java_command",
           "launch_node", "new_cluster_id", "node_args", "write_node"]


class BrokerError(InfraError):
    """The embedded broker cannot be started, reached or stopped."""


class BrokerSetupError(BrokerError, SetupError):
    """The machine lacks what the broker needs (Java, a free port, a writable folder): exit 2."""


@dataclass(frozen=True, slots=True)
class BrokerNode:
    """One Kafka process: broker and controller on two loopback ports."""

    node_id: int
    port: int
    controller_port: int
    pid: int
    internal_port: int = 0  # secure mode: the broker-to-broker listener


def _server_properties(
    node: BrokerNode, voters: str, data_dir: Path, n_nodes: int, partitions: int,
    material: _secure_mod.SecureMaterial | None = None,
) -> str:
    rf = min(n_nodes, 3)
    min_isr = 1 if rf == 1 else 2
    lines = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data_dir),
        "num.partitions": str(partitions),
        "default.replication.factor": str(rf),
        "min.insync.replicas": str(min_isr),
        # Internal topics must be satisfiable on this many nodes, or transactions and consumer
        # groups never become available.
        "offsets.topic.replication.factor": str(rf),
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.replication.factor": str(rf),
        "transaction.state.log.min.isr": str(min_isr),
        "transaction.state.log.num.partitions": "10",
        "share.coordinator.state.topic.replication.factor": str(rf),
        "share.coordinator.state.topic.min.isr": str(min_isr),
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "true",
        "log.retention.hours": "168",
        "log.segment.bytes": str(256 * 1024 * 1024),
    }
    if material is not None:
        lines.update(_secure_mod.listener_properties(
            material, port=node.port, internal_port=node.internal_port,
            controller_port=node.controller_port))
    return "".join(f"{k}={v}\n" for k, v in lines.items())


_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def check_writable(path: Path) -> None:
    """Create ``path`` and write a probe file in it.

    Raises:
        BrokerSetupError: It cannot be written (the message says what to do).
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        msg = (
            f"the broker's log directory {path} is not writable ({exc.strerror}); "
            "pass --home to a folder you can write or fix its permissions"
        )
        raise BrokerSetupError(msg) from exc


BROKER_G1: Final = ("-XX:+UseG1GC", "-XX:G1HeapRegionSize=4m")
"""The broker's collector. A produce request is read into one heap buffer, and the tasks'
producers send requests of up to a megabyte (``batch.size``). With G1's default region of
1 MB for this heap, a buffer of half a region or more is a humongous object, and each such
allocation above the heap's initiating occupancy started a concurrent marking cycle: 29 of
the 34 cycles of a daily benchmark run (``-Xlog:gc``). With 4 MB regions it started 2 of 7
(docs/BENCHMARKS.md, *The embedded broker's JVM*)."""


def java_command(args: list[str], *, heap: str = "1g") -> list[str]:
    """A broker-side JVM's command (the broker, its storage tool), ``args`` last.

    Kafka's classpath; :data:`BROKER_G1`, unless ``$REVISE_JVM_OPTIONS`` choose another
    collector (a JVM given two refuses to start); those options after revise's own.
    """
    cp = os.pathsep.join(str(p) for p in classpath("kafka"))
    user = jvm_options()
    collector = [] if selects_collector(user) else list(BROKER_G1)
    return [java(), f"-Xmx{heap}", "-Xms128m", *collector, "-Djava.awt.headless=true",
            *user, "-cp", cp, *args]


def _run_java(
    args: list[str], *, log: Path | None = None, heap: str = "1g"
) -> subprocess.Popen[bytes]:
    cmd = java_command(args, heap=heap)
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
    try:
        env = dict(os.environ)
        cap_malloc_arenas(env)
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )
    finally:
        if log:
            out.close()  # type: ignore[union-attr]


def _format(node_dir: Path, cluster_id: str, extra: list[str]) -> None:
    log = node_dir / "format.log"
    proc = _run_java(
        ["kafka.tools.StorageTool", "format", "-t", cluster_id, "-c",
         str(node_dir / "server.properties"), "--ignore-formatted", *extra],
        log=log, heap="256m",
    )
    if proc.wait(timeout=120) != 0:
        msg = f"formatting the broker storage failed; see {log}:\n{log.read_text()[-2000:]}"
        raise BrokerError(msg)


def write_node(
    home: Path, node: BrokerNode, voters: str, n_nodes: int, partitions: int, cluster_id: str,
    material: _secure_mod.SecureMaterial | None,
) -> int:
    """Write one node's configuration, format its storage once, start it; its pid."""
    node_dir = home / f"node-{node.node_id}"
    data_dir = node_dir / "data"
    check_writable(data_dir)
    props = _server_properties(node, voters, data_dir, n_nodes, partitions, material)
    if material is not None:
        # The broker's internal password is in this file: owner only.
        _secure_mod.write_secret(node_dir / "server.properties", props)
    else:
        (node_dir / "server.properties").write_text(props)
    log = node_dir / "broker.log"
    (node_dir / "log4j2.properties").write_text(_LOG4J2.format(log=log))
    if not (data_dir / "meta.properties").is_file():
        scram = _secure_mod.scram_format_args(material) if material is not None else []
        _format(node_dir, cluster_id, scram)
    return launch_node(node_dir)


def node_args(node_dir: Path) -> list[str]:
    """The JVM arguments after the classpath that run one node; unique to it (its own folder)."""
    return [f"-Dlog4j2.configurationFile={node_dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={node_dir}",
            "kafka.Kafka", str(node_dir / "server.properties")]


def launch_node(node_dir: Path) -> int:
    """Start the Kafka process of one node whose ``server.properties`` exists; returns its pid."""
    return _run_java(node_args(node_dir), log=node_dir / "stdout.log").pid


def new_cluster_id() -> str:
    """A random cluster id as Kafka writes them: 22 url-safe base64 characters.

    Like Kafka's own ``Uuid.randomUuid``, never one starting with ``-``: the storage tool's
    command line would read it as an option (``--cluster-id: expected one argument``), which
    failed one broker start in 64.
    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid
