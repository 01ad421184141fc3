"""What the subcommands share: environment defaults, coercions, common option groups.

Every option also reads ``REVISE_<OPTION>`` from the environment (:class:`EnvDefaults`).
Values may arrive typed (from argparse ``type=``) or as text (from those environment
defaults, which argparse does not convert); the ``maybe_*`` coercions accept both.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from revise.aggspec import AggList
from revise.config import EngineConfig, WindowSpec, parse_duration
from revise.errors import ConfigError
from revise.generate import GeneratorConfig
from revise.vocab import MODES, Mode

__all__ = [
    "EnvDefaults",
    "absolute_path",
    "add_engine_options",
    "add_field_options",
    "add_generator_options",
    "duration_type",
    "embedded_bootstrap",
    "engine_config",
    "generator_config",
    "maybe_duration",
    "maybe_float",
    "maybe_int",
]


class EnvDefaults(argparse.ArgumentParser):
    """An ArgumentParser whose options fall back to ``REVISE_<OPTION>`` environment variables."""

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        """Add the option; its default comes from ``REVISE_<OPTION>`` when that is set."""
        long = next((a for a in args if isinstance(a, str) and a.startswith("--")), None)
        if long is not None and kwargs.get("action") not in ("help", "version"):
            env = "REVISE_" + long[2:].upper().replace("-", "_")
            if env in os.environ:
                raw = os.environ[env]
                if kwargs.get("action") == "store_true":
                    kwargs["default"] = raw.strip().lower() in ("1", "true", "yes", "on")
                else:
                    kwargs["default"] = raw
                    kwargs["required"] = False
            help_text = kwargs.get("help")
            if help_text is not None and help_text is not argparse.SUPPRESS:
                kwargs["help"] = f"{help_text} [env {env}]"
        return super().add_argument(*args, **kwargs)


def embedded_bootstrap(given: str | None, *, start: bool = False) -> str:
    """The given bootstrap servers, else the running embedded broker's (optionally started)."""
    if given:
        return given
    from revise.infra import broker

    cluster = broker.status()
    if cluster is None and start:
        cluster = broker.start()
    if cluster is None:
        msg = (
            "--bootstrap-servers is required: no embedded broker is running "
            "(start one with `revise broker start`, or pass HOST:PORT)"
        )
        raise ConfigError(msg)
    return cluster.bootstrap_servers


def add_engine_options(p: argparse.ArgumentParser, *, mode: bool = True) -> None:
    """The options of :class:`~revise.config.EngineConfig` (``--mode`` only if ``mode``)."""
    p.add_argument("--window", required=True,
                   help="tumbling:SIZE | hopping:SIZE:ADVANCE | session:GAP")
    p.add_argument("--grace", required=True, type=duration_type("--grace"),
                   help="how long after window end late records still correct it")
    p.add_argument("--watermark-delay", default="0ms", type=duration_type("--watermark-delay"),
                   help="watermark = max event time - this (default 0ms)")
    p.add_argument("--aggs", default="count,sum,min,max,mean",
                   help="aggregates: count and FN(FIELD), FN in sum, min, max, mean, pNN "
                        "(percentile, p1-p99), distinct, e.g. count,sum(amount),"
                        "p99(latency_ms),distinct(user); or the bare count,sum,min,max,mean "
                        "of --value-field (default)")
    if mode:
        p.add_argument("--mode", choices=MODES, default="revision",
                       help="revision: every change then FINAL; watermark: FINAL only")
    p.add_argument("--emit-min-change",
                   help="revision mode: emit a window's next EARLY/LATE revision only when "
                        "some --aggs column changed by at least this relative amount since "
                        "its last emitted revision (0.1 = 10%%; from 0 any change counts); "
                        "revision 0, retractions and FINALs always go out")
    p.add_argument("--emit-every", type=duration_type("--emit-every"),
                   help="revision mode: at most one EARLY/LATE revision of a window per this "
                        "much watermark progress (e.g. 10s); revision 0, retractions and "
                        "FINALs always go out")


def add_field_options(p: argparse.ArgumentParser) -> None:
    """Where the inputs are in a record (docs/FIELDS.md): key, event time, value, time format."""
    p.add_argument("--key-field", default="key",
                   help="JSON field of the key; a dotted path reads nested objects "
                        "(payload.user.id); a,b groups by several (the key is a JSON array)")
    p.add_argument("--ts-field", default="ts",
                   help="JSON field (dotted path) of the event time, or @timestamp for the "
                        "Kafka record timestamp")
    p.add_argument("--ts-format", default="epoch_ms",
                   help="epoch_ms (default) | epoch_s | epoch_us | iso8601 (with Z or an offset)")
    p.add_argument("--value-field", default="value",
                   help="JSON field (dotted path) the bare --aggs form aggregates")


def engine_config(args: argparse.Namespace, *, mode: Mode = "revision",
                  query_id: str = "revise") -> EngineConfig:
    """The :class:`~revise.config.EngineConfig` of :func:`add_engine_options`' options.

    ``--aggs`` in either form (``revise.aggspec``); the bare form aggregates ``--value-field``
    where the command has one.
    """
    value_field = (getattr(args, "value_field", None) or "value").strip()
    return EngineConfig(
        window=WindowSpec.parse(args.window),
        grace_ms=maybe_duration(args.grace, "--grace") or 0,
        watermark_delay_ms=maybe_duration(args.watermark_delay, "--watermark-delay") or 0,
        aggs=AggList.parse(args.aggs, value_field=value_field),
        mode=mode,
        query_id=query_id,
        emit_min_change=maybe_float(getattr(args, "emit_min_change", None),
                                    "--emit-min-change"),
        emit_every_ms=maybe_duration(getattr(args, "emit_every", None), "--emit-every"),
    )


def add_generator_options(p: argparse.ArgumentParser, *, events_required: bool = True,
                          keys: int = 100, disorder: str = "0ms", late_fraction: float = 0.0,
                          late_by: str = "1m", events_help: str = "number of records") -> None:
    """The options of :class:`~revise.generate.GeneratorConfig`, with per-command defaults."""
    p.add_argument("--events", type=int, required=events_required, help=events_help)
    p.add_argument("--keys", type=int, default=keys, help="distinct keys")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--disorder", default=disorder, type=duration_type("--disorder"),
                   help="max event-time disorder")
    p.add_argument("--late-fraction", type=float, default=late_fraction,
                   help="share of late records")
    p.add_argument("--late-by", default=late_by, type=duration_type("--late-by"),
                   help="scale of the heavy-tailed lateness")
    p.add_argument("--bad-fraction", type=float, default=0.0, help="share of malformed records")


def generator_config(args: argparse.Namespace, *, default_events: int = 0) -> GeneratorConfig:
    """The :class:`~revise.generate.GeneratorConfig` of :func:`add_generator_options`' options."""
    events = maybe_int(args.events, "--events")
    step = maybe_duration(getattr(args, "step", None), "--step")  # compare's option only
    return GeneratorConfig(
        events=default_events if events is None else events,
        keys=maybe_int(args.keys, "--keys") or 1,
        seed=maybe_int(args.seed, "--seed") or 0,
        disorder_ms=maybe_duration(args.disorder, "--disorder") or 0,
        late_fraction=maybe_float(args.late_fraction, "--late-fraction") or 0.0,
        late_by_ms=maybe_duration(args.late_by, "--late-by") or 0,
        bad_fraction=maybe_float(args.bad_fraction, "--bad-fraction") or 0.0,
        **({} if step is None else {"step_ms": step}),
    )


def duration_type(option: str) -> Callable[[str], int]:
    """An argparse ``type=`` that parses ``500ms``/``10s``/``5m``/``1h`` into ms."""

    def parse(text: str) -> int:
        try:
            return parse_duration(text, option=option)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc

    return parse


def absolute_path(path: str) -> str:
    """A local path made absolute (``~`` expanded); a URI (``s3://…``) as given."""
    return path if "://" in path else str(Path(path).expanduser().resolve())


def maybe_duration(v: Any, option: str) -> int | None:
    """None, ms as int, or duration text → ms (ConfigError on bad text)."""
    if v is None or isinstance(v, int):
        return v
    return parse_duration(str(v), option=option)


def maybe_int(v: Any, option: str) -> int | None:
    """None, an int, or integer text → int (ConfigError on bad text)."""
    if v is None or isinstance(v, int):
        return v
    try:
        return int(v)
    except ValueError:
        msg = f"{option} must be an integer, got {v!r}"
        raise ConfigError(msg) from None


def maybe_float(v: Any, option: str) -> float | None:
    """None, a float, or number text → float (ConfigError on bad text)."""
    if v is None or isinstance(v, float):
        return v
    try:
        return float(v)
    except ValueError:
        msg = f"{option} must be a number, got {v!r}"
        raise ConfigError(msg) from None
