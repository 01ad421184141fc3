"""``revise status``: where a running or stopped job stands (``revise.ops.status``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from revise.cli.args import duration_type, maybe_duration, maybe_int
from revise.kafka import add_kafka_arguments, install_redaction, settings_from_args

__all__ = ["add_parser", "cmd_status"]

EXIT_CODES = ("exit codes: 0 running and caught up; 3 stopped (cleanly, killed or crashed); "
              "4 running but stalled or trailing by more than --max-delay / --max-lag; 1 "
              "running but Kafka or Delta could not be read; 2 no revise checkpoint there")


def add_parser(sub: Any) -> None:
    """Register ``revise status``."""
    p = sub.add_parser(
        "status", help="where a running or stopped job stands",
        description="Where the job of a checkpoint stands: whether it runs, its last committed "
        "micro-batch and watermark, input lag, last Kafka and Delta commits, whether latest "
        "has caught up with revisions. Reads the checkpoint, Kafka and Delta; starts no Spark. "
        "docs/OPERATIONS.md.", epilog=EXIT_CODES)
    p.add_argument("--checkpoint", required=True, help="the job's --checkpoint folder")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text (default) or one JSON object")
    p.add_argument("--bootstrap-servers",
                   help="Kafka HOST:PORT (default: the one the job recorded in its checkpoint)")
    add_kafka_arguments(p)
    p.add_argument("--max-delay", type=duration_type("--max-delay"), default="60s",
                   help="a running job whose Delta tables trail the changelog by longer than "
                        "this is behind, exit 4 (default 60s)")
    p.add_argument("--max-lag", type=int,
                   help="a running job with more input records not yet read is behind, exit 4 "
                        "(default: the lag alone never is)")
    p.set_defaults(handler=cmd_status)


def cmd_status(args: argparse.Namespace) -> int:
    """``revise status``; its exit code says how the job stands (:data:`EXIT_CODES`)."""
    from revise.cli.args import absolute_path
    from revise.ops.runfile import read_run_file
    from revise.ops.status import job_status

    checkpoint = absolute_path(args.checkpoint)
    info = read_run_file(checkpoint)
    recorded = info.bootstrap_servers if info is not None else None
    settings = settings_from_args(args, bootstrap_servers=args.bootstrap_servers or recorded)
    install_redaction(settings.redactor)
    status = job_status(
        checkpoint,
        kafka_config=settings.consumer_conf() if settings.bootstrap_servers else None,
        bootstrap_servers=settings.bootstrap_servers,
        max_delay_s=(maybe_duration(args.max_delay, "--max-delay") or 0) / 1000,
        max_lag=maybe_int(args.max_lag, "--max-lag"),
    )
    if args.format == "json":
        print(json.dumps(status.to_dict(), indent=2))
    else:
        print(status.text())
    return status.exit_code
