"""Durable, atomic writes to a local folder: a reader sees the old content or the new, whole.

:func:`put_in_place` is the one way anything is published into a folder: the temporary file
(or folder) is fsync'd, renamed over its final name and the parent folder fsync'd, so after a
crash at any point the final name holds either what it held before or the complete new
content, never part of it. :func:`write_atomic` builds one file that way;
:func:`write_synced` writes a file inside a temporary folder that :func:`put_in_place` then
publishes whole. The checkpoint folder's writes
(:mod:`revise.checkpoint`) and the staged Delta batches use these; revise imports them from
here because ``sinks`` may not import revise's job. Standard library only; POSIX (a folder
cannot be fsync'd on Windows).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["fsync_dir", "put_in_place", "write_atomic", "write_synced"]

Content = bytes | str | Callable[[BinaryIO], object]
"""Bytes, text (written as UTF-8) or a function that writes to the open binary file."""


def fsync_dir(path: str | Path) -> None:
    """Flush a folder's entries (names created, renamed or removed in it) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: str | Path, content: Content) -> None:
    """Write ``content`` to ``path`` and fsync it (not atomic by itself: see the module)."""
    with Path(path).open("wb") as f:
        if isinstance(content, str):
            f.write(content.encode())
        elif isinstance(content, bytes):
            f.write(content)
        else:
            content(f)
        f.flush()
        os.fsync(f.fileno())


def put_in_place(tmp: str | Path, final: str | Path) -> None:
    """Rename the written ``tmp`` (a file, or a folder of fsync'd files) over ``final``, durably.

    A folder ``tmp`` is fsync'd first (its entries); ``final`` must then not exist. After the
    rename, ``final``'s folder is fsync'd so the new name survives a power loss.
    """
    tmp, final = Path(tmp), Path(final)
    if tmp.is_dir():
        fsync_dir(tmp)
    os.replace(tmp, final)
    fsync_dir(final.parent)


def write_atomic(path: str | Path, content: Content) -> None:
    """Replace the file ``path`` with ``content``: whole or not at all, durable on return.

    The content goes to ``.<name>.<pid>.tmp`` beside it (hidden: Spark's file source and the
    folder's readers skip it; the pid keeps two processes' writes apart), which is fsync'd and
    renamed over ``path`` (:func:`put_in_place`). A crash before the rename leaves the old file
    (and the temporary one, which nobody reads); after it, the new one.

    Raises:
        OSError: The folder could not be written; ``path`` is unchanged.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write_synced(tmp, content)
        put_in_place(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
