"""``latest``'s MERGE in a local or shared folder: deletion vectors and revise's own commit.

The MERGE marks the rows of the windows a batch revises as deleted, in Delta deletion vectors
(:mod:`sinks.deletion_vectors`), and writes the batch's rows into one new file: its cost follows
the batch, not the table. (delta-rs merges copy-on-write, rewriting every file that holds an
updated window: with a batch's keys spread over the whole table, every file, every MERGE.) The
files a MERGE has deleted half of, and the small files once several gathered, are rewritten by
a later MERGE into its new file, so the table holds at most about twice its live rows.

delta-rs reads, checkpoints and compacts such a table but writes no deletion vectors and
exposes none: this module reads the log (:mod:`sinks.delta_log`), writes the vectors and
commits the actions itself, put-if-absent, which needs a folder (a hard link is the
put-if-absent); :mod:`sinks.latest_merge` runs delta-rs's MERGE on object stores instead.
Spark reads the table as any Delta table with deletion vectors.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote

import numpy as np
import numpy.typing as npt
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from revise.vocab import LATEST_KEY
from sinks.deletion_vectors import DvDescriptor, read_deletion_vector, write_deletion_vectors
from sinks.delta_commit import commit_actions
from sinks.delta_files import write_data_file
from sinks.delta_log import ActiveFile, LogSnapshot, read_snapshot
from sinks.delta_txn import DeltaRoot, conform

if TYPE_CHECKING:
    from deltalake import DeltaTable as RustDeltaTable
    from deltalake.transaction import CommitProperties

__all__ = ["REWRITE_DELETED_SHARE", "SMALL_FILES", "SMALL_FILE_BYTES", "merge"]

log = logging.getLogger("revise.delta")


def merge(root: DeltaRoot, path: str, source: pa.Table, schema: pa.Schema, app_id: str,
          batch_id: int) -> float:
    """MERGE ``source`` into the ``latest`` table in the folder ``path``; its seconds.

    ``source`` holds one row per window, in ``schema``
    (:func:`sinks.latest_merge.highest_per_window`): a higher retracted revision deletes the
    window's row, a higher one replaces it, a new window is inserted unless retracted; equal or
    lower revisions change nothing. One Delta commit as app transaction ``(app_id,
    batch_id)`` through ``root`` (:meth:`sinks.delta_txn.DeltaRoot.write_once`), step numbers
    as in the code:

    1. Read ``latest``'s log (:func:`sinks.delta_log.read_snapshot`): its active files, their
       deletion vectors, the version of ``app_id`` (a replay stops here).
    2. Plan: the rows the batch replaces or deletes, file by file; the rows it inserts; the
       files to rewrite (:data:`REWRITE_DELETED_SHARE`, :data:`SMALL_FILES`).
    3. Write the new data file (inserted rows and the rewritten files' live rows) and one
       deletion vector file (every touched file's deleted rows, old and new).
    4. Commit ``remove`` + ``add`` (new deletion vector) per touched file, ``remove`` per
       rewritten file, ``add`` of the new file and the app transaction, as version + 1:
       put-if-absent (:func:`sinks.delta_commit.commit_actions`); a lost race re-reads (1).
    5. Every ``delta.checkpointInterval`` versions, a checkpoint (delta-rs), so that readers
       and step 1 replay a bounded log.

    A crash between 3 and 4 leaves unreferenced files; a crash after 4 is the batch done.
    """

    def write(target: RustDeltaTable, _props: CommitProperties, _done: int | None) -> bool:
        snapshot = read_snapshot(path)  # 1.
        done = snapshot.app_versions.get(app_id)
        if done is not None and done >= batch_id:
            return False
        plan = _plan(path, snapshot, source, schema)  # 2.
        version = snapshot.version + 1
        actions = plan.actions(path, batch_id)  # 3.
        now_ms = int(time.time() * 1000)
        commit_actions(path, version, [  # 4.
            {"commitInfo": {
                "timestamp": now_ms, "operation": "MERGE",
                "operationParameters": {"predicate": " AND ".join(
                    f"t.{c} = s.{c}" for c in LATEST_KEY)},
                "readVersion": snapshot.version, "isolationLevel": "Serializable",
                "isBlindAppend": False, "engineInfo": "revise",
                "operationMetrics": plan.metrics(),
            }},
            {"txn": {"appId": app_id, "version": batch_id, "lastUpdated": now_ms}},
            *actions,
        ])
        interval = int(target.metadata().configuration.get(CHECKPOINT_INTERVAL_KEY, "10"))
        if (version + 1) % interval == 0:  # 5. (where delta-rs puts its own: 9, 19, …)
            _checkpoint(path)
        return True

    return root.write_once("latest", app_id, batch_id, write)


REWRITE_DELETED_SHARE: Final = 0.5
"""A MERGE rewrites a file once this share of its rows is deleted (its live rows go into the
MERGE's new file), so ``latest`` holds at most about twice its live rows and a MERGE's read of
the table's keys stays proportional to the live rows."""
SMALL_FILE_BYTES: Final = 2 * 2**20
"""A file below this size is small (a quiet stream's MERGEs add a small file each)."""
SMALL_FILES: Final = 8
"""A MERGE rewrites the small files once this many have gathered (their rows into its file)."""
CHECKPOINT_INTERVAL_KEY: Final = "delta.checkpointInterval"
_FILE: Final = "__revise_file"
_ROW: Final = "__revise_row"
_SOURCE_ROW: Final = "__revise_source_row"
_TARGET_REVISION: Final = "__revise_target_revision"


@dataclass(frozen=True, slots=True)
class _Plan:
    """What one MERGE changes (:func:`_plan`).

    ``deleted``: per touched file (an index into ``files``) the row indexes deleted in all,
    old and new, sorted; ``rewrite``: the files whose live rows move into the new file;
    ``rows``: the new file's rows (inserted ones, then the rewritten files' live rows).
    """

    files: tuple[ActiveFile, ...]
    deleted: dict[int, npt.NDArray[np.uint64]]
    rewrite: tuple[int, ...]
    rows: pa.Table
    inserted: int
    replaced: int

    def actions(self, path: str, batch_id: int) -> list[dict[str, Any]]:
        """Write the new data and deletion vector files; the commit's file actions."""
        now_ms = int(time.time() * 1000)
        marked = [i for i in self.deleted if i not in self.rewrite]
        vectors = write_deletion_vectors(path, [self.deleted[i] for i in marked])
        actions: list[dict[str, Any]] = []
        for i in (*marked, *self.rewrite):
            actions.append({"remove": _remove(self.files[i], now_ms)})
        for i, vector in zip(marked, vectors, strict=True):
            actions.append({"add": _add(self.files[i], vector)})
        if self.rows.num_rows:
            new = write_data_file(path, self.rows, prefix=f"latest-b{batch_id}")
            actions.append({"add": {
                "path": new.path, "partitionValues": {}, "size": new.size,
                "modificationTime": new.modification_time_ms, "dataChange": True,
                "stats": new.stats,
            }})
        return actions

    def metrics(self) -> dict[str, str]:
        """The commit's ``operationMetrics`` (Delta's names, as strings)."""
        return {
            "numTargetRowsInserted": str(self.inserted),
            "numTargetRowsUpdated": str(self.replaced),
            "numTargetDeletionVectorsAdded": str(len(set(self.deleted) - set(self.rewrite))),
            "numTargetFilesRemoved": str(len(self.rewrite)),
            "numOutputRows": str(self.rows.num_rows),
        }


def _plan(path: str, snapshot: LogSnapshot, source: pa.Table, schema: pa.Schema) -> _Plan:
    """Step 2 of :func:`merge`: match ``source`` (one row per window) with ``latest``.

    Reads the window columns and ``revision`` of the live rows of every file whose
    ``window_start_ms`` range meets the source's, joins them with the source on
    :data:`LATEST_KEY` (``latest`` holds one live row per window), and keeps:
    a matched window whose source revision is higher → its row deleted, and the source row
    inserted unless retracted; an unmatched window → inserted unless retracted.

    Trace: latest has (k1, rev 2) in file 0 row 5 and (k2, rev 0) in file 1 row 0; source
    (k1, rev 3), (k2, rev 0), (k3, rev 0 retracted), (k4, rev 1) → file 0 deletes row 5;
    rows inserted: k1 rev 3, k4 rev 1.
    """
    starts = source.column("window_start_ms")
    lo, hi = pc.min(starts).as_py(), pc.max(starts).as_py()
    files = snapshot.files
    parts: list[pa.Table] = []
    gone_before: dict[int, npt.NDArray[np.uint64]] = {}
    physical: dict[int, int] = {}
    for i, f in enumerate(files):
        if not _may_hold(f, lo, hi):
            continue
        keys = pq.read_table(f"{path}/{unquote(f.path)}", columns=[*LATEST_KEY, "revision"])
        physical[i] = keys.num_rows
        gone = gone_before[i] = _deleted_rows(path, f)
        live = np.ones(keys.num_rows, bool)
        live[gone.astype(np.int64)] = False
        rows = np.flatnonzero(live)
        parts.append(keys.take(pa.array(rows))
                     .rename_columns([*LATEST_KEY, _TARGET_REVISION])
                     .append_column(_FILE, pa.array(np.full(rows.size, i, np.int64)))
                     .append_column(_ROW, pa.array(rows)))
    n = source.num_rows
    src = source.select([*LATEST_KEY, "revision", "retracted"]).append_column(
        _SOURCE_ROW, pa.array(np.arange(n, dtype=np.int64)))
    if parts:  # the source is the join's (smaller) build side
        matched = pa.concat_tables(parts).join(src, keys=list(LATEST_KEY), join_type="inner",
                                               use_threads=False)
    else:
        matched = src.slice(0, 0).append_column(_TARGET_REVISION, pa.array([], pa.int32()))
        matched = matched.append_column(_FILE, pa.array([], pa.int64()))
        matched = matched.append_column(_ROW, pa.array([], pa.int64()))
    m_src = _np(matched, _SOURCE_ROW)
    higher = _np(matched, "revision") > _np(matched, _TARGET_REVISION)
    insert = np.ones(n, bool)
    insert[m_src[~higher]] = False  # the table holds this revision or a higher one
    insert &= ~_np(source, "retracted").astype(bool)
    deleted: dict[int, npt.NDArray[np.uint64]] = {}
    if higher.any():
        d_file, d_row = _np(matched, _FILE)[higher], _np(matched, _ROW)[higher]
        order = np.argsort(d_file, kind="stable")
        d_file, d_row = d_file[order], d_row[order]
        cuts = np.flatnonzero(np.diff(d_file)) + 1
        for chunk_f, chunk_r in zip(np.split(d_file, cuts), np.split(d_row, cuts),
                                    strict=True):
            i = int(chunk_f[0])
            # The rows deleted before were not live, so not matched: the two are disjoint.
            deleted[i] = np.sort(np.concatenate([gone_before[i], chunk_r.astype(np.uint64)]))
    heavy = [i for i, d in deleted.items() if d.size >= REWRITE_DELETED_SHARE * physical[i]]
    small = [i for i, f in enumerate(files) if f.size < SMALL_FILE_BYTES]
    rewrite = sorted({*heavy, *(small if len(small) >= SMALL_FILES else [])})
    kept = [source.take(pa.array(np.flatnonzero(insert)))]
    for i in rewrite:
        gone = deleted[i] if i in deleted else _deleted_rows(path, files[i])
        if gone.size == physical.get(i, -1):
            continue  # every row deleted: nothing to carry over
        whole = pq.read_table(f"{path}/{unquote(files[i].path)}", schema=schema)
        live = np.ones(whole.num_rows, bool)
        live[gone.astype(np.int64)] = False
        kept.append(whole.filter(pa.array(live)))
    return _Plan(files, deleted, tuple(rewrite), conform(pa.concat_tables(kept), schema),
                 int(insert.sum()), int(higher.sum()))


def _np(table: pa.Table, column: str) -> npt.NDArray[Any]:
    array: npt.NDArray[Any] = table.column(column).combine_chunks().to_numpy(
        zero_copy_only=False)
    return array


def _deleted_rows(path: str, f: ActiveFile) -> npt.NDArray[np.uint64]:
    """The rows of ``f`` its deletion vector deletes (none without one)."""
    if f.deletion_vector is None:
        return np.empty(0, np.uint64)
    return read_deletion_vector(path, DvDescriptor.from_action(f.deletion_vector))


def _may_hold(f: ActiveFile, lo: int, hi: int) -> bool:
    """Whether ``f``'s ``window_start_ms`` statistics meet ``[lo, hi]`` (no statistics: yes)."""
    if f.stats is None:
        return True
    stats = orjson.loads(f.stats)
    low = stats.get("minValues", {}).get("window_start_ms")
    high = stats.get("maxValues", {}).get("window_start_ms")
    return low is None or high is None or (low <= hi and high >= lo)


def _remove(f: ActiveFile, now_ms: int) -> dict[str, Any]:
    """The ``remove`` of ``f`` as it is now (with its deletion vector, if any)."""
    action: dict[str, Any] = {
        "path": f.path, "deletionTimestamp": now_ms, "dataChange": True,
        "extendedFileMetadata": True, "partitionValues": f.partition_values, "size": f.size,
    }
    if f.deletion_vector is not None:
        action["deletionVector"] = f.deletion_vector
    return action


def _add(f: ActiveFile, vector: DvDescriptor) -> dict[str, Any]:
    """The ``add`` of ``f`` again, with ``vector`` (its statistics count its physical rows)."""
    action: dict[str, Any] = {
        "path": f.path, "partitionValues": f.partition_values, "size": f.size,
        "modificationTime": f.modification_time_ms, "dataChange": True,
        "deletionVector": vector.to_action(),
    }
    if f.stats is not None:
        stats = orjson.loads(f.stats)
        stats["tightBounds"] = False
        action["stats"] = orjson.dumps(stats).decode()
    return action


def _checkpoint(path: str) -> None:
    """Step 5 of :func:`merge`: a checkpoint of ``latest`` and its expired log files.

    A failure is logged, not raised: the MERGE is committed, and the next interval's
    checkpoint covers this one's commits too.
    """
    from deltalake import DeltaTable

    try:
        table = DeltaTable(path)
        table.create_checkpoint()
        table.cleanup_metadata()
    except Exception as e:  # noqa: BLE001 - the commit stands; readers replay more JSON
        log.warning("checkpoint of Delta latest at %s failed (%s: %s); the next one is due "
                    "in delta.checkpointInterval commits", path, type(e).__name__, e)
