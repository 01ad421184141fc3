"""History rows written where they are computed: data files by the tasks, commits by the driver.

Two halves of one append to ``revisions``, ``late`` or ``dead_letter``:

1. **Executor** (a stateful Spark task, in its Python worker): :func:`write_data_file` writes
   the task's rows for one table as one Parquet file in the table's folder, under a name of
   its own (``part-<prefix>-<uuid4 hex>.snappy.parquet``), and returns a :class:`DataFile`: the
   file's path, size, modification time and Delta statistics, a few hundred bytes of JSON
   (:meth:`DataFile.to_json`) that travel back to the driver instead of the rows. The file is
   invisible to every reader until a commit names it.
2. **Driver**: :func:`commit_files` adds a micro-batch's files to a table's log in one Delta
   transaction carrying the application transaction ``(revise-<query_id>, batch_id)``,
   through :meth:`sinks.delta_txn.DeltaRoot.write_once`: a replayed batch (``batch_id`` not
   above the table's recorded version) commits nothing, and a zombie committing the same
   batch at the same time loses Delta's conflict check and finds the batch done.
   :func:`commit_batches` does the same for several micro-batches at once (the staged ones of
   :mod:`sinks.file_stage`), adding only the files of batches above the table's version.

The driver's work per micro-batch grows with the number of files, not of rows.

A batch with no files for a table commits nothing to it (no empty transaction): the table's
app version is the highest batch that had rows for it. Whether a batch is in a table is known
without it: the batch's staged record (:mod:`sinks.file_stage`) lists its files per table, and
a table it lists none for needs nothing. An empty commit per quiet table would add a log entry
per commit interval for nothing (``late`` and ``dead_letter`` are empty in most batches).

The files are what delta-rs writes for ``write_deltalake`` in these tables (Parquet with
snappy compression, column statistics, the Arrow schema in the footer, one row group per
million rows; the table's Arrow schema, the caller conforms the rows,
:func:`sinks.delta_txn.conform`), except that floating-point columns are not dictionary
encoded (:func:`parquet_options`). A file written for a batch that is never committed (a task
attempt that failed, a replayed batch) stays in the folder unreferenced; ``VACUUM`` removes it
after the table's retention.

Trace (batch 12, two shards): shard 0 writes ``part-b12-s0-….snappy.parquet`` (600 rows), shard
1 ``part-b12-s1-….snappy.parquet`` (400 rows) → the driver commits both to ``revisions`` as
``(revise-q, 12)``: v7, 1,000 rows visible at once; batch 12 replayed → new files written,
nothing committed (12 ≤ 12), the new files unreferenced.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Final

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from revise.errors import ReviseError
from sinks.atomic import write_atomic
from sinks.delta_log import object_store
from sinks.delta_txn import DeltaRoot

if TYPE_CHECKING:
    from deltalake import DeltaTable as RustDeltaTable
    from deltalake.transaction import AddAction, CommitProperties

__all__ = ["PARQUET_OPTIONS", "STATS_COLUMNS", "STRING_PREFIX", "DataFile", "DataFileError",
           "commit_batches", "commit_files", "delta_stats", "parquet_options",
           "read_data_files", "write_data_file"]

PARQUET_OPTIONS: Final[Mapping[str, Any]] = {
    "compression": "snappy",
    "use_dictionary": True,
    "write_statistics": True,
    "row_group_size": 1024 * 1024,
}
"""``pyarrow.parquet.write_table`` options: delta-rs 1.6's defaults for its own data files
(:func:`parquet_options` narrows the dictionary encoding per schema)."""
STATS_COLUMNS: Final = 32
"""Columns (the first, in schema order) with statistics: Delta's default
``delta.dataSkippingNumIndexedCols``, which delta-rs and Spark follow."""
STRING_PREFIX: Final = 32
"""Characters of a string kept in its min/max statistics: Delta Spark's default
``delta.dataSkippingStringPrefixLength`` (a longer max is cut and its last character raised)."""

_PREFIX_RE: Final = re.compile(r"[A-Za-z0-9_-]+")
_KEYS: Final = ("path", "size", "modification_time_ms", "num_records", "stats")


class DataFileError(ReviseError, ValueError):
    """Rows that do not fit their table, files that do not fit theirs, a record that won't parse."""


@dataclass(frozen=True, slots=True)
class DataFile:
    """One Parquet file written into a Delta table's folder, not yet (or already) committed.

    Attributes:
        path: Relative to the table's root (the Delta ``add`` action's path).
        size: Bytes.
        modification_time_ms: The file's modification time, epoch milliseconds.
        num_records: Rows in the file.
        stats: The Delta statistics JSON (``numRecords``, ``minValues``, ``maxValues``,
            ``nullCount``; :func:`delta_stats`).
    """

    path: str
    size: int
    modification_time_ms: int
    num_records: int
    stats: str

    def to_json(self) -> bytes:
        """The record as a small JSON object (what a task sends the driver)."""
        return orjson.dumps({k: getattr(self, k) for k in _KEYS})

    @classmethod
    def from_json(cls, data: bytes | str) -> DataFile:
        """The record :meth:`to_json` wrote.

        Raises:
            DataFileError: ``data`` is not such a record.
        """
        try:
            obj = orjson.loads(data)
            fields = {k: obj[k] for k in _KEYS}
        except (orjson.JSONDecodeError, KeyError, TypeError) as e:
            msg = (f"not a DataFile record ({type(e).__name__}: {e}): {data[:200]!r}; "
                   f"expected a JSON object with {', '.join(_KEYS)} (DataFile.to_json)")
            raise DataFileError(msg) from e
        return cls(**fields)

    def add_action(self) -> AddAction:
        """The Delta ``add`` action of this file."""
        from deltalake.transaction import AddAction

        return AddAction(self.path, self.size, {}, self.modification_time_ms, True, self.stats)


def write_data_file(table_path: str, rows: pa.Table, *, prefix: str,
                    storage_options: Mapping[str, str] | None = None) -> DataFile:
    """Write ``rows`` as one new Parquet data file of the Delta table at ``table_path``.

    The file is named ``part-<prefix>-<uuid4 hex>.snappy.parquet`` in the table's folder
    (unpartitioned tables) and is not part of the table until :func:`commit_files` commits
    it. A local path is written to a hidden temporary name, fsync'd and renamed
    (:func:`sinks.atomic.write_atomic`): a crash leaves no partial file under a ``part-``
    name. A URI (``s3://``, ``gs://``, ``abfss://``, ``file://``…) is written through delta-rs's
    object store with ``storage_options`` (the same options as the table's,
    ``deltalake.fs.DeltaStorageHandler``); an object store's put is whole or absent.

    Args:
        table_path: The table's root, a local path or a URI (``DeltaRoot.table_path``).
        rows: The rows, in the table's Arrow schema (:func:`sinks.delta_txn.conform`).
        prefix: Says who wrote it, e.g. ``b12-p3`` for batch 12, state partition 3 (letters, digits,
            ``_`` and ``-``).
        storage_options: delta-rs storage options for a URI; None reads the environment.

    Raises:
        DataFileError: ``prefix`` has other characters, or a non-nullable column holds nulls.
        OSError: The file could not be written (nothing under its final name).
    """
    if not _PREFIX_RE.fullmatch(prefix):
        msg = (f"data file prefix {prefix!r} has characters other than letters, digits, '_' "
               "and '-'; give e.g. 'b12-s3'")
        raise DataFileError(msg)
    for field, column in zip(rows.schema, rows.columns, strict=True):
        if not field.nullable and column.null_count:
            msg = (f"column {field.name!r} of {table_path!r} is not nullable but "
                   f"{column.null_count} of {rows.num_rows} rows are null; fix the rows "
                   "before writing them")
            raise DataFileError(msg)
    name = f"part-{prefix}-{uuid.uuid4().hex}.snappy.parquet"
    stats = delta_stats(rows)
    if "://" in table_path:
        size, mtime_ms = _write_to_store(table_path, name, rows, storage_options)
    else:
        final = Path(table_path) / name
        write_atomic(final, _parquet_writer(rows))
        st = final.stat()
        size, mtime_ms = st.st_size, st.st_mtime_ns // 1_000_000
    return DataFile(name, size, mtime_ms, rows.num_rows, stats)


def read_data_files(table_path: str, files: Sequence[DataFile], schema: pa.Schema, *,
                    storage_options: Mapping[str, str] | None = None) -> pa.Table:
    """The rows of ``files`` of the Delta table at ``table_path``, in ``schema``, in order.

    Reads them whether or not the table's log holds them yet (a local path directly, a URI
    through delta-rs's object store, as :func:`write_data_file` wrote them).

    Raises:
        OSError: A file could not be read (gone, or the store refused).
    """
    if not files:
        return schema.empty_table()
    if "://" in table_path:
        fs: Any = object_store(table_path, storage_options)
        paths = [f.path for f in files]
    else:
        fs, paths = None, [str(Path(table_path) / f.path) for f in files]
    tables = [pq.read_table(path, schema=schema, filesystem=fs) for path in paths]
    return pa.concat_tables(tables)


def parquet_options(schema: pa.Schema) -> dict[str, Any]:
    """:data:`PARQUET_OPTIONS` for a file of ``schema``: a dictionary for its other columns.

    Aggregates of real-valued data hardly repeat: a dictionary of a file's doubles is as long
    as the column, so the encoding costs the hashing and still falls back or grows the file.
    Without it a file of revisions is written about 3× as fast and comes out smaller (0.67 →
    0.23 µs and 109 → 94 bytes a revision of random doubles, ``bench_output``).
    """
    coded = [f.name for f in schema if not pa.types.is_floating(f.type)]
    return {**PARQUET_OPTIONS, "use_dictionary": coded}


def _parquet_writer(rows: pa.Table) -> Callable[[BinaryIO], None]:
    def write(f: BinaryIO) -> None:
        pq.write_table(rows, f, **parquet_options(rows.schema))
    return write


def _write_to_store(table_uri: str, name: str, rows: pa.Table,
                    storage_options: Mapping[str, str] | None) -> tuple[int, int]:
    """Put the file through delta-rs's object store; its (size, modification time in ms)."""
    fs = object_store(table_uri, storage_options)
    with fs.open_output_stream(name) as f:
        pq.write_table(rows, f, **parquet_options(rows.schema))
    info = fs.get_file_info(name)
    mtime = info.mtime
    mtime_ms = int(mtime.timestamp() * 1000) if mtime is not None else int(time.time() * 1000)
    return int(info.size or 0), mtime_ms


def delta_stats(rows: pa.Table, *, columns: int = STATS_COLUMNS) -> str:
    """The Delta statistics JSON of a data file holding ``rows``.

    For the first ``columns`` top-level columns: ``nullCount`` for every one, and
    ``minValues`` / ``maxValues`` for the types readers prune on, in the JSON forms delta-rs
    writes: integers and floats as numbers (NaN ignored, as delta-rs and pyarrow compare),
    booleans, strings (cut to :data:`STRING_PREFIX` characters; a cut max gets its last
    character raised, so it still bounds the column), dates as ``2024-01-02``, timestamps as
    milliseconds, truncated (readers widen the max by 1 ms): ``2024-01-01T00:00:00.123Z`` (UTC)
    or ``2024-01-01 00:00:00.123`` (no time zone). No min/max for a column of nulls, a float
    column reaching ±inf (JSON has no such numbers), decimals, binaries; nested columns get
    nothing. Trace: ``key`` = ["b", "a", null] → min "a", max "b", nullCount 1.
    """
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for field, column in list(zip(rows.schema, rows.columns, strict=True))[:columns]:
        kind = field.type
        if pa.types.is_nested(kind):
            continue
        nulls[field.name] = column.null_count
        if column.null_count == len(column):
            continue
        bounds = _bounds(kind, column)
        if bounds is not None:
            mins[field.name], maxs[field.name] = bounds
    return orjson.dumps({"numRecords": rows.num_rows, "minValues": mins, "maxValues": maxs,
                         "nullCount": nulls}).decode()


def _bounds(kind: pa.DataType, column: pa.ChunkedArray) -> tuple[Any, Any] | None:
    """(min, max) of a column with a non-null value, as Delta statistics; None: none kept."""
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)
            or pa.types.is_boolean(kind) or pa.types.is_string(kind)
            or pa.types.is_large_string(kind) or pa.types.is_date(kind)
            or pa.types.is_timestamp(kind)):
        return None
    if pa.types.is_timestamp(kind):
        # as int64 in the column's unit, then floored to ms: readers add 1 ms to the max
        column = column.cast(pa.int64())
    mm = pc.min_max(column)
    lo, hi = mm["min"].as_py(), mm["max"].as_py()
    if pa.types.is_floating(kind):
        if lo is None or not (math.isfinite(lo) and math.isfinite(hi)):  # None: all NaN
            return None
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        top = _string_upper_bound(hi)
        return None if top is None else (lo[:STRING_PREFIX], top)
    elif pa.types.is_date(kind):
        return lo.isoformat(), hi.isoformat()
    elif pa.types.is_timestamp(kind):
        assert isinstance(kind, pa.TimestampType)
        per_ms = {"s": 0, "ms": 1, "us": 1_000, "ns": 1_000_000}[kind.unit]
        zone = kind.tz is not None
        if per_ms == 0:
            return _ms_text(lo * 1000, zone), _ms_text(hi * 1000, zone)
        return _ms_text(lo // per_ms, zone), _ms_text(hi // per_ms, zone)
    return lo, hi


def _string_upper_bound(s: str) -> str | None:
    """An upper bound of ``s`` no longer than :data:`STRING_PREFIX` characters.

    ``s`` if short enough, else its prefix with the last raisable character raised (greater
    than every string starting with the prefix); None if none is raisable.
    """
    if len(s) <= STRING_PREFIX:
        return s
    cut = s[:STRING_PREFIX]
    for i in range(len(cut) - 1, -1, -1):
        code = ord(cut[i]) + 1
        if code <= 0x10FFFF:
            if 0xD800 <= code <= 0xDFFF:  # surrogates are not characters
                code = 0xE000
            return cut[:i] + chr(code)
    return None


_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _ms_text(ms: int, zone: bool) -> str:
    """``2024-01-01T00:00:00.123Z`` (``zone``) or ``2024-01-01 00:00:00.123`` of epoch ms."""
    t = _EPOCH + dt.timedelta(milliseconds=ms)
    if zone:
        return f"{t:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"
    return f"{t:%Y-%m-%d %H:%M:%S}.{ms % 1000:03d}"


def commit_files(root: DeltaRoot, table: str, app_id: str, batch_id: int,
                 files: Sequence[DataFile], schema: pa.Schema) -> float:
    """Add ``files`` to ``table`` in one Delta commit, as app transaction ``(app_id, batch_id)``.

    Skipped (nothing committed) when the table's version of ``app_id`` is ``batch_id`` or
    higher (a replay), and when ``files`` is empty (see the module: no empty transactions).
    A concurrent commit of the same app id fails Delta's conflict check; the table is re-read
    and the batch found done (:meth:`~sinks.delta_txn.DeltaRoot.write_once`). Returns the
    seconds spent, 0.0 when nothing was committed.

    Args:
        root: The Delta root the table is under.
        table: ``revisions``, ``late`` or ``dead_letter``.
        app_id: ``revise-<query_id>`` (:func:`sinks.delta_txn.app_id`).
        batch_id: The micro-batch the files hold.
        files: What the tasks wrote (:func:`write_data_file`), in the table's folder.
        schema: The table's Arrow schema, which the files were written in.

    Raises:
        DataFileError: ``schema`` is not the table's, or the table maps column names (the
            files' columns would not be found).
        deltalake.exceptions.CommitFailedError: Three commits in a row lost to other writers.
    """
    return commit_batches(root, table, app_id, {batch_id: files}, schema)


def commit_batches(root: DeltaRoot, table: str, app_id: str,
                   files: Mapping[int, Sequence[DataFile]], schema: pa.Schema) -> float:
    """Add the files of several micro-batches (batch id → files) to ``table`` in one commit.

    Only the batches above the table's version of ``app_id`` are added, read from the same
    snapshot the commit is checked against; the commit is tagged with the highest batch id of
    ``files``. Nothing is committed when those batches have no files. Otherwise as
    :func:`commit_files` (its seconds, its errors).
    """
    if not files or not any(files.values()):
        return 0.0
    last = max(files)

    def write(target: RustDeltaTable, props: CommitProperties, done: int | None) -> bool:
        new = [f for b in sorted(files) if done is None or b > done for f in files[b]]
        if not new:
            return False
        _check_table(root.table_path(table), target, schema)
        target.create_write_transaction([f.add_action() for f in new], mode="append",
                                        schema=schema, commit_properties=props)
        return True

    return root.write_once(table, app_id, last, write)


def _check_table(where: str, target: RustDeltaTable, schema: pa.Schema) -> None:
    """Refuse files for a table whose columns differ from ``schema``'s or are mapped."""
    mapping = target.metadata().configuration.get("delta.columnMapping.mode", "none")
    if mapping != "none":
        msg = (f"{where} maps column names (delta.columnMapping.mode={mapping}); data files "
               "written by name cannot be committed to it: give the job a new --delta-path")
        raise DataFileError(msg)
    have = pa.schema(target.schema().to_arrow())
    if [(f.name, f.type) for f in have] != [(f.name, f.type) for f in schema]:
        msg = (f"{where} has the columns {have.names} ({have.types}), the files "
               f"{schema.names} ({schema.types}); write the files in the table's schema")
        raise DataFileError(msg)

