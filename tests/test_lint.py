"""The project's own checks run with the tests: ruff (docstring, error-message rules) and mypy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *cmd], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False)


def test_ruff_clean() -> None:
    proc = _run("ruff", "check", "revise", "windows", "sinks", "tests", "benchmarks")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_clean() -> None:
    proc = _run("mypy")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_checks_are_the_strict_ones() -> None:
    """mypy runs strict and reports stale ignores; ruff reports a ``noqa`` it does not need
    (RUF100: also one naming a rule it does not run), so no suppression outlives its reason."""
    import tomllib

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    assert conf["mypy"]["strict"] is True
    assert conf["mypy"]["warn_unused_ignores"] is True
    assert {"revise", "windows", "sinks"} <= set(conf["mypy"]["files"])
    assert "RUF100" in conf["ruff"]["lint"]["select"]
