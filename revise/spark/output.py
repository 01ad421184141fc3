"""The stateful operator's output rows, and what the driver reads of them.

Each stateful task (:mod:`revise.spark.operator`) ends with the output of all its shard calls
written where it was computed: its records as Kafka messages (rows ``msg:<i>``, framed, which
the same task's JVM writer commits, ``revise.jvm.TaskChangelog``) and as one Delta data file
per history table (written by the worker, ``sinks.delta_files``; rows ``file:<table>`` carry
the files' records). What else comes back to the driver is small: the task's counts
(``counts``: revisions by timing, too-late records, dead letters by reason, the highest
watermark), each called shard's open windows (``open``) and each task's Kafka report
(``kafka``): metadata that grows with the shards and files, never with the records
(``latest`` is merged from the ``revisions`` data files, ``sinks.latest_merge``).
:func:`encode_output` writes the rows in the Python worker; on the driver
:func:`decode_output` turns the collected rows into one :class:`BatchOutput`.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from revise.records import REVISION_SCHEMA

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql.types import StructType

    from sinks.delta_files import DataFile

__all__ = [
    "COUNTS_KIND",
    "FILE_KIND",
    "MESSAGES_PER_ROW",
    "MESSAGE_KINDS",
    "OPEN_KIND",
    "PAYLOAD_BYTES_PER_FRAME",
    "REPORT_KIND",
    "NO_MESSAGES",
    "REVISIONS_ONLY",
    "BatchCounts",
    "BatchOutput",
    "MessageKinds",
    "decode_output",
    "encode_output",
    "output_type",
    "stamp",
]

MESSAGE_KINDS: Final = ("revision", "late", "dead")
"""The record kinds that become Kafka messages, in the order of their topic index: a row of
kind ``msg:<i>`` holds messages of ``MESSAGE_KINDS[i]`` (``sinks.kafka.partitions.frame_parts``)."""

REPORT_KIND: Final = "kafka"
"""The kind of the row each task adds after writing its messages (``revise.jvm.TaskChangelog``):
its report, JSON."""

OPEN_KIND: Final = "open"
"""The kind of a row reporting one shard's open windows (``rows``; the shard in the payload)."""

COUNTS_KIND: Final = "counts"
"""The kind of the row holding a task's :class:`BatchCounts` (JSON; ``rows`` = its state
partition)."""

MESSAGES_PER_ROW: Final = 16_384
"""At most this many messages in one ``msg:`` row (a few MB of JSON): a task's output, up to a
close of hundreds of thousands of windows, reaches the JVM as rows Spark copies without
growing one buffer to the whole output (a single row of ~1M revisions ran the local JVM out of
heap)."""

PAYLOAD_BYTES_PER_FRAME: Final = 16 << 20
"""At most this many payload bytes in one of a task's output frames (but for a single larger
row). The frames go to the JVM one at a time as they are encoded, and the task's writer sends
a row's messages as it reads it: neither side holds the task's whole output (a close of
hundreds of thousands of windows), only a frame or two."""

FILE_KIND: Final = "file:"
"""Prefix of the kind of a row holding one data file's record; the rest is the table."""

@dataclass(frozen=True, slots=True)
class MessageKinds:
    """Which record kinds the tasks write to Kafka.

    Revisions (but for a dry run, ``JobConfig.dry_run``); too-late records and dead letters
    when a topic takes them (``--late-topic``, ``--dead-letter-topic``).
    """

    late: bool = False
    dead: bool = False
    revisions: bool = True

    def wants(self, kind: str) -> bool:
        """Whether ``kind`` (one of :data:`MESSAGE_KINDS`) goes to Kafka."""
        return (kind == "revision" and self.revisions) or (kind == "late" and self.late) or (
            kind == "dead" and self.dead)


REVISIONS_ONLY: Final = MessageKinds()
NO_MESSAGES: Final = MessageKinds(revisions=False)


@dataclass(frozen=True, slots=True)
class BatchCounts:
    """What a micro-batch (or one task of it) produced, counted.

    Attributes:
        revisions: Revisions by timing.
        late: Too-late records.
        dead: Dead letters by reason.
        watermark_ms: The highest watermark a revision carried (None: no revision).
    """

    revisions: Mapping[str, int] = field(default_factory=dict)
    late: int = 0
    dead: Mapping[str, int] = field(default_factory=dict)
    watermark_ms: int | None = None

    @property
    def total_revisions(self) -> int:
        """Revisions of every timing."""
        return sum(self.revisions.values())

    @property
    def total_dead(self) -> int:
        """Dead letters of every reason."""
        return sum(self.dead.values())

    @property
    def empty(self) -> bool:
        """True when nothing was produced."""
        return not (self.total_revisions or self.late or self.total_dead)

    def __add__(self, other: BatchCounts) -> BatchCounts:
        marks = [w for w in (self.watermark_ms, other.watermark_ms) if w is not None]
        return BatchCounts(dict(Counter(self.revisions) + Counter(other.revisions)),
                           self.late + other.late, dict(Counter(self.dead) + Counter(other.dead)),
                           max(marks) if marks else None)

    @classmethod
    def of(cls, revisions: pa.Table, late: pa.Table, dead: pa.Table) -> BatchCounts:
        """The counts of one task's tables."""
        watermark = (pc.max(revisions.column("watermark_ms")).as_py() if revisions.num_rows
                     else None)
        return cls(_value_counts(revisions, "timing"), late.num_rows,
                   _value_counts(dead, "reason"), watermark)

    def to_json(self) -> bytes:
        """The counts as the ``counts`` row's payload."""
        return json.dumps({"revisions": self.revisions, "late": self.late, "dead": self.dead,
                           "watermark_ms": self.watermark_ms}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> BatchCounts:
        """The counts :meth:`to_json` wrote."""
        o = json.loads(data)
        return cls(o["revisions"], int(o["late"]), o["dead"], o["watermark_ms"])


def _value_counts(table: pa.Table, column: str) -> dict[str, int]:
    if not table.num_rows:
        return {}
    counts = pc.value_counts(table.column(column)).to_pylist()
    return {str(c["values"]): int(c["counts"]) for c in counts}


@dataclass(frozen=True, slots=True)
class BatchOutput:
    """One micro-batch's output as the driver sees it.

    Attributes:
        files: The history tables' data files the tasks wrote, by table.
        counts: What the batch produced, counted.
        partition_counts: The same, per state partition.
        open_windows: Open windows after the batch, per shard the batch called (the job's
            ``revise_open_windows`` metric, ``revise.ops.metrics``).
        reports: What each task that wrote messages did (``partition``, ``attempt``,
            ``messages``, ``skipped``: the partition had committed the batch before,
            ``seconds``).
    """

    files: dict[str, list[DataFile]] = field(default_factory=dict)
    counts: BatchCounts = field(default_factory=BatchCounts)
    partition_counts: dict[int, BatchCounts] = field(default_factory=dict)
    open_windows: dict[int, int] = field(default_factory=dict)
    reports: tuple[dict[str, Any], ...] = ()

    @property
    def empty(self) -> bool:
        """True when the batch produced nothing at all."""
        return self.counts.empty

    def fresh_counts(self) -> BatchCounts:
        """The counts of the partitions whose Kafka transaction this run committed.

        A partition that had committed the batch before (a replay after a crash; its report
        says ``skipped``) is left out, so a metric counts each record once.
        """
        skipped = {int(r["partition"]) for r in self.reports
                   if r.get("skipped") and r.get("messages")}
        total = BatchCounts()
        for partition, counts in self.partition_counts.items():
            if partition not in skipped:
                total = total + counts
        return total


def output_type() -> StructType:
    """The operator's output rows: ``kind``, ``rows``, ``payload`` (see the module).

    A type object, not DDL text, which the cold JVM's SQL parser would read at the job's start.
    """
    from pyspark.sql.types import BinaryType, LongType, StringType, StructType

    return (StructType().add("kind", StringType()).add("rows", LongType())
            .add("payload", BinaryType()))


def encode_output(*, revisions: pa.Table, late: pa.Table, dead: pa.Table,
                  revision_schema: pa.Schema = REVISION_SCHEMA,
                  files: Mapping[str, Sequence[DataFile]] | None = None,
                  open_windows: Mapping[int, int] | None = None,
                  messages: MessageKinds = REVISIONS_ONLY,
                  partition: int = 0) -> Iterator[pd.DataFrame]:
    """A task's output → the operator's rows, in frames (none when there is nothing to say).

    ``revisions`` (in ``revision_schema``, each window's in revision order, a close-all's FINALs
    last, already stamped, :func:`stamp`), ``late`` and ``dead`` give the Kafka messages of the
    kinds ``messages`` asks for and the counts. ``files``: the data files the worker wrote for
    them. ``open_windows`` (shard → count): each called shard's open windows after its last
    call. ``partition``: the state partition of the task (the ``counts`` row's ``rows``).

    The rows for the driver come first, then the messages, encoded a row at a time as the
    frames are taken: each frame's ``payload`` column is one Arrow binary array
    (:func:`_frames`), which PySpark sends to the JVM as it is; the rows keep their order.
    """
    head: list[tuple[str, int, list[bytes | pa.Buffer]]] = []
    for shard, count in (open_windows or {}).items():
        head.append((OPEN_KIND, count, [str(shard).encode()]))
    counts = BatchCounts.of(revisions, late, dead)
    if not counts.empty:
        head.append((COUNTS_KIND, partition, [counts.to_json()]))
    for table_name, table_files in (files or {}).items():
        head.extend((FILE_KIND + table_name, f.num_records, [f.to_json()]) for f in table_files)

    def message_rows() -> Iterator[tuple[str, int, list[bytes | pa.Buffer]]]:
        for i, (kind, table) in enumerate((("revision", revisions), ("late", late),
                                           ("dead", dead))):
            if not messages.wants(kind):
                continue
            for at in range(0, table.num_rows, MESSAGES_PER_ROW):
                chunk = table.slice(at, MESSAGES_PER_ROW)
                yield f"msg:{i}", chunk.num_rows, _messages(kind, chunk, revision_schema)

    return _frames(itertools.chain(head, message_rows()))


def _frames(rows: Iterable[tuple[str, int, list[bytes | pa.Buffer]]]
            ) -> Iterator[pd.DataFrame]:
    """``(kind, rows, payload pieces)`` → DataFrames of at most :data:`PAYLOAD_BYTES_PER_FRAME`.

    A frame's payloads are joined once into the data buffer of one Arrow binary array, held
    by the frame as an Arrow-backed column: PySpark's pandas-to-Arrow conversion of the
    operator's output takes such a column without copying it, where a column of Python
    ``bytes`` is copied again into freshly allocated Arrow memory. Each frame is made when the
    next row would overflow it, so the rows are taken (and encoded) only as fast as the frames.
    """
    group: list[tuple[str, int, list[bytes | pa.Buffer]]] = []
    lengths: list[int] = []
    size = 0
    for row in rows:
        length = sum(len(p) for p in row[2])
        if group and size + length > PAYLOAD_BYTES_PER_FRAME:
            yield _frame(group, lengths)
            group, lengths, size = [], [], 0
        group.append(row)
        lengths.append(length)
        size += length
    if group:
        yield _frame(group, lengths)


def _frame(rows: list[tuple[str, int, list[bytes | pa.Buffer]]],
           lengths: list[int]) -> pd.DataFrame:
    """One frame: ``kind``, ``rows``, and the payloads as one binary array (int32 offsets).

    ``lengths``: each row's payload bytes, as :func:`_frames` summed them.

    Raises:
        ValueError: A single row's payload is more than such an array holds.
    """
    import pandas as pd

    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        msg = (f"a task's output row of {max(lengths)} bytes is more than an Arrow "
               "binary column holds")
        raise ValueError(msg)
    data = b"".join(p for _k, _n, parts in rows for p in parts)
    payload = pa.Array.from_buffers(pa.binary(), len(rows), [
        None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)])
    return pd.DataFrame({
        "kind": [k for k, _n, _p in rows],
        "rows": np.array([n for _k, n, _p in rows], dtype=np.int64),
        "payload": pd.arrays.ArrowExtensionArray(payload),
    })


def stamp(revisions: pa.Table, emitted_at_ms: int) -> pa.Table:
    """``revisions`` with ``emitted_at_ms`` set to ``emitted_at_ms`` on every row."""
    i = revisions.schema.get_field_index("emitted_at_ms")
    column = pa.array(np.full(revisions.num_rows, emitted_at_ms, dtype=np.int64))
    return revisions.set_column(i, revisions.schema.field(i), column)


def _messages(kind: str, table: pa.Table, revision_schema: pa.Schema
              ) -> list[bytes | pa.Buffer]:
    """One kind's records as framed Kafka messages (the changelog's JSON), in pieces."""
    from sinks.kafka.codec import encode_dead_letters, encode_late, encode_revisions
    from sinks.kafka.partitions import frame_parts

    if kind == "revision":
        return frame_parts(*encode_revisions(table.cast(revision_schema), revision_schema))
    if kind == "late":
        return frame_parts(*encode_late(table))
    return frame_parts(*encode_dead_letters(table))


def decode_output(collected: pa.Table) -> BatchOutput:
    """The micro-batch's collected rows → a :class:`BatchOutput`."""
    from sinks.delta_files import DataFile

    kinds = collected.column("kind").to_pylist()
    payloads = collected.column("payload")
    counts = collected.column("rows")
    files: dict[str, list[DataFile]] = {}
    by_partition: dict[int, BatchCounts] = {}
    open_windows: dict[int, int] = {}
    reports: list[dict[str, Any]] = []
    for i, kind in enumerate(kinds):
        if kind.startswith(FILE_KIND):
            files.setdefault(kind[len(FILE_KIND):], []).append(
                DataFile.from_json(payloads[i].as_py()))
        elif kind == COUNTS_KIND:
            p = int(counts[i].as_py())
            by_partition[p] = by_partition.get(p, BatchCounts()) + BatchCounts.from_json(
                payloads[i].as_py())
        elif kind == OPEN_KIND:
            open_windows[int(payloads[i].as_py())] = int(counts[i].as_py())
        elif kind == REPORT_KIND:
            reports.append(json.loads(payloads[i].as_py()))
    total = BatchCounts()
    for c in by_partition.values():
        total = total + c
    return BatchOutput(files, total, by_partition, open_windows, tuple(reports))
