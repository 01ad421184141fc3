"""Creating topics returns only once the broker's metadata shows them ready.

A KRaft broker answers ``UNKNOWN_TOPIC_OR_PART`` for a moment after ``CreateTopics`` returns;
a job's first start read its progress topic in that moment once and failed. The broker's lag
cannot be produced on demand, so these tests script the admin client's answers.
"""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError

from sinks.kafka import admin as admin_module
from sinks.kafka.errors import ChangelogError


def _topic(*, leaders: tuple[int, ...] = (1,), error: KafkaError | None = None,
           partition_error: KafkaError | None = None):
    parts = {i: SimpleNamespace(id=i, leader=leader, error=partition_error)
             for i, leader in enumerate(leaders)}
    return SimpleNamespace(partitions=parts, error=error)


class _ScriptedAdmin:
    """An AdminClient whose metadata answers follow a script, one per ``list_topics`` call."""

    def __init__(self, script):
        self.script = list(script)
        self.listed = 0
        self.created: list[str] = []

    def list_topics(self, timeout=None):
        answer = self.script[min(self.listed, len(self.script) - 1)]
        self.listed += 1
        return SimpleNamespace(topics=answer)

    def create_topics(self, new_topics, **_kw):
        futures = {}
        for t in new_topics:
            self.created.append(t.topic)
            done: Future = Future()
            done.set_result(None)
            futures[t.topic] = done
        return futures


@pytest.fixture
def scripted(monkeypatch):
    def install(script):
        fake = _ScriptedAdmin(script)
        monkeypatch.setattr(admin_module, "AdminClient", lambda _conf: fake)
        monkeypatch.setattr(admin_module, "_READY_POLL_S", 0.0)
        return fake
    return install


UNKNOWN = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)


def test_the_progress_topic_is_waited_for_until_its_partition_has_a_leader(scripted):
    fake = scripted([
        {},                                # before creating: absent
        {"p": _topic(error=UNKNOWN)},      # just created: the broker does not know it yet
        {"p": _topic(leaders=(-1,))},      # known, no leader yet
        {"p": _topic()},                   # ready
    ])
    admin_module.ensure_compacted_topic("b:9092", "p", timeout_s=5)
    assert fake.created == ["p"]
    assert fake.listed == 4


def test_output_topics_are_waited_for_until_every_partition_has_a_leader(scripted):
    fake = scripted([
        {},
        {"a": _topic(leaders=(1, 1)), "b": _topic(leaders=(1, -1))},
        {"a": _topic(leaders=(1, 1)), "b": _topic(leaders=(1, 2))},
    ])
    admin_module.create_topics("b:9092", ["a", "b"], partitions=2, timeout_s=5)
    assert sorted(fake.created) == ["a", "b"]
    assert fake.listed == 3


def test_a_topic_that_never_becomes_ready_fails_with_its_name(scripted):
    scripted([{}, {"p": _topic(error=UNKNOWN)}])
    with pytest.raises(ChangelogError, match=r"\['p'\] created but not ready"):
        admin_module.ensure_compacted_topic("b:9092", "p", timeout_s=0.2)


def test_an_existing_topic_is_neither_created_nor_waited_for(scripted):
    fake = scripted([{"p": _topic()}])
    admin_module.ensure_compacted_topic("b:9092", "p", timeout_s=5)
    assert fake.created == []
    assert fake.listed == 1


def test_a_partition_with_a_follower_down_counts_as_ready(scripted):
    fake = scripted([
        {},
        {"p": _topic(partition_error=KafkaError(KafkaError.LEADER_NOT_AVAILABLE))},
        {"p": _topic(partition_error=KafkaError(KafkaError.REPLICA_NOT_AVAILABLE))},
    ])
    admin_module.ensure_compacted_topic("b:9092", "p", timeout_s=5)
    assert fake.listed == 3
