"""The files of the Delta tables over an unbounded run (delta-rs).

The history tables' compaction: a file or two per micro-batch would be ~170,000 a day.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

import sinks.delta_layout as delta_layout
from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA, REVISION_SCHEMA
from revise.vocab import TABLE_NAMES
from sinks.delta_layout import (
    DELTA_LOG_RETENTION_MS,
    LOG_RETENTION_KEY,
    log_retention_ms,
    log_retention_value,
)
from sinks.delta_tables import DeltaTables

pytestmark = [pytest.mark.delta]

KEYS = 1_000
WINDOW_MS = 10_000


def _revisions(starts: list[int], revision: int, final: bool, rng: np.random.Generator
               ) -> pa.Table:
    """One revision per key and window start; random (incompressible) aggregates."""
    n = len(starts) * KEYS
    given = {
        "query_id": pa.array(["q"] * n),
        "key": pa.array(np.tile([f"k{i:05d}" for i in range(KEYS)], len(starts))),
        "window_start_ms": pa.array(np.repeat(np.array(starts, dtype=np.int64), KEYS)),
        "revision": pa.array(np.full(n, revision, dtype=np.int64)),
        "is_final": pa.array(np.full(n, final)),
        "retracted": pa.array(np.zeros(n, dtype=bool)),
    }
    given["window_end_ms"] = pc.add(given["window_start_ms"], WINDOW_MS)
    cols = []
    for f in REVISION_SCHEMA:
        if f.name in given:
            cols.append(given[f.name])
        elif pa.types.is_floating(f.type):
            cols.append(pa.array(rng.random(n)))
        elif pa.types.is_integer(f.type):
            cols.append(pa.array(rng.integers(0, 2**40, n)))
        elif pa.types.is_boolean(f.type):
            cols.append(pa.array(np.zeros(n, dtype=bool)))
        else:
            cols.append(pa.array(["EARLY"] * n))
    return pa.Table.from_arrays([c.cast(f.type) for c, f in zip(cols, REVISION_SCHEMA,
                                                                strict=True)],
                                schema=REVISION_SCHEMA)


def test_history_tables_are_compacted_in_the_background_without_changing_a_row(
        tmp_path, monkeypatch):
    monkeypatch.setattr(delta_layout, "COMPACT_HISTORY_EVERY", 10)
    tables = DeltaTables(str(tmp_path)).ensure()
    rng = np.random.default_rng(2)
    late, dead = LATE_SCHEMA.empty_table(), DEAD_LETTER_SCHEMA.empty_table()
    written = []
    for b in range(25):
        rev = _revisions([b * WINDOW_MS], 0, False, rng).slice(0, 50)
        written.append(rev)
        tables.write_batch("q", b, rev, late, dead)
        tables.flush()  # waits for a running compaction too: each one due then runs
    history = DeltaTable(tables.table_path("revisions"))
    ops = [op["operation"] for op in history.history()]
    assert ops.count("OPTIMIZE") == 2, ops  # after appends 10 and 20
    assert len(history.file_uris()) <= 7, len(history.file_uris())  # 25 appends: 2 bins + 5
    got = history.to_pyarrow_table().sort_by([("window_start_ms", "ascending"),
                                              ("key", "ascending")])
    want = pa.concat_tables(written).sort_by([("window_start_ms", "ascending"),
                                              ("key", "ascending")])
    assert got.equals(want.cast(got.schema))
    # Replays are still skipped: the app transaction survives the compactions.
    version = history.version()
    tables.write_batch("q", 3, written[3], late, dead)
    assert DeltaTable(tables.table_path("revisions")).version() == version
    # Time travel still reads a version before the compactions.
    assert DeltaTable(tables.table_path("revisions"), version=5).to_pyarrow_table().num_rows == 250


@pytest.mark.parametrize("committed", [True, False], ids=["after-commit", "before-commit"])
def test_a_log_file_gone_under_a_commit_is_retried_and_written_once(
        tmp_path, monkeypatch, rev_table, make_revision, committed):
    """delta-rs raises FileNotFoundError when a log file goes away under a write: after the
    commit, when its expired-log cleanup races the history compaction's deleting the same
    file (seen with a short ``delta.logRetentionDuration``, ``benchmarks.bench_delta_log``).
    The commit re-reads the table: the batch lands once either way."""
    import deltalake

    tables = DeltaTables(str(tmp_path)).ensure()
    real, calls = deltalake.DeltaTable.create_write_transaction, []

    def flaky(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            if committed:
                real(self, *args, **kwargs)
            raise FileNotFoundError("Object at location _delta_log/00000000000000000000.json "
                                    "not found")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(deltalake.DeltaTable, "create_write_transaction", flaky)
    rows = rev_table([make_revision(k, 0, 10_000, 0) for k in ("a", "b")])
    tables.write_batch("q", 0, rows, LATE_SCHEMA.empty_table(), DEAD_LETTER_SCHEMA.empty_table())
    assert len(calls) == (1 if committed else 2)  # re-read; written again only if it was not
    revisions = DeltaTable(tables.table_path("revisions"))
    assert revisions.to_pyarrow_dataset().count_rows() == 2
    assert revisions.transaction_version("revise-q") == 0
    assert tables.last_timings is not None and tables.last_timings.revisions > 0


def test_a_log_retention_is_set_on_every_table_at_start_and_kept(tmp_path):
    six_hours = 6 * 3_600_000
    # New tables are created with it: no commit besides the creation (and latest's deletion
    # vectors, sinks.latest_merge).
    new = DeltaTables(str(tmp_path / "new"), log_retention_ms=six_hours).ensure()
    for name in TABLE_NAMES:
        table = DeltaTable(new.table_path(name))
        assert table.metadata().configuration[LOG_RETENTION_KEY] == "interval 6 hours", name
        assert table.version() == (1 if name == "latest" else 0), name

    # Tables of a run without the option get it at the next start that gives it, once.
    root = str(tmp_path / "old")
    DeltaTables(root).ensure()
    assert all(LOG_RETENTION_KEY not in DeltaTable(f"{root}/{n}").metadata().configuration
               for n in TABLE_NAMES)
    DeltaTables(root, log_retention_ms=six_hours).ensure()
    versions = {n: DeltaTable(f"{root}/{n}").version() for n in TABLE_NAMES}
    once = {n: 2 if n == "latest" else 1 for n in TABLE_NAMES}
    assert versions == once
    DeltaTables(root, log_retention_ms=six_hours).ensure()
    DeltaTables(root).ensure()  # without the option: each table's value is kept
    for name in TABLE_NAMES:
        table = DeltaTable(f"{root}/{name}")
        assert table.version() == once[name], name
        assert table.metadata().configuration[LOG_RETENTION_KEY] == "interval 6 hours", name
    # Another value replaces it.
    DeltaTables(root, log_retention_ms=90_000).ensure()
    assert (DeltaTable(f"{root}/late").metadata().configuration[LOG_RETENTION_KEY]
            == "interval 90 seconds")


def test_the_longest_log_retention_of_the_tables(tmp_path):
    tables = DeltaTables(str(tmp_path)).ensure()
    assert tables.longest_log_retention_ms() == DELTA_LOG_RETENTION_MS  # Delta's default
    tables = DeltaTables(str(tmp_path), log_retention_ms=3_600_000).ensure()
    assert tables.longest_log_retention_ms() == 3_600_000
    DeltaTable(tables.table_path("late")).alter.set_table_properties(
        {LOG_RETENTION_KEY: "interval 2 days"})
    assert tables.longest_log_retention_ms() == 2 * 86_400_000
    DeltaTable(tables.table_path("late")).alter.set_table_properties(
        {LOG_RETENTION_KEY: "interval 1 day 2 hours"})
    assert tables.longest_log_retention_ms() is None  # not read: the user's


@pytest.mark.parametrize("value, ms", [
    ("interval 1 days", 86_400_000), ("interval 36 hours", 129_600_000),
    ("interval 90 minutes", 5_400_000), ("interval 61 seconds", 61_000),
    ("interval 60500 milliseconds", 60_500)])
def test_log_retention_value_is_in_its_largest_whole_unit(value, ms):
    assert log_retention_value(ms) == value
    assert log_retention_ms(value) == ms  # and reads back


@pytest.mark.parametrize("retention_ms", [3_600_000, None], ids=["1h", "default"])
def test_commit_files_past_the_retention_go_at_the_next_checkpoint(
        tmp_path, rev_table, make_revision, retention_ms):
    """What the option is for: at each Delta checkpoint (``revisions``: every 20 commits)
    delta-rs deletes the commit files older than the retention that come before a checkpoint
    itself older than it; the table still reads whole and still skips a replay."""
    tables = DeltaTables(str(tmp_path), log_retention_ms=retention_ms).ensure()
    late, dead = LATE_SCHEMA.empty_table(), DEAD_LETTER_SCHEMA.empty_table()

    def write(batch: int) -> None:
        rows = rev_table([make_revision(f"k{batch}", 0, 10_000, 0)])
        tables.write_batch("q", batch, rows, late, dead)

    for b in range(21):  # versions 1..21 of revisions; version 19 writes a checkpoint
        write(b)
    log_dir = Path(tables.table_path("revisions")) / "_delta_log"
    assert (log_dir / f"{19:020d}.checkpoint.parquet").exists()
    two_hours_ago = time.time() - 7_200
    for f in log_dir.glob("0*"):
        if int(f.name[:20]) <= 19:
            os.utime(f, (two_hours_ago, two_hours_ago))
    for b in range(21, 40):  # versions 22..40; version 39 writes the next checkpoint
        write(b)
    tables.flush()
    kept = sorted(int(f.name[:20]) for f in log_dir.glob("*.json"))
    if retention_ms is None:
        assert kept == list(range(41))  # Delta's 30 days keep them all
    else:
        assert kept == list(range(19, 41))  # before the expired checkpoint: gone
    revisions = DeltaTable(tables.table_path("revisions"))
    assert revisions.to_pyarrow_dataset().count_rows() == 40
    assert revisions.transaction_version("revise-q") == 39
    write(3)  # a replay is still skipped: the app transaction is in the checkpoint
    assert DeltaTable(tables.table_path("revisions")).version() == revisions.version()


def test_bench_delta_log_runs_with_a_log_retention(capsys):
    from benchmarks import bench_delta_log

    assert bench_delta_log.main(["--commits", "25", "--rows", "10", "--log-retention", "1h"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "25 appends of 10 revisions to revisions, back to back; log retention 1h"
    files = int(lines[-1].split("log_files=")[1].split()[0])
    assert lines[-1].startswith("commits=    25") and files >= 26, lines  # nothing expired yet
