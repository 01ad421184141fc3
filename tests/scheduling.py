"""The order of the test files: longest first, from the seconds each took in a recorded run.

``make test`` hands whole files to two pytest-xdist workers in collection order (``--dist
loadfile --no-loadscope-reorder``), and ``tests/conftest.py`` collects them in the order of
:func:`slowest_first`: the longest files start first and the short ones fill both workers up to
the end (longest processing time first). xdist's own order, by the number of tests in a file,
put the single-test chaos and crash files last, where one worker ran them alone.

``tests/durations.json`` holds each file's seconds (setup, call and teardown of its tests) from
a whole run: ``python -m pytest -n 2 --dist loadfile --record-durations tests/durations.json``.
A file it does not list runs first.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Protocol

DURATIONS = Path(__file__).with_name("durations.json")


class _Report(Protocol):
    nodeid: str
    duration: float


def file_of(nodeid: str) -> str:
    """The test file of a pytest node id (``a/test_b.py::test_c[1]`` → ``a/test_b.py``)."""
    return nodeid.split("::", 1)[0]


def slowest_first(files: list[str], seconds: dict[str, float]) -> list[str]:
    """The distinct ``files``, those without a recorded time first (in their order: a new file
    may be slow), then the others by recorded time, longest first."""
    distinct = list(dict.fromkeys(files))
    unknown = [f for f in distinct if f not in seconds]
    known = sorted((f for f in distinct if f in seconds), key=lambda f: -seconds[f])
    return unknown + known


def recorded_durations(path: Path = DURATIONS) -> dict[str, float]:
    """The seconds per file in ``path``; empty when it is missing or not such a table."""
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(table, dict):
        return {}
    return {str(f): float(s) for f, s in table.items() if isinstance(s, (int, float))}


class FileSeconds:
    """The seconds of each test file's reports in this run (setup, call, teardown)."""

    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def add(self, report: _Report) -> None:
        """Count one report's duration to its file."""
        self.seconds[file_of(report.nodeid)] += report.duration

    def write(self, path: Path) -> None:
        """Write the table to ``path`` as JSON, files sorted, seconds to 0.1 s."""
        table = {f: round(s, 1) for f, s in sorted(self.seconds.items())}
        path.write_text(json.dumps(table, indent=1) + "\n")
