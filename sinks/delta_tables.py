"""The Delta Lake tables of a query and the SQL views over them (SPEC §5).

Under one ``path``::

    revisions/    append-only history of every revision (SPEC §4 fields)
    latest/       one row per (query_id, key, window_start_ms, window_end_ms): its highest
                  revision; retracted (superseded) session bounds are removed
    late/         too-late records (SPEC §6 late fields + query_id), append-only
    dead_letter/  bad input (raw_value, reason, topic, partition, offset, batch_id + query_id)

Guarantee: **replaying a micro-batch changes nothing.** Every write of batch ``b`` of query
``q`` is a Delta transaction tagged ``txnAppId = revise-<q>``, ``txnVersion = b`` (appends via
the writer options, the MERGE via ``spark.databricks.delta.write.txnAppId/txnVersion``, which
Delta 4.4 honours for MERGE — pinned by a test). Delta keeps the highest version per app id in
each table's own log and silently skips a write whose version is not higher: no new commit, no
data change. The MERGE into ``latest`` is also idempotent by itself: it only replaces a row with a
strictly higher revision, so a replay of the same revisions matches and changes nothing.

Trace (tumbling 10 s, window ``[0, 10000)`` of key ``a``): batch 3 writes rev 0 (EARLY) →
``latest`` holds rev 0; batch 5 writes rev 1 (LATE) → rev 1 replaces it; batch 5 replayed →
skipped (txnVersion 5 ≤ 5); a stray rev 0 → ignored (0 < 1).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import pyarrow as pa
from delta.tables import DeltaTable
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StringType, StructField, StructType
from pyspark.sql.window import Window

from revise.errors import ReviseError
from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA, REVISION_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "TABLE_NAMES",
    "VIEW_NAMES",
    "WINDOW_ID",
    "DeltaTables",
    "DeltaWriteError",
    "WriteTimings",
    "register_views",
    "table_schema",
    "view_sql",
]

TABLE_NAMES: Final = ("revisions", "latest", "late", "dead_letter")
WINDOW_ID: Final = ("query_id", "key", "window_start_ms", "window_end_ms")
"""The identity of a window in ``latest`` (and the MERGE key)."""

_APPEND_ONLY: Final = {"delta.appendOnly": "true"}
_PROPERTIES: Final[Mapping[str, Mapping[str, str]]] = {
    # History tables only ever grow: Delta rejects UPDATE/DELETE/MERGE on them.
    "revisions": _APPEND_ONLY,
    "late": _APPEND_ONLY,
    "dead_letter": _APPEND_ONLY,
    # Many small MERGE commits: checkpoint the log often so snapshots stay cheap to load.
    "latest": {"delta.checkpointInterval": "10"},
}

# view name → (table, filter)
_VIEWS: Final[Mapping[str, tuple[str, str | None]]] = {
    "final_windows": ("latest", "is_final"),
    "provisional_windows": ("latest", "NOT is_final"),
    "revision_history": ("revisions", None),
    "late_records": ("late", None),
    "dead_letters": ("dead_letter", None),
    "revisions": ("revisions", None),
    "latest": ("latest", None),
    "late": ("late", None),
    "dead_letter": ("dead_letter", None),
}
VIEW_NAMES: Final = tuple(_VIEWS)
"""Every view :func:`register_views` creates: the SPEC §5 views, then the raw tables."""


class DeltaWriteError(ReviseError, RuntimeError):
    """A Delta write of a micro-batch failed (the batch is safe to replay)."""


def _with_query_id(schema: pa.Schema) -> StructType:
    base = from_arrow_schema(schema)
    return StructType([StructField("query_id", StringType(), False), *base.fields])


def table_schema(table: str) -> StructType:
    """The Spark schema of one of :data:`TABLE_NAMES`."""
    if table in ("revisions", "latest"):
        return from_arrow_schema(REVISION_SCHEMA)
    if table == "late":
        return _with_query_id(LATE_SCHEMA)
    if table == "dead_letter":
        return _with_query_id(DEAD_LETTER_SCHEMA)
    msg = f"unknown Delta table {table!r}; expected one of {TABLE_NAMES}"
    raise ValueError(msg)


@dataclass(frozen=True, slots=True)
class WriteTimings:
    """Seconds spent per table in the last :meth:`DeltaTables.write_batch` (0 when skipped)."""

    revisions: float
    late: float
    dead_letter: float
    latest: float
    total: float


class DeltaTables:
    """The four Delta tables of revise under one path, written idempotently per micro-batch."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        self.spark = spark
        self.path = str(path).rstrip("/")
        self.last_timings: WriteTimings | None = None

    def table_path(self, table: str) -> str:
        """``<path>/<table>``."""
        return f"{self.path}/{table}"

    def ensure(self) -> DeltaTables:
        """Create the tables that are missing, with explicit schemas and properties.

        ``latest`` is created last so every other table exists at any of its commit times
        (used by time travel in :func:`register_views`).
        """
        for table in ("revisions", "late", "dead_letter", "latest"):
            builder = (
                DeltaTable.createIfNotExists(self.spark)
                .location(self.table_path(table))
                .addColumns(table_schema(table))
            )
            for k, v in _PROPERTIES[table].items():
                builder = builder.property(k, v)
            builder.execute()
        return self

    def write_batch(
        self,
        query_id: str,
        batch_id: int,
        revisions: DataFrame,
        late: DataFrame,
        dead_letters: DataFrame,
        *,
        after_table: Callable[[str], None] | None = None,
    ) -> None:
        """Write one micro-batch to the four tables; a replay of the batch is a no-op.

        Every write is a Delta transaction tagged ``(txnAppId="revise-<query_id>",
        txnVersion=batch_id)``: Delta skips it (no commit) when that table's log already holds
        this app id at ``batch_id`` or higher. Empty inputs are not written (a replay of the
        same deterministic batch is empty too, so skipping keeps replays no-ops):

        a. append ``revisions`` to ``revisions``;
        b. append ``late`` (+ ``query_id``) to ``late``;
        c. append ``dead_letters`` (+ ``query_id``) to ``dead_letter``;
        d. MERGE ``revisions`` into ``latest`` on :data:`WINDOW_ID`, after keeping only the
           highest revision per window: a higher retracted revision deletes the row, a higher
           one replaces it, a new window is inserted unless retracted; equal or lower revisions
           change nothing.

        Args:
            query_id: The job's stable id.
            batch_id: The Spark micro-batch id (the Delta ``txnVersion``).
            revisions: Revisions with the SPEC §4 columns (extra columns are dropped, types
                cast to the table's).
            late: Too-late records with the SPEC §6 late columns.
            dead_letters: Dead letters with the SPEC §6 columns.
            after_table: Called with each table's name after its write (crash tests kill the
                process between tables there).

        Each DataFrame is evaluated up to three times: pass materialized ones (built from local
        data, or persisted).

        Raises:
            DeltaWriteError: a write failed; the tables hold a prefix of the batch's writes and
                a replay completes the rest.
        """
        app_id = f"revise-{query_id}"
        t0 = time.perf_counter()
        t: dict[str, float] = {}

        def done(table: str) -> None:
            if after_table is not None:
                after_table(table)

        try:
            qid = F.lit(query_id)
            has_revisions = not revisions.isEmpty()  # one Spark job, shared by (a) and (d)
            # (a)(b)(c) idempotent appends
            t["revisions"] = (
                self._append("revisions", revisions, app_id, batch_id, nonempty=True)
                if has_revisions
                else 0.0
            )
            done("revisions")
            t["late"] = self._append("late", late.withColumn("query_id", qid), app_id, batch_id)
            done("late")
            t["dead_letter"] = self._append(
                "dead_letter", dead_letters.withColumn("query_id", qid), app_id, batch_id
            )
            done("dead_letter")
            # (d) MERGE into latest, same transaction identifiers
            t["latest"] = self._merge_latest(revisions, app_id, batch_id) if has_revisions else 0.0
            done("latest")
        except Exception as e:
            msg = (
                f"Delta write of batch {batch_id} of query {query_id!r} under {self.path!r} "
                f"failed ({type(e).__name__}: {e}); replaying the batch completes it"
            )
            raise DeltaWriteError(msg) from e
        self.last_timings = WriteTimings(
            t["revisions"], t["late"], t["dead_letter"], t["latest"], time.perf_counter() - t0
        )

    # ---- helpers ---------------------------------------------------------------------------

    def _conform(self, table: str, df: DataFrame) -> DataFrame:
        return df.select(*[F.col(f.name).cast(f.dataType) for f in table_schema(table).fields])

    def _append(
        self, table: str, df: DataFrame, app_id: str, batch_id: int, *, nonempty: bool = False
    ) -> float:
        t0 = time.perf_counter()
        if not nonempty and df.isEmpty():
            return 0.0
        (
            self._conform(table, df)
            .write.format("delta")
            .mode("append")
            .option("txnAppId", app_id)
            .option("txnVersion", str(batch_id))
            .save(self.table_path(table))
        )
        return time.perf_counter() - t0

    def _merge_latest(self, revisions: DataFrame, app_id: str, batch_id: int) -> float:
        t0 = time.perf_counter()
        top = Window.partitionBy(*WINDOW_ID).orderBy(F.col("revision").desc())
        source = (
            self._conform("latest", revisions)
            .withColumn("_rank", F.row_number().over(top))
            .where("_rank = 1")
            .drop("_rank")
        )
        on = " AND ".join(f"t.{c} = s.{c}" for c in WINDOW_ID)
        merge = (
            DeltaTable.forPath(self.spark, self.table_path("latest"))
            .alias("t")
            .merge(source.alias("s"), on)
            .whenMatchedDelete(condition="s.revision > t.revision AND s.retracted")
            .whenMatchedUpdateAll(condition="s.revision > t.revision")
            .whenNotMatchedInsertAll(condition="NOT s.retracted")
        )
        conf = self.spark.conf
        conf.set("spark.databricks.delta.write.txnAppId", app_id)
        conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
        try:
            merge.execute()
        finally:
            conf.unset("spark.databricks.delta.write.txnAppId")
            conf.unset("spark.databricks.delta.write.txnVersion")
        return time.perf_counter() - t0

    def version(self, table: str) -> int:
        """The current Delta version of one table."""
        row = DeltaTable.forPath(self.spark, self.table_path(table)).history(1).first()
        return int(row["version"]) if row is not None else -1


# --------------------------------------------------------------------------------------------
# Views
# --------------------------------------------------------------------------------------------


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
        name: One of :data:`VIEW_NAMES`.
        path: The Delta root (``--delta-path``).
        version: Read the view's table as of this Delta version of that table.
        timestamp: Or as of this time (``'2026-11-21 10:00:00'`` or a datetime, UTC).

    Returns:
        ``SELECT * FROM delta.`<path>/<table>` [VERSION|TIMESTAMP AS OF …] [WHERE …]``.
    """
    if name not in _VIEWS:
        msg = f"unknown view {name!r}; expected one of {VIEW_NAMES}"
        raise ValueError(msg)
    if version is not None and timestamp is not None:
        msg = "give a version or a timestamp to time-travel to, not both"
        raise ValueError(msg)
    table, where = _VIEWS[name]
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
) -> list[str]:
    """Create (or replace) the temp views of :data:`VIEW_NAMES` over the tables under ``path``.

    ``final_windows`` = latest where is_final; ``provisional_windows`` = latest where not
    is_final; ``revision_history`` = revisions; ``late_records`` = late; ``dead_letters`` =
    dead_letter; plus each raw table under its own name.

    Time travel: ``timestamp`` reads every table as of that time. ``version`` is a version of
    ``latest`` (the table a ``--as-of-version`` user asks about); the other tables are read at
    their last version committed no later than that ``latest`` version, so all views show one
    moment (each table has its own version numbers).

    Returns:
        The view names.
    """
    root = str(path).rstrip("/")
    versions: dict[str, int | None] = dict.fromkeys(TABLE_NAMES)
    if version is not None:
        versions = _versions_at_latest(spark, root, version)
    for name, (table, _) in _VIEWS.items():
        sql = view_sql(name, root, version=versions[table], timestamp=timestamp)
        spark.sql(f"CREATE OR REPLACE TEMP VIEW `{name}` AS {sql}")
    return list(VIEW_NAMES)


def _versions_at_latest(spark: SparkSession, root: str, version: int) -> dict[str, int | None]:
    hist = DeltaTable.forPath(spark, f"{root}/latest").history()
    row = hist.where(F.col("version") == version).select("timestamp").first()
    if row is None:
        msg = f"{root}/latest has no version {version}; see DESCRIBE HISTORY for its versions"
        raise ValueError(msg)
    at = row["timestamp"]
    out: dict[str, int | None] = {"latest": version}
    for table in ("revisions", "late", "dead_letter"):
        h = DeltaTable.forPath(spark, f"{root}/{table}").history()
        best = h.where(F.col("timestamp") <= F.lit(at)).agg(F.max("version")).first()
        out[table] = int(best[0]) if best is not None and best[0] is not None else 0
    return out
