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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
    "closing": REVISION_SCHEMA,
    "late": LATE_SCHEMA,
    "dead": DEAD_LETTER_SCHEMA,
}
"""The operator's output kinds (the ``kind`` column) and the schema of each payload, for
the bare ``--aggs`` columns; :func:`kind_schemas` gives them for any revision schema.
``closing``: the FINALs of a close-all (:func:`decode_output` gives them the batch's last real
watermark)."""


def kind_schemas(revision_schema: pa.Schema = REVISION_SCHEMA) -> dict[str, pa.Schema]:
    """:data:`KIND_SCHEMAS` with ``revision_schema`` (``revise.records.revision_schema``)."""
    return {**KIND_SCHEMAS, "revision": revision_schema, "closing": revision_schema}


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
    """

    revisions: pa.Table
    late: pa.Table
    dead: pa.Table
    open_windows: dict[int, int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """True when the batch produced nothing at all."""
        return not (self.revisions.num_rows or self.late.num_rows or self.dead.num_rows)


def encode_output(*, revisions: Sequence[pa.Table], late: Sequence[pa.Table],
                  dead: Sequence[pa.Table], closing: Sequence[pa.Table] = (),
                  revision_schema: pa.Schema = REVISION_SCHEMA,
                  open_windows: tuple[int, int] | None = None) -> pd.DataFrame | None:
    """A shard's output tables → the operator's rows (None when all are empty).

    One row per kind and chunk of at most :data:`CHUNK_ROWS` rows: ``kind``, ``rows``,
    ``payload`` (an Arrow IPC stream with the kind's schema; revisions and a close-all's
    ``closing`` FINALs in ``revision_schema``). ``open_windows`` ``(shard, count)`` adds a row
    of kind :data:`OPEN_KIND` (``rows`` = the count, ``payload`` = the shard's number as
    text). :func:`decode_output` is the inverse.
    """
    schemas = kind_schemas(revision_schema)
    chunks: list[tuple[str, int, bytes]] = []
    if open_windows is not None:
        shard, count = open_windows
        chunks.append((OPEN_KIND, count, str(shard).encode()))
    for kind, tables in (("revision", revisions), ("closing", closing), ("late", late),
                         ("dead", dead)):
        if not any(t.num_rows for t in tables):
            continue
        table = pa.concat_tables(tables).cast(schemas[kind])
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


def _ipc(table: pa.Table) -> tuple[int, bytes]:
    """``(rows, Arrow IPC stream bytes, zstd-compressed)`` of one output table."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=OUTPUT_IPC) as writer:
        writer.write_table(table)
    return table.num_rows, sink.getvalue().to_pybytes()


def decode_output(collected: pa.Table,
                  revision_schema: pa.Schema = REVISION_SCHEMA) -> BatchTables:
    """The stateful operator's collected chunks → one table per kind (empty ones included).

    ``revision_schema``: the job's (``revise.records.revision_schema`` of its aggregates).

    Chunks keep their order (the order Spark collected them in); rows inside a chunk keep the
    engine's emission order, and a close-all's FINALs follow every other revision, so one
    window's revisions of a batch stay in revision order.

    A close-all's FINALs carry the last real watermark (SPEC §3: the max accepted event time
    of all input, minus the delay). Each shard closes at its own view of it, the batch's
    watermark raised by the event times the shard accepted in that batch (which is exact
    when the close-all has a micro-batch of its own, and too low for some shards when it
    comes with the rest of the input, ``revise.spark.close_all``); the highest of them is
    the global one, which every closing FINAL gets here.
    """
    schemas = kind_schemas(revision_schema)
    parts: dict[str, list[pa.Table]] = {k: [] for k in schemas}
    kinds = collected.column("kind").to_pylist()
    payloads = collected.column("payload")
    open_windows: dict[int, int] = {}
    for i, kind in enumerate(kinds):
        if kind == OPEN_KIND:
            open_windows[int(payloads[i].as_py())] = int(collected.column("rows")[i].as_py())
            continue
        parts[kind].append(pa.ipc.open_stream(payloads[i].as_buffer()).read_all())
    tables = {
        k: pa.concat_tables(v) if v else schemas[k].empty_table() for k, v in parts.items()
    }
    closing = tables["closing"]
    revisions = tables["revision"]
    if closing.num_rows:
        watermark = closing.column("watermark_ms")
        last = pa.array(np.full(closing.num_rows, pc.max(watermark).as_py(), dtype=np.int64),
                        watermark.type)
        closing = closing.set_column(closing.schema.get_field_index("watermark_ms"),
                                     closing.schema.field("watermark_ms"), last)
        revisions = pa.concat_tables([revisions, closing])
    return BatchTables(revisions, tables["late"], tables["dead"], open_windows)
