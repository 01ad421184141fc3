"""``revise.aggspec``: the ``--aggs`` syntax of SPEC §7, its columns, types and errors."""

from __future__ import annotations

import pyarrow as pa
import pytest

from revise.aggspec import AggList, AggSpec, field_column
from revise.errors import ConfigError


def test_call_form_columns_fields_and_kinds():
    aggs = AggList.parse("count,sum(amount),mean(amount),max(latency_ms),p99(latency_ms),"
                         "distinct(user)")
    assert not aggs.bare
    assert aggs.columns == ("count", "sum_amount", "mean_amount", "max_latency_ms",
                            "p99_latency_ms", "distinct_user")
    assert aggs.numeric_fields == ("amount", "latency_ms")
    assert aggs.distinct_fields == ("user",)
    assert aggs.value_required
    assert aggs.specs[0] == AggSpec("count", None, "count", "count")
    assert aggs.specs[4] == AggSpec("p99", "latency_ms", "p99_latency_ms", "numeric")
    assert aggs.specs[4].percentile == 99 and aggs.specs[1].percentile is None
    assert aggs.specs[5] == AggSpec("distinct", "user", "distinct_user", "distinct")


def test_dotted_paths_become_underscores():
    aggs = AggList.parse("distinct(ev.user), p50( http.latency_ms ),sum(a.b.c)")
    assert aggs.columns == ("distinct_ev_user", "p50_http_latency_ms", "sum_a_b_c")
    assert aggs.numeric_fields == ("http.latency_ms", "a.b.c")
    assert aggs.distinct_fields == ("ev.user",)
    assert field_column("payload.user.id") == "payload_user_id"


def test_bare_form_is_the_same_specs_on_the_value_field_named_by_function():
    aggs = AggList.parse("count,sum,min,max,mean", value_field="payload.v")
    assert aggs.bare and aggs.value_field == "payload.v"
    assert aggs.specs[1] == AggSpec("sum", "payload.v", "sum", "numeric")
    assert [s.name for s in aggs.specs] == ["count", "sum", "min", "max", "mean"]
    assert [s.name for s in AggList.parse("count,sum(payload.v)").specs] == [
        "count", "sum(payload.v)"]
    assert aggs.columns == ("count", "sum", "min", "max", "mean")
    assert aggs.numeric_fields == ("payload.v",) and aggs.distinct_fields == ()
    assert [s.field for s in aggs.specs] == [None, *["payload.v"] * 4]
    assert str(aggs) == "count,sum,min,max,mean"
    assert AggList.parse(" SUM , Count ").columns == ("sum", "count")


def test_count_alone_needs_no_value():
    aggs = AggList.parse("count")
    assert aggs.columns == ("count",) and not aggs.value_required
    assert aggs.numeric_fields == () and aggs.distinct_fields == ()


def test_distinct_alone_requires_its_field_only():
    aggs = AggList.parse("distinct(user)")
    assert aggs.value_required and aggs.numeric_fields == ()


@pytest.mark.parametrize("text", ["count,sum(amount),p99(latency_ms),distinct(ev.user)",
                                  "p1(x),p5(x),p95(x)", "count,sum,mean"])
def test_text_round_trip(text):
    aggs = AggList.parse(text)
    assert str(aggs) == text and AggList.parse(str(aggs)) == aggs


def test_arrow_types_and_prev_columns():
    aggs = AggList.parse("count,sum(a),min(a),max(a),mean(a),p95(a),distinct(u)")
    types = {s.column: s.arrow_type for s in aggs.specs}
    assert types == {"count": pa.int64(), "sum_a": pa.float64(), "min_a": pa.float64(),
                     "max_a": pa.float64(), "mean_a": pa.float64(), "p95_a": pa.float64(),
                     "distinct_u": pa.int64()}
    fields = aggs.arrow_fields()
    assert [f.name for f in fields] == [*aggs.columns, *(f"prev_{c}" for c in aggs.columns)]
    assert all(f.nullable for f in fields)
    assert fields[len(aggs.columns)].type == pa.int64()
    bare = AggList.parse("count,sum,min,max,mean")
    assert [(f.name, f.type) for f in bare.arrow_fields()[:5]] == [
        ("count", pa.int64()), ("sum", pa.float64()), ("min", pa.float64()),
        ("max", pa.float64()), ("mean", pa.float64())]


@pytest.mark.parametrize(("text", "message"), [
    ("", 'names no aggregate; write e.g. count,sum\\(amount\\)'),
    (" , ", "names no aggregate"),
    ("count,,sum", "has an empty item between commas"),
    ("median(x)", "unknown aggregate 'median'; choose from count, sum, min, max, mean, pNN"),
    ("avg", "unknown aggregate 'avg'"),
    ("p0(x)", "percentile 'p0' must be p1 ... p99"),
    ("p100(x)", "percentile 'p100' must be p1 ... p99"),
    ("p5.5(x)", "percentile 'p5.5' must be p1 ... p99"),
    ("p05(x)", "without a leading zero"),
    ("p99", "p99 needs a field; write p99\\(FIELD\\), e.g. p99\\(value\\)"),
    ("distinct", "distinct needs a field; write distinct\\(FIELD\\)"),
    ("count(x)", "count takes no field"),
    ("sum()", "field '' of 'sum\\(\\)' must be a dotted path"),
    ("sum(a..b)", "field 'a..b' of 'sum\\(a..b\\)' must be a dotted path"),
    ("sum(a-b)", "must be a dotted path of names made of letters, digits and _"),
    ("sum(a", "cannot read 'sum\\(a'"),
    ("sum,p99(x)", "mixes the bare form \\(sum, which aggregates --value-field\\) with "
                   "FN\\(FIELD\\) \\(p99\\(x\\)\\); use one form, e.g. sum\\(value\\),p99\\(x\\)"),
    ("count,sum,count", "asks twice for column 'count'"),
    ("sum(a),SUM(a)", "asks twice for column 'sum_a'"),
    ("sum(a.b),max(a_b)", "fields 'a.b' and 'a_b' would both be named 'a_b'"),
    ("sum(a.b),distinct(a_b)", "would both be named 'a_b'"),
])
def test_errors_say_what_and_how_to_fix(text, message):
    with pytest.raises(ConfigError, match=message):
        AggList.parse(text)


def test_not_text_is_a_config_error():
    with pytest.raises(ConfigError, match="must be text"):
        AggList.parse(None)  # type: ignore[arg-type]
