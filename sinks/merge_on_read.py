"""``latest``'s MERGE in a local or shared folder: deletion vectors and revise's own commit.

The MERGE marks the rows of the windows a batch revises as deleted, in Delta deletion vectors
(:mod:`sinks.deletion_vectors`), and adds the batch's ``revisions`` data files themselves to
``latest`` (a hard link in ``latest``'s folder, a copy where the file system has none), with a
deletion vector for their rows that are not their window's latest: it reads the window
columns of the files, never their rows, and writes no Parquet for them. Its cost follows the
batch, not the table. (delta-rs merges copy-on-write, rewriting every file that holds an
updated window: with a batch's keys spread over the whole table, every file, every MERGE.)
The live rows of small files, of files a MERGE has deleted half of, and of small files once
several gathered go into the MERGE's one new file instead, so the table holds at most about
twice its live rows.

delta-rs reads, checkpoints and compacts such a table but writes no deletion vectors and
exposes none: this module reads the log (:mod:`sinks.delta_log`), writes the vectors and
commits the actions itself, put-if-absent, which needs a folder (a hard link is the
put-if-absent); :mod:`sinks.latest_merge` runs delta-rs's MERGE on object stores instead.
Spark reads the table as any Delta table with deletion vectors.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Final
from urllib.parse import unquote

import numpy as np
import numpy.typing as npt
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from revise.vocab import LATEST_KEY
from sinks.atomic import put_in_place, write_synced
from sinks.deletion_vectors import DvDescriptor, read_deletion_vector, write_deletion_vectors
from sinks.delta_commit import commit_actions
from sinks.delta_files import DataFile, write_data_file
from sinks.delta_log import ActiveFile, LogSnapshot, read_snapshot
from sinks.delta_txn import DeltaRoot, conform

if TYPE_CHECKING:
    from deltalake import DeltaTable as RustDeltaTable
    from deltalake.transaction import CommitProperties

__all__ = ["REWRITE_DELETED_SHARE", "SMALL_FILES", "SMALL_FILE_BYTES", "Source", "best_rows",
           "merge"]

log = logging.getLogger("revise.delta")


@dataclass(frozen=True, slots=True)
class Source:
    """A data file whose rows a MERGE brings into ``latest``: its folder and its record.

    A file of ``revisions`` (the tasks' own), or one written into ``latest``'s folder for the
    MERGE (the catch-up's); in ``latest``'s schema.
    """

    folder: str
    file: DataFile

    @property
    def location(self) -> Path:
        """The file's path."""
        return Path(self.folder) / self.file.path


def merge(root: DeltaRoot, path: str, sources: Sequence[Source], schema: pa.Schema,
          app_id: str, batch_id: int) -> float:
    """MERGE the rows of ``sources`` into the ``latest`` table in the folder ``path``; its seconds.

    Of the sources' rows, each window's highest revision counts (the first of equals): a
    higher retracted revision deletes the window's row, a higher one replaces it, a new window
    is inserted unless retracted; equal or lower revisions change nothing. One Delta commit as
    app transaction ``(app_id, batch_id)`` through ``root``
    (:meth:`sinks.delta_txn.DeltaRoot.write_once`), step numbers as in the code:

    1. Read ``latest``'s log (:func:`sinks.delta_log.read_snapshot`): its active files, their
       deletion vectors, the version of ``app_id`` (a replay stops here).
    2. Plan from the sources' window columns: the rows the batch replaces or deletes, file by
       file; the source rows it inserts; the source files added whole (their other rows
       deleted) and those whose inserted rows are copied; the files to rewrite
       (:data:`REWRITE_DELETED_SHARE`, :data:`SMALL_FILES`).
    3. Link (or copy) the added source files into ``path``; write the new data file (the
       copied rows and the rewritten files' live rows) and one deletion vector file (every
       touched file's deleted rows, old and new).
    4. Commit ``remove`` + ``add`` (new deletion vector) per touched file, ``remove`` per
       rewritten file, ``add`` of each added source file and of the new file, and the app
       transaction, as version + 1: put-if-absent
       (:func:`sinks.delta_commit.commit_actions`); a lost race re-reads (1).
    5. Every ``delta.checkpointInterval`` versions, a checkpoint (delta-rs), so that readers
       and step 1 replay a bounded log.

    A crash between 3 and 4 leaves unreferenced files; a crash after 4 is the batch done.
    """

    def write(target: RustDeltaTable, _props: CommitProperties, _done: int | None) -> bool:
        snapshot = read_snapshot(path)  # 1.
        done = snapshot.app_versions.get(app_id)
        if done is not None and done >= batch_id:
            return False
        plan = _plan(path, snapshot, sources, schema)  # 2.
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
"""A file below this size is small (a quiet stream's MERGEs add a small file each); a small
source file's rows are copied into the MERGE's new file, not added as a file of their own."""
SMALL_FILES: Final = 8
"""A MERGE rewrites the small files once this many have gathered (their rows into its file)."""
CHECKPOINT_INTERVAL_KEY: Final = "delta.checkpointInterval"
_FILE: Final = "__revise_file"
_ROW: Final = "__revise_row"
_SOURCE_ROW: Final = "__revise_source_row"
_TARGET_REVISION: Final = "__revise_target_revision"
_SCORE: Final = "__revise_score"
_SOURCE_COLUMNS: Final = (*LATEST_KEY, "revision", "retracted")


@dataclass(frozen=True, slots=True)
class _Plan:
    """What one MERGE changes (:func:`_plan`).

    ``deleted``: per touched file (an index into ``files``) the row indexes deleted in all,
    old and new, sorted; ``rewrite``: the files whose live rows move into the new file;
    ``added``: the source files added whole, each with its name in ``latest`` and its rows
    not inserted; ``rows``: the new file's rows (the copied sources' inserted rows, then the
    rewritten files' live rows).
    """

    files: tuple[ActiveFile, ...]
    deleted: dict[int, npt.NDArray[np.uint64]]
    rewrite: tuple[int, ...]
    added: tuple[tuple[Source, str, npt.NDArray[np.uint64]], ...]
    rows: pa.Table
    inserted: int
    replaced: int

    def actions(self, path: str, batch_id: int) -> list[dict[str, Any]]:
        """Place the added files; write the new data and deletion vector files; the actions."""
        now_ms = int(time.time() * 1000)
        for source, name, _gone in self.added:
            _place(source, path, name)
        marked = [i for i in self.deleted if i not in self.rewrite]
        cut = [k for k, (_s, _n, gone) in enumerate(self.added) if gone.size]
        vectors = write_deletion_vectors(
            path, [self.deleted[i] for i in marked] + [self.added[k][2] for k in cut])
        actions: list[dict[str, Any]] = []
        for i in (*marked, *self.rewrite):
            actions.append({"remove": _remove(self.files[i], now_ms)})
        for i, vector in zip(marked, vectors[:len(marked)], strict=True):
            f = self.files[i]
            actions.append({"add": _add(f.path, f.partition_values, f.size,
                                        f.modification_time_ms, f.stats, vector)})
        cut_vectors = dict(zip(cut, vectors[len(marked):], strict=True))
        for k, (source, name, _gone) in enumerate(self.added):
            data = source.file
            actions.append({"add": _add(name, {}, data.size, data.modification_time_ms,
                                        data.stats, cut_vectors.get(k))})
        if self.rows.num_rows:
            new = write_data_file(path, self.rows, prefix=f"latest-b{batch_id}")
            actions.append({"add": _add(new.path, {}, new.size, new.modification_time_ms,
                                        new.stats, None)})
        return actions

    def metrics(self) -> dict[str, str]:
        """The commit's ``operationMetrics`` (Delta's names, as strings)."""
        cut = sum(1 for _s, _n, gone in self.added if gone.size)
        added_rows = sum(s.file.num_records - gone.size for s, _n, gone in self.added)
        return {
            "numTargetRowsInserted": str(self.inserted),
            "numTargetRowsUpdated": str(self.replaced),
            "numTargetDeletionVectorsAdded": str(
                len(set(self.deleted) - set(self.rewrite)) + cut),
            "numTargetFilesRemoved": str(len(self.rewrite)),
            "numTargetFilesAdded": str(len(self.added) + (1 if self.rows.num_rows else 0)),
            "numOutputRows": str(self.rows.num_rows + added_rows),
        }


def _plan(path: str, snapshot: LogSnapshot, sources: Sequence[Source],
          schema: pa.Schema) -> _Plan:
    """Step 2 of :func:`merge`: match the sources' rows with ``latest``.

    Reads the sources' window columns, ``revision`` and ``retracted``, and keeps each window's
    highest revision (:func:`best_rows`). Reads the window columns and ``revision`` of the
    live rows of every file of ``latest`` whose ``window_start_ms`` range meets the sources',
    joins them with those rows on :data:`LATEST_KEY` (``latest`` holds one live row per
    window), and keeps: a matched window whose source revision is higher → its row deleted,
    and the source row inserted unless retracted; an unmatched window → inserted unless
    retracted. Each source file is then added whole with its other rows deleted, or, small
    or mostly not inserted, its inserted rows are copied into the new file.

    Trace: latest has (k1, rev 2) in file 0 row 5 and (k2, rev 0) in file 1 row 0; a source
    file holds (k1, rev 3), (k2, rev 0), (k3, rev 0 retracted), (k4, rev 1), (k4, rev 0) →
    file 0 deletes row 5; inserted: k1 rev 3, k4 rev 1 (source rows 0 and 3).
    """
    # A small source file's rows are copied, not added: read it whole, once.
    small_rows = {j: pq.read_table(s.location, schema=schema) for j, s in enumerate(sources)
                  if s.file.size < SMALL_FILE_BYTES}
    parts = [small_rows[j].select(list(_SOURCE_COLUMNS)) if j in small_rows
             else pq.read_table(s.location, columns=list(_SOURCE_COLUMNS))
             for j, s in enumerate(sources)]
    cuts = np.cumsum([0, *(p.num_rows for p in parts)])
    everything = pa.concat_tables(parts) if parts else schema.empty_table().select(
        list(_SOURCE_COLUMNS))
    best = best_rows(everything)
    source = everything.take(pa.array(best))
    n = source.num_rows
    files = snapshot.files
    deleted: dict[int, npt.NDArray[np.uint64]] = {}
    physical: dict[int, int] = {}
    insert = np.ones(n, bool)
    replaced = 0
    if n:
        starts = source.column("window_start_ms")
        lo, hi = pc.min(starts).as_py(), pc.max(starts).as_py()
        targets: list[pa.Table] = []
        gone_before: dict[int, npt.NDArray[np.uint64]] = {}
        for i, f in enumerate(files):
            if not _may_hold(f, lo, hi):
                continue
            keys = pq.read_table(f"{path}/{unquote(f.path)}", columns=[*LATEST_KEY, "revision"])
            physical[i] = keys.num_rows
            gone = gone_before[i] = _deleted_rows(path, f)
            live = np.ones(keys.num_rows, bool)
            live[gone.astype(np.int64)] = False
            rows = np.flatnonzero(live)
            targets.append(keys.take(pa.array(rows))
                           .rename_columns([*LATEST_KEY, _TARGET_REVISION])
                           .append_column(_FILE, pa.array(np.full(rows.size, i, np.int64)))
                           .append_column(_ROW, pa.array(rows)))
        if targets:  # the source is the join's (smaller) build side
            src = source.select([*LATEST_KEY, "revision"]).append_column(
                _SOURCE_ROW, pa.array(np.arange(n, dtype=np.int64)))
            matched = pa.concat_tables(targets).join(src, keys=list(LATEST_KEY),
                                                     join_type="inner", use_threads=False)
            higher = _np(matched, "revision") > _np(matched, _TARGET_REVISION)
            insert[_np(matched, _SOURCE_ROW)[~higher]] = False  # latest holds it or higher
            replaced = int(higher.sum())
            if higher.any():
                d_file, d_row = _np(matched, _FILE)[higher], _np(matched, _ROW)[higher]
                order = np.argsort(d_file, kind="stable")
                d_file, d_row = d_file[order], d_row[order]
                splits = np.flatnonzero(np.diff(d_file)) + 1
                for chunk_f, chunk_r in zip(np.split(d_file, splits), np.split(d_row, splits),
                                            strict=True):
                    i = int(chunk_f[0])
                    # The rows deleted before were not live, so not matched: disjoint.
                    deleted[i] = np.sort(np.concatenate([gone_before[i],
                                                         chunk_r.astype(np.uint64)]))
        insert &= ~_np(source, "retracted").astype(bool)
    kept_rows = np.zeros(everything.num_rows, bool)  # the sources' rows latest gets
    kept_rows[best[insert]] = True
    added: list[tuple[Source, str, npt.NDArray[np.uint64]]] = []
    kept: list[pa.Table] = []
    for j, s in enumerate(sources):
        mine = kept_rows[cuts[j]:cuts[j + 1]]
        taken = int(mine.sum())
        if taken == 0:
            continue
        if s.file.size >= SMALL_FILE_BYTES and taken > (1 - REWRITE_DELETED_SHARE) * mine.size:
            name = s.file.path if Path(s.folder) == Path(path) else (
                f"part-latest-{s.file.path.removeprefix('part-')}")
            added.append((s, name, np.flatnonzero(~mine).astype(np.uint64)))
        else:
            rows_j = small_rows[j] if j in small_rows else pq.read_table(s.location, schema=schema)
            kept.append(rows_j.filter(pa.array(mine)))
    heavy = [i for i, d in deleted.items() if d.size >= REWRITE_DELETED_SHARE * physical[i]]
    small = [i for i, f in enumerate(files) if f.size < SMALL_FILE_BYTES]
    rewrite = sorted({*heavy, *(small if len(small) >= SMALL_FILES else [])})
    for i in rewrite:
        gone = deleted[i] if i in deleted else _deleted_rows(path, files[i])
        if gone.size == physical.get(i, -1):
            continue  # every row deleted: nothing to carry over
        whole = pq.read_table(f"{path}/{unquote(files[i].path)}", schema=schema)
        live_rows = np.ones(whole.num_rows, bool)
        live_rows[gone.astype(np.int64)] = False
        kept.append(whole.filter(pa.array(live_rows)))
    rows = conform(pa.concat_tables(kept), schema) if kept else schema.empty_table()
    return _Plan(files, deleted, tuple(rewrite), tuple(added), rows, int(insert.sum()),
                 replaced)


def best_rows(windows: pa.Table) -> npt.NDArray[np.int64]:
    """Per :data:`LATEST_KEY` of ``windows``, the row of its highest ``revision`` (first of equals).

    One hash aggregation, no sort: each row scores ``revision × n + (n − 1 − row)``, so the
    highest score of a window is its highest revision, the earliest row among equals, and
    names the row. Windows come out in the order they first appear.

    Trace: rows (a, rev 1), (b, rev 0), (a, rev 3), (a, rev 3) → rows 2, 1.
    """
    n = windows.num_rows
    if n <= 1:
        return np.arange(n, dtype=np.int64)
    revision = windows.column("revision").combine_chunks().to_numpy(zero_copy_only=False)
    # Revisions are >= 0 and below 2^31, rows below 2^31: the score stays below 2^62.
    score = revision.astype(np.int64) * n + (n - 1 - np.arange(n, dtype=np.int64))
    keyed = windows.select(list(LATEST_KEY)).append_column(_SCORE, pa.array(score))
    top = keyed.group_by(list(LATEST_KEY), use_threads=False).aggregate([(_SCORE, "max")])
    rows: npt.NDArray[np.int64] = (n - 1) - top.column(f"{_SCORE}_max").to_numpy() % n
    return rows


def _place(source: Source, folder: str, name: str) -> None:
    """Give ``source``'s file the name ``name`` in ``folder``: a hard link, else a copy.

    Through a hidden temporary name and a rename, so that ``name`` is whole or absent (a
    copy left there by a MERGE that did not commit is replaced; a link of the same file is
    kept: a rename onto another link of the same file would leave the temporary name behind);
    the folder is fsync'd.
    """
    target = Path(folder) / name
    if source.location == target or (target.exists() and target.samefile(source.location)):
        return
    scratch = target.with_name(f".{name}.{uuid.uuid4().hex}.tmp")
    try:
        os.link(source.location, scratch)
    except OSError:  # another file system, or none with hard links
        write_synced(scratch, lambda out: _copy(source.location, out))
    put_in_place(scratch, target)


def _copy(path: Path, out: BinaryIO) -> None:
    with path.open("rb") as src:
        shutil.copyfileobj(src, out, 1 << 20)


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


def _add(path: str, partition_values: dict[str, str | None], size: int,
         modification_time_ms: int, stats: str | None,
         vector: DvDescriptor | None) -> dict[str, Any]:
    """An ``add`` action, with ``vector`` if given.

    A file's statistics count its physical rows: with a vector they no longer bound its live
    rows tightly (``tightBounds`` false).
    """
    action: dict[str, Any] = {
        "path": path, "partitionValues": partition_values, "size": size,
        "modificationTime": modification_time_ms, "dataChange": True,
    }
    if stats is not None:
        if vector is not None:
            loose = orjson.loads(stats)
            loose["tightBounds"] = False
            stats = orjson.dumps(loose).decode()
        action["stats"] = stats
    if vector is not None:
        action["deletionVector"] = vector.to_action()
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
