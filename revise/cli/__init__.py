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
from revise.infra import logfile

__all__ = ["SUBCOMMANDS", "build_parser", "exit_code", "main"]

Handler = Callable[[argparse.Namespace], int]

SUBCOMMANDS = (run, status, generate, compare, query, broker, spark, demo)
"""The subcommand modules, in ``--help`` order; each registers itself with ``add_parser``."""


_OURS = "_revise_cli"
"""Attribute that marks the handlers :func:`setup_logging` installed."""


def _own_line(record: logging.LogRecord) -> bool:
    """Whether a log record is revise's own, for the console: ``revise`` and ``revise.*``.

    librdkafka's lines (``revise.kafka``) only when they are errors.
    """
    name = record.name
    if name == "revise.kafka" or name.startswith("revise.kafka."):
        return record.levelno >= logging.ERROR
    return name == "revise" or name.startswith("revise.")


def setup_logging(verbose: bool = False, command: str = "revise") -> None:
    """Log revise's own lines to stderr at INFO, the rest to ``command``'s log file.

    Everything else — Spark's, the JVM's, py4j's, librdkafka's lines, Python warnings — goes
    to the log file of :mod:`revise.infra.logfile`, whose path is printed once. With
    ``verbose`` (``-v``) all of it comes to stderr instead, at DEBUG, Spark's at INFO.
    """
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for old in [h for h in root.handlers if getattr(h, _OURS, False)]:  # an earlier main()
        root.removeHandler(old)
        old.close()
    console = logging.StreamHandler(sys.stderr)
    handlers: list[logging.Handler] = [console]
    if verbose:
        logfile.stop()
    else:
        console.addFilter(_own_line)
        handlers.append(logfile.start(command).handler())
    for handler in handlers:
        handler.setFormatter(fmt)
        setattr(handler, _OURS, True)
        root.addHandler(handler)
    logging.captureWarnings(True)
    logging.getLogger("py4j").setLevel(logging.DEBUG if verbose else logging.WARNING)
    # py4j logs the traceback of an exception raised in foreachBatch (e.g. a fenced zombie's)
    # at ERROR, and Spark logs the same traceback when the query terminates: keep one of them.
    for callback in ("py4j.clientserver", "py4j.java_gateway"):
        logging.getLogger(callback).setLevel(logging.DEBUG if verbose else logging.CRITICAL)
    if verbose:  # Spark's own INFO lines too (read by revise.spark.session)
        os.environ.setdefault("REVISE_SPARK_LOG_LEVEL", "INFO")


VERBOSE_HELP = ("print Spark's, the JVM's, py4j's and librdkafka's lines here, and debug "
                "logging (without it they go to a log file under $REVISE_HOME/logs, whose "
                "path revise prints)")


def build_parser() -> argparse.ArgumentParser:
    """The ``revise`` argument parser with every subcommand."""
    parser = EnvDefaults(
        prog="revise",
        description="Speculative out-of-order windowing on Apache Spark: numbered, corrected, "
        "exactly-once revisions of windowed aggregates in Kafka and Delta Lake.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=EnvDefaults)
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    for command in sub.choices.values():  # `revise demo -v` as well as `revise -v demo`
        command.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                             help=VERBOSE_HELP)
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
    setup_logging(args.verbose, args.command)
    handler: Handler = args.handler
    try:
        return handler(args)
    except ReviseError as exc:
        code = exit_code(exc)
        word = "error" if isinstance(exc, ConfigError | InfraError) else "failed"
        text = redact_text(f"revise {args.command}: {word}: {exc}")
        print(text, file=sys.stderr)
        written = logfile.current()
        if written is not None and written.opened:
            print(f"revise {args.command}: Spark's and the Kafka clients' lines are in "
                  f"{written.path}", file=sys.stderr)
        return code
    except KeyboardInterrupt as exc:
        print(f"revise {args.command}: interrupted", file=sys.stderr)
        return exit_code(exc)
