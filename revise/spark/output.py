"""The stateful operator's output: a shard's Arrow tables as a few rows of IPC chunks, and back.

The operator (:mod:`revise.spark.operator`) returns its revisions, too-late records and
dead letters as a few rows holding Arrow IPC streams (``kind``, ``rows``, ``payload``):
Spark moves a few large binary values instead of converting every revision row pandas →
Arrow → Spark rows → Arrow on the way to the driver, which collects them anyway (Kafka and
Delta are written from there). :func:`encode_output` writes them in the Python worker;
on the driver :func:`decode_output` turns the collected rows back into one typed
:class:`BatchTables`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import pyarrow as pa

from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA, REVISION_SCHEMA

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql.types import StructType

__all__ = [
    "CHUNK_ROWS",
    "KIND_SCHEMAS",
    "OPEN_KIND",
    "OUTPUT_IPC",
    "BatchTables",
    "decode_output",
    "encode_output",
    "kind_schemas",
    "output_type",
]

KIND_SCHEMAS: Final[dict[str, pa.Schema]] = {
    "revision": REVISION_SCHEMA,
    "late": LATE_SCHEMA,
    "dead": DEAD_LETTER_SCHEMA,
}
"""The operator's Arrow output kinds (the ``kind`` column) and the schema of each payload, for
the bare ``--aggs`` columns; :func:`kind_schemas` gives them for any revision schema."""

MESSAGE_KINDS: Final = ("revision", "late", "dead")
"""The kinds whose rows are also Kafka messages, in the order of their topic index: a row of
kind ``msg:<i>`` holds messages of ``MESSAGE_KINDS[i]`` (``sinks.kafka.partitions.frame``)."""

REPORT_KIND: Final = "kafka"
"""The kind of the row each task adds after writing its messages (``revise.jvm.TaskChangelog``):
its report, JSON."""


@dataclass(frozen=True, slots=True)
class MessageKinds:
    """Which output kinds the tasks write to Kafka.

    Revisions always; too-late records and dead letters when a topic takes them
    (``--late-topic``, ``--dead-letter-topic``).
    """

    late: bool = False
    dead: bool = False

    def wants(self, kind: str) -> bool:
        """Whether ``kind`` (one of :data:`MESSAGE_KINDS`) goes to Kafka."""
        return kind == "revision" or (kind == "late" and self.late) or (
            kind == "dead" and self.dead)


REVISIONS_ONLY: Final = MessageKinds()


def kind_schemas(revision_schema: pa.Schema = REVISION_SCHEMA) -> dict[str, pa.Schema]:
    """:data:`KIND_SCHEMAS` with ``revision_schema`` (``revise.records.revision_schema``)."""
    return {**KIND_SCHEMAS, "revision": revision_schema}


def output_type() -> StructType:
    """The operator's output rows: Arrow IPC chunks (``payload``) of one ``kind`` each.

    A type object, not DDL text, which the cold JVM's SQL parser would read at the job's start.
    """
    from pyspark.sql.types import BinaryType, LongType, StringType, StructType

    return (StructType().add("kind", StringType()).add("rows", LongType())
            .add("payload", BinaryType()))


OPEN_KIND: Final = "open"
"""The kind of the row in which a shard reports its open windows (no Arrow payload)."""

CHUNK_ROWS = 250_000
"""Rows per IPC chunk (~120 MB of revisions at most): far below Spark's 2 GB value limit."""

OUTPUT_IPC: Final = pa.ipc.IpcWriteOptions(compression="zstd")
"""The operator's chunks are zstd-compressed: every byte of them is copied from the Python
worker through the JVM's rows, the task's Arrow result and the driver's socket, and crosses
the network to the driver on a cluster. A close of 210k windows: 40.4 MB → 15.8 MB for +8 ms
to write and +15 ms to read (lz4: 18.9 MB, +45 ms); on the 1M-key daily run the
close's collect took 1.2–1.8 s against 1.9–2.2 s and the JVM ~2.5 CPU s less a run
(docs/lab/benchmarks-diary.md, *The operator's output compressed*). :func:`decode_output` needs
nothing: Arrow's reader reads either."""


@dataclass(frozen=True, slots=True)
class BatchTables:
    """One micro-batch's output on the driver, as Arrow tables.

    Attributes:
        revisions: Revisions (the job's ``revise.records.revision_schema``), each window's
            in revision order.
        late: Too-late records (:data:`~revise.records.LATE_SCHEMA`).
        dead: Dead letters (:data:`~revise.records.DEAD_LETTER_SCHEMA`).
        open_windows: Open windows after the batch, per shard the batch called (the job's
            ``revise_open_windows`` metric, ``revise.ops.metrics``).
        reports: What each task that wrote messages did (``partition``, ``attempt``,
            ``messages``, ``skipped``: the partition had committed the batch before,
            ``seconds``).
    """

    revisions: pa.Table
    late: pa.Table
    dead: pa.Table
    open_windows: dict[int, int] = field(default_factory=dict)
    reports: tuple[dict[str, Any], ...] = ()

    @property
    def empty(self) -> bool:
        """True when the batch produced nothing at all."""
        return not (self.revisions.num_rows or self.late.num_rows or self.dead.num_rows)


def encode_output(*, revisions: Sequence[pa.Table], late: Sequence[pa.Table],
                  dead: Sequence[pa.Table], revision_schema: pa.Schema = REVISION_SCHEMA,
                  open_windows: tuple[int, int] | None = None,
                  messages: MessageKinds = REVISIONS_ONLY,
                  emitted_at_ms: int | None = None) -> pd.DataFrame | None:
    """A shard's output tables → the operator's rows (None when all are empty).

    Per kind, in this order: revisions (each window's in revision order, a close-all's FINALs
    last), too-late records, dead letters. Each kind gives rows of ``kind``, ``rows``,
    ``payload``: chunks of at most :data:`CHUNK_ROWS` rows as Arrow IPC streams with the kind's
    schema (revisions in ``revision_schema``, their ``emitted_at_ms`` set to ``emitted_at_ms``
    when given), and, for the kinds ``messages`` asks for, one row ``msg:<i>`` of the same
    records as Kafka messages (``sinks.kafka.partitions.frame``; ``i`` its index in
    :data:`MESSAGE_KINDS`), which the task writes to Kafka. ``open_windows`` ``(shard,
    count)`` adds a row of kind :data:`OPEN_KIND` (``rows`` = the count, ``payload`` = the
    shard's number as text). :func:`decode_output` reads the Arrow rows back.
    """
    schemas = kind_schemas(revision_schema)
    chunks: list[tuple[str, int, bytes]] = []
    if open_windows is not None:
        shard, count = open_windows
        chunks.append((OPEN_KIND, count, str(shard).encode()))
    for i, (kind, tables) in enumerate((("revision", revisions), ("late", late),
                                        ("dead", dead))):
        if not any(t.num_rows for t in tables):
            continue
        table = pa.concat_tables(tables).cast(schemas[kind])
        if kind == "revision" and emitted_at_ms is not None:
            table = stamp(table, emitted_at_ms)
        if messages.wants(kind):
            chunks.append((f"msg:{i}", table.num_rows, _messages(kind, table, revision_schema)))
        for start in range(0, table.num_rows, CHUNK_ROWS):
            chunks.append((kind, *_ipc(table.slice(start, CHUNK_ROWS))))
    if not chunks:
        return None
    import pandas as pd

    return pd.DataFrame({
        "kind": [k for k, _n, _b in chunks],
        "rows": [n for _k, n, _b in chunks],
        "payload": [b for _k, _n, b in chunks],
    })


def stamp(revisions: pa.Table, emitted_at_ms: int) -> pa.Table:
    """``revisions`` with ``emitted_at_ms`` set to ``emitted_at_ms`` on every row."""
    i = revisions.schema.get_field_index("emitted_at_ms")
    column = pa.array(np.full(revisions.num_rows, emitted_at_ms, dtype=np.int64))
    return revisions.set_column(i, revisions.schema.field(i), column)


def _messages(kind: str, table: pa.Table, revision_schema: pa.Schema) -> bytes:
    """One kind's records as framed Kafka messages (the changelog's JSON)."""
    from sinks.kafka.codec import encode_dead_letters, encode_late, encode_revisions
    from sinks.kafka.partitions import frame

    if kind == "revision":
        return frame(*encode_revisions(table, revision_schema))
    if kind == "late":
        return frame(*encode_late(table))
    return frame(*encode_dead_letters(table))


def _ipc(table: pa.Table) -> tuple[int, bytes]:
    """``(rows, Arrow IPC stream bytes, zstd-compressed)`` of one output table."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=OUTPUT_IPC) as writer:
        writer.write_table(table)
    return table.num_rows, sink.getvalue().to_pybytes()


def decode_output(collected: pa.Table,
                  revision_schema: pa.Schema = REVISION_SCHEMA) -> BatchTables:
    """The micro-batch's collected rows → one table per kind (empty ones included).

    ``revision_schema``: the job's (``revise.records.revision_schema`` of its aggregates).
    Chunks keep their order (the order Spark collected them in); rows inside a chunk keep the
    engine's emission order, so one window's revisions of a batch stay in revision order.
    The tasks' reports (:data:`REPORT_KIND`) are in :attr:`BatchTables.reports`.
    """
    schemas = kind_schemas(revision_schema)
    parts: dict[str, list[pa.Table]] = {k: [] for k in schemas}
    kinds = collected.column("kind").to_pylist()
    payloads = collected.column("payload")
    open_windows: dict[int, int] = {}
    reports: list[dict[str, Any]] = []
    for i, kind in enumerate(kinds):
        if kind == OPEN_KIND:
            open_windows[int(payloads[i].as_py())] = int(collected.column("rows")[i].as_py())
        elif kind == REPORT_KIND:
            reports.append(json.loads(payloads[i].as_py()))
        elif kind in parts:
            parts[kind].append(pa.ipc.open_stream(payloads[i].as_buffer()).read_all())
    tables = {
        k: pa.concat_tables(v) if v else schemas[k].empty_table() for k, v in parts.items()
    }
    return BatchTables(tables["revision"], tables["late"], tables["dead"], open_windows,
                       tuple(reports))
