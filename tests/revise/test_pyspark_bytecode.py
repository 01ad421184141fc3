"""Bytecode in Spark's Python zips (an opt-in): imported from the zip, same code."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from revise.infra.pyspark_bytecode import (
    add_bytecode,
    has_bytecode,
    imported_entries,
)

_MOD = b"def answer():\n    return 6 * 7\n\ndef fail():\n    raise ValueError('from mod')\n"


def _run(archive: Path, code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(archive)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True, timeout=60)
    return done.stdout


def test_a_zip_gets_bytecode_once_and_imports_the_same_code_from_it(tmp_path):
    archive = tmp_path / "pkg.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("pkg/__init__.py", b"")
        z.writestr("pkg/mod.py", _MOD)
        z.writestr("pkg/data.txt", b"not code")
    before = {n: zipfile.ZipFile(archive).read(n) for n in zipfile.ZipFile(archive).namelist()}
    assert not has_bytecode(archive)
    assert add_bytecode(archive) and has_bytecode(archive)
    assert not add_bytecode(archive)  # the second time: nothing to do
    with zipfile.ZipFile(archive) as z:
        names = z.namelist()
        assert {n: z.read(n) for n in before} == before  # the zip's own entries unchanged
    assert sorted(names) == sorted([*before, "pkg/__init__.pyc", "pkg/mod.pyc"])
    out = _run(archive, "import traceback, pkg.mod as m\nprint(m.__file__)\nprint(m.answer())\n"
                        "try:\n    m.fail()\nexcept ValueError as e:\n"
                        "    print(traceback.extract_tb(e.__traceback__)[-1].filename)")
    file, answer, raised_in = out.split()
    assert file == f"{archive}{os.sep}pkg{os.sep}mod.pyc" and answer == "42"
    assert raised_in == f"{archive}{os.sep}pkg/mod.py"  # tracebacks name the source


def test_only_the_modules_named_get_bytecode_and_those_are_found_by_importing(tmp_path):
    archive = tmp_path / "pkg.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("pkg/__init__.py", b"")
        z.writestr("pkg/user.py", b"from pkg import mod\n")
        z.writestr("pkg/mod.py", _MOD)
        z.writestr("pkg/unused.py", b"x = 1\n")
    entries = imported_entries([archive], ["pkg.user", "no_such_module"])[archive]
    assert entries == {"pkg/__init__.py", "pkg/user.py", "pkg/mod.py"}
    assert add_bytecode(archive, entries) and has_bytecode(archive, entries)
    assert not has_bytecode(archive)  # pkg/unused.py has none
    assert not add_bytecode(archive, entries)
    names = zipfile.ZipFile(archive).namelist()
    assert sorted(n for n in names if n.endswith(".pyc")) == [
        "pkg/__init__.pyc", "pkg/mod.pyc", "pkg/user.pyc"]
    out = _run(archive, "import pkg.user, pkg.unused\nprint(pkg.user.__file__)\n"
                        "print(pkg.unused.__file__)\nprint(pkg.user.mod.answer())")
    assert out.split() == [f"{archive}/pkg/user.pyc", f"{archive}/pkg/unused.py", "42"]


def test_bytecode_of_another_interpreter_falls_back_to_the_source(tmp_path):
    archive = tmp_path / "pkg.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("pkg/__init__.py", b"")
        z.writestr("pkg/mod.py", _MOD)
        z.writestr("pkg/mod.pyc", b"\0\0\0\0" + b"\0" * 12 + b"garbage")  # wrong magic
    assert not has_bytecode(archive)
    assert _run(archive, "import pkg.mod as m\nprint(m.__file__, m.answer())").split() == [
        f"{archive}{os.sep}pkg{os.sep}mod.py", "42"]
    assert add_bytecode(archive)  # this interpreter's replaces it
    assert has_bytecode(archive) and zipfile.ZipFile(archive).namelist().count("pkg/mod.pyc") == 1
    assert _run(archive, "import pkg.mod as m\nprint(m.__file__, m.answer())").split() == [
        f"{archive}{os.sep}pkg{os.sep}mod.pyc", "42"]
