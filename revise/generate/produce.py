"""Writing a generated stream to Kafka (the test input; revise's outputs are :mod:`sinks`')."""

from __future__ import annotations

import time

from revise.errors import ReviseError
from revise.generate.stream import EventStream
from revise.kafka import KafkaSettings

__all__ = ["ProduceError", "produce"]


class ProduceError(ReviseError, RuntimeError):
    """Generated records could not be delivered to Kafka."""


def produce(
    stream: EventStream,
    *,
    bootstrap_servers: str,
    topic: str,
    rate: float | None = None,
    partitions: int | None = None,
    kafka: KafkaSettings | None = None,
) -> int:
    """Write ``stream`` to ``topic`` (created if missing) with an idempotent producer.

    Records are keyed by their key (bad ones too, when they have one), so one key's records
    stay in one partition in arrival order. ``rate`` (records/s) paces the writes; None: as fast
    as possible. ``kafka``: the user's client settings (SASL, TLS …; None: plaintext).
    Returns the number of records written.
    """
    from confluent_kafka import Producer

    from sinks.kafka import client_logging, create_topics

    settings = (kafka or KafkaSettings(None)).with_bootstrap(bootstrap_servers)
    create_topics(bootstrap_servers, [topic], partitions=partitions or 4,
                  client_config=settings.admin_conf())
    producer = Producer({
        **settings.producer_conf(),
        **client_logging(),
        "enable.idempotence": True,
        "linger.ms": 20,
        "batch.num.messages": 10000,
        "queue.buffering.max.messages": 500000,
        "compression.type": "lz4",
    })
    t0 = time.monotonic()
    for i, (key, payload) in enumerate(zip(stream.keys, stream.payloads, strict=True)):
        if rate:
            ahead = i / rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
        while True:
            try:
                producer.produce(topic, value=payload, key=str(key).encode())
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    if remaining:
        msg = f"{remaining} records were not delivered to {topic} within 60s"
        raise ProduceError(msg)
    return len(stream)
