"""Where the engine's inputs are in a record: ``--key-field``, ``--ts-field``, ``--ts-format``.

Pure (no Spark): the job's configuration validates these options with it before Spark starts;
:mod:`revise.spark.fields` turns an :class:`InputSpec` into the SQL that classifies records, and
docs/FIELDS.md states the rules. A field is a dotted path into nested JSON objects
(``payload.user.id``); several key fields group by all of them (the key is a JSON array text).

Trace: ``InputSpec.build(key_field="store,region", ts_field="@timestamp",
aggs=AggList.parse("sum(amount),distinct(user)"))`` → key fields ``("store", "region")``,
Kafka record time, numeric ``("amount",)``, distinct ``("user",)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from revise.aggspec import AggList, field_column
from revise.errors import ConfigError

__all__ = ["KAFKA_TIMESTAMP", "TS_FORMATS", "InputSpec", "TsFormat", "parse_key_fields",
           "spark_path", "variant_path"]

TsFormat = Literal["epoch_ms", "epoch_s", "epoch_us", "iso8601"]
TS_FORMATS: tuple[str, ...] = get_args(TsFormat)
"""The ``--ts-format`` values."""
KAFKA_TIMESTAMP = "@timestamp"
"""``--ts-field`` value naming the Kafka record timestamp instead of a JSON field."""

def parse_key_fields(text: str) -> tuple[str, ...]:
    """``"store, region"`` → ``("store", "region")``: the ``--key-field`` list.

    Raises:
        ConfigError: On an empty list or member, or a repeated field.
    """
    fields = tuple(p.strip() for p in text.split(","))
    if not any(fields) or "" in fields:
        msg = f'--key-field "{text}" has an empty field; write e.g. user or store,region'
        raise ConfigError(msg)
    if len(set(fields)) != len(fields):
        msg = f'--key-field "{text}" repeats a field; list each once, e.g. store,region'
        raise ConfigError(msg)
    return fields


def variant_path(field: str, option: str) -> str:
    """``a.b`` → ``$['a']['b']`` (each segment quoted as :func:`spark_path` does).

    Raises:
        ConfigError: An empty segment, or a name Spark's path syntax cannot address.
    """
    segments = field.split(".")
    if not all(segments):
        msg = f'{option} "{field}" has an empty path segment; write e.g. payload.user.id'
        raise ConfigError(msg)
    try:
        return "$" + "".join(spark_path(s)[1:] for s in segments)
    except ValueError as e:
        msg = f'{option} "{field}": {e}; rename the field in the input'
        raise ConfigError(msg) from e


@dataclass(frozen=True, slots=True)
class InputSpec:
    """Where each input of the engine is in a record, validated on construction.

    Attributes:
        key_fields: Dotted paths grouped by (one → the string itself; several → a JSON array).
        ts_field: Dotted path of the event time, or ``@timestamp`` for Kafka's timestamp.
        ts_format: ``epoch_ms``, ``epoch_s``, ``epoch_us`` or ``iso8601``.
        numeric_fields: Paths read as finite float64 (for sum/min/max/mean/pNN).
        distinct_fields: Paths read as canonical text (for distinct).
        value_field: The bare ``--aggs`` form's ``--value-field``: the parse gives its number
            as a ``value`` column (0.0 where no aggregate needs it and it is not a finite
            number), which late records carry; ``None`` in the ``FN(FIELD)`` form.
    """

    key_fields: tuple[str, ...] = ("key",)
    ts_field: str = "ts"
    ts_format: TsFormat = "epoch_ms"
    numeric_fields: tuple[str, ...] = ()
    distinct_fields: tuple[str, ...] = ()
    value_field: str | None = None

    def __post_init__(self) -> None:
        if not self.key_fields or len(set(self.key_fields)) != len(self.key_fields):
            msg = f"key_fields must be non-empty and unique, got {self.key_fields!r}"
            raise ConfigError(msg)
        if self.ts_format not in get_args(TsFormat):
            msg = (f"--ts-format must be one of {', '.join(get_args(TsFormat))}, got "
                   f"{self.ts_format!r}; epoch_ms is the default")
            raise ConfigError(msg)
        for f in self.key_fields:
            variant_path(f, "--key-field")
        if self.ts_field != KAFKA_TIMESTAMP:
            variant_path(self.ts_field, "--ts-field")
        for f in (*self.numeric_fields, *self.distinct_fields):
            variant_path(f, "--aggs field")
        names = [self.numeric_column(f) for f in self.numeric_fields] + [
            self.distinct_column(f) for f in self.distinct_fields]
        if len(set(names)) != len(names):
            msg = (f"aggregated fields {self.numeric_fields + self.distinct_fields!r} give "
                   "two fields the same column; a.b and a_b cannot both be aggregated")
            raise ConfigError(msg)

    @staticmethod
    def build(*, key_field: str = "key", ts_field: str = "ts", ts_format: str = "epoch_ms",
              aggs: AggList) -> InputSpec:
        """The spec of the options ``--key-field``, ``--ts-field``, ``--ts-format``, ``--aggs``."""
        return InputSpec(parse_key_fields(key_field), ts_field.strip(),
                         ts_format.strip().lower(),  # type: ignore[arg-type]
                         aggs.numeric_fields, aggs.distinct_fields,
                         aggs.value_field if aggs.bare else None)

    @property
    def plain(self) -> bool:
        """Whether this is the shape ``revise.spark.parse.classify`` reads (``FastParse``).

        That is a ``value_field`` with one top-level key field, a top-level ``epoch_ms``
        event-time field and top-level fields only: ``InputSpec(value_field="value")`` (key
        ``key``, ts ``ts``, number ``value``) is one.
        """
        return (self.value_field is not None and len(self.key_fields) == 1
                and self.ts_format == "epoch_ms" and self.ts_field != KAFKA_TIMESTAMP
                and not self.distinct_fields
                and all("." not in f for f in (*self.key_fields, self.ts_field,
                                               *self.numeric_fields)))

    @staticmethod
    def numeric_column(field: str) -> str:
        """Output column of a numeric field: ``payload.ms`` → ``num_payload_ms`` (double)."""
        return f"num_{field_column(field)}"

    @staticmethod
    def distinct_column(field: str) -> str:
        """Output column of a distinct field: ``ev.user`` → ``dst_ev_user`` (string)."""
        return f"dst_{field_column(field)}"

    @property
    def columns(self) -> tuple[str, ...]:
        """Columns of :func:`classify_fields`, in order."""
        return ("raw_value", "topic", "partition", "offset", "timestamp", "reason", "key",
                "ts_ms", *map(self.numeric_column, self.numeric_fields),
                *map(self.distinct_column, self.distinct_fields))


def spark_path(field: str) -> str:
    """The ``variant_get`` path of one field name (no dots taken as nesting).

    Spark's path syntax has no escapes: a backslash is taken verbatim and a quote always ends
    the name, so the name goes inside whichever quotes it does not contain, or after a dot.

    Raises:
        ValueError: The name holds both quote characters and a ``.`` or ``[``.
    """
    if "'" not in field:
        return f"$['{field}']"
    if '"' not in field:
        return f'$["{field}"]'
    if "." not in field and "[" not in field:
        return f"$.{field}"
    msg = f"field name {field!r} cannot be addressed in a Spark variant path"
    raise ValueError(msg)
