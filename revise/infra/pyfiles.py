"""Ship revise's own code to Spark executors that do not have it installed.

On a real cluster the Workers' interpreter may lack revise (or hold another version of it). The
executors need ``revise``, ``windows`` and ``sinks`` to unpickle the job's functions, so the
driver ships them: one zip built from the files of the packages *this* driver imported (the
code that runs here is the code that runs there), cached under ``$REVISE_HOME/pyfiles`` (else
the temp folder) by a hash of its content, and added with ``SparkContext.addPyFile``.

Spark fetches the zip into each executor's working folder and puts it at the front of the
Python workers' ``sys.path`` (before site-packages), so the shipped copy wins over any
installed one. Local masters (``local``, ``local[N]``, ``local[*]``) share the driver's
interpreter and need nothing.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["PACKAGES", "is_local_master", "package_files", "packages_zip", "ship_to_executors"]

PACKAGES: tuple[str, ...] = ("revise", "windows", "sinks")
"""The packages the executors import (the engine, its kernels, the records' sinks)."""

_FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the same files give the same zip bytes


def is_local_master(master: str) -> bool:
    """True for ``local``, ``local[N]`` and ``local[*]`` (executors in the driver's process)."""
    return master == "local" or master.startswith("local[")


def package_files(packages: Sequence[str] = PACKAGES) -> list[tuple[str, Path]]:
    """``(name in the zip, file)`` for every file of the imported ``packages``, sorted.

    Compiled files and caches are left out; package data (``py.typed``, poms) go along.
    """
    found: list[tuple[str, Path]] = []
    for name in packages:
        module = importlib.import_module(name)
        if module.__file__ is None:
            msg = f"package {name!r} has no files to ship (a namespace package?)"
            raise ValueError(msg)
        root = Path(module.__file__).resolve().parent
        for path in root.rglob("*"):
            rel = path.relative_to(root)
            if not path.is_file() or "__pycache__" in rel.parts or path.suffix == ".pyc":
                continue
            found.append(((Path(name) / rel).as_posix(), path))
    return sorted(found)


def _cache_dir() -> Path:
    root = os.environ.get("REVISE_HOME")
    if root:
        return Path(root).expanduser().resolve() / "pyfiles"
    return Path(tempfile.gettempdir()) / f"revise-pyfiles-{os.getuid()}"


def packages_zip(
    packages: Sequence[str] = PACKAGES, cache_dir: Path | None = None
) -> Path:
    """The zip of ``packages`` (built once per content; later calls return the cached file).

    The file name carries the first 16 hex digits of a SHA-256 over every file's name and
    bytes, so changed code gives a new file (Spark ships a given path only once).
    """
    files = package_files(packages)
    digest = hashlib.sha256()
    contents: list[tuple[str, bytes]] = []
    for arcname, path in files:
        data = path.read_bytes()
        contents.append((arcname, data))
        digest.update(arcname.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    folder = cache_dir or _cache_dir()
    target = folder / f"revise-{digest.hexdigest()[:16]}.zip"
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    # Write aside and rename: concurrent drivers never see a half-written zip.
    fd, tmp = tempfile.mkstemp(prefix=".revise-", suffix=".zip.tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as zf:
            for arcname, data in contents:
                info = zipfile.ZipInfo(arcname, date_time=_FIXED_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, data)
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return target


def ship_to_executors(spark: SparkSession) -> Path | None:
    """Add the packages' zip to ``spark`` unless its master is local.

    Returns the shipped zip, or None on a local master. Safe to call more than once: Spark
    ignores a path it already ships.
    """
    sc = spark.sparkContext
    if is_local_master(str(sc.master)):
        return None
    path = packages_zip()
    sc.addPyFile(str(path))
    return path
