"""``revise query``: SQL over the views of a run's Delta tables (see :mod:`revise.query`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from revise.cli.args import maybe_int
from revise.query.run import ENGINES

__all__ = ["add_parser", "cmd_query"]


def add_parser(sub: Any) -> None:
    """Register ``revise query``."""
    p = sub.add_parser(
        "query", help="run SQL over the Delta views of a run",
        description="Run SQL over the views final_windows, provisional_windows, "
        "revision_history, late_records, dead_letters (and the raw tables revisions, latest, "
        "late, dead_letter) of a run's Delta tables, optionally as of a Delta version or time, "
        "or as known at an emission time or a watermark (give at most one of the four).",
    )
    p.add_argument("sql", help='the SQL, e.g. "SELECT timing, count(*) FROM revision_history '
                   'GROUP BY timing"')
    p.add_argument("--delta-path", required=True, help="the run's --delta-path")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="output format (json: one object per line)")
    p.add_argument("--as-of-version", type=int,
                   help="time travel: read as of this Delta version of the latest table")
    p.add_argument("--as-of-timestamp",
                   help="time travel: read as of this UTC time, e.g. '2026-01-01 10:00:00'")
    p.add_argument("--as-known-at", metavar="T",
                   help="answer with what was known at emission time T (epoch ms, or a UTC "
                   "time as --as-of-timestamp takes it): each window's latest revision with "
                   "emitted_at_ms <= T")
    p.add_argument("--as-of-watermark", metavar="MS",
                   help="answer with what was known at watermark MS (epoch ms): each window's "
                   "latest revision with watermark_ms <= MS")
    p.add_argument("--engine", choices=ENGINES, default=ENGINES[0],
                   help="datafusion: in-process, no JVM (default); spark: a Spark session")
    p.set_defaults(handler=cmd_query)


def cmd_query(args: argparse.Namespace) -> int:
    """``revise query``: print the result; 2 on bad SQL, unknown views or a bad path.

    ``--engine datafusion`` (default) answers in-process (:mod:`revise.query.local`, no JVM);
    ``--engine spark`` in a Spark session. Same views, columns, time travel and errors.
    ``--as-known-at`` / ``--as-of-watermark``: :mod:`revise.query.known`.
    """
    from revise.query.run import format_frame

    version = maybe_int(args.as_of_version, "--as-of-version")
    timestamp = args.as_of_timestamp or None
    known_at, watermark = args.as_known_at or None, args.as_of_watermark or None
    if args.engine == "spark":
        from revise.query.run import run_query

        frame = run_query(args.sql, args.delta_path, version=version, timestamp=timestamp,
                          known_at=known_at, watermark=watermark)
    else:
        from revise.query.local import run_query_local

        frame = run_query_local(args.sql, args.delta_path, version=version, timestamp=timestamp,
                                known_at=known_at, watermark=watermark)
    print(format_frame(frame, args.format))
    sys.stdout.flush()
    return 0
