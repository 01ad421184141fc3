"""The Kafka client settings of a job: one file for every client, translated per library.

``settings`` loads ``--kafka-config`` / ``--kafka-option`` into :class:`KafkaSettings`,
``translate`` turns one property set into librdkafka and Java (Spark source) settings,
``keys`` lists the property names each library knows, ``redact`` keeps secrets out of logs and
Spark's output, and ``errors`` turns a client error into one clear line and probes a cluster.

Example:
    >>> settings = load_kafka_settings(bootstrap_servers="localhost:9092", environ={})
    >>> settings.producer_conf()["bootstrap.servers"]
    'localhost:9092'
"""

from __future__ import annotations

from revise.kafka.errors import KafkaAccessError, explain_kafka_error, probe_kafka
from revise.kafka.redact import Redactor, install_redaction, spark_redaction_conf
from revise.kafka.settings import (
    ENV_KAFKA_CONFIG,
    SPARK_SOURCE_DEFAULTS,
    KafkaSettings,
    add_kafka_arguments,
    load_kafka_settings,
    render_client_configs,
    revise_client_configs,
    settings_from_args,
)

__all__ = [
    "ENV_KAFKA_CONFIG",
    "SPARK_SOURCE_DEFAULTS",
    "KafkaAccessError",
    "KafkaSettings",
    "Redactor",
    "add_kafka_arguments",
    "explain_kafka_error",
    "install_redaction",
    "load_kafka_settings",
    "probe_kafka",
    "render_client_configs",
    "revise_client_configs",
    "settings_from_args",
    "spark_redaction_conf",
]
