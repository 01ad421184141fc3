"""The Kafka client settings of a subcommand: options, the embedded default, redaction, probe.

Every subcommand that talks to Kafka calls :func:`kafka_settings` once, right after its
arguments are parsed: it builds the :class:`~revise.kafka.settings.KafkaSettings` of
``--bootstrap-servers`` / ``--kafka-config`` / ``--kafka-option`` (else the embedded broker; a
secure embedded broker is used as its ``revise`` user), makes every log line redact the
settings' secrets, and probes the cluster so that an unreachable or refusing cluster ends with
a clear error (exit 1) within ~25 s instead of a hang.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from revise.cli.args import embedded_bootstrap
from revise.kafka import (
    ENV_KAFKA_CONFIG,
    KafkaSettings,
    install_redaction,
    load_kafka_settings,
    probe_kafka,
    settings_from_args,
)
from revise.kafka.redact import RedactingFilter

__all__ = ["kafka_settings", "redact_text"]


def _embedded(args: argparse.Namespace, settings: KafkaSettings, *, start: bool) -> KafkaSettings:
    """``settings`` on the embedded broker; its ``revise`` user's file when it is secure."""
    from revise.infra import broker, secure

    address = embedded_bootstrap(None, start=start)
    cluster = broker.status()
    own = (getattr(args, "kafka_config", None) or getattr(args, "kafka_option", None)
           or os.environ.get(ENV_KAFKA_CONFIG))
    if cluster is not None and cluster.secure and not own:
        path = secure.load_material(Path(cluster.home)).client_file("revise")
        return load_kafka_settings(config_file=path).with_bootstrap(address)
    return settings.with_bootstrap(address)


def kafka_settings(args: argparse.Namespace, *, start: bool = False,
                   topics: Sequence[str] = (), probe: bool = True) -> KafkaSettings:
    """The subcommand's Kafka settings, with redaction installed and the cluster probed.

    Args:
        args: The parsed command line (with ``--bootstrap-servers`` and the options of
            :func:`~revise.kafka.settings.add_kafka_arguments`).
        start: Start the embedded broker when none is running and no address is given.
        topics: Topics whose authorization the probe checks (missing ones are fine).
        probe: Connect and fetch metadata now (False: only build the settings).

    Raises:
        ConfigError: a bad client setting (exit 2).
        KafkaAccessError: unreachable, TLS or SASL failure, or a topic not authorized (exit 1).
    """
    settings = settings_from_args(args, bootstrap_servers=getattr(args, "bootstrap_servers", None))
    install_redaction(settings.redactor)
    if settings.bootstrap_servers is None:
        settings = _embedded(args, settings, start=start)
        install_redaction(settings.redactor)
    if probe:
        probe_kafka(settings, topics=[t for t in topics if t])
    return settings


def redact_text(text: str) -> str:
    """``text`` with every secret known to the installed redaction filter as ``***``."""
    for flt in logging.getLogger().filters:
        if isinstance(flt, RedactingFilter):
            text = flt.redactor.text(text)
    return text
