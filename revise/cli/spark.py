"""``revise spark start|stop|status``: the local Spark standalone cluster from the command line.

Registered by :mod:`revise.cli` (``add_parser``). ``start`` and ``status`` print ``key=value``
lines, ``master=spark://HOST:PORT`` first, then each process's pid and state, the web UI, the
home folder and the cluster's state::

    master=spark://127.0.0.1:40123
    master.pid=5120
    master.state=up
    worker.1.pid=5188
    worker.1.state=up
    worker.2.pid=5190
    worker.2.state=up
    workers=2
    webui=http://127.0.0.1:40124
    home=/home/me/.revise/spark
    state=running

``status`` exits 0 when every process runs, 3 (``not running``) when none does, 4 when some do:
then ``worker.2.state=down``, the last line ``state=degraded up=master,worker.1 down=worker.2``,
no ``master=``/``webui=`` line while the Master is down, and what to do on stderr. ``start`` on
a degraded cluster starts the down Workers again (a new cluster when the Master is down);
``stop`` stops every process still up.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from revise.cli.args import maybe_int

__all__ = ["add_parser", "cmd_spark"]


def add_parser(sub: Any) -> None:
    """Add the ``spark`` subcommand to the CLI's subparsers."""
    p = sub.add_parser("spark", help="a local Spark standalone cluster (Master + Workers)",
                       description="Start, stop or inspect a local Spark standalone cluster: "
                       "Spark's own Master and Worker processes from the installed pyspark. "
                       "status exits 0 when every process runs, 3 when none does, 4 when some "
                       "do (degraded: it names the processes up and down); start on a degraded "
                       "cluster starts its down Workers again; stop stops every process up.")
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--workers", type=int, default=2, help="Worker processes (default 2)")
    p.add_argument("--cores", type=int, default=1, help="cores per Worker (default 1)")
    p.add_argument("--memory", default="1g", help="executor memory per Worker (default 1g)")
    p.add_argument("--home", help="revise's home folder; the cluster lives in HOME/spark "
                   "(default ~/.revise)")
    p.set_defaults(handler=cmd_spark)


def cmd_spark(args: argparse.Namespace) -> int:
    """``revise spark start|stop|status``; the exit code (status: 3 none running, 4 degraded)."""
    from revise.infra import spark_cluster

    # Like `revise broker`: --home (and REVISE_HOME) name revise's home, the cluster's own
    # folder is HOME/spark, where spark_cluster.default_home() finds it too.
    home = Path(args.home).expanduser() / "spark" if args.home else None
    if args.action == "start":
        workers, cores = maybe_int(args.workers, "--workers"), maybe_int(args.cores, "--cores")
        cluster = spark_cluster.start(
            home, workers=2 if workers is None else workers, cores=1 if cores is None else cores,
            memory=str(args.memory),
        )
        print(cluster.describe())
        return 0
    if args.action == "stop":
        stopped = spark_cluster.stop(home)
        print("stopped" if stopped else "not running")
        return 0
    found = spark_cluster.recorded(home)
    states = found.states() if found is not None else {}
    if found is None or not any(states.values()):
        print("not running")
        return 3
    print(found.describe(states))
    if all(states.values()):
        return 0
    print("revise spark start with the same --home and --workers starts the down processes "
          "again; revise spark stop stops the rest", file=sys.stderr)
    return 4
