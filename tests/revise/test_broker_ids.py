"""The embedded broker's cluster ids, which the storage tool takes on its command line."""

from __future__ import annotations

import uuid

import pytest

from revise.infra import broker_node


def test_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    # 0xF8 as the first byte encodes to "-" (62) in url-safe base64: Kafka's storage tool would
    # read "-t -…" as a missing value; the id is drawn again, as Kafka's Uuid.randomUuid does
    draws = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x10" + bytes(15))])
    monkeypatch.setattr(broker_node.uuid, "uuid4", lambda: next(draws))
    cid = broker_node.new_cluster_id()
    assert cid == "EAAAAAAAAAAAAAAAAAAAAA"


def test_cluster_ids_are_22_url_safe_characters() -> None:
    ids = {broker_node.new_cluster_id() for _ in range(2_000)}
    assert len(ids) == 2_000
    assert all(len(c) == 22 and not c.startswith("-") for c in ids)
