"""``revise generate``: a reproducible out-of-order event stream into a Kafka topic."""

from __future__ import annotations

import argparse
import time
from typing import Any

from revise.cli.args import add_generator_options, generator_config, maybe_float
from revise.cli.kafka import kafka_settings
from revise.kafka import add_kafka_arguments

__all__ = ["add_parser", "cmd_generate"]


def add_parser(sub: Any) -> None:
    """Register ``revise generate``."""
    p = sub.add_parser("generate", help="write a reproducible out-of-order event stream",
                       description="Write a seeded stream of JSON events with disorder, late "
                       "and malformed records to a Kafka topic.")
    p.add_argument("--bootstrap-servers", help="Kafka HOST:PORT (default: the embedded broker; "
                   "a secure embedded broker is used as its `revise` user)")
    add_kafka_arguments(p)
    p.add_argument("--topic", required=True, help="topic to write (created if missing)")
    add_generator_options(p)
    p.add_argument("--rate", type=float, help="records per second (default: as fast as possible)")
    p.add_argument("--partitions", type=int, default=4, help="partitions if the topic is created")
    p.set_defaults(handler=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:
    """``revise generate``."""
    from revise.generate import generate, produce

    cfg = generator_config(args)
    settings = kafka_settings(args, topics=[args.topic])
    bootstrap = str(settings.bootstrap_servers)
    stream = generate(cfg)
    t0 = time.monotonic()
    n = produce(stream, bootstrap_servers=bootstrap, topic=args.topic, kafka=settings,
                rate=maybe_float(args.rate, "--rate") or None, partitions=args.partitions)
    kinds = {name: int((stream.kind == code).sum())
             for code, name in ((0, "on_time"), (1, "late"), (2, "bad"))}
    print(f"wrote {n} records to {args.topic} on {bootstrap} in {time.monotonic() - t0:.1f}s "
          f"(on time {kinds['on_time']}, delayed {kinds['late']}, malformed {kinds['bad']})")
    return 0
