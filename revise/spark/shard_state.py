"""A shard's state in Spark's state store: a base snapshot and a log of the steps since.

The stateful operator (``revise.spark.operator``) keeps each shard's engine in three
``transformWithStateInPandas`` state variables, each its own RocksDB key(s):

- ``meta`` (a ValueState): :class:`Meta` — which base, how many log entries, the last entry's
  nonce, the registered timer, and the base itself when it is small (``inline``);
- ``base`` (a ListState of chunks): an :meth:`~revise.engine.Engine.snapshot` of the engine as
  it was when the base was written, unless the base is inline;
- ``log`` (a ListState, appended to): one :class:`Step` per call since the base — the batch's
  accepted records, its watermark, batch id and clock, and whether a close-all came.

A call that changes the shard appends its step to the log (RocksDB's changelog then holds
the step's records, not the shard's whole state), and writes a new base — and empties the log —
only once the log holds more records than the shard has open windows (:func:`should_rebase`).
So the bytes a micro-batch writes follow the records it brings, amortised: every record is
written once in a step, and a base of ``W`` windows is written at most once per ``W`` records.

A shard whose snapshot fits in :data:`INLINE_BASE_BYTES` (a few hundred windows: a quiet
stream's, or many shards over few keys) keeps it in ``meta`` and writes it at every call
instead of a step: each call is then a read and a write of one value. Every access to a
state variable is a round trip between the Python worker and the executor's state server
(about 1–4 ms each on a busy 2-core machine), and a small shard's call otherwise made five
(read meta, write the base, empty the log, write meta, and the key); the bytes it writes
stay bounded by the threshold.

Reading is cut the same way by :class:`EngineCache`: each Python worker keeps the engines of
the shards it ran, with the :class:`Stamp` of the state they match. When the stored ``meta``
names the same base, the engine only replays the log entries it has not applied yet (none in
the common case); otherwise the shard is rebuilt from its base and the whole log.

Why this is exact: a stored step is applied by the same :func:`apply_step` the live call used,
and the engine is deterministic in (state, records, watermark, batch id, clock); so base +
replay gives the state the live engine had (``tests/revise/test_shard_state.py`` checks it
against an engine that never left memory). A cached engine is used only when the state it
matches is the one Spark restored: every base and every step carries a random nonce, so an
engine left ahead by a failed task attempt or by a micro-batch that was never committed (its
stamp names a step the store does not hold) is never mistaken for the stored state.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from revise.config import EngineConfig
from revise.engine import Engine, InputBatch
from revise.record_batches import LateBatch, RevisionBatch

__all__ = [
    "BASE_CHUNK_BYTES",
    "BASE_SCHEMA",
    "CACHED_SHARDS",
    "INLINE_BASE_BYTES",
    "LOG_SCHEMA",
    "MAX_LOG_ENTRIES",
    "META_SCHEMA",
    "EngineCache",
    "Meta",
    "Stamp",
    "Step",
    "apply_step",
    "base_chunks",
    "new_nonce",
    "replay",
    "should_rebase",
    "skip_applied",
]

META_SCHEMA: Final = StructType([
    StructField("base_id", StringType()), StructField("log_entries", LongType()),
    StructField("log_records", LongType()), StructField("tail", StringType()),
    StructField("timer_ms", LongType()), StructField("inline", BinaryType()),
])
BASE_SCHEMA: Final = StructType([StructField("chunk", BinaryType())])
LOG_SCHEMA: Final = StructType([StructField("nonce", StringType()),
                                StructField("step", BinaryType())])
"""The state variables' schemas, as types: given as DDL text, pyspark would ask the JVM to
parse each one twice per task (a round trip each)."""

BASE_CHUNK_BYTES: Final = 8 << 20
"""A base snapshot is stored in chunks of at most this many bytes (one state value each)."""
INLINE_BASE_BYTES: Final = 32 << 10
"""A snapshot of at most this many bytes is the shard's base inside ``meta`` (module
docstring): 120 bytes a window for 50 windows, 82 for 750 (count, sum, min, max)."""
MAX_LOG_ENTRIES: Final = 64
"""A new base is written when the log would hold more steps than this, however small: bounds
what a shard missing from a worker's cache reads and replays (timer-only steps have no
records)."""
CACHED_SHARDS: Final = 64
"""Engines a Python worker keeps (least recently used dropped first)."""


def new_nonce() -> str:
    """A fresh identity for a base or a step."""
    return uuid.uuid4().hex


class Stamp(NamedTuple):
    """Which stored state an engine is: its base and how far into the log it has applied."""

    base_id: str
    applied: int
    tail: str
    """The nonce of the last applied step ('' when none)."""


@dataclass(frozen=True, slots=True)
class Meta:
    """The shard's ``meta`` value (:data:`META_SCHEMA`)."""

    base_id: str
    log_entries: int
    log_records: int
    tail: str
    timer_ms: int
    """The registered event-time timer (-1: none)."""
    inline: bytes | None = None
    """The base snapshot, when it is kept here (the ``base`` list is then empty and so is the
    log); None: the base is the ``base`` list's chunks."""

    @property
    def stamp(self) -> Stamp:
        """The stamp of the state this meta describes."""
        return Stamp(self.base_id, self.log_entries, self.tail)

    def row(self) -> tuple[str, int, int, str, int, bytes | None]:
        """As a state value."""
        return (self.base_id, self.log_entries, self.log_records, self.tail, self.timer_ms,
                self.inline)

    @staticmethod
    def of(row: tuple | None) -> Meta | None:  # type: ignore[type-arg]
        """From a state value (None: no state)."""
        if row is None:
            return None
        inline = None if row[5] is None else bytes(row[5])
        return Meta(str(row[0]), int(row[1]), int(row[2]), str(row[3]), int(row[4]), inline)


def should_rebase(log_records: int, log_entries: int, open_windows: int) -> bool:
    """Whether to write a new base instead of a log of ``log_records`` in ``log_entries`` steps.

    Yes once the log outgrows the state it would rebuild.
    Writing a base costs ~ its windows; each logged record costs its bytes once, and a worker
    without the engine cached replays the log. Rebasing once the log's records pass the open
    windows keeps both within twice the records' own cost, and rebuilding within twice a
    snapshot's. Trace: 110,000 open windows and 12,500 records a step → a base every 9th step;
    400 open windows and 62,000 records a step → a base every step (the small-state cost).
    """
    return log_records > open_windows or log_entries > MAX_LOG_ENTRIES


@dataclass(frozen=True, slots=True)
class Step:
    """One call of the operator on a shard: what it applied, enough to apply it again.

    Attributes:
        batch_id: The micro-batch.
        watermark_ms: The watermark the call judged against.
        now_ms: The clock the engine stamped.
        close_all: Whether a close-all command came with the call.
        batch: The accepted records.
    """

    batch_id: int
    watermark_ms: int
    now_ms: int
    close_all: bool
    batch: InputBatch

    def encode(self) -> bytes:
        """Arrow IPC bytes (zstd-compressed buffers) of the step."""
        b = self.batch
        topic = b.topic if isinstance(b.topic, str) else None
        cols: dict[str, pa.Array] = {
            "key": pa.array(b.keys, pa.string()),
            "ts_ms": pa.array(b.ts_ms, pa.int64()),
            "value": pa.array(b.values, pa.float64()),
            "partition": pa.array(b.partitions, pa.int32()),
            "offset": pa.array(b.offsets, pa.int64()),
        }
        if topic is None:
            cols["topic"] = pa.array(b.topic, pa.string())
        names = {"numeric": list(b.numeric), "distinct": list(b.distinct)}
        for i, arr in enumerate(b.numeric.values()):
            cols[f"num_{i}"] = pa.array(arr, pa.float64())
        for i, hashes in enumerate(b.distinct.values()):
            cols[f"dst_{i}"] = pa.array(hashes, pa.int64())
        meta = {
            "batch_id": str(self.batch_id), "watermark_ms": str(self.watermark_ms),
            "now_ms": str(self.now_ms), "close_all": "1" if self.close_all else "0",
            "topic": topic or "", "fields": json.dumps(names),
        }
        table = pa.table(cols).replace_schema_metadata(meta)
        sink = pa.BufferOutputStream()
        options = pa.ipc.IpcWriteOptions(compression="zstd")
        with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
            writer.write_table(table)
        encoded: bytes = sink.getvalue().to_pybytes()
        return encoded

    @staticmethod
    def decode(data: bytes) -> Step:
        """The inverse of :meth:`encode`."""
        table = pa.ipc.open_stream(data).read_all()
        meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
        names = json.loads(meta["fields"])

        def col(name: str) -> npt.NDArray[Any]:
            values: npt.NDArray[Any] = table.column(name).to_numpy(zero_copy_only=False)
            return values

        topic = col("topic") if "topic" in table.column_names else meta["topic"]
        batch = InputBatch(
            keys=np.asarray(col("key"), dtype=object), ts_ms=col("ts_ms"), values=col("value"),
            partitions=col("partition"), offsets=col("offset"), topic=topic,
            numeric={f: col(f"num_{i}") for i, f in enumerate(names["numeric"])},
            distinct={f: col(f"dst_{i}") for i, f in enumerate(names["distinct"])},
        )
        return Step(int(meta["batch_id"]), int(meta["watermark_ms"]), int(meta["now_ms"]),
                    meta["close_all"] == "1", batch)


def apply_step(engine: Engine, step: Step) -> tuple[list[RevisionBatch], LateBatch]:
    """Apply ``step`` to ``engine``: the live call and a replay both go through here.

    Returns the revisions (the batch's, then a close-all's) and the too-late records.
    A close-all closes at the last real watermark: the batch's own, raised to what its
    accepted records would have made it (their max event time minus the watermark delay).
    """
    cfg: EngineConfig = engine.config
    out = engine.process(step.batch, watermark_ms=step.watermark_ms, batch_id=step.batch_id,
                         now_ms=step.now_ms)
    revisions = [out.revisions]
    if step.close_all:
        last = step.watermark_ms
        if out.max_accepted_ts_ms is not None:
            last = max(last, out.max_accepted_ts_ms - cfg.watermark_delay_ms)
        closed = engine.close_all(watermark_ms=last, batch_id=step.batch_id, now_ms=step.now_ms)
        revisions.append(closed.revisions)
    return revisions, out.late


def base_chunks(snapshot: bytes) -> list[tuple[bytes]]:
    """``snapshot`` cut into :data:`BASE_CHUNK_BYTES` state values (one empty chunk if empty)."""
    return [(snapshot[i:i + BASE_CHUNK_BYTES],)
            for i in range(0, max(len(snapshot), 1), BASE_CHUNK_BYTES)]


class EngineCache:
    """The engines of the shards a Python worker ran, by (job token, shard), with their stamps.

    Spark reuses Python workers across micro-batches, so the engine a task left behind is
    usually still in the process the next time a task of that shard runs there. It is valid
    only for the stored state whose stamp it carries (module docstring).
    """

    def __init__(self, capacity: int = CACHED_SHARDS) -> None:
        self._capacity = capacity
        self._items: OrderedDict[tuple[str, int], tuple[Stamp, Engine]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, token: str, shard: int) -> tuple[Stamp, Engine] | None:
        """Remove and return the cached engine of the shard (the caller mutates it)."""
        with self._lock:
            return self._items.pop((token, shard), None)

    def put(self, token: str, shard: int, stamp: Stamp, engine: Engine) -> None:
        """Remember ``engine`` as the stored state ``stamp``."""
        with self._lock:
            self._items[(token, shard)] = (stamp, engine)
            self._items.move_to_end((token, shard))
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


def replay(engine: Engine, entries: Iterable[tuple[str, bytes]]) -> Engine:
    """``engine`` after applying the log ``entries`` (nonce, step bytes) in order."""
    for _nonce, data in entries:
        apply_step(engine, Step.decode(data))
    return engine


def skip_applied(entries: Iterator[tuple[str, bytes]],
                 stamp: Stamp) -> Iterator[tuple[str, bytes]] | None:
    """The log ``entries`` after the ``stamp.applied`` first ones.

    None when the log does not start with the steps the stamp names (the nonce at the
    stamp's last applied place is not its ``tail``).
    """
    if stamp.applied == 0:
        return entries
    last = None
    for i, (nonce, _data) in enumerate(entries):
        if i + 1 == stamp.applied:
            last = nonce
            break
    if last != stamp.tail:
        return None
    return entries
