"""The test files' order (tests/scheduling.py): longest recorded first, unrecorded before them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from scheduling import DURATIONS, FileSeconds, file_of, recorded_durations, slowest_first


def test_longest_recorded_file_first_and_unrecorded_files_before_all() -> None:
    files = ["t/a.py", "t/a.py", "t/b.py", "t/new.py", "t/c.py", "t/new2.py"]
    seconds = {"t/a.py": 5.0, "t/b.py": 300.0, "t/c.py": 40.0}
    assert slowest_first(files, seconds) == ["t/new.py", "t/new2.py", "t/b.py", "t/c.py", "t/a.py"]


def test_file_of_strips_the_test_and_its_parameters() -> None:
    assert file_of("tests/x/test_y.py::test_z[a::b]") == "tests/x/test_y.py"
    assert file_of("tests/x/test_y.py") == "tests/x/test_y.py"


@dataclass
class _Report:
    nodeid: str
    duration: float


def test_recorded_seconds_round_trip_through_the_file(tmp_path: Path) -> None:
    seconds = FileSeconds()
    for nodeid, d in [("t/a.py::x", 1.2), ("t/a.py::y", 2.0), ("t/b.py::z[1]", 0.5)]:
        seconds.add(_Report(nodeid, d))
    path = tmp_path / "d.json"
    seconds.write(path)
    assert recorded_durations(path) == {"t/a.py": 3.2, "t/b.py": 0.5}


def test_a_missing_or_malformed_table_orders_nothing(tmp_path: Path) -> None:
    assert recorded_durations(tmp_path / "none.json") == {}
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert recorded_durations(tmp_path / "bad.json") == {}


def test_the_recorded_table_names_only_files_that_exist() -> None:
    """A renamed or deleted test file leaves a stale entry: re-record the table."""
    root = Path(__file__).resolve().parents[1]
    table = json.loads(DURATIONS.read_text())
    assert table, "tests/durations.json is empty"
    assert [f for f in table if not (root / f).is_file()] == []
