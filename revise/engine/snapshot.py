"""The engine's snapshot: its whole state as bytes of one Arrow IPC stream.

No pickled objects; stamped with a format version and a fingerprint of the config that gives
the state its meaning (:func:`state_config`), so a changed window, grace, aggregate set or mode
is refused (:class:`~revise.errors.StateSchemaMismatch`) instead of silently reusing old state.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from revise.config import EngineConfig
from revise.engine.aggplan import AggPlan, Sketches
from revise.engine.batch import IntArray
from revise.engine.state import NO_SEAL, KeyTable, LastEmitted, WindowTable, unique_sorted
from revise.errors import StateSchemaMismatch
from windows import AggregateSet, State
from windows.completeness import HISTOGRAM_TAG, DelayHistogram
from windows.sketches import EncodedSketch

__all__ = [
    "COMPRESS_ABOVE_BYTES",
    "SNAPSHOT_FORMAT",
    "Snapshot",
    "decode_snapshot",
    "encode_snapshot",
    "state_config",
]

SNAPSHOT_FORMAT = 4
"""Version of the snapshot layout; bumped on any incompatible change.

2 added the sketch columns of ``FN(FIELD)`` aggregates; 4 the arrival-delay histogram the
revisions' ``completeness`` is learned from, and the last-emitted columns an emit policy keeps
(``last_*``, :class:`LastEmitted`). A format-1 or -2 snapshot (no policy, same columns
otherwise) is still read, under the same fingerprint check (which refuses it to an engine with
an emit policy), as having learned no delays yet."""

_READABLE_FORMATS = ("1", "2", str(SNAPSHOT_FORMAT))

_ZSTD_IPC = pa.ipc.IpcWriteOptions(compression="zstd")
_PLAIN_IPC = pa.ipc.IpcWriteOptions()
COMPRESS_ABOVE_BYTES = 64 * 1024
"""A snapshot whose columns hold more than this is zstd-compressed: ~3x fewer bytes through
Spark and into the state store (7.9 MB → 2.7 MB at 87k windows, +4 ms to write and read);
below it, zstd's fixed cost per buffer (~0.3 ms a snapshot) would outweigh the bytes saved.
Readers decompress on their own, so either form (and an earlier version's) reads."""

_I64 = np.int64


def state_config(config: EngineConfig, aggs: AggregateSet) -> dict[str, Any]:
    """What gives stored state its meaning: window, grace, aggregate tags, mode, emit policy.

    An emit policy adds ``"emit_policy": "on"`` (the state then holds each window's last
    emitted revision); its thresholds are not recorded: they may change on a restart.
    """
    out: dict[str, Any] = {"window": str(config.window), "grace_ms": config.grace_ms,
                           "aggs": list(aggs.tags), "mode": config.mode}
    if config.emit_policy is not None:
        out["emit_policy"] = "on"
    return out


def _fingerprint(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(slots=True)
class Snapshot:
    """An engine's whole state, as :func:`encode_snapshot` writes and :func:`decode_snapshot` reads.

    Attributes:
        keys: The key table (ranks of the keys of ``table``).
        table: The open windows.
        watermark_ms: The largest watermark the engine was given (ms).
        max_ts_ms: Max accepted event time so far (ms; -1: none).
        sealed_ms: Windows starting at or before this were closed by close_all (ms).
        delays: Arrival delays learned so far (``completeness``).
    """

    keys: KeyTable
    table: WindowTable
    watermark_ms: int
    max_ts_ms: int
    sealed_ms: int
    delays: DelayHistogram = field(default_factory=DelayHistogram)


def encode_snapshot(snap: Snapshot, config: dict[str, Any], aggs: AggregateSet) -> bytes:
    """The state as bytes: one Arrow IPC stream, no pickled objects.

    Layout: one record batch (zstd-compressed above :data:`COMPRESS_ABOVE_BYTES`), one row
    per open window, columns ``key`` (dictionary of the live keys, int32 indices), ``start``,
    ``end``, ``rev``, ``n_late``, ``max_late`` (int64) and one column per aggregate state column
    (``count`` int64, ``sum``/``min``/``max`` float64, …); schema metadata ``revise.format``
    (:data:`SNAPSHOT_FORMAT`), ``revise.fingerprint``, ``revise.config`` (JSON, ``config``),
    ``revise.watermark_ms``, ``revise.max_ts_ms``, ``revise.sealed_ms``, and the delay
    histogram: ``revise.delays`` (JSON ``[[bin, count], …]`` of its non-empty bins) under
    ``revise.delays.tag`` (:data:`~windows.completeness.HISTOGRAM_TAG`). Each sketch
    ``NAME`` (``q:FIELD``, ``d:FIELD``) adds ``sk_NAME_slots`` (large_list<int64>) and
    ``sk_NAME_values`` (large_list<int64>, uint8 for distinct), one list per window, and its
    version tag in ``revise.sketch.NAME``. Under an emit policy (:class:`LastEmitted`) the
    last emitted revision of each window follows: ``last_wm`` (int64 ms), ``last_col_C`` per
    state column and ``last_sk_NAME_slots`` / ``last_sk_NAME_values`` per sketch.
    """
    st = snap.table
    live = unique_sorted(st.key)
    idx = np.searchsorted(live, st.key).astype(np.int32)
    keys = pa.DictionaryArray.from_arrays(
        pa.array(idx, type=pa.int32()), pa.array(snap.keys.keys[live], type=pa.string()))
    arrays: list[pa.Array] = [keys]
    names = ["key"]
    for name in ("start", "end", "rev", "n_late", "max_late"):
        arrays.append(pa.array(getattr(st, name)))
        names.append(name)
    tags = _append_state(aggs, st.cols, st.sketches, "", arrays, names)
    meta: dict[str, str] = {f"revise.sketch.{name}": tag for name, tag in tags.items()}
    if st.last is not None:
        _encode_last(st.last, aggs, arrays, names)
    meta |= {
        "revise.format": str(SNAPSHOT_FORMAT),
        "revise.fingerprint": _fingerprint(config),
        "revise.config": json.dumps(config, sort_keys=True),
        "revise.watermark_ms": str(snap.watermark_ms),
        "revise.max_ts_ms": str(snap.max_ts_ms),
        "revise.sealed_ms": str(snap.sealed_ms),
        "revise.delays": json.dumps(snap.delays.sparse(), separators=(",", ":")),
        "revise.delays.tag": HISTOGRAM_TAG,
    }
    rb = pa.RecordBatch.from_arrays(arrays, names=names)
    rb = rb.replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    options = _ZSTD_IPC if rb.nbytes > COMPRESS_ABOVE_BYTES else _PLAIN_IPC
    with pa.ipc.new_stream(sink, rb.schema, options=options) as writer:
        writer.write_batch(rb)
    return bytes(sink.getvalue().to_pybytes())


def decode_snapshot(snapshot: bytes, config: dict[str, Any], aggs: AggregateSet) -> Snapshot:
    """Read what :func:`encode_snapshot` wrote, for an engine whose state config is ``config``.

    Raises:
        StateSchemaMismatch: The bytes are not a snapshot, have another format version, or
            were written under another state config.
    """
    try:
        table = pa.ipc.open_stream(pa.py_buffer(snapshot)).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        msg = f"engine snapshot is not a revise state snapshot ({e}); start from empty state"
        raise StateSchemaMismatch(msg) from e
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    fmt = meta.get("revise.format")
    if fmt not in _READABLE_FORMATS:
        msg = (
            f"engine snapshot has format {fmt!r}, this engine reads "
            f"{' and '.join(_READABLE_FORMATS)}; "
            "restart with a new checkpoint (or the revise version that wrote it)"
        )
        raise StateSchemaMismatch(msg)
    if meta.get("revise.fingerprint") != _fingerprint(config):
        msg = (
            f"engine snapshot was written for {meta.get('revise.config')}, this engine "
            f"runs {json.dumps(config, sort_keys=True)}; restart with the "
            "original --window/--grace/--aggs/--mode (and with an --emit-min-change or "
            "--emit-every exactly when the original had one), or with a new checkpoint and "
            "query id"
        )
        raise StateSchemaMismatch(msg)
    has_last = "last_wm" in table.column_names
    snap = Snapshot(KeyTable(), WindowTable.empty(aggs, last=has_last),
                    int(meta["revise.watermark_ms"]),
                    int(meta.get("revise.max_ts_ms", "-1")),
                    int(meta.get("revise.sealed_ms", str(NO_SEAL))), _decode_delays(meta))
    if table.num_rows == 0:
        return snap
    table = table.combine_chunks()
    key_col = table.column("key").chunk(0)
    snap.keys = KeyTable(np.asarray(key_col.dictionary.to_numpy(zero_copy_only=False),
                                    dtype=object))
    cols = {c.name: np.array(table.column(f"col_{c.name}").to_numpy(), dtype=c.dtype)
            for c in aggs.columns}

    def i64(name: str) -> IntArray:
        return np.array(table.column(name).to_numpy(), dtype=_I64)

    sketches = _decode_sketches(table, meta, aggs) if isinstance(aggs, AggPlan) else {}
    snap.table = WindowTable(np.asarray(key_col.indices.to_numpy(), dtype=_I64), i64("start"),
                             i64("end"), cols, i64("rev"), i64("n_late"), i64("max_late"),
                             sketches)
    if has_last:
        last_cols = {c.name: np.array(table.column(f"last_col_{c.name}").to_numpy(),
                                      dtype=c.dtype) for c in aggs.columns}
        last_sk = (_decode_sketches(table, meta, aggs, prefix="last_sk_")
                   if isinstance(aggs, AggPlan) else {})
        snap.table.last = LastEmitted(last_cols, last_sk, i64("last_wm"))
    return snap


def _encode_last(last: LastEmitted, aggs: AggregateSet, arrays: list[pa.Array],
                 names: list[str]) -> None:
    """Append the ``last_*`` columns of :func:`encode_snapshot` to ``arrays`` / ``names``."""
    arrays.append(pa.array(last.watermark_ms))
    names.append("last_wm")
    _append_state(aggs, last.cols, last.sketches, "last_", arrays, names)


def _append_state(aggs: AggregateSet, cols: State, sketches: Sketches, prefix: str,
                  arrays: list[pa.Array], names: list[str]) -> dict[str, str]:
    """Append the state's columns to ``arrays`` / ``names``; each sketch's version tag by name.

    ``{prefix}col_C`` per state column, then ``{prefix}sk_NAME_slots`` and
    ``{prefix}sk_NAME_values`` per sketch.
    """
    for c in aggs.columns:
        arrays.append(pa.array(cols[c.name]))
        names.append(f"{prefix}col_{c.name}")
    tags: dict[str, str] = {}
    if isinstance(aggs, AggPlan):
        for name, t in sketches.items():
            enc = aggs.sketch(name).encode(t)
            offsets = pa.array(enc.offsets, type=pa.int64())
            arrays.append(pa.LargeListArray.from_arrays(offsets, pa.array(enc.slots)))
            arrays.append(pa.LargeListArray.from_arrays(offsets, pa.array(enc.values)))
            names += [f"{prefix}sk_{name}_slots", f"{prefix}sk_{name}_values"]
            tags[name] = enc.tag
    return tags


def _decode_delays(meta: dict[str, str]) -> DelayHistogram:
    """The delay histogram of a snapshot (empty for formats 1 and 2, which had none).

    Raises:
        StateSchemaMismatch: It was written with another bin layout, or is corrupt.
    """
    if meta.get("revise.format") in ("1", "2"):
        return DelayHistogram()
    tag = meta.get("revise.delays.tag")
    if tag != HISTOGRAM_TAG:
        msg = (f"engine snapshot's delay histogram has tag {tag!r}, this engine reads "
               f"{HISTOGRAM_TAG!r}; restart with a new checkpoint (or the revise version that "
               "wrote it)")
        raise StateSchemaMismatch(msg)
    try:
        return DelayHistogram.from_sparse(json.loads(meta["revise.delays"]))
    except (KeyError, ValueError, TypeError) as e:
        msg = (f"engine snapshot's delay histogram cannot be read ({e}); restart with a new "
               "checkpoint (or the revise version that wrote it)")
        raise StateSchemaMismatch(msg) from e


def _decode_sketches(table: pa.Table, meta: dict[str, str], aggs: AggPlan,
                     prefix: str = "sk_") -> Sketches:
    """The sketch columns of a snapshot, checked by their kernels.

    Raises:
        StateSchemaMismatch: A sketch column is missing, has another tag, or is corrupt.
    """
    out: Sketches = {}
    for name in aggs.sketches:
        try:
            slots = table.column(f"{prefix}{name}_slots").chunk(0)
            values = table.column(f"{prefix}{name}_values").chunk(0)
            offsets = slots.offsets.to_numpy()
            lo, hi = int(offsets[0]), int(offsets[-1])
            enc = EncodedSketch(meta.get(f"revise.sketch.{name}", "?"), offsets - lo,
                                slots.values.to_numpy()[lo:hi], values.values.to_numpy()[lo:hi])
            out[name] = aggs.sketch(name).decode(enc)
        except (KeyError, ValueError) as e:
            msg = (f"engine snapshot's sketch {name!r} cannot be read ({e}); restart with a new "
                   "checkpoint (or the revise version that wrote it)")
            raise StateSchemaMismatch(msg) from e
    return out
