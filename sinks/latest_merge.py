"""``latest``'s writes: the MERGE, where the job runs it, its merger and the catch-up.

In a local or shared folder a MERGE into ``latest`` marks the rows a batch revises in Delta
deletion vectors and adds the batch's ``revisions`` data files to ``latest`` as they are, so
its cost follows the batch, not the table (:mod:`sinks.merge_on_read`); on an object store
(``s3://``, ``gs://``, ``abfss://``), where revise's own commit cannot be put-if-absent,
delta-rs merges it, copy-on-write (:func:`_merge_copy_on_write`).

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

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from revise.vocab import LATEST_KEY
from sinks import merge_on_read
from sinks.delta_files import DataFile, read_data_files, write_data_file
from sinks.delta_log import local_folder
from sinks.delta_txn import AfterWrite, DeltaRoot, DeltaWriteError, app_id, conform
from sinks.latest_merger import REST_RATIO, LatestMerger, MergeFailed

if TYPE_CHECKING:
    from deltalake import DeltaTable as RustDeltaTable
    from deltalake.transaction import CommitProperties

__all__ = ["LatestTable", "MergeJob", "MergeRunner", "enable_deletion_vectors",
           "highest_per_window", "run_merge"]


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
    if not _merge_files(root, job.schema, job.files, job.app_id, job.batch_id):
        return 0.0
    return time.perf_counter() - t0


def _merge_files(root: DeltaRoot, schema: pa.Schema, files: Sequence[DataFile], app_id: str,
                 batch_id: int) -> float:
    """MERGE the rows of ``revisions`` data files into ``latest``; its seconds.

    In a folder the files themselves join ``latest`` (:func:`sinks.merge_on_read.merge`);
    on an object store (``s3://``…), where revise's own commit has no put-if-absent
    (:func:`sinks.delta_commit.commit_actions`), delta-rs's MERGE takes their rows
    (:func:`_merge_copy_on_write`).
    """
    folder = local_folder(root.table_path("latest"))
    history = local_folder(root.table_path("revisions"))
    if folder is None or history is None:
        rows = read_data_files(root.table_path("revisions"), files, schema,
                               storage_options=root.storage_options)
        return _merge_copy_on_write(root, highest_per_window(conform(rows, schema)), app_id,
                                    batch_id)
    return merge_on_read.merge(root, str(folder),
                               [merge_on_read.Source(str(history), f) for f in files],
                               schema, app_id, batch_id)


def _merge_rows(root: DeltaRoot, schema: pa.Schema, revisions: pa.Table, app_id: str,
                batch_id: int) -> float:
    """MERGE ``revisions`` into ``latest`` as ``(app_id, batch_id)``; its seconds.

    Keeps only the highest revision per window first: a higher retracted revision deletes
    the row, a higher one replaces it, a new window is inserted unless retracted; equal or
    lower revisions change nothing. In a folder the rows go into a data file of ``latest``
    that the MERGE adds (:func:`sinks.merge_on_read.merge`); on an object store delta-rs's
    MERGE takes them (:func:`_merge_copy_on_write`).
    """
    if revisions.num_rows == 0:
        return 0.0
    source = highest_per_window(conform(revisions, schema))
    folder = local_folder(root.table_path("latest"))
    if folder is None:
        return _merge_copy_on_write(root, source, app_id, batch_id)
    written = write_data_file(str(folder), source, prefix=f"latest-b{batch_id}")
    return merge_on_read.merge(root, str(folder), [merge_on_read.Source(str(folder), written)],
                               schema, app_id, batch_id)


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

    The rows :func:`sinks.merge_on_read.best_rows` names, in the order their windows first
    appear. Trace: rows (a, rev 1), (b, rev 0), (a, rev 3), (a, rev 3) → (a, rev 3 from row
    2), (b, rev 0).
    """
    if revisions.num_rows <= 1:
        return revisions
    return revisions.take(pa.array(merge_on_read.best_rows(revisions)))
