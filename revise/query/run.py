"""SQL over the views of a run's Delta tables, optionally time-travelled.

The views (SPEC §5), registered by :func:`open_views` in a Spark session:

==========================  =====================================================
``final_windows``           ``latest`` where ``is_final``: one row per closed window
``provisional_windows``     ``latest`` where not ``is_final``: windows still open
``revision_history``        ``revisions``: every revision ever emitted
``late_records``            ``late``: too-late records (arrived after end + grace)
``dead_letters``            ``dead_letter``: bad input with its reason
``revisions`` ``latest``    the raw tables under their own names
``late`` ``dead_letter``
==========================  =====================================================

"What did we report for window W at time T?" — either filter the history by wall-clock
emission time::

    revise query "SELECT * FROM revision_history WHERE key = 'k00003'
                  AND window_start_ms = 1767225600000 AND emitted_at_ms <= 1767225700000
                  ORDER BY revision DESC LIMIT 1" --delta-path DIR

or read every view as of a Delta version or timestamp (time travel)::

    revise query "SELECT * FROM provisional_windows" --delta-path DIR --as-of-version 12
    revise query "SELECT * FROM latest" --delta-path DIR --as-of-timestamp '2026-01-01 10:00:00'

or answer every view from the revisions known at an emission time or a watermark
(:mod:`revise.query.known`)::

    revise query "SELECT * FROM provisional_windows" --delta-path DIR --as-known-at 1767225700000
    revise query "SELECT * FROM final_windows" --delta-path DIR --as-of-watermark 1767225600000

Bad SQL, an unknown table or view, or a time-travel point the tables do not have is a usage
error (exit 2) with a one-line message that names the views; never a Java stack trace.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from revise.errors import ConfigError
from revise.query.known import check_one_point, known_point
from revise.vocab import TABLE_NAMES, VIEW_NAMES

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

__all__ = ["ENGINES", "Format", "format_frame", "open_views", "run_query"]

Format = Literal["table", "csv", "json"]

ENGINES: tuple[str, ...] = ("datafusion", "spark")
"""``--engine`` choices: in-process (:mod:`revise.query.local`, the default, no JVM) or Spark."""


def views_hint() -> str:
    return f"views: {', '.join(VIEW_NAMES)} (raw tables: {', '.join(TABLE_NAMES)})"


def check_delta_path(delta_path: str) -> str:
    """The Delta root as a string; a local folder must exist and hold revise's tables."""
    if "://" in delta_path:
        return delta_path.rstrip("/")
    root = Path(delta_path).expanduser().resolve()
    if not root.exists():
        msg = (
            f"--delta-path {delta_path} does not exist; give the --delta-path of a "
            "`revise run` (or `revise demo`), the folder that holds revisions/ and latest/"
        )
        raise ConfigError(msg)
    missing = [t for t in TABLE_NAMES if not (root / t / "_delta_log").is_dir()]
    if missing:
        msg = (
            f"--delta-path {delta_path} holds no revise Delta tables ({', '.join(missing)} "
            "missing); give the --delta-path of a `revise run`, the folder that holds "
            f"{', '.join(t + '/' for t in TABLE_NAMES)}"
        )
        raise ConfigError(msg)
    return str(root)


def _short(exc: BaseException) -> str:
    """The first line of a Spark error, without the logical plan and JVM frames."""
    text = str(exc).strip()
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__


def open_views(
    delta_path: str,
    *,
    spark: SparkSession | None = None,
    version: int | None = None,
    timestamp: str | dt.datetime | None = None,
    known_at: int | str | dt.datetime | None = None,
    watermark: int | str | None = None,
) -> SparkSession:
    """Register the views over the tables under ``delta_path`` and return the session.

    Args:
        delta_path: The run's ``--delta-path``.
        spark: Session to register them in; the project's session when None.
        version: Time travel to this Delta version of ``latest`` (the other tables are read as
            of the same moment).
        timestamp: Or to this time (``'2026-01-01 10:00:00'``, UTC, or a datetime).
        known_at: Or answer with what was known at this emission time (epoch ms, or a time as
            ``timestamp``): the revisions with ``emitted_at_ms <= known_at``
            (:mod:`revise.query.known`).
        watermark: Or with what was known at this watermark (epoch ms): the revisions with
            ``watermark_ms <= watermark``.

    Returns:
        The session, with temp views :data:`VIEW_NAMES` and the raw tables.

    Raises:
        ConfigError: No revise tables under the path, more than one point given, or a
            version/timestamp the tables do not have.
    """
    from pyspark.errors import PySparkException

    from revise.query.views import register_views

    check_one_point(version=version, timestamp=timestamp, known_at=known_at,
                    watermark=watermark)
    point = known_point(known_at=known_at, watermark=watermark)
    root = check_delta_path(delta_path)
    if spark is None:
        from revise.spark.session import spark_session

        spark = spark_session("revise-query", ui=False)
        spark.sparkContext.setLogLevel("ERROR")
    try:
        register_views(spark, root, version=version, timestamp=timestamp, known_at=known_at,
                       watermark=watermark)
    except ConfigError:
        raise
    except (PySparkException, ValueError) as exc:
        where = (f"version {version}" if version is not None
                 else f"timestamp {timestamp}" if timestamp is not None
                 else point.describe() if point is not None else "the current version")
        msg = f"cannot read the tables under {root} at {where}: {_short(exc)}"
        raise ConfigError(msg) from None
    return spark


def run_query(
    sql: str,
    delta_path: str,
    *,
    spark: SparkSession | None = None,
    version: int | None = None,
    timestamp: str | dt.datetime | None = None,
    known_at: int | str | dt.datetime | None = None,
    watermark: int | str | None = None,
) -> pd.DataFrame:
    """Run ``sql`` over the views of ``delta_path`` and return the result as pandas.

    ``version`` / ``timestamp`` / ``known_at`` / ``watermark``: at most one, as
    :func:`open_views` takes them.

    Raises:
        ConfigError: Bad SQL, an unknown table or view (the message names the views), or a
            problem reported by :func:`open_views`.
    """
    from pyspark.errors import PySparkException

    session = open_views(delta_path, spark=spark, version=version, timestamp=timestamp,
                         known_at=known_at, watermark=watermark)
    try:
        return session.sql(sql).toPandas()
    except PySparkException as exc:
        msg = f"{_short(exc)}\n{views_hint()}"
        raise ConfigError(msg) from None


def format_frame(frame: pd.DataFrame, fmt: Format = "table") -> str:
    """Render a result: an aligned ``table``, ``csv`` with a header, or ``json`` lines."""
    if fmt == "csv":
        buf = io.StringIO()
        frame.to_csv(buf, index=False)
        return buf.getvalue().rstrip("\n")
    if fmt == "json":
        # 15 significant digits, pandas' most (its default, 10, cut sums and percentiles).
        rows = json.loads(frame.to_json(orient="records", date_format="iso",
                                        double_precision=15) or "[]")
        return "\n".join(json.dumps(r) for r in rows)
    if frame.empty:
        return " ".join(frame.columns) + "\n(no rows)"
    return str(frame.to_string(index=False))
