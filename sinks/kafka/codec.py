"""The changelog's JSON: Arrow tables → Kafka key/value bytes, and message bytes → records.

Encoding is vectorized over Arrow columns (each distinct string escaped once by orjson), so a
micro-batch of 500k revisions is rendered without a Python call per row. Value = the record as
a JSON object with exactly the SPEC fields (§4 revisions, §6 late records and dead letters);
key of a revision = canonical JSON ``{"key","window_start_ms","window_end_ms"}``: the same bytes
for a window every time, so all its revisions go to one partition and compaction keeps the
latest. Doubles keep a ``.0`` when integral (3 → ``3.0``); NaN and ±inf become ``null``.

Trace: a revision of window ``[0,10000)`` of key ``a`` → key
``{"key":"a","window_start_ms":0,"window_end_ms":10000}``, value ``{"query_id":"q",…}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, TypeAlias

import numpy as np
import numpy.typing as npt
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

_INT_TEXT: Final = r"^-?[0-9]+$"
_ESCAPED: Final = np.zeros(256, dtype=bool)
_ESCAPED[[*range(0x20), ord('"'), ord("\\")]] = True
"""The bytes orjson escapes in a JSON string (checked over every code point): control
characters, the quote and the backslash. A string without them is its JSON literal in quotes.
None of them occurs inside a multi-byte UTF-8 character (those bytes are all >= 0x80)."""

_Literals: TypeAlias = "pa.Array | str"
"""A column's JSON literals: one per row, or one ``str`` when every row has the same."""


def _constant(col: pa.Array) -> str | None:
    """The one JSON literal of a column whose rows are all the same non-null value, else None.

    Not for doubles: ``0.0`` and ``-0.0`` compare equal and render apart.
    """
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


def _json_strings(col: pa.Array, floats: list[_Rendered] | None = None) -> _Literals:
    """Render one Arrow column as JSON literals (nulls as ``null``).

    A column whose rows are all one value (the query id, the batch id…) is rendered once. A
    floating-point column reuses the text of the rows it shares with a column already rendered
    in ``floats`` (:func:`_json_doubles`), and is added to it.
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
            out = pc.binary_join_element_wise('"', col, '"', "")
        else:
            # Escape each distinct string once (orjson), then gather: O(distinct) calls.
            enc = pc.dictionary_encode(col)
            literals = [orjson.dumps(v).decode() for v in enc.dictionary.to_pylist()]
            out = pc.take(pa.array(literals, pa.string()), enc.indices)
    elif pa.types.is_boolean(t) or pa.types.is_integer(t):
        out = col.cast(pa.string())
    elif pa.types.is_floating(t):
        out = _json_doubles(col.cast(pa.float64()), [] if floats is None else floats)
    else:  # rare types: one orjson call per value
        literals = [orjson.dumps(v).decode() for v in col.to_pylist()]
        out = pa.array(literals, pa.string())
    return pc.fill_null(out, "null")


_Rendered: TypeAlias = "tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_], pa.Array]"
"""A float64 column already rendered: its values' bits, its validity, its JSON literals."""

_MIN_SHARED: Final = 0.1
"""Reuse another column's text when at least this share of the rows hold the same double."""


def _json_doubles(col: pa.Array, rendered: list[_Rendered]) -> pa.Array:
    """A float64 column's JSON literals (nulls as null), reusing ``rendered`` columns' text.

    Formatting doubles is the costliest part of encoding revisions, and their columns repeat
    each other row by row: ``prev_sum`` is ``sum`` on every FINAL that closed an unchanged
    window, ``min``, ``max`` and ``mean`` are ``sum`` for a window of one record. The text of a
    double depends only on its bits, so rows whose bits equal those of the earlier column that
    shares the most rows take that column's text, and only the others are formatted. The
    column is then added to ``rendered``.

    Trace: ``sum`` [1.5, 2.0] rendered ``1.5``, ``2.0``; ``prev_sum`` [1.5, 3.0] → row 0 takes
    ``1.5``, row 1 alone is formatted → ``3.0``.
    """
    bits = _double_bits(col)
    valid = np.ones(len(col), dtype=bool) if not col.null_count else (
        col.is_valid().to_numpy(zero_copy_only=False))
    best: tuple[int, npt.NDArray[np.bool_], pa.Array] | None = None
    for other_bits, other_valid, other_text in rendered:
        same = (bits == other_bits) & valid & other_valid
        shared = int(np.count_nonzero(same))
        if best is None or shared > best[0]:
            best = (shared, same, other_text)
    if best is None or best[0] < _MIN_SHARED * len(col):
        out = _format_doubles(col)
    else:
        _shared, same, text = best
        todo = valid & ~same
        out = pc.if_else(pa.array(same), text, pa.scalar(None, pa.string()))
        if todo.any():
            out = pc.replace_with_mask(out, pa.array(todo),
                                       _format_doubles(col.filter(pa.array(todo))))
    rendered.append((bits, valid, out))
    return out


def _double_bits(col: pa.Array) -> npt.NDArray[np.int64]:
    """The 64 bits of each double of a float64 column (null rows: whatever they hold)."""
    data = col.buffers()[1]
    if data is None:
        return np.zeros(len(col), dtype=np.int64)
    return np.frombuffer(data, dtype=np.int64)[col.offset:col.offset + len(col)]


def _format_doubles(col: pa.Array) -> pa.Array:
    """Each double's shortest round-trip text, ``3.0`` for an integral 3, null for NaN/±inf."""
    out = col.cast(pa.string())
    # 3 → 3.0 so JSON readers keep the double type, for the integral values only (rare in
    # aggregates of real-valued data); 1e+20 already reads as a double.
    integral = pc.fill_null(pc.equal(pc.floor(col), col), False)
    if pc.any(integral).as_py():
        text = pc.filter(out, integral)
        text = pc.if_else(pc.match_substring_regex(text, _INT_TEXT),
                          pc.binary_join_element_wise(text, ".0", ""), text)
        out = pc.replace_with_mask(out, integral, text)
    # NaN/±inf have no JSON form → null.
    finite = pc.is_finite(col)
    if not pc.all(finite).as_py():
        out = pc.if_else(finite, out, pa.scalar(None, pa.string()))
    return out


def _json_objects(
    table: pa.Table, names: Sequence[str], cache: dict[str, _Literals] | None = None
) -> pa.Array:
    """One JSON object per row with the given columns in the given order (canonical bytes).

    ``cache`` holds already rendered columns (name → JSON literals) to share between the key
    and the value of the same rows. Constant columns join the literal text around them, so
    the row-wise join has fewer parts.
    """
    parts: list[_Literals] = []
    floats: list[_Rendered] = []  # this call's double columns, whose text later ones reuse
    text = ""  # literal text not yet added to ``parts``
    for i, name in enumerate(names):
        text += ("{" if i == 0 else ",") + orjson.dumps(name).decode() + ":"
        lit = cache.get(name) if cache is not None else None
        if lit is None:
            lit = _json_strings(table.column(name).combine_chunks(), floats)
            if cache is not None:
                cache[name] = lit
        if isinstance(lit, str):
            text += lit
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
    cache: dict[str, pa.Array] = {}
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
