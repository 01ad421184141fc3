"""The changelog's JSON: Arrow tables → Kafka key/value bytes, and message bytes → records.

Encoding is vectorized over Arrow columns (each distinct string escaped once by orjson), so a
micro-batch of 500k revisions is rendered without a Python call per row. Value = the record as
a JSON object with exactly the SPEC fields (§4 revisions, §6 late records and dead letters);
key of a revision = canonical JSON ``{"key","window_start_ms","window_end_ms"}``: the same bytes
for a window every time, so all its revisions go to one partition and compaction keeps the
latest. Each field's text is orjson's (doubles: shortest round trip, ``3.0`` for an integral 3,
``null`` for NaN and ±inf), so a value's bytes are ``orjson.dumps`` of its row as a dict.

Trace: a revision of window ``[0,10000)`` of key ``a`` → key
``{"key":"a","window_start_ms":0,"window_end_ms":10000}``, value ``{"query_id":"q",…}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, NamedTuple, TypeAlias

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from revise.records import (
    DEAD_LETTER_SCHEMA,
    LATE_SCHEMA,
    REVISION_SCHEMA,
    DeadLetter,
    LateRecord,
    Revision,
)
from revise.vocab import WINDOW_BOUNDS
from sinks.kafka.errors import ChangelogEncodeError

__all__ = [
    "decode_dead_letter",
    "decode_late",
    "decode_revision",
    "decode_revision_row",
    "encode_dead_letters",
    "encode_late",
    "encode_revisions",
    "require_schema",
    "revision_key",
]

_ESCAPED: Final = np.zeros(256, dtype=bool)
_ESCAPED[[*range(0x20), ord('"'), ord("\\")]] = True
"""The bytes orjson escapes in a JSON string (checked over every code point): control
characters, the quote and the backslash. A string without them is its JSON literal in quotes.
None of them occurs inside a multi-byte UTF-8 character (those bytes are all >= 0x80)."""


class _Quoted(NamedTuple):
    """A string column without nulls or characters to escape: its literals are its rows quoted.

    The object's literal text around the column supplies the quotes: no pass over the column.
    """

    text: pa.Array


_Literals: TypeAlias = "pa.Array | _Quoted | str"
"""A column's JSON literals: one per row, its rows to quote, or one ``str`` when every row has
the same."""


def _constant(col: pa.Array) -> str | None:
    """The one JSON literal of a column whose rows are all null or all the same value, else None.

    Values compared only for strings, booleans and integers: doubles ``0.0`` and ``-0.0``
    compare equal and render apart (:func:`_json_doubles` compares their bits).
    """
    if len(col) and col.null_count == len(col):
        return "null"
    t = col.type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_boolean(t)
            or pa.types.is_integer(t)) or col.null_count or len(col) == 0:
        return None
    low, high = pc.min_max(col).values()
    if low.as_py() != high.as_py():
        return None
    return orjson.dumps(low.as_py()).decode()


def _needs_escape(col: pa.Array) -> bool:
    """Whether any string of ``col`` holds a character JSON escapes (one pass over its bytes)."""
    if len(col) == 0:
        return False
    _validity, offsets, data = col.buffers()
    if data is None:
        return False
    width = np.int64 if pa.types.is_large_string(col.type) else np.int32
    at = np.frombuffer(offsets, dtype=width)[col.offset:col.offset + len(col) + 1]
    text = np.frombuffer(data, dtype=np.uint8)[at[0]:at[-1]]
    return bool(_ESCAPED[text].any())


def _json_strings(col: pa.Array) -> _Literals:
    """Render one Arrow column as JSON literals (nulls as ``null``).

    A column whose rows are all one value (the query id, the batch id…) is rendered once.
    """
    t = col.type
    if pa.types.is_dictionary(t):
        col = col.cast(t.value_type)
        t = col.type
    constant = _constant(col)
    if constant is not None:
        return constant
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if not _needs_escape(col):
            # Nothing to escape (the usual case): the literal is the string in quotes.
            if not col.null_count:
                return _Quoted(col)
            out = pc.binary_join_element_wise('"', col, '"', "")
        else:
            # Escape each distinct string once (orjson), then gather: O(distinct) calls.
            enc = pc.dictionary_encode(col)
            literals = [orjson.dumps(v).decode() for v in enc.dictionary.to_pylist()]
            out = pc.take(pa.array(literals, pa.string()), enc.indices)
    elif pa.types.is_boolean(t) or pa.types.is_integer(t):
        out = col.cast(pa.string())
    elif pa.types.is_floating(t):
        return _json_doubles(col)
    else:  # rare types: one orjson call per value
        literals = [orjson.dumps(v).decode() for v in col.to_pylist()]
        out = pa.array(literals, pa.string())
    return pc.fill_null(out, "null")


def _json_doubles(col: pa.Array) -> pa.Array | str:
    """A floating-point column's JSON literals: orjson's text of each value, ``null`` for nulls.

    A column of one value (``completeness`` 1.0 on a close's FINALs) is rendered once.
    Otherwise orjson renders the whole column as one JSON array, in C (shortest round-trip
    text, ``3.0`` for an integral 3, ``null`` for NaN and ±inf); no number's text holds a
    comma, so the commas split the array's bytes into the rows' literals, which an Arrow string
    array then reads in place. Each literal but the last keeps its comma, trimmed by one pass.

    Trace: [1.5, null, 3.0] → ``[1.5,null,3.0]`` → offsets 1, 5, 10, 13 → ``1.5,``,
    ``null,``, ``3.0`` → ``1.5``, ``null``, ``3.0``.
    """
    rows = len(col)
    if rows == 0:
        return pa.array([], pa.string())
    values = col.cast(pa.float64()).to_numpy(zero_copy_only=False)  # nulls → NaN → null
    bits = values.view(np.int64)
    if not col.null_count and (bits == bits[0]).all():  # bits: 0.0 and -0.0 render apart
        return orjson.dumps(float(values[0])).decode()
    text = orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY)
    offsets = np.empty(rows + 1, dtype=np.int64)
    offsets[0] = 1
    offsets[1:rows] = np.flatnonzero(np.frombuffer(text, dtype=np.uint8) == ord(",")) + 1
    offsets[rows] = len(text) - 1
    out = pa.LargeStringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(text))
    # To the other columns' type: the same bytes, narrower offsets (Arrow refuses > 2 GiB).
    return pc.utf8_rtrim(out.cast(pa.string()), characters=",")


def _json_objects(
    table: pa.Table, names: Sequence[str], cache: dict[str, _Literals] | None = None
) -> pa.Array:
    """One JSON object per row with the given columns in the given order (canonical bytes).

    ``cache`` holds already rendered columns (name → JSON literals) to share between the key
    and the value of the same rows. Constant columns and quotes join the literal text around
    them, so the row-wise join has fewer parts.
    """
    parts: list[str | pa.Array] = []
    text = ""  # literal text not yet added to ``parts``
    for i, name in enumerate(names):
        text += ("{" if i == 0 else ",") + orjson.dumps(name).decode() + ":"
        lit = cache.get(name) if cache is not None else None
        if lit is None:
            lit = _json_strings(table.column(name).combine_chunks())
            if cache is not None:
                cache[name] = lit
        if isinstance(lit, str):
            text += lit
        elif isinstance(lit, _Quoted):
            parts += [text + '"', lit.text]
            text = '"'
        else:
            parts += [text, lit]
            text = ""
    parts.append(text + "}")
    if len(parts) == 1:  # every column constant
        return pa.array([parts[0]] * table.num_rows, pa.string())
    return pc.binary_join_element_wise(*parts, "")


def require_schema(table: pa.Table, schema: pa.Schema, what: str) -> None:
    """Raise :class:`ChangelogEncodeError` unless ``table`` has every field of ``schema``."""
    present = set(table.column_names)
    missing = [n for n in schema.names if n not in present]
    if missing:
        msg = (
            f"{what} table lacks field(s) {missing}; expected the SPEC fields {schema.names} "
            f"(got {table.column_names}); build it with revise.records"
        )
        raise ChangelogEncodeError(msg)


def encode_revisions(table: pa.Table,
                     schema: pa.Schema = REVISION_SCHEMA) -> tuple[pa.Array, pa.Array]:
    """Encode revisions as Kafka keys and values, vectorized.

    Args:
        table: Revisions with (at least) the fields of ``schema``.
        schema: The revision fields the values carry: ``REVISION_SCHEMA`` (SPEC §4) or
            ``revise.records.revision_schema`` of ``FN(FIELD)`` aggregates (SPEC §7), whose
            ``count`` / ``FN_FIELD`` and ``prev_`` columns replace ``count`` … ``prev_mean``.

    Returns:
        ``(keys, values)``, binary arrays (``sinks.kafka.partitions.frame_parts`` frames them
        without a Python object per message; ``.to_pylist()`` gives bytes): key =
        ``{"key":…,"window_start_ms":…,"window_end_ms":…}`` (the same
        bytes for a window every time, for partitioning and compaction); value = a JSON object
        with every field of ``schema`` in its order, nulls as ``null``, doubles with a decimal
        point, non-finite doubles as ``null``.

    Raises:
        ChangelogEncodeError: a SPEC field is missing.
    """
    require_schema(table, schema, "revisions")
    if table.num_rows == 0:
        return _NO_BYTES, _NO_BYTES
    cache: dict[str, _Literals] = {}
    keys = _json_objects(table, WINDOW_BOUNDS, cache)
    return _binary(keys), _binary(_json_objects(table, schema.names, cache))


def encode_late(table: pa.Table) -> tuple[pa.Array, pa.Array]:
    """Encode too-late records: key = the input key (UTF-8), value = JSON of the SPEC §6 fields.

    Binary arrays, as :func:`encode_revisions` returns them.
    """
    require_schema(table, LATE_SCHEMA, "late")
    if table.num_rows == 0:
        return _NO_BYTES, _NO_BYTES
    keys = pc.fill_null(table.column("key").combine_chunks().cast(pa.string()), "")
    return _binary(keys), _binary(_json_objects(table, LATE_SCHEMA.names))


def encode_dead_letters(table: pa.Table) -> tuple[pa.Array, pa.Array]:
    """Encode dead letters: key = null (bad input has no trusted key), value = SPEC §6 JSON.

    Binary arrays, as :func:`encode_revisions` returns them.
    """
    require_schema(table, DEAD_LETTER_SCHEMA, "dead-letter")
    if table.num_rows == 0:
        return _NO_BYTES, _NO_BYTES
    values = _binary(_json_objects(table, DEAD_LETTER_SCHEMA.names))
    return pa.nulls(len(values), pa.binary()), values


_NO_BYTES: Final = pa.nulls(0, pa.binary())
"""No messages (``pa.nulls``: ``pa.array`` would import pandas, which the operator's
module must not on the first micro-batch's path)."""


def _binary(arr: pa.Array) -> pa.Array:
    """``arr`` (JSON text) as binary: the same buffers, no copy."""
    return arr.cast(pa.binary())


def revision_key(key: str, window_start_ms: int, window_end_ms: int) -> bytes:
    """The changelog key of one window (same bytes as :func:`encode_revisions` gives)."""
    return orjson.dumps(
        {"key": key, "window_start_ms": window_start_ms, "window_end_ms": window_end_ms}
    )


def decode_revision(value: bytes) -> Revision:
    """Decode a changelog value into a :class:`~revise.records.Revision`."""
    return Revision.from_row(_typed_row(orjson.loads(value), REVISION_SCHEMA))


def decode_revision_row(value: bytes, schema: pa.Schema = REVISION_SCHEMA) -> dict[str, Any]:
    """Decode a changelog value into a row of ``schema`` (any ``--aggs``; SPEC §4, §7).

    :class:`~revise.records.Revision` holds the bare form's aggregate fields only; a revision of
    ``FN(FIELD)`` aggregates (``p99_latency_ms``, ``distinct_user`` …) decodes with this into a
    dict with the schema's Python types (JSON ``3`` for a double → ``3.0``).
    """
    return _typed_row(orjson.loads(value), schema)


def decode_late(value: bytes) -> LateRecord:
    """Decode a late-topic value into a :class:`~revise.records.LateRecord`."""
    return LateRecord.from_row(_typed_row(orjson.loads(value), LATE_SCHEMA))


def decode_dead_letter(value: bytes) -> DeadLetter:
    """Decode a dead-letter-topic value into a :class:`~revise.records.DeadLetter`."""
    return DeadLetter.from_row(_typed_row(orjson.loads(value), DEAD_LETTER_SCHEMA))


def _typed_row(obj: dict[str, Any], schema: pa.Schema) -> dict[str, Any]:
    """JSON object → row with the schema's Python types (JSON ``3`` for a double → ``3.0``)."""
    row: dict[str, Any] = {}
    for f in schema:
        v = obj.get(f.name)
        if v is not None and pa.types.is_floating(f.type):
            v = float(v)
        row[f.name] = v
    return row
