"""The read side of the Delta tables: Spark SQL views over them, with time travel (SPEC §5).

Spark (delta-spark) reads the tables the driver wrote with delta-rs (:mod:`sinks.delta_tables`)
as any Delta table. ``final_windows`` = latest where is_final, ``provisional_windows`` = latest
where not is_final, ``revision_history`` = revisions, ``late_records`` = late,
``dead_letters`` = dead_letter; the raw tables are registered under their own names too.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from revise.errors import ConfigError
from revise.query.known import check_one_point, known_point, known_tables_sql
from revise.vocab import TABLE_NAMES, VIEW_NAMES
from sinks.delta_schema import arrow_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["REGISTERED_VIEWS", "VIEW_DEFINITIONS", "fmt_time", "older_than_kept",
           "register_views", "table_schema", "view_sql"]

# view name → (table, filter)
VIEW_DEFINITIONS: Final[Mapping[str, tuple[str, str | None]]] = {
    "final_windows": ("latest", "is_final"),
    "provisional_windows": ("latest", "NOT is_final"),
    "revision_history": ("revisions", None),
    "late_records": ("late", None),
    "dead_letters": ("dead_letter", None),
    **{table: (table, None) for table in TABLE_NAMES},
}
REGISTERED_VIEWS: Final = tuple(VIEW_DEFINITIONS)
"""Every view :func:`register_views` creates: the user views, then the raw tables."""
assert (*VIEW_NAMES, *TABLE_NAMES) == REGISTERED_VIEWS


def older_than_kept(table_path: str, point: str, oldest: int, oldest_at: str) -> str:
    """The error of a time travel to before a table's oldest version kept.

    A table whose log was never cleaned up still holds version 0 (its creation, before any
    moment of the run). One whose old commits delta-rs deleted (past
    ``delta.logRetentionDuration``) keeps the versions from ``oldest`` (committed at
    ``oldest_at``) on, and cannot be read as of any earlier moment.
    """
    return (f"{table_path} keeps no version as old as {point}: its oldest version kept is "
            f"{oldest} ({oldest_at}); older ones are past the table's log retention "
            "(delta.logRetentionDuration, revise run --delta-log-retention); ask for a later "
            "version or time")


def table_schema(table: str) -> StructType:
    """The Spark schema of one of :data:`TABLE_NAMES` (what Spark reads back)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema(table))


def _quote_path(path: str) -> str:
    return "delta.`" + path.replace("`", "``") + "`"


def view_sql(
    name: str,
    path: str,
    version: int | None = None,
    timestamp: str | dt.datetime | None = None,
) -> str:
    """The SQL of view ``name`` over the tables under ``path``, optionally time-travelled.

    Args:
        name: One of :data:`REGISTERED_VIEWS`.
        path: The Delta root (``--delta-path``).
        version: Read the view's table as of this Delta version of that table.
        timestamp: Or as of this time (``'2026-11-21 10:00:00'`` or a datetime, UTC).

    Returns:
        ``SELECT * FROM delta.`<path>/<table>` [VERSION|TIMESTAMP AS OF …] [WHERE …]``.
    """
    if name not in VIEW_DEFINITIONS:
        msg = f"unknown view {name!r}; expected one of {REGISTERED_VIEWS}"
        raise ConfigError(msg)
    if version is not None and timestamp is not None:
        msg = "give a version or a timestamp to time-travel to, not both"
        raise ConfigError(msg)
    table, where = VIEW_DEFINITIONS[name]
    sql = f"SELECT * FROM {_quote_path(str(path).rstrip('/') + '/' + table)}"
    if version is not None:
        sql += f" VERSION AS OF {int(version)}"
    elif timestamp is not None:
        ts = timestamp.isoformat(sep=" ") if isinstance(timestamp, dt.datetime) else timestamp
        sql += " TIMESTAMP AS OF '" + str(ts).replace("'", "''") + "'"
    if where:
        sql += f" WHERE {where}"
    return sql


def register_views(
    spark: SparkSession,
    path: str,
    *,
    version: int | None = None,
    timestamp: str | dt.datetime | None = None,
    known_at: int | str | dt.datetime | None = None,
    watermark: int | str | None = None,
) -> list[str]:
    """Create (or replace) the temp views :data:`REGISTERED_VIEWS` over the tables under ``path``.

    ``final_windows`` = latest where is_final; ``provisional_windows`` = latest where not
    is_final; ``revision_history`` = revisions; ``late_records`` = late; ``dead_letters`` =
    dead_letter; plus each raw table under its own name.

    Time travel: ``timestamp`` reads every table as of that time. ``version`` is a version of
    ``latest`` (the table a ``--as-of-version`` user asks about); the other tables are read at
    their last version committed no later than that ``latest`` version, so all views show one
    moment (each table has its own version numbers).

    What was known when: ``known_at`` (emission time: epoch ms or a time) or ``watermark``
    (epoch ms) makes each raw table name a view of the current tables as known at that point,
    and the views above read those (:mod:`revise.query.known`).

    Returns:
        The view names.

    Raises:
        ConfigError: More than one point, or a point that is not a time / an integer.
    """
    check_one_point(version=version, timestamp=timestamp, known_at=known_at,
                    watermark=watermark)
    root = str(path).rstrip("/")
    point = known_point(known_at=known_at, watermark=watermark)
    if point is not None:
        source = {t: _quote_path(f"{root}/{t}") for t in TABLE_NAMES}
        for table, sql in known_tables_sql(source, point).items():
            spark.sql(f"CREATE OR REPLACE TEMP VIEW `{table}` AS {sql}")
        for name in VIEW_NAMES:
            table, where = VIEW_DEFINITIONS[name]
            sql = f"SELECT * FROM `{table}`" + (f" WHERE {where}" if where else "")
            spark.sql(f"CREATE OR REPLACE TEMP VIEW `{name}` AS {sql}")
        return list(REGISTERED_VIEWS)
    versions: dict[str, int | None] = dict.fromkeys(TABLE_NAMES)
    if version is not None:
        versions = _versions_at_latest(spark, root, version)
    for name, (table, _) in VIEW_DEFINITIONS.items():
        sql = view_sql(name, root, version=versions[table], timestamp=timestamp)
        spark.sql(f"CREATE OR REPLACE TEMP VIEW `{name}` AS {sql}")
    return list(REGISTERED_VIEWS)


def _history(spark: SparkSession, path: str) -> DataFrame:
    """The commits of the Delta table at ``path`` (``DESCRIBE HISTORY``: version, timestamp…)."""
    return spark.sql(f"DESCRIBE HISTORY {_quote_path(path)}")


def _versions_at_latest(spark: SparkSession, root: str, version: int) -> dict[str, int | None]:
    from pyspark.sql import functions as F

    hist = _history(spark, f"{root}/latest")
    row = hist.where(F.col("version") == version).select("timestamp").first()
    if row is None:
        msg = f"{root}/latest has no version {version}; see DESCRIBE HISTORY for its versions"
        raise ConfigError(msg)
    at = row["timestamp"]
    out: dict[str, int | None] = {"latest": version}
    for table in ("revisions", "late", "dead_letter"):
        h = _history(spark, f"{root}/{table}")
        best = h.where(F.col("timestamp") <= F.lit(at)).agg(F.max("version")).first()
        if best is not None and best[0] is not None:
            out[table] = int(best[0])
            continue
        oldest = h.orderBy("version").select("version", "timestamp").first()
        if oldest is not None and int(oldest["version"]) > 0:  # its log was cleaned up
            msg = older_than_kept(f"{root}/{table}", f"latest version {version} ({fmt_time(at)})",
                                  int(oldest["version"]), fmt_time(oldest["timestamp"]))
            raise ConfigError(msg)
        out[table] = 0
    return out


def fmt_time(when: dt.datetime) -> str:
    """``when`` as the query errors print a commit time: ``2026-01-01 10:00:00.000``."""
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
