"""The embedded Apache Kafka broker: real Kafka in KRaft combined mode, started as a JVM process.

One node by default (``revise broker start``), or a cluster of N nodes on one machine
(``start(..., nodes=3)``) whose internal topics use replication factor min(N, 3). Every node is
broker + controller; the controller quorum is static (``controller.quorum.voters``) and the
storage of each node is formatted on first start with one shared cluster id. Settings make
transactions and consumer groups work on one node: the internal topics'
replication factor and min ISR follow the node count.

State lives in a home folder (``$REVISE_HOME/broker`` by default, ``~/.revise/broker``)::

    cluster.json       ports, pids, cluster id — what ``status`` prints
    node-<id>/         server.properties, data/ (the log directory), broker.log
                       (written and started by :mod:`revise.infra.broker_node`)

A node is up while the pid in ``cluster.json`` still runs that node's own command line
(``kafka.Kafka <home>/node-<id>/server.properties``), so a pid the kernel has since given to
another process counts as down. :func:`status` returns only a cluster whose every node is up;
:func:`recorded` and :meth:`BrokerCluster.up_nodes` tell a degraded cluster (some nodes up) from
a stopped one.

Starting twice reuses the running broker; starting a degraded cluster starts its down nodes again
(same ids, ports and data) and leaves the others alone. ``stop`` sends SIGTERM to every node that
is up, waits, then SIGKILLs; ``cluster.json`` stays, so the next start reuses ports and cluster id.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from revise.infra import secure as _secure_mod
from revise.infra.broker_node import (
    BrokerError,
    BrokerNode,
    BrokerSetupError,
    check_writable,
    launch_node,
    new_cluster_id,
    node_args,
    write_node,
)
from revise.infra.procs import free_port, port_free, runs_command, terminate_all

__all__ = [
    "BrokerCluster", "BrokerError", "default_home", "given_or_embedded", "recorded", "restart_node",
    "start", "status", "stop",
]

_READY_TIMEOUT_S = 90.0
_STOP_TIMEOUT_S = 30.0


def default_home() -> Path:
    """``$REVISE_HOME/broker`` or ``~/.revise/broker``."""
    root = os.environ.get("REVISE_HOME")
    base = Path(root).expanduser() if root else Path.home() / ".revise"
    return (base / "broker").resolve()


@dataclass(frozen=True, slots=True)
class BrokerCluster:
    """A running embedded broker (one or more nodes) and where its files are."""

    home: str
    cluster_id: str
    nodes: tuple[BrokerNode, ...]
    secure: bool = False

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:port[,127.0.0.1:port…]`` for Kafka clients."""
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    @property
    def pids(self) -> list[int]:
        """Process ids of the nodes."""
        return [n.pid for n in self.nodes]

    def node_up(self, node: BrokerNode) -> bool:
        """Whether ``node``'s pid runs that node's Kafka process (not a process with its pid)."""
        return runs_command(node.pid, self.node_args(node))

    def node_args(self, node: BrokerNode) -> list[str]:
        """The arguments unique to ``node``'s process (what tells it from one with its pid)."""
        return node_args(Path(self.home) / f"node-{node.node_id}")

    def up_nodes(self) -> tuple[BrokerNode, ...]:
        """The nodes whose process runs, in node order."""
        return tuple(n for n in self.nodes if self.node_up(n))

    def alive(self) -> bool:
        """True when every node's process is running."""
        return all(self.node_up(n) for n in self.nodes)

    def to_json(self) -> str:
        """The ``cluster.json`` form."""
        return json.dumps(
            {"home": self.home, "cluster_id": self.cluster_id,
             "nodes": [asdict(n) for n in self.nodes], "secure": self.secure},
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str) -> BrokerCluster:
        """Inverse of :meth:`to_json`."""
        d = json.loads(text)
        return cls(d["home"], d["cluster_id"], tuple(BrokerNode(**n) for n in d["nodes"]),
                   bool(d.get("secure", False)))

    def client_config(self, user: str = "admin") -> dict[str, Any]:
        """confluent-kafka settings reaching this cluster (as ``user`` when secure)."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        if self.secure:
            material = _secure_mod.load_material(Path(self.home))
            conf.update(_secure_mod.client_config(material, user))
        return conf

    def describe_lines(self) -> list[str]:
        """``bootstrap=HOST:PORT[,...]`` and, when secure, ``config.<user>=<file>`` per user."""
        if self.secure:
            return _secure_mod.describe_lines(self.bootstrap_servers, Path(self.home))
        return [f"bootstrap={self.bootstrap_servers}"]


def _state_file(home: Path) -> Path:
    return home / "cluster.json"


def recorded(home: Path | None = None) -> BrokerCluster | None:
    """The broker last started under ``home`` (``cluster.json``), up or not; None if none was.

    Which of its nodes run: :meth:`BrokerCluster.up_nodes`.
    """
    f = _state_file((home or default_home()).resolve())
    if not f.is_file():
        return None
    try:
        return BrokerCluster.from_json(f.read_text())
    except (ValueError, KeyError, TypeError):
        return None


def status(home: Path | None = None) -> BrokerCluster | None:
    """The embedded broker under ``home`` when every node runs; None when none or only some do."""
    cluster = recorded(home)
    return cluster if cluster is not None and cluster.alive() else None


def _log_tail(cluster: BrokerCluster, node_id: int, chars: int = 1500) -> str:
    """The end of a node's ``broker.log`` (a node that died before writing one has none)."""
    path = Path(cluster.home) / f"node-{node_id}" / "broker.log"
    try:
        return path.read_text(errors="replace")[-chars:]
    except FileNotFoundError:
        return f"(no {path}: the process ended before writing it)"


def _wait_ready(cluster: BrokerCluster, timeout_s: float) -> None:
    from confluent_kafka.admin import AdminClient  # local: keep CLI start-up light

    deadline = time.monotonic() + timeout_s
    conf: dict[str, Any] = {**cluster.client_config(), "log_level": 0,
                            "logger": _SilentLogger()}
    admin = AdminClient(conf)
    last = "no answer"
    while time.monotonic() < deadline:
        if not cluster.alive():
            logs = "\n".join(f"--- node {n.node_id}:\n" + _log_tail(cluster, n.node_id)
                             for n in cluster.nodes)
            msg = f"the Kafka broker exited during start-up:\n{logs}"
            raise BrokerError(msg)
        try:
            md = admin.list_topics(timeout=2)
            if len(md.brokers) >= len(cluster.nodes) and md.controller_id >= 0:
                return
            last = f"{len(md.brokers)} of {len(cluster.nodes)} brokers registered"
        except Exception as exc:  # noqa: BLE001 - any failure means not ready yet
            last = str(exc)
        time.sleep(0.3)
    msg = f"the Kafka broker did not answer metadata requests within {timeout_s:.0f}s ({last})"
    raise BrokerError(msg)


class _SilentLogger:
    """librdkafka logs connection refusals while the broker starts; they are expected."""

    def log(self, *_args: object, **_kw: object) -> None:
        return None


def _previous(home: Path, nodes: int, secure_mode: bool) -> BrokerCluster | None:
    """The cluster last started under ``home`` (its ports and id are reused), checked to match."""
    previous: BrokerCluster | None = None
    if _state_file(home).is_file():
        with contextlib.suppress(ValueError, KeyError, TypeError):
            previous = BrokerCluster.from_json(_state_file(home).read_text())
    if previous is not None and len(previous.nodes) != nodes:
        msg = (
            f"{home} holds a {len(previous.nodes)}-node broker, not {nodes}; "
            "use another --home or delete that folder"
        )
        raise BrokerError(msg)
    if previous is not None and previous.secure != secure_mode:
        had, want = ("secure", "plain") if previous.secure else ("plain", "secure")
        msg = (
            f"{home} holds a {had} broker, not a {want} one; use another --home, start it "
            f"{'with' if previous.secure else 'without'} --secure, or delete that folder"
        )
        raise BrokerError(msg)
    return previous


def _plan_ports(
    previous: BrokerCluster | None, port: int | None, nodes: int
) -> list[tuple[int, int, int]]:
    """(client, controller, internal) port of each node; the previous ones on a restart."""
    if previous is not None and port is None:
        # Restart on the same ports so clients and topics keep working.
        plan = [(n.port, n.controller_port, n.internal_port or free_port())
                for n in previous.nodes]
    else:
        plan = [(port + i if port is not None else free_port(), free_port(), free_port())
                for i in range(nodes)]
    for p, _c, _i in plan:
        if not port_free(p):
            msg = (
                f"port {p} on 127.0.0.1 is already in use by another process; "
                "pass --port with a free port or stop that process"
            )
            raise BrokerSetupError(msg)
    return plan


def start(
    home: Path | None = None,
    *,
    port: int | None = None,
    nodes: int = 1,
    partitions: int = 4,
    ready_timeout_s: float = _READY_TIMEOUT_S,
    secure: bool = False,
) -> BrokerCluster:
    """Start the embedded broker (or return the one already running under ``home``).

    When only some nodes of the cluster under ``home`` run (the others died), the down nodes
    start again on their ports with their data and rejoin; the running ones are left alone.

    Args:
        home: state folder; ``default_home()`` when None. Data persist there across restarts.
        port: client port of the first node; a free port when None. Node i uses port + i.
        nodes: 1 (default) or more Kafka processes forming one cluster.
        partitions: default partition count of auto-created topics.
        ready_timeout_s: how long to wait for a real metadata answer, in seconds.
        secure: SASL_SSL (SCRAM-SHA-512 over TLS) client listener, ACLs and the users of
            :mod:`revise.infra.secure`; no plaintext listener.

    Raises:
        BrokerError: Java missing, port taken, log directory not writable, or start-up failed;
            a broker of the other kind (secure or plain) runs under ``home``; ``nodes`` or
            ``port`` differ from those of the degraded cluster there.
    """
    home = (home or default_home()).resolve()
    last = recorded(home)
    up = last.up_nodes() if last is not None else ()
    if last is not None and up and last.secure != secure:
        msg = (
            f"a {'secure' if last.secure else 'plain'} broker already runs under {home}; "
            f"stop it first (`revise broker stop`) or pass another --home"
        )
        raise BrokerError(msg)
    if last is not None and len(up) == len(last.nodes):
        return last
    if last is not None and up:
        return _start_down_nodes(last, up, nodes=nodes, port=port,
                                 ready_timeout_s=ready_timeout_s)
    check_writable(home)
    previous = _previous(home, nodes, secure)
    plan = _plan_ports(previous, port, nodes)
    cluster_id = previous.cluster_id if previous else new_cluster_id()
    material = _secure_mod.ensure_material(home) if secure else None
    voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_p, c, _i) in enumerate(plan))
    started: list[BrokerNode] = []
    try:
        for i, (p, c, internal) in enumerate(plan):
            proto = BrokerNode(i + 1, p, c, 0, internal)
            pid = write_node(home, proto, voters, nodes, partitions, cluster_id, material)
            started.append(BrokerNode(i + 1, p, c, pid, internal))
        cluster = BrokerCluster(str(home), cluster_id, tuple(started), secure)
        _state_file(home).write_text(cluster.to_json())
        _wait_ready(cluster, ready_timeout_s)
        if material is not None:
            _secure_mod.grant(cluster.client_config("admin"), _secure_mod.start_acls())
    except BaseException:
        terminate_all([(n.pid, None) for n in started], timeout_s=10)  # our children
        raise
    return cluster


def stop(home: Path | None = None, *, timeout_s: float = _STOP_TIMEOUT_S) -> BrokerCluster | None:
    """Stop every node of the embedded broker that runs (SIGTERM, wait, then SIGKILL).

    Data and ``cluster.json`` stay on disk: the next :func:`start` reuses ports and cluster id.
    Returns the cluster when any of its nodes was running (all of them or a degraded rest),
    None when none was.
    """
    cluster = recorded(home)
    if cluster is None:
        return None
    up = cluster.up_nodes()
    # Brokers first, then the last node, so the controller quorum outlives the brokers.
    terminate_all([(n.pid, cluster.node_args(n)) for n in up], timeout_s=timeout_s)
    return cluster if up else None


@contextlib.contextmanager
def given_or_embedded(bootstrap_servers: str | None, home: Path) -> Iterator[str]:
    """The ``bootstrap_servers`` given, or else an embedded broker's for the block.

    The embedded broker is started under ``home`` and stopped after the block (the benchmarks'
    default when no broker is given).
    """
    if bootstrap_servers:
        yield bootstrap_servers
        return
    cluster = start(home)
    try:
        yield cluster.bootstrap_servers
    finally:
        stop(home)


def restart_node(
    node_id: int, home: Path | None = None, *, ready_timeout_s: float = _READY_TIMEOUT_S
) -> BrokerCluster:
    """Start again one node of a cluster whose process died (e.g. SIGKILLed), on its old ports.

    The node keeps its id, ports and data, so it rejoins the cluster and catches its replicas
    up. The other nodes are left alone; ``cluster.json`` gets the new pid.

    Args:
        node_id: The node to restart (1-based, as in ``cluster.json``).
        home: The cluster's state folder; ``default_home()`` when None.
        ready_timeout_s: How long to wait until every node answers metadata requests.

    Raises:
        BrokerError: No cluster under ``home``, no such node, the node still runs, or it did
            not come back.
    """
    home = (home or default_home()).resolve()
    cluster = recorded(home)
    if cluster is None:
        msg = f"no embedded broker under {home}; start one with revise broker start"
        raise BrokerError(msg)
    node = next((n for n in cluster.nodes if n.node_id == node_id), None)
    if node is None:
        ids = [n.node_id for n in cluster.nodes]
        msg = f"the cluster under {home} has nodes {ids}, not {node_id}"
        raise BrokerError(msg)
    if cluster.node_up(node):
        msg = f"node {node_id} (pid {node.pid}) is still running; stop it before restarting it"
        raise BrokerError(msg)
    return _relaunch(cluster, [node], ready_timeout_s)


def _start_down_nodes(
    cluster: BrokerCluster, up: tuple[BrokerNode, ...], *, nodes: int, port: int | None,
    ready_timeout_s: float,
) -> BrokerCluster:
    """``start`` on a degraded cluster: its down nodes again, once the request matches it."""
    down = [n for n in cluster.nodes if n not in up]
    state = (f"nodes {','.join(str(n.node_id) for n in up)} up, "
             f"{','.join(str(n.node_id) for n in down)} down")
    if nodes != len(cluster.nodes) or port not in (None, cluster.nodes[0].port):
        msg = (
            f"the {len(cluster.nodes)}-node broker under {cluster.home} is degraded ({state}); "
            f"start it with --nodes {len(cluster.nodes)} and no other --port to restart the "
            "down nodes, or stop it first (`revise broker stop`)"
        )
        raise BrokerError(msg)
    return _relaunch(cluster, down, ready_timeout_s)


def _relaunch(
    cluster: BrokerCluster, down: list[BrokerNode], ready_timeout_s: float
) -> BrokerCluster:
    """Start ``down`` (nodes whose process is gone) again on their ports; wait for all nodes.

    Raises:
        BrokerSetupError: A down node's port is taken by another process.
        BrokerError: A node did not come back (the relaunched ones are stopped again).
    """
    home = Path(cluster.home)
    for n in down:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(n.pid, os.WNOHANG)  # reap it if it was our child
        taken = [p for p in (n.port, n.controller_port) if not port_free(p)]
        if taken:
            msg = (
                f"node {n.node_id}'s port {taken[0]} on 127.0.0.1 is in use by another process; "
                "stop that process, or stop the broker (`revise broker stop`) and use another "
                "--home"
            )
            raise BrokerSetupError(msg)
    pids = {n.node_id: launch_node(home / f"node-{n.node_id}") for n in down}
    restarted = dataclasses.replace(cluster, nodes=tuple(
        dataclasses.replace(n, pid=pids.get(n.node_id, n.pid)) for n in cluster.nodes))
    _state_file(home).write_text(restarted.to_json())
    try:
        _wait_ready(restarted, ready_timeout_s)
    except BaseException:
        terminate_all([(pid, None) for pid in pids.values()], timeout_s=10)  # our children
        raise
    return restarted
