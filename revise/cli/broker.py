"""``revise broker start|stop|status``: the embedded Apache Kafka broker."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from revise.cli.args import maybe_int

__all__ = ["add_parser", "cmd_broker"]


def add_parser(sub: Any) -> None:
    """Register ``revise broker``."""
    p = sub.add_parser("broker", help="the embedded Apache Kafka broker",
                       description="Start, stop or inspect the embedded Apache Kafka broker "
                       "(KRaft, single node by default).")
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
    found = broker.status(home)
    if found is None:
        print("not running")
        return 3
    print(_describe(found))
    return 0


def _describe(cluster: Any) -> str:
    if cluster.secure:  # SPEC 7: bootstrap=..., then one config file line per user
        return "\n".join(cluster.describe_lines())
    pids = ",".join(map(str, cluster.pids))
    return f"running bootstrap={cluster.bootstrap_servers} pids={pids} home={cluster.home}"
