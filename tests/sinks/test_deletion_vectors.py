"""Delta deletion vectors (``sinks.deletion_vectors``): the codec, and real readers and writers.

Oracles: ZeroMQ's Z85 test vector and a plain integer Z85; the protocol's descriptor example;
pyroaring's 32-bit bitmaps laid out by hand as the 64-bit format. Real systems: Spark (Delta
4.4) writes DVs that we read, byte for byte as we would write them; Spark and delta-rs read
the DVs we write (file and inline) in a table delta-rs wrote.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyroaring import BitMap

from sinks.deletion_vectors import (
    DV_FILE_PREFIX,
    DeletionVectorError,
    DvDescriptor,
    deserialize_rows,
    read_deletion_vector,
    serialize_rows,
    write_deletion_vectors,
    z85_decode,
    z85_encode,
)

MAGIC = struct.pack("<i", 1681511377)
Z85_ALPHABET = ("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                ".-:+=^!/*?&<>()[]{}@%$#")


def plain_z85(data: bytes) -> str:
    """Z85 the obvious way: each big-endian 32-bit word as 5 base-85 digits, most significant
    first."""
    out = []
    for i in range(0, len(data), 4):
        word = int.from_bytes(data[i:i + 4], "big")
        out.append("".join(Z85_ALPHABET[word // 85**k % 85] for k in (4, 3, 2, 1, 0)))
    return "".join(out)


def dv_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob(f"{DV_FILE_PREFIX}*.bin"))


# --- Z85 -----------------------------------------------------------------------------------


def test_z85_zeromq_test_vector() -> None:
    vector = bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    assert z85_encode(vector) == "HelloWorld"
    assert z85_decode("HelloWorld") == vector


def test_z85_round_trip_matches_the_plain_encoder() -> None:
    rng = np.random.default_rng(7)
    for data in [b"", bytes(4), b"\xff" * 8, rng.bytes(4), rng.bytes(400)]:
        text = z85_encode(data)
        assert text == plain_z85(data)
        assert len(text) == len(data) // 4 * 5
        assert z85_decode(text) == data


@pytest.mark.parametrize("text", ["abcd", "Hello Worl", "Hell\"World", "HelloWörld", "#####"])
def test_z85_decode_refuses_what_is_not_z85(text: str) -> None:
    with pytest.raises(DeletionVectorError, match="Z85"):
        z85_decode(text)


def test_z85_encode_needs_whole_words() -> None:
    with pytest.raises(DeletionVectorError, match="pad the data with 1 zero bytes"):
        z85_encode(b"abc")


# --- the data: magic number + portable 64-bit Roaring --------------------------------------

ROW_SETS = {
    "empty": np.array([], dtype=np.int64),
    "few, unsorted, repeated": np.array([9, 3, 3, 0, 65_536, 70_000], dtype=np.int32),
    "100k random": np.random.default_rng(3).integers(0, 10_000_000, 100_000),
    "a run": np.arange(5_000, 90_000, dtype=np.uint32),
    "beyond 2^32": np.array([1, 2**32, 2**32 + 7, 5 * 2**32 + 1, 2**63 - 1], dtype=np.uint64),
}


@pytest.mark.parametrize("name", list(ROW_SETS))
def test_rows_round_trip(name: str) -> None:
    rows = ROW_SETS[name]
    data = serialize_rows(rows)
    assert data[:4] == MAGIC
    back = deserialize_rows(data)
    assert back.dtype == np.uint64
    np.testing.assert_array_equal(back, np.unique(rows.astype(np.uint64)))


def test_data_is_the_portable_64_bit_layout() -> None:
    """Bucket count (int64 LE), then per bucket its key (uint32 LE) and a 32-bit bitmap."""
    rows = np.array([7, 9, 2**32 + 3, 3 * 2**32], dtype=np.uint64)
    expected = (MAGIC + struct.pack("<q", 3)
                + struct.pack("<I", 0) + BitMap([7, 9]).serialize()
                + struct.pack("<I", 1) + BitMap([3]).serialize()
                + struct.pack("<I", 3) + BitMap([0]).serialize())
    assert serialize_rows(rows) == expected
    assert serialize_rows(np.array([], dtype=np.int64)) == MAGIC + bytes(8)


def test_reads_empty_buckets() -> None:
    """A bucket with no rows (Delta's own writer can emit one below a used key) reads as none."""
    data = (MAGIC + struct.pack("<q", 2) + struct.pack("<I", 0) + BitMap().serialize()
            + struct.pack("<I", 1) + BitMap([4]).serialize())
    np.testing.assert_array_equal(deserialize_rows(data), [2**32 + 4])


@pytest.mark.parametrize("rows", [
    np.array([3, -1]),
    np.array([2**63], dtype=np.uint64),
    np.array([[1, 2]]),
    np.array([1.0, 2.0]),
])
def test_serialize_refuses_what_are_not_row_indexes(rows: Any) -> None:
    with pytest.raises(DeletionVectorError, match="row indexes"):
        serialize_rows(rows)


def test_deserialize_refuses_what_is_not_a_dv() -> None:
    good = serialize_rows(np.array([1, 5, 900]))
    with pytest.raises(DeletionVectorError, match="magic number"):
        deserialize_rows(b"\x00" + good[1:])
    with pytest.raises(DeletionVectorError, match="magic number"):
        deserialize_rows(good[:6])
    with pytest.raises(DeletionVectorError, match="Roaring"):
        deserialize_rows(good[:-3])
    with pytest.raises(DeletionVectorError, match="Roaring"):
        deserialize_rows(MAGIC + struct.pack("<q", 1) + b"\x00\x00\x00\x00garbage!")
    # The protocol's inline example ("wi5b=0000…") is in an older layout (magic 1681511376,
    # big-endian): Spark 4.2/Delta 4.4 and delta-rs 1.6 refuse it too.
    example = z85_decode("wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L")
    with pytest.raises(DeletionVectorError, match="magic number"):
        deserialize_rows(example)


# --- descriptors ---------------------------------------------------------------------------


def test_descriptor_action_round_trip_and_unique_id() -> None:
    file_dv = DvDescriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", 4, 40, 6)
    action = file_dv.to_action()
    assert action == {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
                      "offset": 4, "sizeInBytes": 40, "cardinality": 6}
    assert list(action) == ["storageType", "pathOrInlineDv", "offset", "sizeInBytes",
                            "cardinality"]
    assert DvDescriptor.from_action(json.loads(json.dumps(action))) == file_dv
    assert file_dv.unique_id == "uab^-aqEH.-t@S}K{vb[*k^@4"

    inline = DvDescriptor("i", "HelloWorld", None, 8, 2)
    assert "offset" not in inline.to_action()
    assert DvDescriptor.from_action(inline.to_action()) == inline
    assert inline.unique_id == "iHelloWorld"
    # a checkpoint's struct has the key, null; numpy integers are integers
    assert DvDescriptor.from_action({**inline.to_action(), "offset": None,
                                     "cardinality": np.int64(2)}) == inline


@pytest.mark.parametrize("change", [
    {"storageType": None},
    {"storageType": "x"},
    {"sizeInBytes": "40"},
    {"sizeInBytes": 40.0},
    {"cardinality": True},
    {"cardinality": -1},
    {"offset": -4},
    {"pathOrInlineDv": "tooShort"},
    {"pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k "},
    {"storageType": "i", "pathOrInlineDv": "HelloWorld"},  # an inline DV with an offset
])
def test_from_action_refuses_malformed_descriptors(change: dict[str, Any]) -> None:
    good = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 4,
            "sizeInBytes": 40, "cardinality": 6}
    with pytest.raises(DeletionVectorError):
        DvDescriptor.from_action({**good, **change})
    missing = dict(good)
    del missing["sizeInBytes"]
    with pytest.raises(DeletionVectorError, match="sizeInBytes"):
        DvDescriptor.from_action(missing)


# --- files ---------------------------------------------------------------------------------


def test_one_file_holds_every_dv_in_order(tmp_path: Path) -> None:
    rows = [np.array([0, 7, 14]), np.arange(0, 100_000, 3), np.array([], dtype=np.int64)]
    dvs = write_deletion_vectors(str(tmp_path), rows)
    [file] = dv_files(tmp_path)
    raw = file.read_bytes()
    assert raw[0] == 1  # format version
    offset = 1
    for dv, expected in zip(dvs, rows, strict=True):
        data = serialize_rows(expected)
        assert (dv.storage_type, dv.offset, dv.size_in_bytes) == ("u", offset, len(data))
        assert dv.cardinality == len(expected)
        assert file.name == f"{DV_FILE_PREFIX}{UUID(bytes=z85_decode(dv.path_or_inline_dv))}.bin"
        assert raw[offset:offset + 4] == struct.pack(">i", len(data))
        assert raw[offset + 4:offset + 4 + len(data)] == data
        np.testing.assert_array_equal(read_deletion_vector(str(tmp_path), dv), expected)
        offset += 4 + len(data) + 4
    assert len(raw) == offset
    assert {dv.path_or_inline_dv for dv in dvs} == {dvs[0].path_or_inline_dv}
    assert len(dvs[0].path_or_inline_dv) == 20  # no prefix
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_a_moved_table_keeps_its_dvs(tmp_path: Path) -> None:
    """``u`` descriptors are relative to the table's root: the folder can move."""
    rows = np.array([10, 20])
    (tmp_path / "a").mkdir()
    [dv] = write_deletion_vectors(str(tmp_path / "a"), [rows])
    (tmp_path / "a").rename(tmp_path / "b")
    np.testing.assert_array_equal(read_deletion_vector(str(tmp_path / "b"), dv), rows)


def test_no_rows_no_file(tmp_path: Path) -> None:
    assert write_deletion_vectors(str(tmp_path), []) == []
    assert list(tmp_path.iterdir()) == []


def test_uri_goes_through_the_object_store(tmp_path: Path) -> None:
    uri = tmp_path.as_uri()
    big = np.random.default_rng(5).integers(0, 2**40, 200_000)  # ~2 MB
    rows = [np.array([2, 4, 8]), big, np.array([1])]
    dvs = write_deletion_vectors(uri, rows, storage_options={})
    [file] = dv_files(tmp_path)
    assert file.stat().st_size > 2**20  # more than one 1 MiB write
    for dv, expected in zip(dvs, rows, strict=True):
        np.testing.assert_array_equal(read_deletion_vector(uri, dv), np.unique(expected))
        np.testing.assert_array_equal(read_deletion_vector(str(tmp_path), dv),
                                      np.unique(expected))


def test_prefix_and_absolute_path_descriptors(tmp_path: Path) -> None:
    """``u`` with the protocol's example prefix ``ab`` (UUID d2c639aa-…) is the file
    ``ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin``; ``p`` names the file."""
    rows = np.array([3, 4, 7, 11, 18, 29])
    [dv] = write_deletion_vectors(str(tmp_path), [rows])
    [written] = dv_files(tmp_path)
    (tmp_path / "ab").mkdir()
    moved = tmp_path / "ab" / f"{DV_FILE_PREFIX}d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    written.rename(moved)
    prefixed = DvDescriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", dv.offset, dv.size_in_bytes, 6)
    np.testing.assert_array_equal(read_deletion_vector(str(tmp_path), prefixed), rows)
    for location in (str(moved), moved.as_uri()):
        absolute = DvDescriptor("p", location, dv.offset, dv.size_in_bytes, 6)
        np.testing.assert_array_equal(read_deletion_vector("/elsewhere", absolute), rows)
    relative = DvDescriptor("p", f"ab/{moved.name}", dv.offset, dv.size_in_bytes, 6)
    with pytest.raises(DeletionVectorError, match="absolute path"):
        read_deletion_vector(str(tmp_path), relative)


def inline(rows: np.ndarray) -> DvDescriptor:
    """An inline descriptor: the data in Z85, zero-padded to whole words (``sizeInBytes`` says
    how many bytes are data)."""
    data = serialize_rows(rows)
    text = z85_encode(data + bytes(-len(data) % 4))
    return DvDescriptor("i", text, None, len(data), len(np.unique(rows)))


def test_inline_descriptor_reads_back() -> None:
    rows = np.array([5])
    dv = inline(rows)
    assert dv.size_in_bytes % 4 != 0  # the padding is exercised
    np.testing.assert_array_equal(read_deletion_vector("/nowhere", dv), rows)
    too_big = DvDescriptor("i", dv.path_or_inline_dv, None, dv.size_in_bytes + 8, 1)
    with pytest.raises(DeletionVectorError, match="fewer than its sizeInBytes"):
        read_deletion_vector("/nowhere", too_big)


def test_corrupt_file_or_wrong_descriptor_raises(tmp_path: Path) -> None:
    rows = np.arange(0, 5_000, 7)
    [dv] = write_deletion_vectors(str(tmp_path), [rows])
    [file] = dv_files(tmp_path)
    good = file.read_bytes()
    table = str(tmp_path)

    def corrupt(at: int) -> None:
        bad = bytearray(good)
        bad[at] ^= 0x10
        file.write_bytes(bytes(bad))

    corrupt(len(good) // 2)  # a byte of the bitmap
    with pytest.raises(DeletionVectorError, match="CRC-32"):
        read_deletion_vector(table, dv)
    corrupt(len(good) - 1)  # the checksum
    with pytest.raises(DeletionVectorError, match="CRC-32"):
        read_deletion_vector(table, dv)
    corrupt(3)  # the size field
    with pytest.raises(DeletionVectorError, match="size field"):
        read_deletion_vector(table, dv)
    file.write_bytes(good[:-2])
    with pytest.raises(DeletionVectorError, match="truncated"):
        read_deletion_vector(table, dv)

    file.write_bytes(good)
    np.testing.assert_array_equal(read_deletion_vector(table, dv), rows)
    fields = dv.to_action()
    with pytest.raises(DeletionVectorError, match="cardinality"):
        read_deletion_vector(table, DvDescriptor.from_action({**fields, "cardinality": 3}))
    with pytest.raises(DeletionVectorError):
        read_deletion_vector(table, DvDescriptor.from_action({**fields, "offset": 2}))
    file.unlink()
    with pytest.raises(FileNotFoundError):
        read_deletion_vector(table, dv)


# --- real readers and writers --------------------------------------------------------------


def log_actions(table: Path, version: int) -> list[dict[str, Any]]:
    path = table / "_delta_log" / f"{version:020d}.json"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.spark
@pytest.mark.delta
def test_reads_the_dv_spark_wrote(spark: Any, tmp_path: Path) -> None:
    table = tmp_path / "t"
    (spark.range(0, 1000).coalesce(1).write.format("delta")
     .option("delta.enableDeletionVectors", "true").save(str(table)))
    spark.sql(f"DELETE FROM delta.`{table}` WHERE id % 7 = 0")
    [add] = [a["add"] for a in log_actions(table, 1) if "add" in a]
    dv = DvDescriptor.from_action(add["deletionVector"])
    expected = np.arange(0, 1000, 7)  # ids are the row positions in the one file
    np.testing.assert_array_equal(read_deletion_vector(str(table), dv), expected)

    # Spark's file: the offset is the size field's position (after the version byte);
    # sizeInBytes counts the magic number and the bitmap, not the size field or checksum.
    assert (dv.storage_type, dv.offset, dv.cardinality) == ("u", 1, len(expected))
    [file] = dv_files(table)
    raw = file.read_bytes()
    assert raw[0] == 1
    assert len(raw) == 1 + 4 + dv.size_in_bytes + 4
    assert raw[1:5] == struct.pack(">i", dv.size_in_bytes)
    assert raw[5:5 + dv.size_in_bytes] == serialize_rows(expected)  # byte for byte ours


def commit_dvs(table: Path, dvs: dict[str, DvDescriptor], *,
               replaced: dict[str, DvDescriptor] | None = None) -> None:
    """Commit by hand what Spark's DELETE commits: per data file, a ``remove`` of it (with its
    old DV, if any) and an ``add`` of it with its new DV."""
    adds: dict[str, dict[str, Any]] = {}
    for log in sorted((table / "_delta_log").glob("*.json")):
        for action in log_actions(table, int(log.stem)):
            if "add" in action and "deletionVector" not in action["add"]:
                adds[action["add"]["path"]] = action["add"]
    version = max(int(p.stem) for p in (table / "_delta_log").glob("*.json")) + 1
    now_ms = int(time.time() * 1000)
    lines: list[dict[str, Any]] = [{"commitInfo": {"timestamp": now_ms, "operation": "DELETE",
                                                   "operationParameters": {}}}]
    for path, dv in dvs.items():
        old = adds[path]
        remove = {"path": path, "deletionTimestamp": now_ms, "dataChange": True,
                  "extendedFileMetadata": True, "partitionValues": {}, "size": old["size"]}
        if replaced and path in replaced:
            remove["deletionVector"] = replaced[path].to_action()
        stats = {**json.loads(old["stats"]), "tightBounds": False}
        add = {"path": path, "partitionValues": {}, "size": old["size"],
               "modificationTime": old["modificationTime"], "dataChange": True,
               "stats": json.dumps(stats), "deletionVector": dv.to_action()}
        lines += [{"remove": remove}, {"add": add}]
    with (table / "_delta_log" / f"{version:020d}.json").open("x") as f:
        f.write("".join(json.dumps(line) + "\n" for line in lines))


def visible_ids(spark: Any, table: Path) -> tuple[list[int], list[int]]:
    """The ids Spark and delta-rs read from the table, each sorted."""
    from deltalake import DeltaTable

    by_spark = sorted(r.id for r in spark.read.format("delta").load(str(table)).collect())
    by_rust = sorted(pa.table(DeltaTable(str(table)).scan()).column("id").to_pylist())
    return by_spark, by_rust


@pytest.mark.spark
@pytest.mark.delta
def test_spark_and_delta_rs_read_our_dvs(spark: Any, tmp_path: Path) -> None:
    from deltalake import DeltaTable, TableFeatures, write_deltalake

    table = tmp_path / "t"
    for start in (0, 1000):  # two data files, their DVs in one DV file
        write_deltalake(str(table), pa.table({"id": np.arange(start, start + 1000)}),
                        mode="append")
    DeltaTable(str(table)).alter.add_feature(TableFeatures.DeletionVectors,
                                            allow_protocol_versions_increase=True)
    files = [Path(uri).name for uri in DeltaTable(str(table)).file_uris()]
    ids = {p: pq.read_table(table / p).column("id").to_numpy() for p in files}
    paths = sorted(files, key=lambda p: int(ids[p][0]))  # ids 0…999, then 1000…1999
    deleted = {paths[0]: np.flatnonzero(ids[paths[0]] % 7 == 0),
               paths[1]: np.flatnonzero(ids[paths[1]] % 3 != 1)}

    dvs = write_deletion_vectors(str(table), [deleted[p] for p in paths])
    assert dvs[1].offset is not None and dvs[1].offset > 1
    commit_dvs(table, dict(zip(paths, dvs, strict=True)))
    expected = sorted(int(i) for p in paths for i in np.delete(ids[p], deleted[p]))
    assert len(expected) == 2000 - 143 - 666
    by_spark, by_rust = visible_ids(spark, table)
    assert by_spark == expected
    assert by_rust == expected

    # an inline DV (its data not a whole number of words) replacing the first file's
    one = np.array([5])
    dv = inline(one)
    assert dv.size_in_bytes % 4 != 0
    np.testing.assert_array_equal(read_deletion_vector(str(table), dv), one)
    commit_dvs(table, {paths[0]: dv}, replaced={paths[0]: dvs[0]})
    expected = sorted(np.delete(ids[paths[0]], one).tolist()
                      + np.delete(ids[paths[1]], deleted[paths[1]]).tolist())
    by_spark, by_rust = visible_ids(spark, table)
    assert by_spark == expected
    assert by_rust == expected

