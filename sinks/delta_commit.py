"""A raw commit to a Delta table's log, put-if-absent: what delta-rs cannot commit for revise.

delta-rs (1.6) has no way to commit actions that carry a deletion vector; revise writes
``latest``'s vectors itself (:mod:`sinks.merge_on_read`) and commits them here.
:func:`commit_actions` writes one commit of raw actions (``commitInfo``, ``txn``, ``add``,
``remove``… built by the caller) as ``_delta_log/<version:020d>.json``, put-if-absent: of two
writers of one version exactly one wins, the other gets :class:`CommitConflict`. The log is
read by :func:`sinks.delta_log.read_snapshot`.

A local folder (a path or a ``file:`` URI, a shared mount included) gets the bytes
in a hidden temporary file beside the commit (fsync'd), hard-linked to the commit's name
(``link`` fails when the name exists: the atomic put-if-absent that Delta needs), then the
temporary name removed and the folder fsync'd. Other stores (``s3://``…) are refused: their
put-if-absent is not reachable from here.
"""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import orjson

from sinks.atomic import fsync_dir, write_synced
from sinks.delta_log import LOG_DIR, DeltaLogError, local_folder

__all__ = ["CommitConflict", "commit_actions"]

_ACTIONS: Final = frozenset({"add", "remove", "metaData", "protocol", "txn", "commitInfo", "cdc",
                             "domainMetadata"})
"""The actions a commit file may hold (``checkpointMetadata`` and ``sidecar`` are a
checkpoint's)."""
_NO_LINKS: Final = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV,
                              errno.EMLINK})
"""``link`` errors that say the file system makes no hard links here (EPERM: some mounts)."""


class CommitConflict(DeltaLogError):
    """The commit's version was taken by another writer: re-read the table and rebuild it."""


def commit_actions(table_path: str, version: int, actions: Sequence[Mapping[str, Any]], *,
                   storage_options: Mapping[str, str] | None = None) -> None:
    """Commit ``actions`` as ``version`` of the Delta table at ``table_path``, put-if-absent.

    Writes ``_delta_log/<version:020d>.json``, one action a line, whole or not at all and
    durable on return; no ``.crc`` file. The caller builds the actions (a ``commitInfo``, the
    ``txn``, the ``add`` and ``remove`` dicts with their ``deletionVector``); they are not
    checked against the table (schema, protocol, files), only for their shape.

    1. The bytes go to ``.<version:020d>.json.<pid>.<random>.tmp`` in ``_delta_log`` (hidden:
       Delta readers skip it), fsync'd.
    2. ``os.link`` gives them the commit's name, failing when it exists (another writer's
       commit of this version): :class:`CommitConflict`, the existing commit untouched.
    3. The temporary name is removed (whatever happened; a crash before may leave it, hidden
       and unread) and the folder fsync'd.

    Args:
        table_path: The table's root: a local path or a ``file:`` URI.
        version: The new version: the table's version + 1 (``read_snapshot(…).version + 1``;
            0 creates the table, and its ``_delta_log`` folder).
        actions: The commit's actions, each a mapping with one key (``add``, ``remove``,
            ``txn``, ``commitInfo``, ``metaData``, ``protocol``, ``cdc``, ``domainMetadata``).
        storage_options: Accepted for symmetry with :func:`read_snapshot`; unused (only
            local folders can be committed to).

    Raises:
        CommitConflict: ``version`` exists already; nothing was written.
        DeltaLogError: ``table_path`` is not a local folder; there is no table there
            (``version`` > 0) or ``version - 1`` has no commit (a gap); an action is not one
            JSON-serialisable action; the folder cannot make hard links.
        OSError: The folder could not be written: the commit does not exist, unless the
            error came from the last step's fsync (read the table to know).
    """
    del storage_options  # local folders only
    root = local_folder(str(table_path))
    if root is None:
        msg = (f"cannot commit to {table_path!r}: raw Delta commits need a store with an atomic "
               "put-if-absent and only local or shared folders (a path or a file: URI) are "
               "supported here; commit to such a folder, or through delta-rs")
        raise DeltaLogError(msg)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        msg = f"commit version {version!r} for {table_path!r} is not an integer >= 0"
        raise DeltaLogError(msg)
    data = _encode(actions, f"version {version} of {table_path!r}")
    log_dir = root / LOG_DIR
    final = log_dir / f"{version:020d}.json"
    if version == 0:
        log_dir.mkdir(parents=True, exist_ok=True)
    elif not log_dir.is_dir():
        msg = (f"no Delta table at {table_path!r} ({log_dir} is missing) to commit version "
               f"{version} to; create the table first (version 0)")
        raise DeltaLogError(msg)
    elif not (log_dir / f"{version - 1:020d}.json").exists():
        msg = (f"commit version {version} of {table_path!r} would leave a gap: "
               f"{log_dir / f'{version - 1:020d}.json'} does not exist; commit the table's "
               "next version, read_snapshot(…).version + 1")
        raise DeltaLogError(msg)

    # 1. the bytes under a hidden temporary name, fsync'd
    tmp = log_dir / f".{final.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        write_synced(tmp, data)
        # 2. the commit's name, only if free
        try:
            os.link(tmp, final)
        except FileExistsError:
            # An NFS client may retry a link that succeeded and get EEXIST: ours if same inode.
            if not _same_file(tmp, final):
                msg = (f"version {version} of {table_path!r} was committed by another writer "
                       f"({final} exists); read the table again (read_snapshot) and rebuild "
                       "the commit on its newest version")
                raise CommitConflict(msg) from None
        except OSError as e:
            if e.errno not in _NO_LINKS:
                raise
            msg = (f"cannot commit to {table_path!r}: its file system refused a hard link "
                   f"({type(e).__name__}: {e}), which raw commits need as their atomic "
                   "put-if-absent; keep the table on a POSIX file system (ext4, xfs, NFS…)")
            raise DeltaLogError(msg) from e
    finally:
        # 3. the temporary name gone, the new entry durable
        tmp.unlink(missing_ok=True)
    fsync_dir(log_dir)


def _encode(actions: Sequence[Mapping[str, Any]], where: str) -> bytes:
    """The commit file's bytes: one JSON object a line, each ending with a newline."""
    if isinstance(actions, Mapping | str | bytes) or not actions:
        msg = (f"the commit of {where} has no actions ({type(actions).__name__}); give a "
               "sequence of actions such as [{'commitInfo': {…}}, {'add': {…}}]")
        raise DeltaLogError(msg)
    lines: list[bytes] = []
    for i, action in enumerate(actions):
        keys = list(action) if isinstance(action, Mapping) else None
        if keys is None or len(keys) != 1 or keys[0] not in _ACTIONS:
            msg = (f"action {i} of the commit of {where} is {str(action)[:200]}; each action "
                   f"is a mapping with one key of {sorted(_ACTIONS)}")
            raise DeltaLogError(msg)
        try:
            lines.append(orjson.dumps(action, default=_plain))
        except orjson.JSONEncodeError as e:
            msg = (f"action {i} ({keys[0]}) of the commit of {where} is not JSON-serialisable "
                   f"({e}); give str, int, float, bool, None, lists and mappings")
            raise DeltaLogError(msg) from e
    return b"\n".join(lines) + b"\n"


def _plain(value: Any) -> Any:
    """The fallback of ``orjson.dumps``: a mapping that is no dict as a dict."""
    if isinstance(value, Mapping):
        return dict(value)
    msg = f"{type(value).__name__} is not JSON-serialisable"
    raise TypeError(msg)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
