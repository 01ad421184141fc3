"""``revise demo``: the whole pipeline end to end on embedded defaults."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from revise.cli.kafka import kafka_settings
from revise.kafka import add_kafka_arguments

__all__ = ["add_parser", "cmd_demo"]


def add_parser(sub: Any) -> None:
    """Register ``revise demo``."""
    p = sub.add_parser("demo", help="the whole pipeline end to end on embedded defaults",
                       description="Start the embedded broker, generate an out-of-order stream "
                       "with late and bad records, run the job to completion and show the result.")
    p.add_argument("--events", type=int, default=20_000, help="records to generate")
    p.add_argument("--keys", type=int, default=50, help="distinct keys")
    p.add_argument("--seed", type=int, default=7, help="random seed")
    p.add_argument("--out", help="folder for the Delta tables and checkpoint "
                   "(default $REVISE_HOME/demo/<run>)")
    add_kafka_arguments(p)
    p.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    """``revise demo``."""
    from revise.demo import run_demo

    kafka = kafka_settings(args, start=True)
    return run_demo(events=int(args.events), keys=int(args.keys), seed=int(args.seed),
                    out=Path(args.out) if args.out else None, kafka=kafka)
