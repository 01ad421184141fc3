"""The tree keeps its shape: no import cycles (imports inside functions and type-only ones
included), sinks know only revise's records, every subcommand module is registered on the
parser."""

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


def _imports(path: Path, known: set[str]) -> set[str]:
    """Modules of ours that ``path`` imports anywhere: at module level, inside functions and
    under ``TYPE_CHECKING`` (a type-only import still ties the two modules' designs)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        found.update(n for n in names if n in known)
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order, the first repeated), or None."""
    seen: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        seen[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if seen.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in seen and (found := visit(d)) is not None:
                return found
        stack.pop()
        seen[m] = 2
        return None

    for m in sorted(graph):
        if m not in seen and (found := visit(m)) is not None:
            return found
    return None


def _graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    graph = {m: _imports(p, set(mods)) - {m} for m, p in mods.items()}
    # A package's __init__ re-exporting its submodules is not a cycle of logic: drop the edges
    # from a package to its own submodules.
    return {m: {d for d in deps if not d.startswith(m + ".")} for m, deps in graph.items()}


def test_no_import_cycles_between_modules():
    graph = _graph(_modules())
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])
    assert len(graph) > 40  # the walk saw the whole tree


def test_a_cycle_through_a_function_or_type_only_import_is_found(tmp_path: Path):
    (tmp_path / "a.py").write_text("def f():\n    from b import g\n    return g\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\n"
                                   "if TYPE_CHECKING:\n    from a import f\ng = 1\n")
    (tmp_path / "c.py").write_text("import a\n")
    mods = {name: tmp_path / f"{name}.py" for name in ("a", "b", "c")}
    assert _cycle(_graph(mods)) == ["a", "b", "a"]
    (tmp_path / "b.py").write_text("g = 1\n")
    assert _cycle(_graph(mods)) is None


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


def test_the_module_map_of_architecture_md_is_the_tree():
    import re

    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = text.split("\n## Module map\n", 1)[1]
    named = set(re.findall(r"^\| `([\w/]+\.py)` \|", section, flags=re.MULTILINE))
    files = {p.relative_to(ROOT).as_posix() for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    assert named == files, {"not in the map": sorted(files - named),
                            "no such module": sorted(named - files)}
