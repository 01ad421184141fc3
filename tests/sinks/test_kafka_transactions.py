"""Facts about Kafka transactions on the real broker that the changelog relies on (issue 3).

Raw confluent-kafka clients, no revise code: what read_committed readers see of aborted,
committed and open transactions, offsets committed inside a transaction, and fencing.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

pytestmark = pytest.mark.kafka


def _producer(bootstrap: str, txn_id: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                  "retry.backoff.ms": 10, "linger.ms": 5})
    p.init_transactions(30)
    return p


def _read(bootstrap: str, topic: str, isolation: str, *, wait_s: float = 3.0) -> list[bytes]:
    """Everything a fresh consumer with this isolation level gets within wait_s (or until idle)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                  "isolation.level": isolation, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        # Assigned, not subscribed: a group join on a fresh broker first creates
        # __consumer_offsets, which can take longer than wait_s (this test then read nothing).
        partitions = c.list_topics(topic, timeout=10).topics[topic].partitions
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        out: list[bytes] = []
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            for m in c.consume(1000, timeout=0.2):
                if m.error() is None:
                    out.append(m.value())
        return out
    finally:
        c.close()


def test_aborted_records_are_invisible_and_committed_visible(kafka_bootstrap, new_topic):
    topic = new_topic("txn", partitions=1)
    p = _producer(kafka_bootstrap, uuid.uuid4().hex)
    p.begin_transaction()
    p.produce(topic, b"aborted-1")
    p.produce(topic, b"aborted-2")
    p.flush(10)  # really on the broker, then aborted
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"committed")
    p.commit_transaction(30)
    assert _read(kafka_bootstrap, topic, "read_committed") == [b"committed"]
    # The aborted records are in the log: a read_uncommitted reader sees them.
    assert sorted(_read(kafka_bootstrap, topic, "read_uncommitted")) == [
        b"aborted-1", b"aborted-2", b"committed"]


def test_offsets_sent_in_a_transaction_commit_with_it(kafka_bootstrap, new_topic):
    src, dst = new_topic("src", partitions=1), new_topic("dst", partitions=1)
    seed = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(5):
        seed.produce(src, str(i).encode())
    seed.flush(10)
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    c.subscribe([src])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        got += [m for m in c.consume(10, timeout=0.5) if m.error() is None]
    assert len(got) == 5
    p = _producer(kafka_bootstrap, uuid.uuid4().hex)
    tp = TopicPartition(src, 0)

    def process_in_txn(commit: bool) -> None:
        p.begin_transaction()
        for m in got:
            p.produce(dst, m.value())
        p.send_offsets_to_transaction([TopicPartition(src, 0, 5)], c.consumer_group_metadata(),
                                      30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)

    process_in_txn(commit=False)
    assert c.committed([tp], timeout=10)[0].offset < 0  # aborted: no offset committed
    process_in_txn(commit=True)
    assert c.committed([tp], timeout=10)[0].offset == 5  # committed together with the output
    c.close()
    assert _read(kafka_bootstrap, dst, "read_committed") == [str(i).encode() for i in range(5)]


def test_an_older_producer_with_the_same_transactional_id_is_fenced(kafka_bootstrap, new_topic):
    topic = new_topic("fence", partitions=1)
    txn_id = uuid.uuid4().hex
    old = _producer(kafka_bootstrap, txn_id)
    old.begin_transaction()
    old.produce(topic, b"zombie-open")
    old.flush(10)
    new = _producer(kafka_bootstrap, txn_id)  # fences `old` and aborts its open transaction
    with pytest.raises(KafkaException) as info:
        old.produce(topic, b"zombie-late")
        old.commit_transaction(30)
    err = info.value.args[0]
    assert err.fatal() or err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                         KafkaError.INVALID_PRODUCER_EPOCH)
    new.begin_transaction()
    new.produce(topic, b"new")
    new.commit_transaction(30)
    assert _read(kafka_bootstrap, topic, "read_committed") == [b"new"]


def test_an_open_transaction_holds_back_read_committed_readers(kafka_bootstrap, new_topic):
    topic = new_topic("lso", partitions=1)
    slow = _producer(kafka_bootstrap, uuid.uuid4().hex)
    fast = _producer(kafka_bootstrap, uuid.uuid4().hex)
    slow.begin_transaction()
    slow.produce(topic, b"slow")
    slow.flush(10)
    fast.begin_transaction()
    fast.produce(topic, b"fast")  # after `slow`'s record in the log
    fast.commit_transaction(30)
    # `fast` is committed, but it lies past the open transaction's first record (the last
    # stable offset): read_committed readers see nothing until `slow` ends.
    assert _read(kafka_bootstrap, topic, "read_committed", wait_s=2) == []
    assert sorted(_read(kafka_bootstrap, topic, "read_uncommitted", wait_s=2)) == [b"fast", b"slow"]
    slow.commit_transaction(30)
    assert _read(kafka_bootstrap, topic, "read_committed") == [b"slow", b"fast"]
