"""Bytecode inside Spark's ``pyspark.zip``, so the Python workers Spark starts import quickly.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first on the
``PYTHONPATH`` of every Python process it starts: the daemon and its workers, and the
process that runs ``transformWithStateInPandas``' driver-side calls. The zips hold sources
only, and Python's ``zipimport`` never caches the bytecode it compiles, so each of those
processes compiles pyspark again: 1.2–1.4 CPU s to import the worker's modules from the
zip, against 0.2–0.35 s from site-packages, each time (docs/lab/benchmarks-diary.md, *Where the
driver's CPU goes*).

:func:`add_bytecode` writes the zip again with a ``.pyc`` beside the ``.py`` of each module
those processes import (:data:`WORKER_IMPORTS` and what they import, ~100 of pyspark's
~1,300; PEP 552, unchecked hash-based: the zip is replaced whole when pyspark is reinstalled,
so its bytecode cannot go stale). Not every module: a worker re-reads the zip's directory
(pure Python, 5–9 µs an entry) each time PySpark calls ``importlib.invalidate_caches()``, many
times a run, and a ``.pyc`` for all of them doubled that. ``zipimport`` prefers ``name.pyc``;
an interpreter of another version finds the wrong magic number and compiles the source, as
before. Nothing else in the zip changes.
An opt-in: no install step runs it, since it rewrites another package's installed files
(the pip-installed pyspark's zips then no longer match their wheel's RECORD hashes; ``pip
install --force-reinstall pyspark`` puts the originals back). On a local master the workers
do not import from the zips (:mod:`revise.spark.pydaemon` takes them off the path), so what it
still speeds up is ``transformWithStateInPandas``' driver-side pre-init process at each query
start, and the workers of the local standalone cluster and of clusters (docs/CLUSTER.md;
docs/BENCHMARKS.md, *Bytecode in pyspark's zip, opt-in*). Run ``python -m
revise.infra.pyspark_bytecode`` for the pip-installed pyspark, or :func:`add_bytecode` on a
cluster's own ``SPARK_HOME`` zips with its Workers' interpreter.
"""

from __future__ import annotations

import importlib.util
import json
import marshal
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Final

__all__ = ["WORKER_IMPORTS", "add_bytecode", "has_bytecode", "imported_entries", "main",
           "spark_python_zips"]

WORKER_IMPORTS: Final = (
    "pyspark.daemon",
    "pyspark.worker",
    "pyspark.sql.streaming.transform_with_state_driver_worker",
    "pyspark.sql.pandas.serializers",
    "pyspark.sql.pandas.types",
    "pyspark.sql.streaming.stateful_processor",
    "pyspark.sql.streaming.stateful_processor_api_client",
    "revise.spark.operator",
)
"""What the Python processes Spark starts for revise import (with what those import)."""

_UNCHECKED_HASH: Final = (0b01).to_bytes(4, "little")
"""PEP 552 flags: hash-based, source not checked."""


def _pyc(source: bytes, path: str) -> bytes:
    """A ``.pyc`` of ``source`` for this interpreter, compiled under ``path`` (its tracebacks)."""
    code = compile(source, path, "exec", dont_inherit=True)
    return (importlib.util.MAGIC_NUMBER + _UNCHECKED_HASH + importlib.util.source_hash(source)
            + marshal.dumps(code))


def _sources(z: zipfile.ZipFile, entries: Collection[str] | None) -> list[str]:
    """The ``.py`` entries of ``z`` to compile: those in ``entries`` (all when None)."""
    return [n for n in z.namelist() if n.endswith(".py") and (entries is None or n in entries)]


def has_bytecode(archive: Path, entries: Collection[str] | None = None) -> bool:
    """Whether the ``.py`` files of ``entries`` in ``archive`` have this interpreter's ``.pyc``.

    ``entries`` are zip entry names; None means every ``.py`` of the zip.
    """
    with zipfile.ZipFile(archive) as z:
        names = set(z.namelist())
        sources = _sources(z, entries)
        if not all(n + "c" in names for n in sources):
            return False
        return all(z.read(n + "c")[:4] == importlib.util.MAGIC_NUMBER for n in sources)


def add_bytecode(archive: Path, entries: Collection[str] | None = None) -> bool:
    """Rewrite ``archive`` with a ``.pyc`` beside each ``.py`` of ``entries``; False if done.

    ``entries`` are zip entry names; None means every ``.py`` of the zip. The new zip is
    written beside the old one and moved over it, so a reader sees one or the other whole.

    Raises:
        OSError: the folder is not writable.
        SyntaxError: a source does not compile with this interpreter.
    """
    if has_bytecode(archive, entries):
        return False
    fd, tmp = tempfile.mkstemp(prefix=archive.name, suffix=".tmp", dir=archive.parent)
    os.close(fd)
    try:
        with zipfile.ZipFile(archive) as src, zipfile.ZipFile(tmp, "w") as dst:
            compiled = {n + "c" for n in _sources(src, entries)}  # written beside their .py
            for info in src.infolist():
                if info.filename in compiled:
                    continue  # stale bytecode (another interpreter's): replaced below
                data = src.read(info)
                dst.writestr(info, data)
                if info.filename + "c" in compiled:
                    pyc = zipfile.ZipInfo(info.filename + "c", date_time=info.date_time)
                    pyc.compress_type = zipfile.ZIP_DEFLATED
                    dst.writestr(pyc, _pyc(data, f"{archive}{os.sep}{info.filename}"))
        os.chmod(tmp, archive.stat().st_mode & 0o777)
        os.replace(tmp, archive)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return True


def spark_python_zips() -> list[Path]:
    """The zips Spark puts on its Python processes' path, for the pip-installed pyspark."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    return sorted(lib.glob("*.zip"))


def imported_entries(archives: Sequence[Path],
                     modules: Sequence[str] = WORKER_IMPORTS) -> dict[Path, set[str]]:
    """Per archive, the ``.py`` entries that importing ``modules`` loads from it.

    Found by a fresh interpreter with ``archives`` first on its path, as Spark's are; a
    module it cannot import is skipped.

    Raises:
        subprocess.CalledProcessError: the interpreter failed.
        ValueError: its output was not the expected JSON.
    """
    probe = (
        "import importlib, json, sys\n"
        f"for m in {list(modules)!r}:\n"
        "    try:\n        importlib.import_module(m)\n"
        "    except Exception:\n        pass\n"
        "print(json.dumps([getattr(m.__spec__, 'origin', None) for m in list(sys.modules.values())"
        " if getattr(m, '__spec__', None) is not None]))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, archives))}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                          text=True, check=True, timeout=300)
    found: dict[Path, set[str]] = {a: set() for a in archives}
    for origin in json.loads(done.stdout.strip().rsplit("\n", 1)[-1]):
        for archive in archives:
            if origin and origin.startswith(f"{archive}{os.sep}"):
                found[archive].add(origin[len(str(archive)) + 1:].removesuffix("c"))
    return found


def main() -> int:
    """Add bytecode to the pip-installed pyspark's zips; prints what it did."""
    archives = spark_python_zips()
    try:
        entries = imported_entries(archives)
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        print(f"pyspark's zips left as they are: finding what the workers import failed ({e})")
        return 0
    for archive in archives:
        try:
            done = add_bytecode(archive, entries[archive])
        except OSError as e:
            print(f"{archive}: left as it is ({e}); Spark's Python workers compile it at start")
            continue
        what = "bytecode added" if done else "has bytecode already"
        print(f"{archive}: {what} ({len(entries[archive])} modules the workers import)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
