"""The README's ``pip install`` path: revise's wheel in a fresh virtual environment outside the
clone runs ``revise demo`` and a bounded ``revise run`` from a folder outside the clone.

The wheel is built from a copy of the clone's files, and installed with plain ``pip install``
(pip's cache, the package index for what it lacks: a missing dependency fails here). The JVM
artifacts are resolved from the wheel's own poms and Java sources into an empty
``$REVISE_JVM_DIR`` (Maven's local repository as usual), never from the clone's ``.jvm``.
Afterwards nothing in the clone has changed, and every installed file of every package in the
environment still matches its wheel's RECORD (revise rewrites no other package's files).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from console_lines import SPARK_LOG4J, foreign_lines, log_file
from integration_support import REPO, CliRun

pytestmark = [pytest.mark.slow, pytest.mark.kafka, pytest.mark.spark, pytest.mark.delta]

INSTALL_TIMEOUT_S = 1200
RUN_TIMEOUT_S = 600
_SKIPPED = {".git", "__pycache__", ".pytest_cache", ".hypothesis", ".ruff_cache", ".mypy_cache"}
"""Folders of the clone not compared: git's own, and the caches this test process writes."""

RECORD_CHECK = """
import base64, hashlib, importlib.metadata as md
for dist in md.distributions():
    for f in dist.files or []:
        if f.hash is None:
            continue
        path = f.locate()
        if not path.is_file():
            print(dist.metadata["Name"], f, "missing")
            continue
        digest = hashlib.new(f.hash.mode, path.read_bytes()).digest()
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != f.hash.value:
            print(dist.metadata["Name"], f, "changed")
"""
"""Prints each installed file that does not match its distribution's RECORD."""


def _clone_files() -> dict[str, tuple[int, int]]:
    """Every file of the clone (but :data:`_SKIPPED`): path → (mtime in ns, size)."""
    found: dict[str, tuple[int, int]] = {}
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in _SKIPPED]
        for name in files:
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            found[os.path.relpath(path, REPO)] = (st.st_mtime_ns, st.st_size)
    return found


def _run(cmd: list[str], timeout_s: float, **kwargs: object) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False,
                          **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{cmd}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return str(done.stdout)


def _wheel(tmp_path: Path) -> Path:
    """revise's wheel, built from a copy of the clone's files (the clone stays untouched)."""
    src, dist = tmp_path / "src", tmp_path / "dist"
    listed = _run(["git", "ls-files", "-co", "--exclude-standard", "-z"], 60, cwd=REPO)
    for rel in filter(None, listed.split("\0")):
        if (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_bytes((REPO / rel).read_bytes())
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist),
          str(src)], INSTALL_TIMEOUT_S)
    (wheel,) = dist.glob("revise-*.whl")
    return wheel


def test_the_wheel_runs_the_demo_and_a_job_outside_the_clone(tmp_path: Path) -> None:
    before = _clone_files()
    # Nothing of this process's environment points at the clone: an earlier test in this
    # worker may have put it on PYTHONPATH, where pip would find revise "already installed".
    plain = {k: v for k, v in os.environ.items()
             if k not in ("PYTHONPATH", "REVISE_JVM_DIR", "SPARK_HOME", "PYSPARK_PYTHON")}
    wheel = _wheel(tmp_path)
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], 300, env=plain)
    python, revise = venv / "bin" / "python", str(venv / "bin" / "revise")
    _run([str(python), "-m", "pip", "install", "--quiet", str(wheel)], INSTALL_TIMEOUT_S,
         env=plain)

    work, home, jvm = tmp_path / "work", tmp_path / "home", tmp_path / "jvm"
    work.mkdir()
    env: dict[str, str | None] = {
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "REVISE_HOME": str(home), "REVISE_JVM_DIR": str(jvm),
        **dict.fromkeys(("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME",
                         "VIRTUAL_ENV", "PYTHONHOME")),
    }
    where = _run([str(python), "-c", "import revise, pyspark; from revise.infra.jars import "
                  "jvm_dir; print(revise.__file__); print(pyspark.__file__); print(jvm_dir())"],
                 60, cwd=work, env=plain).split()
    assert all(p.startswith(str(venv)) for p in where[:2]), where
    assert where[2] == str(Path.home() / ".cache" / "revise" / "jvm"), where  # not the clone's

    def cli(name: str, *args: str) -> str:
        run = CliRun(list(args), command=[revise], cwd=work, env=env, log=tmp_path / f"{name}.log")
        assert run.wait(RUN_TIMEOUT_S) == 0, f"revise {name}:\n{run.tail()}"
        return run.log()

    try:
        demo = cli("demo", "demo", "--events", "4000")
        cli("generate", "generate", "--topic", "wheel-in", "--events", "1000", "--keys", "10",
            "--seed", "1", "--bad-fraction", "0.02")
        run = cli("run", "run", "--input-topic", "wheel-in", "--changelog-topic", "wheel-out",
                  "--delta-path", str(work / "delta"), "--checkpoint", str(work / "checkpoint"),
                  "--query-id", "wheel", "--window", "tumbling:2s", "--grace", "1s", "--once")
    finally:
        CliRun(["broker", "stop"], command=[revise], cwd=work, env=env,
               log=tmp_path / "broker-stop.log").wait(120)

    assert "OK: demo finished" in demo, demo
    assert re.search(r"INFO revise done query_id=wheel batches=\d+ input_records=10\d\d ", run), run
    for name, output in (("demo", demo), ("run", run)):
        foreign = foreign_lines(output)
        assert not foreign, f"revise {name} printed lines not its own:\n" + "\n".join(foreign)
        written = log_file(output)
        assert written.parent == home / "logs" and SPARK_LOG4J.search(written.read_text()), name
    for classpath in ("kafka", "spark"):
        assert any((jvm / classpath).glob("*.jar")), f"no {classpath} jars resolved in {jvm}"
    assert any((jvm / "revise").glob("revise-jvm-*.jar")), "revise's jar not built from the wheel"

    changed = _run([str(python), "-c", RECORD_CHECK], 300, env=plain)
    assert not changed, f"installed files that no longer match their RECORD:\n{changed}"
    after = _clone_files()
    diff = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not diff, f"written into the clone: {diff[:20]}"
