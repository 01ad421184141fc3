"""What was known when: the views as of an emission time or a watermark (SPEC §7).

``revise query --as-known-at T`` and ``--as-of-watermark MS`` answer from the ``revisions``
history of the current tables, as a consumer of the changelog knew the run at that point —
unlike ``--as-of-version`` / ``--as-of-timestamp``, which read the Delta tables as they were
committed (and so trail the changelog by a Delta commit interval). A revision is *known* at the
point when its ``emitted_at_ms <= T`` (``--as-known-at``, wall-clock epoch ms) or its
``watermark_ms <= MS`` (``--as-of-watermark``, event-time epoch ms). Every table the query sees
is re-derived from the known revisions:

- ``revisions`` (``revision_history``): the known revisions.
- ``latest``: per ``(query_id, key, window_start_ms, window_end_ms)`` its highest known
  revision, left out when that revision is retracted (superseded session bounds), as the Delta
  ``latest`` table keeps it; ``final_windows`` / ``provisional_windows`` are its rows whose known
  latest revision is / is not final.
- ``late`` (``late_records``): ``--as-of-watermark``: the too-late records judged at a watermark
  ``<= MS`` (their own ``watermark_ms``). ``--as-known-at``: too-late records carry no emission
  time; a record's micro-batch counts as done by T when the query has a known revision from that
  batch or a later one (``batch_id <=`` the highest ``batch_id`` among its known revisions; a
  micro-batch's revisions, late records and dead letters are written together, one
  ``emitted_at_ms`` per batch). A batch that emitted no revision is thus counted from the next
  batch that does.
- ``dead_letter`` (``dead_letters``): by the same batch rule, the highest ``batch_id`` among the
  query's known revisions and known too-late records.

Trace (tumbling 10 s, grace 0, window ``[0, 10000)`` of key ``a``): rev 0 EARLY emitted at
t=100 (watermark 4000), rev 1 EARLY at t=200 (watermark 8000), rev 2 FINAL at t=300 (watermark
12000) → ``--as-known-at 150``: provisional rev 0; ``--as-known-at 250``: provisional rev 1;
``--as-known-at 300``: final rev 2; ``--as-known-at 50``: the window is not known at all.

Both engines (:mod:`revise.query.views` on Spark, :mod:`revise.query.local` in-process) run the
SQL of :func:`known_tables_sql`; it selects ``*`` so it keeps every revision column, whatever
the run's schema has.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from revise.errors import ConfigError
from revise.vocab import LATEST_KEY, TABLE_NAMES

__all__ = ["KnownAt", "check_one_point", "known_point", "known_tables_sql", "parse_time_ms"]

_OPTIONS: Final = {"emitted_at_ms": "--as-known-at", "watermark_ms": "--as-of-watermark"}
_INTEGER: Final = re.compile(r"^-?\d+$")
_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True, slots=True)
class KnownAt:
    """A point of a run's history: the revisions whose ``column <= at_ms`` are known.

    Attributes:
        column: ``emitted_at_ms`` (``--as-known-at``, wall clock) or ``watermark_ms``
            (``--as-of-watermark``, event time).
        at_ms: The point, epoch ms (inclusive).
    """

    column: Literal["emitted_at_ms", "watermark_ms"]
    at_ms: int

    @property
    def option(self) -> str:
        """The ``revise query`` option that names this point."""
        return _OPTIONS[self.column]

    def describe(self) -> str:
        """The point as errors name it: ``--as-known-at 1767225600000``."""
        return f"{self.option} {self.at_ms}"


def parse_time_ms(when: str | dt.datetime, option: str) -> int:
    """``when`` in epoch ms (floored); a naive time is UTC (Spark's session time zone).

    Args:
        when: ``'2026-01-01 10:00:00'``, ISO 8601 with a zone (``Z``, ``+01:00``), or a datetime.
        option: The option it came from, for the error.

    Raises:
        ConfigError: ``when`` is not a time.
    """
    if isinstance(when, dt.datetime):
        parsed = when
    else:
        text = str(when).strip()
        try:
            parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            msg = (f"{option} {when!r} is not a timestamp; write e.g. "
                   "'2026-01-01 10:00:00' (UTC) or '2026-01-01T10:00:00+01:00'")
            raise ConfigError(msg) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return (parsed - _EPOCH) // dt.timedelta(milliseconds=1)


def _integer(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _INTEGER.match(value.strip()):
        return int(value.strip())
    return None


def known_point(
    *,
    known_at: int | str | dt.datetime | None = None,
    watermark: int | str | None = None,
) -> KnownAt | None:
    """The point ``known_at`` or ``watermark`` names (None when neither is given).

    Args:
        known_at: Emission time: epoch ms (an int or integer text) or a time as
            ``--as-of-timestamp`` takes it (``'2026-01-01 10:00:00'``, UTC unless it names a
            zone, or a datetime).
        watermark: A watermark, epoch ms (an int or integer text).

    Raises:
        ConfigError: Both given, or a value that is not a time / an integer.
    """
    if known_at is not None and watermark is not None:
        msg = "give --as-known-at or --as-of-watermark, not both"
        raise ConfigError(msg)
    if watermark is not None:
        ms = _integer(watermark)
        if ms is None:
            msg = (f"--as-of-watermark {watermark!r} is not an integer; give a watermark in "
                   "epoch ms, e.g. --as-of-watermark 1767225600000")
            raise ConfigError(msg)
        return KnownAt("watermark_ms", ms)
    if known_at is not None:
        ms = _integer(known_at)
        if ms is None:
            if not isinstance(known_at, str | dt.datetime):
                msg = f"--as-known-at {known_at!r} is not a time; give epoch ms or a timestamp"
                raise ConfigError(msg)
            ms = parse_time_ms(known_at, "--as-known-at")
        return KnownAt("emitted_at_ms", ms)
    return None


def check_one_point(
    *,
    version: object = None,
    timestamp: object = None,
    known_at: object = None,
    watermark: object = None,
) -> None:
    """At most one of the four points of ``revise query`` may be given.

    Raises:
        ConfigError: Two or more given (the message names them).
    """
    given = [opt for opt, value in (("--as-of-version", version),
                                    ("--as-of-timestamp", timestamp),
                                    ("--as-known-at", known_at),
                                    ("--as-of-watermark", watermark)) if value is not None]
    if len(given) > 1:
        how = "not both" if len(given) == 2 else "only one"
        msg = (f"{' and '.join(given)} were given; give one of --as-of-version, "
               f"--as-of-timestamp, --as-known-at, --as-of-watermark, {how}")
        raise ConfigError(msg)


def known_tables_sql(source: Mapping[str, str], point: KnownAt) -> dict[str, str]:
    """The SQL of each of :data:`TABLE_NAMES` as known at ``point``, in creation order.

    Create each as a view under the table's own name, in the order returned: the later ones
    read the earlier views by name (``latest``, ``late`` and ``dead_letter`` read ``revisions``;
    ``dead_letter`` reads ``late``). The SQL is the same on Spark and DataFusion.

    Args:
        source: Each table's full, current contents as the engine names them in SQL
            (Spark: ``delta.`<root>/revisions```; DataFusion: a registered table).
        point: What counts as known.

    Returns:
        ``{"revisions": …, "late": …, "latest": …, "dead_letter": …}``.
    """
    keys = ", ".join(LATEST_KEY)
    same_window = " AND ".join(f"r.{c} = m.{c}" for c in LATEST_KEY)
    if point.column == "watermark_ms":
        late = f"SELECT * FROM {source['late']} WHERE watermark_ms <= {point.at_ms}"
    else:
        late = (f"SELECT l.* FROM {source['late']} AS l JOIN (SELECT query_id, "
                "max(batch_id) AS known_batch FROM revisions GROUP BY query_id) AS b "
                "ON l.query_id = b.query_id WHERE l.batch_id <= b.known_batch")
    out = {
        "revisions": f"SELECT * FROM {source['revisions']} WHERE {point.column} <= {point.at_ms}",
        "late": late,
        "latest": (
            f"SELECT r.* FROM revisions AS r JOIN (SELECT {keys}, max(revision) AS "
            f"known_revision FROM revisions GROUP BY {keys}) AS m ON {same_window} "
            "AND r.revision = m.known_revision WHERE NOT r.retracted"
        ),
        "dead_letter": (
            f"SELECT d.* FROM {source['dead_letter']} AS d JOIN (SELECT query_id, "
            "max(batch_id) AS known_batch FROM (SELECT query_id, batch_id FROM revisions "
            "UNION ALL SELECT query_id, batch_id FROM late) AS k GROUP BY query_id) AS b "
            "ON d.query_id = b.query_id WHERE d.batch_id <= b.known_batch"
        ),
    }
    assert set(out) == set(TABLE_NAMES)
    return out
