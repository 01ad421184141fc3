"""The in-process query engine: SQL over a run's Delta tables without a JVM.

``revise query`` answers here by default (``--engine datafusion``); ``--engine spark`` keeps the
Spark path of :mod:`revise.query`. Both expose the same views (SPEC §5, defined once in
:mod:`revise.query.views`), the same columns and types, the same time travel and the same
errors. The engine is delta-rs's own (``deltalake.QueryBuilder``, Apache DataFusion inside
the ``deltalake`` package revise already writes with): it opens a table by reading its Delta
log, nothing is downloaded or started, and a cold ``revise query`` takes about half a second
(docs/BENCHMARKS.md).

Time travel follows Spark's rules exactly as :func:`revise.query.views.register_views`
applies them:

- A commit's time is the modification time (ms) of its ``_delta_log/<version>.json`` file,
  made strictly increasing (a commit not later than the one before it gets that one's time
  + 1 ms), as Delta's ``DeltaHistoryManager`` does for tables without in-commit timestamps.
  (For object-store paths the commit's own ``commitInfo.timestamp`` stands in for it.)
- ``--as-of-timestamp T`` (UTC unless it names a zone) reads every table at its last commit at
  or before T; T before a table's first commit or after its last one is an error, as in Spark.
- ``--as-of-version N`` is a version of ``latest``; every other table is read at its last
  version committed no later than that version's time (0 if none).

Trace: latest commits v0 at 10:00:00.000, v1 at 10:00:05.000; revisions v3 at 10:00:04.900 and
v4 at 10:00:05.200 → ``--as-of-version 1`` reads latest v1 and revisions v3;
``--as-of-timestamp '… 10:00:05'`` reads the same.

SQL dialect: DataFusion's, which agrees with Spark SQL on what the views are queried with
(SELECT, WHERE, GROUP BY, HAVING, JOIN, ORDER BY, LIMIT, subqueries, count/sum/avg/min/max).
Where the dialects differ, write the portable form: string literals in single quotes (``"x"``
is an identifier in DataFusion), ``CAST(a AS DOUBLE) / b`` for a fractional quotient of two
integers (DataFusion divides integers as integers), and an alias for every computed column
(unaliased names differ: Spark names ``count(*)`` ``count(1)``).
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

import pyarrow as pa

from revise.errors import ConfigError
from revise.query.known import check_one_point, known_point, known_tables_sql, parse_time_ms
from revise.query.run import check_delta_path, views_hint
from revise.query.views import VIEW_DEFINITIONS, fmt_time, older_than_kept
from revise.vocab import TABLE_NAMES
from sinks.delta_layout import local_path

if TYPE_CHECKING:
    import pandas as pd
    from deltalake import DeltaTable, QueryBuilder

__all__ = [
    "COMPARISONS_SCHEMA",
    "append_frame",
    "commit_times",
    "open_views_local",
    "read_table",
    "resolve_versions",
    "run_query_local",
    "spark_like_arrow",
]

_LOG_FILE: Final = re.compile(r"^(\d{20})\.json$")


class _NotInHistory(ConfigError):
    """A time-travel point a table's history does not have (reported with the root and point)."""


# --------------------------------------------------------------------------- time travel


def commit_times(table_path: str) -> list[tuple[int, int]]:
    """``(version, commit time in epoch ms)`` of every commit of one table, oldest first.

    Local tables: each ``_delta_log/<version>.json``'s modification time, monotonized (strictly
    increasing by at least 1 ms), which is what Spark's Delta uses for time travel and history
    on tables without in-commit timestamps. Object stores: ``commitInfo.timestamp``.

    Raises:
        ConfigError: The table has no readable Delta log.
    """
    raw: list[tuple[int, int]] = []
    folder = local_path(table_path)
    if folder is not None:
        log_dir = os.path.join(folder, "_delta_log")
        try:
            names = os.listdir(log_dir)
        except OSError as exc:
            msg = f"{table_path} is not a Delta table ({exc.strerror}: {log_dir})"
            raise ConfigError(msg) from None
        for name in names:
            m = _LOG_FILE.match(name)
            if m:
                st = os.stat(os.path.join(log_dir, name))
                raw.append((int(m.group(1)), st.st_mtime_ns // 1_000_000))
    else:
        from deltalake import DeltaTable

        raw = [(int(h["version"]), int(h["timestamp"])) for h in DeltaTable(table_path).history()]
    raw.sort()
    out: list[tuple[int, int]] = []
    for version, ms in raw:
        if out and ms <= out[-1][1]:
            ms = out[-1][1] + 1
        out.append((version, ms))
    return out


def _fmt_ms(ms: int) -> str:
    return fmt_time(dt.datetime.fromtimestamp(ms / 1000, dt.UTC))


def _version_at(table_path: str, at_ms: int, *, strict: bool, point: str | None = None) -> int:
    """The last version of the table committed at or before ``at_ms``.

    With ``strict`` (``--as-of-timestamp``), a time before the first or after the last commit
    is an error, as Spark's ``TIMESTAMP AS OF``; otherwise 0 when none is that early. Either
    way a time before the oldest version a cleaned-up log keeps is an error
    (:func:`~revise.query.views.older_than_kept`; ``point`` names what asked for the time).
    """
    commits = commit_times(table_path)
    before = [v for v, ms in commits if ms <= at_ms]
    if not before and commits and commits[0][0] > 0:  # its log was cleaned up
        point = f"{point or 'the timestamp'} ({_fmt_ms(at_ms)})"
        raise _NotInHistory(older_than_kept(table_path, point, commits[0][0],
                                            _fmt_ms(commits[0][1])))
    if not strict:
        return before[-1] if before else 0
    if not before:
        first = _fmt_ms(commits[0][1]) if commits else "none"
        msg = (f"{table_path} has no version at or before {_fmt_ms(at_ms)} (its first commit "
               f"is at {first}); use a later --as-of-timestamp")
        raise _NotInHistory(msg)
    last_v, last_ms = commits[-1]
    if at_ms > last_ms:
        msg = (f"the timestamp {_fmt_ms(at_ms)} is after the latest version of {table_path} "
               f"(version {last_v} at {_fmt_ms(last_ms)}); use a timestamp at or before it")
        raise _NotInHistory(msg)
    return before[-1]


def resolve_versions(
    root: str,
    *,
    version: int | None = None,
    timestamp: str | dt.datetime | None = None,
) -> dict[str, int | None]:
    """The Delta version to read of each of :data:`TABLE_NAMES` (None: the newest).

    Args:
        root: The Delta root (``--delta-path``).
        version: A version of ``latest``; the other tables at their last version committed no
            later than it.
        timestamp: Or a time: every table at its last commit at or before it.

    Raises:
        ConfigError: Both given, ``latest`` has no such version, or the time is outside a
            table's history.
    """
    check_one_point(version=version, timestamp=timestamp)
    out: dict[str, int | None] = dict.fromkeys(TABLE_NAMES)
    if timestamp is not None:
        at = parse_time_ms(timestamp, "--as-of-timestamp")
        return {t: _version_at(f"{root}/{t}", at, strict=True) for t in TABLE_NAMES}
    if version is not None:
        times = dict(commit_times(f"{root}/latest"))
        if version not in times:
            msg = f"{root}/latest has no version {version}; see DESCRIBE HISTORY for its versions"
            raise _NotInHistory(msg)
        point = f"latest version {version}"
        out = {t: _version_at(f"{root}/{t}", times[version], strict=False, point=point)
               for t in TABLE_NAMES}
        out["latest"] = version
    return out


# --------------------------------------------------------------------------- views and SQL


def _open(path: str, version: int | None) -> DeltaTable:
    from deltalake import DeltaTable

    return DeltaTable(path, version=version)


def _full_name(table: str) -> str:
    """The name a table's full contents are registered under when the views show a point."""
    return f"revise_all_{table}"


def open_views_local(
    delta_path: str,
    *,
    version: int | None = None,
    timestamp: str | dt.datetime | None = None,
    known_at: int | str | dt.datetime | None = None,
    watermark: int | str | None = None,
) -> QueryBuilder:
    """A DataFusion session (``deltalake.QueryBuilder``) with the views of ``delta_path``.

    The raw tables are registered under their own names, at the versions
    :func:`resolve_versions` picks; the SPEC views are ``CREATE VIEW``s over them with the
    filters of :mod:`sinks.delta_tables`.

    With ``known_at`` (emission time: epoch ms or a time) or ``watermark`` (epoch ms), the
    current tables are registered as ``revise_all_<table>`` and each table name is a view of
    what was known at that point (:mod:`revise.query.known`); the SPEC views read those.

    Raises:
        ConfigError: As :func:`revise.query.open_views`: no revise tables under the path, more
            than one point, or a point the tables do not have.
    """
    from deltalake import QueryBuilder

    check_one_point(version=version, timestamp=timestamp, known_at=known_at,
                    watermark=watermark)
    point = known_point(known_at=known_at, watermark=watermark)
    root = check_delta_path(delta_path)
    at = (f"version {version}" if version is not None
          else f"timestamp {timestamp}" if timestamp is not None
          else point.describe() if point is not None else "the current version")
    # Plain Utf8 rather than Utf8View, so results carry Spark's Arrow types.
    qb = QueryBuilder({"datafusion.execution.parquet.schema_force_view_types": "false"})
    try:
        versions = resolve_versions(root, version=version, timestamp=timestamp)
        if point is None:
            for table in TABLE_NAMES:
                qb.register(table, _open(f"{root}/{table}", versions[table]))
        else:
            for table in TABLE_NAMES:
                qb.register(_full_name(table), _open(f"{root}/{table}", None))
            source = {t: _full_name(t) for t in TABLE_NAMES}
            for table, sql in known_tables_sql(source, point).items():
                qb.execute(f"CREATE VIEW {table} AS {sql}").read_all()
        for name, (table, where) in VIEW_DEFINITIONS.items():
            if name != table:
                sql = f"CREATE VIEW {name} AS SELECT * FROM {table}"
                qb.execute(sql + (f" WHERE {where}" if where else "")).read_all()
    except _NotInHistory as exc:
        msg = f"cannot read the tables under {root} at {at}: {exc}"
        raise ConfigError(msg) from None
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - delta-rs raises DeltaError or a plain Exception
        msg = f"cannot read the tables under {root} at {at}: {_first_line(exc)}"
        raise ConfigError(msg) from None
    return qb


def _first_line(exc: BaseException) -> str:
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__


def spark_like_arrow(table: pa.Table) -> pa.Table:
    """``table`` with view types made plain (``string_view`` → ``string``, binary likewise).

    DataFusion may answer with Arrow's view types; Spark's Arrow results never do.
    """
    fields = []
    for f in table.schema:
        if pa.types.is_string_view(f.type) or pa.types.is_large_string(f.type):
            f = f.with_type(pa.string())
        elif pa.types.is_binary_view(f.type) or pa.types.is_large_binary(f.type):
            f = f.with_type(pa.binary())
        fields.append(f)
    schema = pa.schema(fields)
    return table if schema.equals(table.schema) else table.cast(schema)


def run_query_local(
    sql: str,
    delta_path: str,
    *,
    version: int | None = None,
    timestamp: str | dt.datetime | None = None,
    known_at: int | str | dt.datetime | None = None,
    watermark: int | str | None = None,
) -> pd.DataFrame:
    """Run ``sql`` over the views of ``delta_path`` in-process; the result as pandas.

    ``version`` / ``timestamp`` read the tables as committed then (Delta time travel);
    ``known_at`` (emission time, epoch ms or a time) / ``watermark`` (epoch ms) answer from
    the revisions known at that point (:mod:`revise.query.known`). At most one of the four.

    The frame has what :func:`revise.query.run_query` (Spark) returns for the same SQL: the
    same columns, dtypes and rows (row order only where the SQL orders them), so
    :func:`revise.query.format_frame` prints both alike.

    Raises:
        ConfigError: Bad SQL, an unknown table, view or column (the message names the views),
            or a problem reported by :func:`open_views_local`.
    """
    qb = open_views_local(delta_path, version=version, timestamp=timestamp, known_at=known_at,
                          watermark=watermark)
    try:
        result = pa.RecordBatchReader.from_stream(qb.execute(sql)).read_all()
    except Exception as exc:  # noqa: BLE001 - DataFusion's parse, planning and execution errors
        msg = f"{_first_line(exc)}\n{views_hint()}"
        raise ConfigError(msg) from None
    return spark_like_arrow(result).to_pandas()


# --------------------------------------------------------------------------- compare


COMPARISONS_SCHEMA: Final = pa.schema([
    ("run_id", pa.string()), ("created_at_ms", pa.int64()), ("mode", pa.string()),
    ("section", pa.string()), ("metric", pa.string()), ("value", pa.float64()),
])
"""``revise compare``'s ``comparisons`` table (its Spark DDL: ``run_id STRING, created_at_ms
BIGINT, mode STRING, section STRING, metric STRING, value DOUBLE``)."""


def read_table(
    path: str,
    *,
    query_id: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """One Delta table as pandas, optionally only the rows of one ``query_id``.

    The frame equals ``spark.read.format("delta").load(path).toPandas()`` (filtered); delta-rs
    applies the filter while reading.
    """
    from deltalake import DeltaTable

    table = DeltaTable(path, storage_options=dict(storage_options or {}) or None)
    filters = [("query_id", "=", query_id)] if query_id is not None else None
    data = table.to_pyarrow_table(filters=filters)
    return spark_like_arrow(data).to_pandas()


def append_frame(
    path: str,
    frame: pd.DataFrame,
    schema: pa.Schema,
    *,
    storage_options: Mapping[str, str] | None = None,
) -> None:
    """Append ``frame`` to the Delta table at ``path`` (created when missing) with delta-rs.

    Args:
        path: The table (e.g. ``<delta_path>/comparisons``).
        frame: The rows; its columns are taken in ``schema``'s order and cast to its types.
        schema: The table's Arrow schema (a Spark-written table of the same columns accepts it).
        storage_options: delta-rs storage options; None reads them from the environment.
    """
    from deltalake import write_deltalake

    data = pa.Table.from_pandas(frame[schema.names], schema=schema, preserve_index=False)
    write_deltalake(path, data, mode="append",
                    storage_options=dict(storage_options or {}) or None)
