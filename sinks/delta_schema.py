"""What each of revise's Delta tables is: its Arrow schema and its Delta table properties.

``revisions``, ``late`` and ``dead_letter`` are append-only histories; ``latest`` holds one row
per window, changed by MERGEs with deletion vectors (:mod:`sinks.delta_tables` writes them all).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import pyarrow as pa

from revise.errors import ReviseError
from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA, REVISION_SCHEMA
from revise.vocab import TABLE_NAMES

__all__ = ["TABLE_PROPERTIES", "DeltaSchemaError", "arrow_schema"]

_APPEND_ONLY: Final = {"delta.appendOnly": "true", "delta.checkpointInterval": "20"}
TABLE_PROPERTIES: Final[Mapping[str, Mapping[str, str]]] = {
    # History tables only ever grow: Delta rejects UPDATE/DELETE/MERGE on them.
    "revisions": _APPEND_ONLY,
    "late": _APPEND_ONLY,
    "dead_letter": _APPEND_ONLY,
    # Many small MERGE commits: checkpoint the log often so snapshots stay cheap to load.
    "latest": {"delta.checkpointInterval": "10"},
}
"""Each table's Delta properties, set when the table is created."""


class DeltaSchemaError(ReviseError, ValueError):
    """A table name that is not one of revise's Delta tables."""


def _with_query_id(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field("query_id", pa.string(), nullable=False), *schema])


def arrow_schema(table: str, revision_schema: pa.Schema = REVISION_SCHEMA) -> pa.Schema:
    """The Arrow schema of one of :data:`TABLE_NAMES` (the SPEC fields, + ``query_id``).

    ``revisions`` and ``latest`` have ``revision_schema``: the SPEC §4 fields of the bare
    ``--aggs`` form, or ``revise.records.revision_schema`` of ``FN(FIELD)`` aggregates (§7).
    """
    if table in ("revisions", "latest"):
        return revision_schema
    if table == "late":
        return _with_query_id(LATE_SCHEMA)
    if table == "dead_letter":
        return _with_query_id(DEAD_LETTER_SCHEMA)
    msg = f"unknown Delta table {table!r}; expected one of {TABLE_NAMES}"
    raise DeltaSchemaError(msg)
