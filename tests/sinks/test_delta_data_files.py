"""Data files written by the tasks, committed by the driver (``sinks.delta_files``).

Real Delta tables under ``tmp_path`` (created as ``DeltaTables.ensure`` creates them), real
delta-rs commits and reads; a real process killed with SIGKILL mid-write.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import CommitProperties, Transaction

from revise.records import REVISION_SCHEMA
from sinks.delta_files import (
    STRING_PREFIX,
    DataFile,
    DataFileError,
    commit_files,
    delta_stats,
    write_data_file,
)
from sinks.delta_tables import DeltaTables
from sinks.delta_txn import DeltaRoot

pytestmark = [pytest.mark.delta]

APP = "revise-q"


def revisions(n: int, *, batch_id: int = 0, start_ms: int = 0, key: str = "k",
              seed: int = 0) -> pa.Table:
    """``n`` revisions in ``revisions``' schema: keys ``<key>00000…``, windows from
    ``start_ms``, random aggregates, ``prev_*`` null on every third row."""
    rng = np.random.default_rng(seed)
    idx = np.arange(n, dtype=np.int64)
    given: dict[str, pa.Array] = {
        "query_id": pa.array(["q"] * n),
        "mode": pa.array(["revision"] * n),
        "key": pa.array([f"{key}{i:05d}" for i in range(n)]),
        "window_start_ms": pa.array(start_ms + idx * 10),
        "window_end_ms": pa.array(start_ms + idx * 10 + 10_000),
        "timing": pa.array(["EARLY"] * n),
        "batch_id": pa.array(np.full(n, batch_id, dtype=np.int64)),
    }
    cols = []
    for f in REVISION_SCHEMA:
        if f.name in given:
            cols.append(given[f.name])
        elif pa.types.is_boolean(f.type):
            cols.append(pa.array(idx % 2 == 0))
        elif pa.types.is_floating(f.type):
            values = rng.random(n)
            mask = (idx % 3 == 0) if f.nullable else None
            cols.append(pa.array(values, mask=mask))
        else:
            cols.append(pa.array(rng.integers(0, 1_000, n)).cast(f.type))
    return pa.Table.from_arrays(cols, schema=REVISION_SCHEMA)


@pytest.fixture()
def root(tmp_path: Path) -> DeltaRoot:
    """A Delta root with revise's four tables, empty."""
    DeltaTables(str(tmp_path / "delta")).ensure()
    return DeltaRoot(str(tmp_path / "delta"), None)


def _read(root: DeltaRoot, table: str = "revisions") -> pa.Table:
    rows = DeltaTable(root.table_path(table)).to_pyarrow_table()
    return rows.sort_by([("key", "ascending"), ("window_start_ms", "ascending")])


def _files(path: str) -> list[str]:
    """The data files a table's current version holds (paths relative to the table)."""
    return sorted(Path(uri).name for uri in DeltaTable(path).file_uris())


def _sorted(rows: pa.Table) -> pa.Table:
    return rows.sort_by([("key", "ascending"), ("window_start_ms", "ascending")])


def _commits(root: DeltaRoot, table: str = "revisions") -> list[dict[str, list[Any]]]:
    """The table's log entries after its creation: each commit's actions by kind."""
    log = Path(root.table_path(table)) / "_delta_log"
    out = []
    for path in sorted(log.glob("*.json"))[1:]:
        actions = [orjson.loads(line) for line in path.read_bytes().splitlines() if line]
        out.append({kind: [a[kind] for a in actions if kind in a] for kind in ("add", "txn")})
    return out


def test_a_data_file_record_round_trips_through_json(root: DeltaRoot) -> None:
    f = write_data_file(root.table_path("revisions"), revisions(5), prefix="b1-s0")
    assert DataFile.from_json(f.to_json()) == f
    assert f.path.startswith("part-b1-s0-") and f.path.endswith(".snappy.parquet")
    assert f.num_records == 5
    assert f.size == (Path(root.table_path("revisions")) / f.path).stat().st_size
    with pytest.raises(DataFileError, match="DataFile.to_json"):
        DataFile.from_json(b'{"path": "x"}')


def test_only_the_columns_that_are_not_floating_point_are_dictionary_encoded(
        root: DeltaRoot) -> None:
    import pyarrow.parquet as pq

    f = write_data_file(root.table_path("revisions"), revisions(500), prefix="b1-p0")
    meta = pq.ParquetFile(Path(root.table_path("revisions")) / f.path).metadata
    group = meta.row_group(0)
    coded = {group.column(i).path_in_schema: group.column(i).has_dictionary_page
             for i in range(group.num_columns)}
    floating = {x.name for x in REVISION_SCHEMA if pa.types.is_floating(x.type)}
    assert floating and not any(coded[name] for name in floating)
    assert all(coded[name] for name in ("query_id", "key", "timing", "window_start_ms"))


def test_written_rows_are_invisible_until_committed_and_equal_the_input_after(
        root: DeltaRoot) -> None:
    shards = [revisions(300, batch_id=7, key="a"), revisions(200, batch_id=7, key="b", seed=1)]
    files = [write_data_file(root.table_path("revisions"), rows, prefix=f"b7-s{i}")
             for i, rows in enumerate(shards)]

    assert _read(root).num_rows == 0
    assert _files(root.table_path("revisions")) == []

    assert commit_files(root, "revisions", APP, 7, files, REVISION_SCHEMA) > 0
    assert _read(root).equals(_sorted(pa.concat_tables(shards)))
    assert _files(root.table_path("revisions")) == sorted(f.path for f in files)
    assert DeltaTable(root.table_path("revisions")).transaction_version(APP) == 7
    [commit] = _commits(root)
    assert [(t["appId"], t["version"]) for t in commit["txn"]] == [(APP, 7)]


def test_a_replayed_batch_commits_nothing(root: DeltaRoot) -> None:
    rows = revisions(100, batch_id=3)
    first = write_data_file(root.table_path("revisions"), rows, prefix="b3-s0")
    assert commit_files(root, "revisions", APP, 3, [first], REVISION_SCHEMA) > 0
    # the replay writes the same rows to new files; a fresh driver commits them
    replay = write_data_file(root.table_path("revisions"), rows, prefix="b3-s0")
    again = DeltaRoot(root.path, None)
    assert commit_files(again, "revisions", APP, 3, [replay], REVISION_SCHEMA) == 0.0
    assert commit_files(again, "revisions", APP, 2, [replay], REVISION_SCHEMA) == 0.0

    assert _read(root).num_rows == 100
    assert [len(c["add"]) for c in _commits(root)] == [1]
    assert _files(root.table_path("revisions")) == [first.path]


def test_a_batch_without_files_commits_nothing(root: DeltaRoot) -> None:
    assert commit_files(root, "late", APP, 4, [], root.table("late").schema()) == 0.0
    assert _commits(root, "late") == []
    assert DeltaTable(root.table_path("late")).transaction_version(APP) is None


def test_the_statistics_are_those_delta_rs_writes(root: DeltaRoot, tmp_path: Path) -> None:
    rows = revisions(50, start_ms=1_000)
    mine = orjson.loads(delta_stats(rows))
    write_deltalake(str(tmp_path / "theirs"), rows)
    log = (tmp_path / "theirs" / "_delta_log" / f"{0:020d}.json").read_bytes().splitlines()
    [add] = [orjson.loads(line)["add"] for line in log if b'"add"' in line]
    theirs = orjson.loads(add["stats"])
    assert mine == theirs
    assert mine["minValues"]["window_start_ms"] == 1_000
    assert mine["nullCount"]["prev_sum"] == 17  # every third of 50 rows


def test_the_statistics_let_readers_skip_files(root: DeltaRoot) -> None:
    shards = [revisions(100, start_ms=s, key=k, batch_id=9, seed=i)
              for i, (s, k) in enumerate([(0, "a"), (100_000, "b"), (200_000, "c")])]
    files = [write_data_file(root.table_path("revisions"), rows, prefix=f"b9-s{i}")
             for i, rows in enumerate(shards)]
    commit_files(root, "revisions", APP, 9, files, REVISION_SCHEMA)
    table = DeltaTable(root.table_path("revisions"))
    dataset = table.to_pyarrow_dataset()

    late = ds.field("window_start_ms") >= 200_000
    assert [Path(f.path).name for f in dataset.get_fragments(filter=late)] == [files[2].path]
    key_b = ds.field("key") == "b00042"
    assert [Path(f.path).name for f in dataset.get_fragments(filter=key_b)] == [files[1].path]
    assert len(list(dataset.get_fragments(filter=ds.field("key") == "zzz"))) == 0

    got = table.to_pyarrow_table(filters=[("window_start_ms", ">=", 200_000)])
    assert _sorted(got).equals(_sorted(shards[2]))


def test_long_strings_timestamps_and_odd_floats_keep_their_files_findable(
        tmp_path: Path) -> None:
    schema = pa.schema([pa.field("s", pa.string()), pa.field("ts", pa.timestamp("us", "UTC")),
                        pa.field("ntz", pa.timestamp("us")), pa.field("day", pa.date32()),
                        pa.field("f", pa.float64()), pa.field("g", pa.float64()),
                        pa.field("raw", pa.binary())])
    path = str(tmp_path / "t")
    DeltaTable.create(path, schema=schema)
    long_max = "é" * 40 + "z"
    t0 = dt.datetime(2024, 1, 1, 0, 0, 0, 123_456, tzinfo=dt.UTC)
    t1 = t0 + dt.timedelta(microseconds=999)
    rows = pa.table({"s": ["a" * 100, "b", long_max], "ts": [t0, t1, t0],
                     "ntz": [t0.replace(tzinfo=None), t0.replace(tzinfo=None), None],
                     "day": [t0.date(), t0.date(), t0.date() + dt.timedelta(days=1)],
                     "f": [1.0, float("nan"), 2.0], "g": [1.0, float("inf"), None],
                     "raw": [b"x", None, b"y"]}, schema=schema)
    f = write_data_file(path, rows, prefix="x")
    stats = orjson.loads(f.stats)
    assert stats["minValues"] == {"s": "a" * STRING_PREFIX, "ts": "2024-01-01T00:00:00.123Z",
                                  "ntz": "2024-01-01 00:00:00.123", "day": "2024-01-01",
                                  "f": 1.0}
    assert stats["maxValues"] == {"s": "é" * 31 + "ê", "ts": "2024-01-01T00:00:00.124Z",
                                  "ntz": "2024-01-01 00:00:00.123", "day": "2024-01-02",
                                  "f": 2.0}
    assert stats["nullCount"] == {"s": 0, "ts": 0, "ntz": 1, "day": 0, "f": 0, "g": 1, "raw": 1}
    # delta-rs writes the same for the columns both bound (its strings are cut at 64 bytes)
    write_deltalake(str(tmp_path / "theirs"), rows)
    log = (tmp_path / "theirs" / "_delta_log" / f"{0:020d}.json").read_bytes().splitlines()
    [add] = [orjson.loads(line)["add"] for line in log if b'"add"' in line]
    theirs = orjson.loads(add["stats"])
    for bound in ("minValues", "maxValues"):
        for c in ("ts", "ntz", "day", "f"):
            assert stats[bound][c] == theirs[bound][c], (bound, c)

    commit_files(DeltaRoot(str(tmp_path), None), "t", APP, 0, [f], schema)
    dataset = DeltaTable(path).to_pyarrow_dataset()
    for probe in (ds.field("s") == long_max, ds.field("s") == "a" * 100,
                  ds.field("ts") == pa.scalar(t1, schema.field("ts").type),
                  ds.field("day") == pa.scalar(t0.date() + dt.timedelta(days=1), pa.date32()),
                  ds.field("f") >= 2.0):
        assert len(list(dataset.get_fragments(filter=probe))) == 1, probe
    for probe in (ds.field("s") > "ê", ds.field("f") > 2.0,
                  ds.field("ts") > pa.scalar(t1 + dt.timedelta(milliseconds=1),
                                             schema.field("ts").type)):
        assert len(list(dataset.get_fragments(filter=probe))) == 0, probe
    assert dataset.to_table(filter=ds.field("s") == long_max).num_rows == 1


def test_rows_that_do_not_fit_are_refused(root: DeltaRoot) -> None:
    rows = revisions(3)
    columns = rows.columns
    columns[2] = pa.chunked_array([pa.array(["a", None, "c"])])
    holes = pa.Table.from_arrays(columns, schema=REVISION_SCHEMA)
    with pytest.raises(DataFileError, match="'key'.*not nullable but 1 of 3"):
        write_data_file(root.table_path("revisions"), holes, prefix="b0")
    with pytest.raises(DataFileError, match="prefix 'b0/s1'"):
        write_data_file(root.table_path("revisions"), rows, prefix="b0/s1")
    f = write_data_file(root.table_path("revisions"), rows, prefix="b0")
    other = REVISION_SCHEMA.remove(REVISION_SCHEMA.get_field_index("est_sum"))
    with pytest.raises(DataFileError, match="write the files in the table's schema"):
        commit_files(root, "revisions", APP, 0, [f], other)
    assert _commits(root) == []


def test_a_uri_is_written_through_the_object_store(root: DeltaRoot) -> None:
    rows = revisions(40, batch_id=2)
    f = write_data_file(f"file://{root.table_path('revisions')}", rows, prefix="b2-s0")
    assert (Path(root.table_path("revisions")) / f.path).stat().st_size == f.size
    commit_files(root, "revisions", APP, 2, [f], REVISION_SCHEMA)
    assert _read(root).equals(_sorted(rows))


_KILLED_WRITER = """
import os, signal, sys
import pyarrow as pa
from sinks.delta_files import write_data_file
from tests.sinks.test_delta_data_files import revisions

def die(fd):  # the file is written, not yet durable nor renamed
    os.kill(os.getpid(), signal.SIGKILL)

os.fsync = die
write_data_file(sys.argv[1], revisions(20_000), prefix="b5-s0")
"""


def test_a_writer_killed_mid_write_leaves_nothing_in_the_table(root: DeltaRoot) -> None:
    folder = Path(root.table_path("revisions"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(folder)], env=env,
                          capture_output=True, timeout=120, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    [tmp] = [p for p in folder.iterdir() if p.is_file()]
    assert tmp.name.startswith(".part-b5-s0-") and tmp.name.endswith(".tmp")
    with tmp.open("r+b") as f:  # and torn, as a power loss would leave it
        f.truncate(tmp.stat().st_size // 2)

    rows = revisions(10, batch_id=5, key="z")
    done = write_data_file(str(folder), rows, prefix="b5-s0")
    commit_files(root, "revisions", APP, 5, [done], REVISION_SCHEMA)
    assert _files(str(folder)) == [done.path]
    assert _read(root).equals(_sorted(rows))


def test_a_stale_writer_of_the_same_batch_loses_the_commit(root: DeltaRoot) -> None:
    path = root.table_path("revisions")
    stale = DeltaTable(path)  # a zombie's snapshot, before the batch is in
    mine = write_data_file(path, revisions(10, batch_id=6), prefix="b6-s0")
    commit_files(root, "revisions", APP, 6, [mine], REVISION_SCHEMA)
    theirs = write_data_file(path, revisions(10, batch_id=6), prefix="b6-s0")
    props = CommitProperties(app_transactions=[Transaction(APP, 6)])
    with pytest.raises(CommitFailedError, match="Concurrent transaction"):
        stale.create_write_transaction([theirs.add_action()], mode="append",
                                       schema=REVISION_SCHEMA, commit_properties=props)
    assert _read(root).num_rows == 10


def test_two_drivers_racing_each_batch_leave_it_in_once(root: DeltaRoot) -> None:
    path = root.table_path("revisions")
    batches = 10
    drivers = [DeltaRoot(root.path, None), DeltaRoot(root.path, None)]
    with ThreadPoolExecutor(2) as pool:
        for b in range(batches):
            files = [write_data_file(path, revisions(25, batch_id=b, seed=b),
                                     prefix=f"b{b}-w{w}") for w in range(2)]
            start = threading.Barrier(2)

            def race(w: int, b: int = b, files: list[DataFile] = files,
                     start: threading.Barrier = start) -> float:
                start.wait()
                return commit_files(drivers[w], "revisions", APP, b, [files[w]],
                                    REVISION_SCHEMA)

            took = [f.result() for f in [pool.submit(race, w) for w in range(2)]]
            assert took.count(0.0) <= 1  # at most one of them found it done at once

    got = _read(root)
    assert got.num_rows == 25 * batches
    counts = pc.value_counts(got["batch_id"]).to_pylist()
    assert sorted((c["values"], c["counts"]) for c in counts) == [(b, 25) for b in range(batches)]
    assert [len(c["add"]) for c in _commits(root)] == [1] * batches
