"""Outputs of revise: the transactional Kafka changelog and the Delta Lake tables.

Both are written by the job's driver from one micro-batch held as Arrow tables, Kafka first:

- :mod:`sinks.kafka_changelog` — one Kafka transaction per micro-batch (revisions, too-late
  records, dead letters and a progress marker), ``transactional.id`` = ``revise-<query_id>``;
  a batch whose marker is committed is skipped on replay.
- :mod:`sinks.delta_tables` — the tables ``revisions``, ``latest``, ``late``, ``dead_letter``
  written by delta-rs, each write tagged with the app transaction (query, batch) so a replay
  changes nothing; the SQL views over them (read by Spark).

Each module's docstring states its guarantee and how it holds. This is the only package that
imports ``confluent_kafka`` and ``deltalake`` for writing; it knows revise's record types
(:mod:`revise.records`) and nothing else of it. The Delta module is imported lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sinks.kafka_changelog import (
    ChangelogCommitError,
    ChangelogConfig,
    ChangelogError,
    CommitResult,
    ProducerFencedError,
    TransactionalChangelog,
    decode_dead_letter,
    decode_late,
    decode_revision,
    encode_dead_letters,
    encode_late,
    encode_revisions,
    read_committed,
)

if TYPE_CHECKING:
    from sinks.delta_tables import VIEW_NAMES, DeltaTables, register_views, view_sql

__all__ = [
    "VIEW_NAMES",
    "ChangelogCommitError",
    "ChangelogConfig",
    "ChangelogError",
    "CommitResult",
    "DeltaTables",
    "ProducerFencedError",
    "TransactionalChangelog",
    "decode_dead_letter",
    "decode_late",
    "decode_revision",
    "encode_dead_letters",
    "encode_late",
    "encode_revisions",
    "read_committed",
    "register_views",
    "view_sql",
]

_DELTA = {"VIEW_NAMES", "DeltaTables", "register_views", "view_sql"}


def __getattr__(name: str) -> Any:
    if name in _DELTA:
        from sinks import delta_tables

        return getattr(delta_tables, name)
    msg = f"module 'sinks' has no attribute {name!r}"
    raise AttributeError(msg)
