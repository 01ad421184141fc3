"""The command line: ``revise run | status | generate | compare | query | broker | spark | demo``.

One module per subcommand (:mod:`revise.cli.run`, …), each with ``add_parser(sub)``
registering its options and handler; :mod:`revise.cli.args` holds what they share. Every
option also reads ``REVISE_<OPTION>`` from the environment (``--query-id`` ←
``REVISE_QUERY_ID``); the command line wins. Durations take a unit: ``500ms``, ``10s``, ``5m``,
``1h``. Exit codes, decided by the exception's type: 0 success; 2 usage or configuration error
(:class:`~revise.errors.ConfigError`, :class:`~revise.errors.SetupError`; the message says
what is wrong and how to fix it); 1 runtime failure (any other
:class:`~revise.errors.ReviseError`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence

from revise.cli import broker, compare, demo, generate, query, run, spark, status
from revise.cli.args import EnvDefaults
from revise.cli.kafka import redact_text
from revise.errors import ConfigError, InfraError, ReviseError, SetupError

__all__ = ["SUBCOMMANDS", "build_parser", "exit_code", "main"]

Handler = Callable[[argparse.Namespace], int]

SUBCOMMANDS = (run, status, generate, compare, query, broker, spark, demo)
"""The subcommand modules, in ``--help`` order; each registers itself with ``add_parser``."""


def setup_logging(verbose: bool = False) -> None:
    """Log lines to stderr: INFO, or DEBUG with ``-v`` (also Spark's and librdkafka's own)."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("py4j").setLevel(logging.DEBUG if verbose else logging.WARNING)
    # py4j logs the traceback of an exception raised in foreachBatch (e.g. a fenced zombie's)
    # at ERROR, and Spark logs the same traceback when the query terminates: keep one of them.
    for callback in ("py4j.clientserver", "py4j.java_gateway"):
        logging.getLogger(callback).setLevel(logging.DEBUG if verbose else logging.CRITICAL)
    if verbose:  # Spark's own INFO lines too (read by revise.spark.session)
        os.environ.setdefault("REVISE_SPARK_LOG_LEVEL", "INFO")


def build_parser() -> argparse.ArgumentParser:
    """The ``revise`` argument parser with every subcommand."""
    parser = EnvDefaults(
        prog="revise",
        description="Speculative out-of-order windowing on Apache Spark: numbered, corrected, "
        "exactly-once revisions of windowed aggregates in Kafka and Delta Lake.",
    )
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="debug logging, Spark's and librdkafka's own lines included")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=EnvDefaults)
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return parser


def exit_code(exc: BaseException) -> int:
    """The exit code of an error that ended a subcommand (by type, never by message text)."""
    if isinstance(exc, ConfigError | SetupError):
        return 2
    if isinstance(exc, KeyboardInterrupt):
        return 130
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 2 usage/config error, 1 runtime failure)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    handler: Handler = args.handler
    try:
        return handler(args)
    except ReviseError as exc:
        code = exit_code(exc)
        word = "error" if isinstance(exc, ConfigError | InfraError) else "failed"
        text = redact_text(f"revise {args.command}: {word}: {exc}")
        print(text, file=sys.stderr)
        return code
    except KeyboardInterrupt as exc:
        print(f"revise {args.command}: interrupted", file=sys.stderr)
        return exit_code(exc)
