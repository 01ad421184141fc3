"""Outputs of revise: the transactional Kafka changelog and the Delta Lake tables.

Guarantees (SPEC §5):

- **The changelog is transactional.** Each micro-batch's revisions, too-late records, dead
  letters and a progress marker ``(query_id, batch_id)`` are written in one Kafka transaction
  by a producer whose ``transactional.id`` is ``revise-<query_id>``. A ``read_committed``
  consumer sees every revision exactly once, across crashes, restarts and zombie instances (a
  new instance fences the old one), and the revisions of one window in increasing order (one
  window = one key = one partition). A batch whose marker is already committed is skipped.
- **The Delta tables are idempotent on replay.** ``revisions``, ``late`` and ``dead_letter``
  are appended with Delta's idempotent writes (``txnAppId`` = the query, ``txnVersion`` = the
  batch id); ``latest`` is MERGEd under the same transaction identifiers and only ever accepts a
  higher revision of a window. Replaying a micro-batch changes nothing in any table.

This is the only package that imports ``confluent_kafka`` and ``delta``; it knows revise's record
types (:mod:`revise.records`) and nothing else of it. The Delta module is imported lazily so the
changelog can be used without Spark.
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
