"""The changelog's JSON bytes against a plain renderer of one value at a time (no broker)."""

from __future__ import annotations

import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from revise.records import REVISION_SCHEMA
from revise.vocab import WINDOW_BOUNDS
from sinks.kafka import encode_revisions
from sinks.kafka.codec import _needs_escape

# Text with what JSON escapes (controls, NUL, quote, backslash), non-ASCII and non-BMP.
_TEXT = st.text(st.characters(codec="utf-8"), max_size=6) | st.sampled_from(
    ["a", 'q"t', "b\\s", "nul\0", "\n", "é", "\U0001f600", "\u2028", "\x7f", ""])
_DOUBLES = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [0.0, -0.0, 3.0, -7.0, 1e15, 1e16, 1e20, 2.5, 123456789.0, 1e-7, 5e-324])


def _literal(value: object) -> str:
    """One value's JSON text, rendered alone by orjson (NaN and ±inf: null): the reference."""
    return orjson.dumps(value).decode()


def _reference(table: pa.Table, names: list[str]) -> list[bytes]:
    return [
        ("{" + ",".join(f'"{n}":{_literal(row[n])}' for n in names) + "}").encode()
        for row in table.to_pylist()
    ]


@st.composite
def _columns(draw: st.DrawFn, rows: int) -> pa.Table:
    """Revision columns, each either one repeated value (folded by the encoder) or varied."""
    cols = {}
    for f in REVISION_SCHEMA:
        if pa.types.is_string(f.type):
            values = st.lists(_TEXT, min_size=rows, max_size=rows)
        elif pa.types.is_boolean(f.type):
            values = st.lists(st.booleans(), min_size=rows, max_size=rows)
        elif pa.types.is_integer(f.type):
            bound = 2**31 - 1 if f.type == pa.int32() else 2**53
            item: st.SearchStrategy[int | None] = st.integers(-bound, bound)
            if f.nullable:
                item = item | st.none()
            values = st.lists(item, min_size=rows, max_size=rows)
        else:
            values = st.lists(_DOUBLES | st.none(), min_size=rows, max_size=rows)
        column = draw(values)
        if draw(st.booleans()):
            column = [column[0]] * rows
        cols[f.name] = pa.array(column, f.type)
    return pa.table(cols, schema=REVISION_SCHEMA)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 8).flatmap(lambda n: st.tuples(_columns(n), st.integers(0, n - 1))))
def test_revisions_encode_as_each_value_rendered_alone(drawn: tuple[pa.Table, int]) -> None:
    table, skip = drawn
    for t in (table, table.slice(skip)):  # a slice: Arrow arrays with an offset
        keys, values = (a.to_pylist() for a in encode_revisions(t))
        assert values == _reference(t, REVISION_SCHEMA.names)
        assert keys == _reference(t, list(WINDOW_BOUNDS))
        assert [orjson.loads(k)["key"] for k in keys] == t.column("key").to_pylist()


def test_escape_scan_reads_only_the_arrays_own_bytes() -> None:
    arr = pa.array(['"x', "plain", "ok", "a\nb"])
    assert _needs_escape(arr) and _needs_escape(arr.slice(3))
    assert not _needs_escape(arr.slice(1, 2))  # the quote before and the newline after
    assert not _needs_escape(pa.array(["é", "\U0001f600", "\x7f"]))
    assert _needs_escape(pa.array(["a", "b\0"], pa.large_string()))
    assert not _needs_escape(pa.array([None, None], pa.string()))
    assert not _needs_escape(pa.array([], pa.string()))


def test_a_table_lacking_spec_fields_is_refused_naming_them() -> None:
    from sinks.kafka.errors import ChangelogEncodeError

    rows = {name: pa.nulls(1, REVISION_SCHEMA.field(name).type) for name in REVISION_SCHEMA.names
            if name not in ("n_late", "batch_id")}
    with pytest.raises(ChangelogEncodeError, match=r"\['n_late', 'batch_id'\]"):
        encode_revisions(pa.table(rows))


def test_doubles_of_every_magnitude_encode_as_orjson_renders_each() -> None:
    import numpy as np

    from sinks.kafka.codec import _json_doubles

    rng = np.random.default_rng(7)
    values = rng.standard_normal(20_000) * 10.0 ** rng.integers(-320, 300, 20_000)
    values[::97] = np.round(values[::97])  # integral: 3.0, not 3
    col = pa.array(values, mask=rng.random(20_000) < 0.05)
    ones = pa.array(np.ones(50))
    for arr in (col, col.slice(1234, 5000), pa.array([np.nan, np.inf, -np.inf, -0.0, 0.0]),
                ones, ones.slice(7), pa.array([0.0, -0.0]), pa.array([-0.0, -0.0]),
                pa.nulls(3, pa.float64()), pa.array([None, 2.5]), pa.array([np.nan] * 2)):
        literals = _json_doubles(arr)
        rendered = ([literals] * len(arr) if isinstance(literals, str) else
                    literals.to_pylist())
        assert rendered == [_literal(v) for v in arr.to_pylist()]
