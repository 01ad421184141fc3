"""``revise broker start|stop|status``: the embedded Apache Kafka broker.

``start`` and ``status`` print the clients' address (``running bootstrap=… pids=… home=…``, or
for ``--secure`` the ``bootstrap=`` line and one ``config.<user>=`` line per user), then one line
per node: ``node.<id>=up|down port=<client port> pid=<pid>``. ``status`` exits 0 when every node
runs, 3 (``not running``) when none does, 4 when only some do: the address lines then name the
nodes that are up, the first word is ``degraded`` and a last ``degraded:`` line says which nodes
are up and down (stderr: what to do). ``stop`` stops every node that runs, a degraded rest too.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from revise.cli.args import maybe_int

__all__ = ["add_parser", "cmd_broker"]


def add_parser(sub: Any) -> None:
    """Register ``revise broker``."""
    p = sub.add_parser("broker", help="the embedded Apache Kafka broker",
                       description="Start, stop or inspect the embedded Apache Kafka broker "
                       "(KRaft, single node by default). status exits 0 when every node runs, "
                       "3 when none does, 4 when some do (degraded: it names the nodes up and "
                       "down); start on a degraded cluster starts its down nodes again; stop "
                       "stops every node still running.")
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--home", help="revise's home folder; the broker lives in HOME/broker "
                   "(default ~/.revise)")
    p.add_argument("--port", type=int, help="client port of the first node (default: a free one)")
    p.add_argument("--nodes", type=int, default=1, help="Kafka processes in the cluster")
    p.add_argument("--secure", action="store_true",
                   help="SASL_SSL (SCRAM-SHA-512 over TLS) listener, ACLs and users admin, "
                   "revise, reader, intruder; prints each user's client config file")
    p.set_defaults(handler=cmd_broker)


def cmd_broker(args: argparse.Namespace) -> int:
    """``revise broker start|stop|status``."""
    from revise.infra import broker

    # --home (and REVISE_HOME) name revise's home; the broker's own folder is HOME/broker, the
    # same place broker.default_home() finds it, so every command agrees on one broker.
    home = Path(args.home).expanduser() / "broker" if args.home else None
    if args.action == "start":
        cluster = broker.start(home, port=maybe_int(args.port, "--port"),
                               nodes=maybe_int(args.nodes, "--nodes") or 1,
                               secure=bool(args.secure))
        print(_describe(cluster))
        return 0
    if args.action == "stop":
        stopped = broker.stop(home)
        print("stopped" if stopped else "not running")
        return 0
    found = broker.recorded(home)
    up = found.up_nodes() if found is not None else ()
    if found is None or not up:
        print("not running")
        return 3
    print(_describe(found, up))
    if len(up) == len(found.nodes):
        return 0
    print(f"revise broker start --home … --nodes {len(found.nodes)} starts the down nodes again; "
          "revise broker stop stops the rest", file=sys.stderr)
    return 4


def _describe(cluster: Any, up: tuple[Any, ...] | None = None) -> str:
    """What start and status print of ``cluster`` whose nodes ``up`` run (all when None).

    The address of the nodes up, one line per node, and when some are down a last line
    ``degraded: node 1,3 up, node 2 down``.
    """
    up = cluster.nodes if up is None else up
    serving = dataclasses.replace(cluster, nodes=up)
    degraded = len(up) < len(cluster.nodes)
    if cluster.secure:  # SPEC 7: bootstrap=..., then one config file line per user
        lines = serving.describe_lines()
    else:
        pids = ",".join(map(str, serving.pids))
        lines = [f"{'degraded' if degraded else 'running'} bootstrap={serving.bootstrap_servers} "
                 f"pids={pids} home={cluster.home}"]
    lines += [f"node.{n.node_id}={'up' if n in up else 'down'} port={n.port} pid={n.pid}"
              for n in cluster.nodes]
    if degraded:
        down = [n for n in cluster.nodes if n not in up]
        lines.append(f"degraded: node {','.join(str(n.node_id) for n in up)} up, "
                     f"node {','.join(str(n.node_id) for n in down)} down")
    return "\n".join(lines)
