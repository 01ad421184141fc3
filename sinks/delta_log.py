"""A Delta table's log replayed by revise itself: active files with their deletion vectors.

delta-rs (1.6) reads, appends to, checkpoints and compacts tables with deletion vectors (DVs)
but cannot write a DV, and its Python API shows neither the DV of an active file
(``get_add_actions`` has no such column) nor a way to commit actions that carry one. revise
writes ``latest``'s DVs itself, so it needs the two halves delta-rs does not give: this
module's :func:`read_snapshot` replays ``<table>/_delta_log`` into a :class:`LogSnapshot`
(the table's version, its active files, :class:`ActiveFile`, each with its
``deletionVector`` descriptor, and its application transactions' versions), and
:func:`sinks.delta_commit.commit_actions` writes a commit. Both find the log here
(:data:`LOG_DIR`, :func:`local_folder`, :func:`object_store`).

**Replay.** The folder is listed once. The newest complete checkpoint at or below the wanted
version is read (a classic ``<v>.checkpoint.parquet``, all parts of a multi-part
``<v>.checkpoint.<part>.<parts>.parquet``, or a V2 ``<v>.checkpoint.<uuid>.json|parquet``
without sidecars; ``_last_checkpoint`` only chooses among several checkpoints of its
version, since the listing, which the commits after the checkpoint need anyway, shows every
checkpoint), then every JSON commit after it, which must be contiguous up to the wanted
version. A checkpoint's ``add`` and ``txn`` rows count; its ``remove`` rows are tombstones
and are skipped. A file's identity is its path (URL-decoded: ``add.path`` is a URI-encoded
relative path) with its DV's unique id (``storageType`` + ``pathOrInlineDv``, + ``@offset``
when the offset is set): an ``add`` puts that identity, a ``remove`` deletes it (one without
``deletionVector`` deletes the identity without DV). The actions of a commit are applied in
their order. A commit that updates a file's DV holds ``remove(path, old DV)`` and
``add(path, new DV)`` in either order: two identities, so one active file remains. A ``txn``
sets its app id's version (the last one seen). ``protocol``, ``metaData``, ``commitInfo``,
``cdc``, ``domainMetadata`` and ``checkpointMetadata`` are read past.

Trace (Spark DELETE on a table with DVs, then a read): v0 adds ``part-0`` and ``part-1``; v1
adds ``part-0`` with DV ``u…A@1`` (cardinality 167) and removes ``part-0`` without DV (and the
same for ``part-1``); v2 adds ``part-0`` with ``u…B@1`` (233) and removes ``part-0`` with
``u…A@1`` → ``read_snapshot`` gives version 2, two files, ``part-0`` with DV ``u…B@1``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

import orjson

from revise.errors import ReviseError

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["LOG_DIR", "ActiveFile", "DeltaLogError", "LogSnapshot", "local_folder",
           "object_store", "read_snapshot"]

LOG_DIR: Final = "_delta_log"
_COMMIT_RE: Final = re.compile(r"(\d{20})\.json")
_CLASSIC_RE: Final = re.compile(r"(\d{20})\.checkpoint\.parquet")
_PART_RE: Final = re.compile(r"(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet")
_V2_RE: Final = re.compile(r"(\d{20})\.checkpoint\.([0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}"
                           r"-[0-9a-fA-F]{12})\.(json|parquet)")
_ADD_FIELDS: Final = ("path", "size", "modificationTime", "partitionValues", "stats",
                      "deletionVector")
"""The ``add`` fields read from a checkpoint (not ``stats_parsed``, ``tags``…)."""

_Identity = tuple[str, str | None]


class DeltaLogError(ReviseError, RuntimeError):
    """A Delta log that cannot be read or written here (missing, gapped, malformed, remote)."""


@dataclass(frozen=True, slots=True)
class ActiveFile:
    """One active data file of a table at a version: the ``add`` action that holds it.

    Attributes:
        path: The ``add``'s path as written (a URI-encoded path relative to the table's root,
            or an absolute URI): what a ``remove`` of the file must repeat.
        size: Bytes.
        modification_time_ms: The file's modification time, epoch milliseconds.
        stats: The Delta statistics JSON (``numRecords``, ``minValues``…); None when the
            writer kept none (or a checkpoint has only ``stats_parsed``).
        partition_values: Partition column → value as a string (None: null).
        deletion_vector: The ``deletionVector`` descriptor with the protocol's camelCase keys
            (``storageType``, ``pathOrInlineDv``, ``offset`` (absent for an inline DV),
            ``sizeInBytes``, ``cardinality``; null fields left out); None: no row deleted.
    """

    path: str
    size: int
    modification_time_ms: int
    stats: str | None
    partition_values: dict[str, str | None]
    deletion_vector: dict[str, Any] | None

    @property
    def num_records(self) -> int | None:
        """Rows in the data file (deleted ones included), from ``stats``; None if unknown.

        Raises:
            DeltaLogError: ``stats`` is not a JSON object.
        """
        if self.stats is None:
            return None
        try:
            stats = orjson.loads(self.stats)
        except orjson.JSONDecodeError as e:
            msg = (f"the stats of data file {self.path!r} are not JSON ({e}): "
                   f"{self.stats[:200]!r}; the table's log is damaged")
            raise DeltaLogError(msg) from e
        n = stats.get("numRecords") if isinstance(stats, dict) else None
        return None if n is None else int(n)


@dataclass(frozen=True, slots=True)
class LogSnapshot:
    """A table's state at one version, replayed from its log (:func:`read_snapshot`).

    Attributes:
        version: The table version.
        files: The active files, in the order they were added (the checkpoint's order, then
            the commits').
        app_versions: Application transaction id (``txn.appId``) → its version.
    """

    version: int
    files: tuple[ActiveFile, ...]
    app_versions: dict[str, int]


def read_snapshot(table_path: str, *, version: int | None = None,
                  storage_options: Mapping[str, str] | None = None) -> LogSnapshot:
    """The active files and app transactions of the Delta table at ``table_path``.

    Replays the newest checkpoint at or below ``version`` and the JSON commits after it (see
    the module). A table of ~100 files with 100 commits after its checkpoint replays in
    milliseconds.

    Args:
        table_path: The table's root: a local path, a ``file:`` URI, or a URI delta-rs opens
            (``s3://``, ``gs://``, ``abfss://``…, read through its object store).
        version: The version to read; None: the newest.
        storage_options: delta-rs storage options for a non-local URI; None reads the
            environment.

    Raises:
        DeltaLogError: No Delta log there; ``version`` is not in it (too new, or older than
            every checkpoint whose commits were kept); a commit between the checkpoint and
            ``version`` is missing; a log file is malformed or vanished while being read (a
            log cleanup: read again); the checkpoint is a V2 one with sidecars.
        OSError: The store could not be read.
    """
    if version is not None and version < 0:
        msg = f"version {version} of {table_path!r} is negative; give a table version >= 0"
        raise DeltaLogError(msg)
    return _replay(_open_log(str(table_path), storage_options), str(table_path), version)


def _replay(log: _Log, table_path: str, version: int | None) -> LogSnapshot:
    """:func:`read_snapshot` of the log ``log`` (the table at ``table_path``)."""
    names = log.names()
    if names is None or not names:
        msg = (f"no Delta table at {table_path!r}: {log.where('')} is missing or empty; "
               "give the root of a Delta table")
        raise DeltaLogError(msg)
    commits, checkpoints = _parse_listing(names)
    known = commits | checkpoints.keys()
    if not known:
        msg = (f"no Delta table at {table_path!r}: {log.where('')} holds no commit or "
               "checkpoint; give the root of a Delta table")
        raise DeltaLogError(msg)
    newest = max(known)
    target = newest if version is None else version
    if target > newest:
        msg = (f"version {target} of {table_path!r} does not exist: the newest is {newest}; "
               "read an existing version (or None for the newest)")
        raise DeltaLogError(msg)
    chosen = _choose_checkpoint(log, checkpoints, target)
    start = -1 if chosen is None else chosen.version
    missing = [v for v in range(start + 1, target + 1) if v not in commits]
    if missing:
        base = "no checkpoint" if chosen is None else f"the checkpoint at {start}"
        msg = (f"cannot rebuild version {target} of {table_path!r}: the log has {base} at or "
               f"below it and lacks the commits {_ranges(missing)} after that "
               f"({log.where(f'{missing[0]:020d}.json')} missing: cleaned up or lost); read a "
               f"version from the newest checkpoint on (checkpoints: "
               f"{sorted(checkpoints) or 'none'})")
        raise DeltaLogError(msg)

    files: dict[_Identity, ActiveFile] = {}
    apps: dict[str, int] = {}
    if chosen is not None:
        for name in chosen.names:
            if name.endswith(".json"):
                _replay_json(log, name, files, apps, checkpoint=True)
            else:
                _replay_parquet(log, name, files, apps)
    for v in range(start + 1, target + 1):
        _replay_json(log, f"{v:020d}.json", files, apps, checkpoint=False)
    return LogSnapshot(target, tuple(files.values()), apps)


@dataclass(frozen=True, slots=True)
class _Checkpoint:
    """One complete checkpoint: its version and its file names in ``_delta_log``."""

    version: int
    names: tuple[str, ...]
    parts: int | None = None  # a classic multi-part checkpoint's number of parts


class _Log:
    """``_delta_log`` of a local table (a folder) or of one delta-rs opens (its object store)."""

    def __init__(self, root: Path | None, table_uri: str,
                 storage_options: Mapping[str, str] | None) -> None:
        self.root = root
        self.table_uri = table_uri
        self.fs: Any = None if root is not None else object_store(table_uri, storage_options)

    def where(self, name: str) -> str:
        """The path or URI of ``_delta_log/<name>`` for messages."""
        if self.root is not None:
            return str(self.root / LOG_DIR / name)
        return f"{self.table_uri.rstrip('/')}/{LOG_DIR}/{name}"

    def names(self) -> list[str] | None:
        """The names in ``_delta_log`` (not recursive); None: no such folder."""
        if self.root is not None:
            try:
                return os.listdir(self.root / LOG_DIR)
            except (FileNotFoundError, NotADirectoryError):
                return None
        import pyarrow.fs as pafs

        infos = self.fs.get_file_info(pafs.FileSelector(LOG_DIR, allow_not_found=True,
                                                        recursive=False))
        return [info.base_name for info in infos]

    def read(self, name: str) -> bytes:
        """The bytes of ``_delta_log/<name>`` (FileNotFoundError when gone)."""
        if self.root is not None:
            return (self.root / LOG_DIR / name).read_bytes()
        with self.fs.open_input_file(f"{LOG_DIR}/{name}") as f:
            return bytes(f.read())

    def parquet(self, name: str) -> pq.ParquetFile:
        """``_delta_log/<name>`` opened as Parquet (FileNotFoundError when gone)."""
        import pyarrow.parquet as pq

        if self.root is not None:
            return pq.ParquetFile(str(self.root / LOG_DIR / name))
        return pq.ParquetFile(self.fs.open_input_file(f"{LOG_DIR}/{name}"))


def object_store(table_uri: str, storage_options: Mapping[str, str] | None) -> Any:
    """A pyarrow file system over delta-rs's object store rooted at ``table_uri``.

    The store and the credentials delta-rs itself uses for the table (``storage_options``;
    None reads the environment), for files revise reads and writes beside delta-rs's.
    """
    import pyarrow.fs as pafs
    from deltalake.fs import DeltaStorageHandler

    return pafs.PyFileSystem(DeltaStorageHandler(
        table_uri, dict(storage_options) if storage_options else None))


def local_folder(table_path: str) -> Path | None:
    """The folder of a local path or ``file:`` URI; None for any other URI (an object store).

    The tables :func:`sinks.delta_commit.commit_actions` can commit to.
    """
    if table_path.startswith("file:"):
        parts = urlsplit(table_path)
        if parts.netloc not in ("", "localhost"):
            return None
        return Path(url2pathname(unquote(parts.path)))
    if "://" in table_path:
        return None
    return Path(table_path)


def _open_log(table_path: str, storage_options: Mapping[str, str] | None) -> _Log:
    return _Log(local_folder(table_path), table_path, storage_options)


def _parse_listing(names: Sequence[str]) -> tuple[set[int], dict[int, list[_Checkpoint]]]:
    """The commit versions and the complete checkpoints (by version) among ``names``."""
    commits: set[int] = set()
    checkpoints: dict[int, list[_Checkpoint]] = {}
    parts: dict[tuple[int, int], dict[int, str]] = {}
    for name in names:
        if name.endswith(".json") and (m := _COMMIT_RE.fullmatch(name)):
            commits.add(int(m[1]))
        elif ".checkpoint." not in name:
            continue
        elif m := _CLASSIC_RE.fullmatch(name):
            checkpoints.setdefault(int(m[1]), []).append(_Checkpoint(int(m[1]), (name,)))
        elif m := _PART_RE.fullmatch(name):
            parts.setdefault((int(m[1]), int(m[3])), {})[int(m[2])] = name
        elif m := _V2_RE.fullmatch(name):
            checkpoints.setdefault(int(m[1]), []).append(_Checkpoint(int(m[1]), (name,)))
    for (v, n), have in parts.items():
        if n > 0 and len(have) == n and set(have) == set(range(1, n + 1)):  # all parts there
            names_ = tuple(have[i] for i in range(1, n + 1))
            checkpoints.setdefault(v, []).append(_Checkpoint(v, names_, n))
    return commits, checkpoints


def _choose_checkpoint(log: _Log, checkpoints: Mapping[int, list[_Checkpoint]],
                       target: int) -> _Checkpoint | None:
    """The newest complete checkpoint at or below ``target``; None: none.

    Of several at that version: the one ``_last_checkpoint`` names (its ``parts`` or its
    ``v2Checkpoint.path``), else a classic single file, else the first listed.
    """
    below = [v for v in checkpoints if v <= target]
    if not below:
        return None
    found = checkpoints[max(below)]
    if len(found) == 1:
        return found[0]
    hint = _last_checkpoint(log)
    if hint is not None and hint.get("version") == found[0].version:
        v2 = hint.get("v2Checkpoint")
        v2_path = v2.get("path") if isinstance(v2, dict) else None
        for c in found:
            if (v2_path is not None and c.names == (v2_path,)) or (
                    v2_path is None and c.parts == hint.get("parts")):
                return c
    return next((c for c in found if _CLASSIC_RE.fullmatch(c.names[0])), found[0])


def _last_checkpoint(log: _Log) -> dict[str, Any] | None:
    """``_last_checkpoint``'s object; None when absent or unreadable (it is only a hint)."""
    try:
        hint = orjson.loads(log.read("_last_checkpoint"))
    except (OSError, orjson.JSONDecodeError):
        return None
    return hint if isinstance(hint, dict) else None


def _replay_json(log: _Log, name: str, files: dict[_Identity, ActiveFile],
                 apps: dict[str, int], *, checkpoint: bool) -> None:
    """Apply a JSON commit's (or a V2 JSON checkpoint's) actions to ``files`` and ``apps``."""
    data = _read(log, name)
    line_no = 0  # the line being applied, for the error message
    try:
        for line in data.splitlines():
            line_no += 1
            if not line.strip():
                continue
            action = orjson.loads(line)
            for kind, body in action.items():
                if kind == "add":
                    _put(files, _active_file(body))
                elif kind == "remove":
                    if not checkpoint:  # a checkpoint's removes are tombstones
                        files.pop(_identity(body["path"], body.get("deletionVector")), None)
                elif kind == "txn":
                    apps[body["appId"]] = int(body["version"])
                elif kind == "sidecar":
                    raise DeltaLogError(_sidecar_message(log, name))
    except DeltaLogError:
        raise
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
        msg = (f"line {line_no} of {log.where(name)} is not a valid Delta action "
               f"({type(e).__name__}: {e}); the table's log is damaged (or not a Delta log)")
        raise DeltaLogError(msg) from e


def _replay_parquet(log: _Log, name: str, files: dict[_Identity, ActiveFile],
                    apps: dict[str, int]) -> None:
    """Apply a Parquet checkpoint's (or checkpoint part's) ``add`` and ``txn`` rows."""
    import pyarrow.compute as pc

    try:
        pf = log.parquet(name)
    except FileNotFoundError as e:
        raise DeltaLogError(_vanished(log, name)) from e
    schema = pf.schema_arrow
    columns: list[str] = []
    if "add" in schema.names:
        add_type = schema.field("add").type
        columns += [f"add.{f}" for f in _ADD_FIELDS if add_type.get_field_index(f) >= 0]
    if "txn" in schema.names:
        columns += ["txn.appId", "txn.version"]
    if "sidecar" in schema.names:  # delta-rs writes the column, empty, in classic checkpoints
        columns.append("sidecar.path")
    if not columns:
        return
    table = pf.read(columns=columns)
    if "sidecar" in table.column_names:
        sidecar = table.column("sidecar")
        if sidecar.null_count < len(sidecar):
            raise DeltaLogError(_sidecar_message(log, name))
    if "txn" in table.column_names:
        txn = _struct_rows(table.column("txn"), pc)
        for app_id, app_version in zip(txn["appId"], txn["version"], strict=True):
            apps[app_id] = int(app_version)
    if "add" not in table.column_names:
        return
    add = _struct_rows(table.column("add"), pc)
    for needed in ("path", "size", "modificationTime"):
        if needed not in add:
            msg = (f"checkpoint {log.where(name)} has no add.{needed} column; the table's log "
                   "is damaged (or written by an unknown writer)")
            raise DeltaLogError(msg)
    n = len(add["path"])
    nones: list[Any] = [None] * n
    for path, size, mtime, pvs, stats, dv in zip(
            add["path"], add["size"], add["modificationTime"],
            add.get("partitionValues", nones), add.get("stats", nones),
            add.get("deletionVector", nones), strict=True):
        _put(files, ActiveFile(path, int(size), int(mtime), stats, dict(pvs or ()), _dv(dv)))


def _struct_rows(column: pa.ChunkedArray, pc: Any) -> dict[str, list[Any]]:
    """The non-null rows of a struct column, as Python lists per field."""
    valid = column.filter(pc.is_valid(column)).combine_chunks()
    return {field.name: child.to_pylist()
            for field, child in zip(valid.type, valid.flatten(), strict=True)}


def _read(log: _Log, name: str) -> bytes:
    try:
        return log.read(name)
    except FileNotFoundError as e:
        raise DeltaLogError(_vanished(log, name)) from e


def _vanished(log: _Log, name: str) -> str:
    return (f"{log.where(name)} was listed but is gone (a log cleanup or a checkpoint "
            "rewrite while reading); read the table again")


def _sidecar_message(log: _Log, name: str) -> str:
    return (f"checkpoint {log.where(name)} is a V2 checkpoint with sidecar files, which this "
            "reader does not support; set the table's delta.checkpointPolicy to 'classic' and "
            "write a new checkpoint, or read a version before it")


def _put(files: dict[_Identity, ActiveFile], f: ActiveFile) -> None:
    """Add (or replace) a file's identity, at the end of the order."""
    key = _identity(f.path, f.deletion_vector)
    files.pop(key, None)
    files[key] = f


def _active_file(add: Mapping[str, Any]) -> ActiveFile:
    """The :class:`ActiveFile` of a JSON ``add`` action."""
    return ActiveFile(add["path"], int(add["size"]), int(add["modificationTime"]),
                      add.get("stats"), dict(add.get("partitionValues") or {}),
                      _dv(add.get("deletionVector")))


def _dv(dv: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A DV descriptor without its null fields (a checkpoint's ``offset``, ``maxRowIndex``)."""
    if dv is None:
        return None
    return {k: v for k, v in dv.items() if v is not None}


def _identity(path: str, dv: Mapping[str, Any] | None) -> _Identity:
    """(URL-decoded path, DV unique id or None): what an ``add`` puts and a ``remove`` takes."""
    if dv is None:
        return unquote(path), None
    offset = dv.get("offset")
    dv_id = f"{dv['storageType']}{dv['pathOrInlineDv']}"
    return unquote(path), dv_id if offset is None else f"{dv_id}@{offset}"


def _ranges(versions: Sequence[int]) -> str:
    """``[3, 4, 5, 9]`` → ``3-5, 9``."""
    out: list[str] = []
    start = prev = versions[0]
    for v in [*versions[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(out)
