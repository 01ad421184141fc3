"""The tree keeps its shape: no import cycles, sinks know only revise's records, every
subcommand module is registered on the parser."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("windows", "revise", "sinks")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _top_level_imports(path: Path, known: set[str]) -> set[str]:
    """Modules of ours imported at module level (not inside functions or TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in tree.body:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name in known:
                found.add(name)
    return found


def test_no_import_cycles_between_modules():
    mods = _modules()
    graph = {m: _top_level_imports(p, set(mods)) - {m} for m, p in mods.items()}
    # A package's __init__ re-exporting its submodules is not a cycle of logic: drop the edges
    # from a package to its own submodules.
    graph = {m: {d for d in deps if not d.startswith(m + ".")} for m, deps in graph.items()}
    seen: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        seen[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if seen.get(d) == 1:
                cycle = stack[stack.index(d):] + [d]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if d not in seen:
                visit(d)
        stack.pop()
        seen[m] = 2

    for m in sorted(graph):
        if m not in seen:
            visit(m)
    assert len(graph) > 40  # the walk saw the whole tree


def test_every_module_imports_in_a_fresh_interpreter():
    names = sorted(m for m in _modules() if m != "revise.__main__")
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\n"
    proc = subprocess.run([sys.executable, "-c", code, *names], cwd=ROOT, capture_output=True,
                          text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_the_operator_imports_without_pandas():
    """Spark's driver-side pre-init process for ``transformWithStateInPandas`` unpickles the
    operator, so it imports revise.spark.operator and the engine, on the first micro-batch's
    critical path; pandas (~0.4 s) waits until a batch is read.
    """
    code = ("import sys, pyspark.sql.streaming.transform_with_state_driver_worker, "
            "revise.spark.operator\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]"


def test_sinks_import_only_records_errors_and_vocab_of_revise():
    allowed = {"revise.records", "revise.errors", "revise.vocab"}
    mods = _modules()
    for name, path in mods.items():
        if not name.startswith("sinks"):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and \
                    node.module.split(".")[0] == "revise":
                assert node.module in allowed, (name, node.module)


def test_every_subcommand_module_is_registered_on_the_parser():
    import argparse

    from revise.cli import SUBCOMMANDS, build_parser

    # args and kafka are shared helpers of the subcommands, not subcommands
    files = {p.stem for p in (ROOT / "revise" / "cli").glob("*.py")} - {"__init__", "args", "kafka"}
    assert {m.__name__.rsplit(".", 1)[1] for m in SUBCOMMANDS} == files
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == files
    for name, parser in sub.choices.items():
        assert callable(parser.get_default("handler")), name
