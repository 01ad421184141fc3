"""Bytecode inside Spark's ``pyspark.zip``, so the Python workers Spark starts import quickly.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first on the
``PYTHONPATH`` of every Python process it starts: the daemon and its workers, and the
process that runs ``transformWithStateInPandas``' driver-side calls. The zips hold sources
only, and Python's ``zipimport`` never caches the bytecode it compiles, so each of those
processes compiles pyspark again: 1.85 s of CPU to import the worker's modules from the
zip, against 0.36 s from site-packages, each time (measured here; issue 12 has the figures).

:func:`add_bytecode` writes the zip again with a ``.pyc`` beside every ``.py`` (PEP 552,
unchecked hash-based: the zip is replaced whole when pyspark is reinstalled, so its bytecode
cannot go stale). ``zipimport`` prefers ``name.pyc``; an interpreter of another version finds
the wrong magic number and compiles the source, as before. Nothing else in the zip changes.
Run ``python -m revise.infra.pyspark_bytecode`` (the Makefile's ``install`` does) for the
pip-installed pyspark; a cluster's own ``SPARK_HOME`` is left to its owner.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Final

__all__ = ["add_bytecode", "has_bytecode", "main", "spark_python_zips"]

_UNCHECKED_HASH: Final = (0b01).to_bytes(4, "little")
"""PEP 552 flags: hash-based, source not checked."""


def _pyc(source: bytes, path: str) -> bytes:
    """A ``.pyc`` of ``source`` for this interpreter, compiled under ``path`` (its tracebacks)."""
    code = compile(source, path, "exec", dont_inherit=True)
    return (importlib.util.MAGIC_NUMBER + _UNCHECKED_HASH + importlib.util.source_hash(source)
            + marshal.dumps(code))


def has_bytecode(archive: Path) -> bool:
    """Whether every ``.py`` in ``archive`` has a ``.pyc`` beside it for this interpreter."""
    with zipfile.ZipFile(archive) as z:
        names = set(z.namelist())
        sources = [n for n in names if n.endswith(".py")]
        if not all(n + "c" in names for n in sources):
            return False
        return not sources or z.read(sources[0] + "c")[:4] == importlib.util.MAGIC_NUMBER


def add_bytecode(archive: Path) -> bool:
    """Rewrite ``archive`` with a ``.pyc`` beside each ``.py``; False when it has them already.

    The new zip is written beside the old one and moved over it, so a reader sees one or the
    other whole.

    Raises:
        OSError: the folder is not writable.
        SyntaxError: a source does not compile with this interpreter.
    """
    if has_bytecode(archive):
        return False
    fd, tmp = tempfile.mkstemp(prefix=archive.name, suffix=".tmp", dir=archive.parent)
    os.close(fd)
    try:
        with zipfile.ZipFile(archive) as src, zipfile.ZipFile(tmp, "w") as dst:
            names = set(src.namelist())
            for info in src.infolist():
                data = src.read(info)
                dst.writestr(info, data)
                if info.filename.endswith(".py") and info.filename + "c" not in names:
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


def main() -> int:
    """Add bytecode to the pip-installed pyspark's zips; prints what it did."""
    for archive in spark_python_zips():
        try:
            done = add_bytecode(archive)
        except OSError as e:
            print(f"{archive}: left as it is ({e}); Spark's Python workers compile it at start")
            continue
        print(f"{archive}: {'bytecode added' if done else 'has bytecode already'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
