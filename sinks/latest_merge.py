"""``latest``'s writes: the MERGE (merge-on-read, with deletion vectors), where the job runs it.

A MERGE into ``latest`` deletes the rows of the windows a batch revises by marking them in
Delta deletion vectors, and writes the batch's new rows into one new file
(:func:`_merge_rows`): its cost follows the batch, not the table. (delta-rs merges
copy-on-write, rewriting every file that holds an updated window: with a batch's keys spread
over the whole table, every file, every MERGE.) The files a MERGE has deleted half of, and the
small files once several gathered, are rewritten by a later MERGE into its new file, so the
table holds at most about twice its live rows. delta-rs reads, checkpoints and compacts such a
table but writes no deletion vectors and exposes none: revise reads the log
(:mod:`sinks.delta_log`), writes the vectors (:mod:`sinks.deletion_vectors`) and commits the
actions itself, put-if-absent. Spark reads the table as any Delta table with deletion vectors.
That commit needs a local or shared folder (a hard link is its put-if-absent); on an object
store (``s3://``, ``gs://``, ``abfss://``) ``latest`` is merged by delta-rs, copy-on-write.

A MERGE of several batches' revisions (their highest revision per window) costs little more
than a MERGE of one: :class:`sinks.latest_merger.LatestMerger` coalesces them on a background
thread.

:class:`LatestTable` owns ``latest``'s writes: the MERGE itself (idempotent, an app
transaction per batch, :class:`sinks.delta_txn.DeltaRoot`), its merger and the catch-up from
``revisions`` that every job start runs (:meth:`LatestTable.catch_up`).

Each MERGE is a :class:`MergeJob`, self-contained (the root, the schema, the ``revisions`` data
files, the app transaction), run by the table's :data:`MergeRunner`: here by default
(:func:`run_merge` on the table's root), and in the job as a one-task Spark job on an executor
(``revise.spark.task_output.merge_on_executor``), so the driver only queues file records.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
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
from sinks.delta_files import DataFile, read_data_files, write_data_file
from sinks.delta_log import ActiveFile, LogSnapshot, commit_actions, local_folder, read_snapshot
from sinks.delta_txn import AfterWrite, DeltaRoot, DeltaWriteError, app_id, conform
from sinks.latest_merger import REST_RATIO, LatestMerger, MergeFailed

if TYPE_CHECKING:
    from deltalake import DeltaTable as RustDeltaTable
    from deltalake.transaction import CommitProperties

log = logging.getLogger("revise.delta")

__all__ = ["REWRITE_DELETED_SHARE", "SMALL_FILES", "SMALL_FILE_BYTES", "LatestTable", "MergeJob",
           "MergeRunner", "enable_deletion_vectors", "highest_per_window", "run_merge"]


@dataclass(frozen=True, slots=True)
class MergeJob:
    """One MERGE of ``revisions`` data files into ``latest``, whole (pickled for a Spark task)."""

    path: str
    storage_options: dict[str, str] | None
    schema: pa.Schema
    files: tuple[DataFile, ...]
    app_id: str
    batch_id: int


MergeRunner = Callable[[MergeJob], float]
"""Runs a :class:`MergeJob` somewhere; the MERGE's seconds (0.0: the batch was in already)."""

_ROOTS: dict[tuple[str, tuple[tuple[str, str], ...]], DeltaRoot] = {}
"""This process's Delta roots, by path and options: a Spark worker runs MERGE after MERGE of
one job, and keeps the table loaded between them (brought up to date, not read again)."""
_ROOTS_LOCK = threading.Lock()


def run_merge(job: MergeJob) -> float:
    """Run ``job`` in this process (what the job's Spark task calls); its seconds."""
    key = (job.path, tuple(sorted((job.storage_options or {}).items())))
    with _ROOTS_LOCK:
        root = _ROOTS.get(key)
        if root is None:
            root = _ROOTS[key] = DeltaRoot(job.path, job.storage_options)
        return _merge(root, job)


def _merge(root: DeltaRoot, job: MergeJob) -> float:
    """Run ``job`` on ``root``: its seconds, reading the files included (0.0: merged before)."""
    done = root.table("latest").transaction_version(job.app_id)
    if done is not None and done >= job.batch_id:  # a replay: not even read
        return 0.0
    t0 = time.perf_counter()
    rows = _read(root, job)
    if not _merge_rows(root, job.schema, rows, job.app_id, job.batch_id):
        return 0.0
    return time.perf_counter() - t0


def _read(root: DeltaRoot, job: MergeJob) -> pa.Table:
    """The rows of the job's ``revisions`` data files (written, maybe not committed yet)."""
    return read_data_files(root.table_path("revisions"), job.files, job.schema,
                           storage_options=root.storage_options)


def _merge_rows(root: DeltaRoot, schema: pa.Schema, revisions: pa.Table, app_id: str,
                batch_id: int) -> float:
    """MERGE ``revisions`` into ``latest`` as ``(app_id, batch_id)``; its seconds.

    Keeps only the highest revision per window first: a higher retracted revision deletes
    the row, a higher one replaces it, a new window is inserted unless retracted; equal or
    lower revisions change nothing. The MERGE is merge-on-read (:func:`_plan`): one Delta
    commit (step numbers as in the code):

    1. Read ``latest``'s log (:func:`sinks.delta_log.read_snapshot`): its active files, their
       deletion vectors, the version of ``app_id`` (a replay stops here).
    2. Plan: the rows the batch replaces or deletes, file by file; the rows it inserts; the
       files to rewrite (:data:`REWRITE_DELETED_SHARE`, :data:`SMALL_FILES`).
    3. Write the new data file (inserted rows and the rewritten files' live rows) and one
       deletion vector file (every touched file's deleted rows, old and new).
    4. Commit ``remove`` + ``add`` (new deletion vector) per touched file, ``remove`` per
       rewritten file, ``add`` of the new file and the app transaction, as version + 1:
       put-if-absent (:func:`sinks.delta_log.commit_actions`); a lost race re-reads (1).
    5. Every ``delta.checkpointInterval`` versions, a checkpoint (delta-rs), so that readers
       and step 1 replay a bounded log.

    A crash between 3 and 4 leaves unreferenced files; a crash after 4 is the batch done.

    On an object store (``s3://``…), where revise's own commit has no put-if-absent
    (:func:`sinks.delta_log.commit_actions`), delta-rs's MERGE runs instead
    (:func:`_merge_copy_on_write`).
    """
    if revisions.num_rows == 0:
        return 0.0
    source = highest_per_window(conform(revisions, schema))
    path = root.table_path("latest")
    if local_folder(path) is None:
        return _merge_copy_on_write(root, source, app_id, batch_id)
    options = root.storage_options

    def write(target: RustDeltaTable, _props: CommitProperties, _done: int | None) -> bool:
        snapshot = read_snapshot(path, storage_options=options)  # 1.
        done = snapshot.app_versions.get(app_id)
        if done is not None and done >= batch_id:
            return False
        plan = _plan(path, snapshot, source, schema, options)  # 2.
        version = snapshot.version + 1
        actions = plan.actions(path, batch_id, options)  # 3.
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
        ], storage_options=options)
        interval = int(target.metadata().configuration.get(CHECKPOINT_INTERVAL_KEY, "10"))
        if (version + 1) % interval == 0:  # 5. (where delta-rs puts its own: 9, 19, …)
            _checkpoint(path, options)
        return True

    return root.write_once("latest", app_id, batch_id, write)


def _merge_copy_on_write(root: DeltaRoot, source: pa.Table, app_id: str, batch_id: int) -> float:
    """delta-rs's MERGE of ``source`` (one row per window) into ``latest``; its seconds.

    The clauses of :func:`_merge_rows`. Copy-on-write: it rewrites every file holding a window
    it updates (the files' deletion vectors applied), so its cost follows the files the
    batch's windows are spread over.
    """
    starts = source.column("window_start_ms")
    lo, hi = pc.min(starts).as_py(), pc.max(starts).as_py()
    # The range bound lets delta-rs skip files of windows this batch cannot touch.
    on = " AND ".join(f"t.{c} = s.{c}" for c in LATEST_KEY) + (
        f" AND t.window_start_ms >= {int(lo)} AND t.window_start_ms <= {int(hi)}"
    )

    def write(target: RustDeltaTable, props: CommitProperties, _done: int | None) -> bool:
        (
            target.merge(
                source, predicate=on, source_alias="s", target_alias="t",
                commit_properties=props,
            )
            .when_matched_delete(predicate="s.revision > t.revision AND s.retracted")
            .when_matched_update_all(predicate="s.revision > t.revision")
            .when_not_matched_insert_all(predicate="NOT s.retracted")
            .execute()
        )
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

    def actions(self, path: str, batch_id: int,
                storage_options: dict[str, str] | None) -> list[dict[str, Any]]:
        """Write the new data and deletion vector files; the commit's file actions."""
        now_ms = int(time.time() * 1000)
        marked = [i for i in self.deleted if i not in self.rewrite]
        vectors = write_deletion_vectors(path, [self.deleted[i] for i in marked],
                                         storage_options=storage_options)
        actions: list[dict[str, Any]] = []
        for i in (*marked, *self.rewrite):
            actions.append({"remove": _remove(self.files[i], now_ms)})
        for i, vector in zip(marked, vectors, strict=True):
            actions.append({"add": _add(self.files[i], vector)})
        if self.rows.num_rows:
            new = write_data_file(path, self.rows, prefix=f"latest-b{batch_id}",
                                  storage_options=storage_options)
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


def _plan(path: str, snapshot: LogSnapshot, source: pa.Table, schema: pa.Schema,
          storage_options: dict[str, str] | None) -> _Plan:
    """Step 2 of :func:`_merge_rows`: match ``source`` (one row per window) with ``latest``.

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
    fs, prefix = _filesystem(path, storage_options)
    parts: list[pa.Table] = []
    gone_before: dict[int, npt.NDArray[np.uint64]] = {}
    physical: dict[int, int] = {}
    for i, f in enumerate(files):
        if not _may_hold(f, lo, hi):
            continue
        keys = pq.read_table(prefix + unquote(f.path), columns=[*LATEST_KEY, "revision"],
                             filesystem=fs)
        physical[i] = keys.num_rows
        gone = gone_before[i] = _deleted_rows(path, f, storage_options)
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
        gone = deleted[i] if i in deleted else _deleted_rows(path, files[i], storage_options)
        if gone.size == physical.get(i, -1):
            continue  # every row deleted: nothing to carry over
        whole = pq.read_table(prefix + unquote(files[i].path), schema=schema, filesystem=fs)
        live = np.ones(whole.num_rows, bool)
        live[gone.astype(np.int64)] = False
        kept.append(whole.filter(pa.array(live)))
    return _Plan(files, deleted, tuple(rewrite), conform(pa.concat_tables(kept), schema),
                 int(insert.sum()), int(higher.sum()))


def _np(table: pa.Table, column: str) -> npt.NDArray[Any]:
    array: npt.NDArray[Any] = table.column(column).combine_chunks().to_numpy(
        zero_copy_only=False)
    return array


def _deleted_rows(path: str, f: ActiveFile,
                  storage_options: dict[str, str] | None) -> npt.NDArray[np.uint64]:
    """The rows of ``f`` its deletion vector deletes (none without one)."""
    if f.deletion_vector is None:
        return np.empty(0, np.uint64)
    return read_deletion_vector(path, DvDescriptor.from_action(f.deletion_vector),
                                storage_options=storage_options)


def _may_hold(f: ActiveFile, lo: int, hi: int) -> bool:
    """Whether ``f``'s ``window_start_ms`` statistics meet ``[lo, hi]`` (no statistics: yes)."""
    if f.stats is None:
        return True
    stats = orjson.loads(f.stats)
    low = stats.get("minValues", {}).get("window_start_ms")
    high = stats.get("maxValues", {}).get("window_start_ms")
    return low is None or high is None or (low <= hi and high >= lo)


def _filesystem(path: str, storage_options: dict[str, str] | None) -> tuple[Any, str]:
    """A pyarrow file system for the table's files and the prefix of their paths in it."""
    if "://" not in path:
        return None, path + "/"
    import pyarrow.fs as pafs
    from deltalake.fs import DeltaStorageHandler

    return pafs.PyFileSystem(DeltaStorageHandler(path, storage_options)), ""


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


def _checkpoint(path: str, storage_options: dict[str, str] | None) -> None:
    """Step 5 of :func:`_merge_rows`: a checkpoint of ``latest`` and its expired log files.

    A failure is logged, not raised: the MERGE is committed, and the next interval's
    checkpoint covers this one's commits too.
    """
    from deltalake import DeltaTable

    try:
        table = DeltaTable(path, storage_options=storage_options)
        table.create_checkpoint()
        table.cleanup_metadata()
    except Exception as e:  # noqa: BLE001 - the commit stands; readers replay more JSON
        log.warning("checkpoint of Delta latest at %s failed (%s: %s); the next one is due "
                    "in delta.checkpointInterval commits", path, type(e).__name__, e)


class LatestTable:
    """The writes of ``latest`` under one Delta root: step 3d, in the foreground or deferred.

    Args:
        root: The Delta root's tables.
        revision_schema: The schema of ``latest`` (the revisions' columns).
        after_write: Told after each deferred MERGE with the highest batch it holds.
        rest_ratio: The merger's rest after a MERGE, in multiples of its duration.
        min_rest_s: The merger's least rest after a MERGE.
    """

    def __init__(self, root: DeltaRoot, revision_schema: pa.Schema, *,
                 after_write: AfterWrite | None, rest_ratio: float = REST_RATIO,
                 min_rest_s: float = 0.0) -> None:
        self._root = root
        self._schema = revision_schema
        self._after_write = after_write
        self.runner: MergeRunner = partial(_merge, root)
        """Where the MERGEs of :meth:`merge_files` run (default: here, on this root)."""
        self._merger = LatestMerger(self._merge_deferred, rest_ratio=rest_ratio,
                                    min_rest_s=min_rest_s)

    @property
    def deferred_merges(self) -> int:
        """Deferred MERGEs so far (each covers one or more micro-batches)."""
        return self._merger.merges

    def merge(self, revisions: pa.Table, app_id: str, batch_id: int) -> float:
        """MERGE ``revisions`` into ``latest`` as ``(app_id, batch_id)``, here; its seconds.

        Only a higher revision changes a window's row (:func:`_merge_rows`).
        """
        return _merge_rows(self._root, self._schema, revisions, app_id, batch_id)

    def merge_files(self, files: Sequence[DataFile], app_id: str, batch_id: int) -> float:
        """:meth:`merge` of the rows of ``revisions`` data files, run by :attr:`runner`.

        The rows are read where the MERGE runs, from the files the tasks wrote: what a
        micro-batch brings to the driver is the files' records only.
        """
        if not files:
            return 0.0
        return self.runner(MergeJob(self._root.path, self._root.storage_options, self._schema,
                                    tuple(files), app_id, batch_id))

    def _merge_deferred(self, files: Sequence[DataFile], app_id: str, batch_id: int) -> float:
        """A MERGE of the merger's, then ``after_write``."""
        took = self.merge_files(files, app_id, batch_id)
        if self._after_write is not None:
            self._after_write("latest", batch_id)
        return took

    def take_seconds(self) -> float:
        """The seconds of the deferred MERGEs since the last call.

        Raises:
            DeltaWriteError: a deferred MERGE failed.
        """
        with self._errors():
            self._merger.check()
        return self._merger.take_seconds()

    def submit(self, app_id: str, batch_id: int, files: Sequence[DataFile],
               before: Callable[[], None] | None) -> None:
        """Queue a batch's MERGE for the background merger (:meth:`LatestMerger.submit`).

        Raises:
            DeltaWriteError: an earlier deferred MERGE failed.
        """
        with self._errors():
            self._merger.submit(app_id, batch_id, files, before)

    def hurry(self) -> None:
        """Start merging the backlog now (:meth:`LatestMerger.hurry`)."""
        self._merger.hurry()

    def flush(self, *, raise_error: bool = True) -> float:
        """Merge the backlog now and wait; the seconds of the MERGEs since the last report.

        Raises:
            DeltaWriteError: a MERGE failed, unless ``raise_error`` is false.
        """
        with self._errors():
            self._merger.flush(raise_error=raise_error)
        return self._merger.take_seconds()

    def catch_up(self, query_id: str) -> int:
        """Bring ``latest`` up to ``revisions`` for ``query_id``; the revisions merged.

        A deferred MERGE lost to a crash or an error leaves ``latest``'s app transaction
        version behind that of ``revisions``, which holds every committed revision with its
        ``batch_id``. This MERGEs the revisions of the batches after ``latest``'s version,
        tagged with ``revisions``' version: the MERGE replaces only lower revisions, so
        merging a batch twice changes nothing.

        Raises:
            DeltaWriteError: reading ``revisions`` or the MERGE failed (a restart retries).
        """
        app = app_id(query_id)
        self._merger.flush(raise_error=False)
        try:
            revisions = self._root.table("revisions")
            have = self._root.table("latest").transaction_version(app)
            want = revisions.transaction_version(app)
            merged = 0
            if want is not None and (have is None or have < want):
                rows = revisions.to_pyarrow_dataset().to_table(
                    filter=(pc.field("query_id") == query_id)
                    & (pc.field("batch_id") > (-1 if have is None else have)),
                )
                self.merge(rows, app, want)
                merged = rows.num_rows
        except Exception as e:
            msg = (
                f"bringing Delta latest under {self._root.path!r} up to revisions of query "
                f"{query_id!r} failed ({type(e).__name__}: {e}); fix the cause and restart"
            )
            raise DeltaWriteError(msg) from e
        # latest holds every batch revisions holds: deferred MERGEs may go on from here.
        self._merger.clear_error()
        return merged

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """A failed deferred MERGE (:class:`MergeFailed`) raised as :class:`DeltaWriteError`."""
        try:
            yield
        except MergeFailed as e:
            batches = ", ".join(map(str, e.batch_ids))
            msg = (
                f"Delta MERGE into latest of batch {batches} under {self._root.path!r} failed "
                f"({type(e.cause).__name__}: {e.cause}); a restart redoes it from revisions"
            )
            raise DeltaWriteError(msg) from e.cause


def enable_deletion_vectors(path: str, storage_options: dict[str, str] | None) -> None:
    """Give the ``latest`` table at ``path`` Delta's ``deletionVectors`` feature, if it lacks it.

    A protocol upgrade (reader version 3, writer version 7) in one commit, for a new table and
    one an earlier revise created without the feature; readers older than Delta 2.3 (Spark) or
    delta-rs 0.17 can no longer read it. The features writer version 2 implied (``appendOnly``,
    ``invariants``) are listed with it, as Spark requires of a table-features protocol.
    """
    from deltalake import DeltaTable, TableFeatures

    table = DeltaTable(path, storage_options=storage_options)
    if "deletionVectors" not in (table.protocol().writer_features or []):
        table.alter.add_feature([TableFeatures.DeletionVectors, TableFeatures.AppendOnly,
                                 TableFeatures.Invariants],
                                allow_protocol_versions_increase=True)


def highest_per_window(revisions: pa.Table) -> pa.Table:
    """One row per :data:`LATEST_KEY`: the one with the highest ``revision`` (first on ties).

    One hash aggregation, no sort: each row scores ``revision × n + (n − 1 − row)``, so the
    highest score of a window is its highest revision, the earliest row among equals, and
    names the row to take. Windows come out in the order they first appear. (It sorted the
    windows before, ranking the keys as strings: 1.4–1.8× slower on a backlog of 900k
    revisions over 1M keys, and the MERGE of that backlog into 1M windows 8–10 % slower.)

    Trace: rows (a, rev 1), (b, rev 0), (a, rev 3), (a, rev 3) → (a, rev 3 from row 2),
    (b, rev 0).
    """
    n = revisions.num_rows
    if n <= 1:
        return revisions
    revision = revisions.column("revision").combine_chunks().to_numpy(zero_copy_only=False)
    # Revisions are >= 0 and below 2^31, rows below 2^31: the score stays below 2^62.
    score = revision.astype(np.int64) * n + (n - 1 - np.arange(n, dtype=np.int64))
    windows = revisions.select(list(LATEST_KEY)).append_column(_SCORE, pa.array(score))
    best = windows.group_by(list(LATEST_KEY), use_threads=False).aggregate([(_SCORE, "max")])
    rows = (n - 1) - best.column(f"{_SCORE}_max").to_numpy() % n
    return revisions.take(pa.array(rows))


_SCORE: Final = "__revise_score"
"""The scratch column of :func:`highest_per_window` (no revision column has this name)."""
