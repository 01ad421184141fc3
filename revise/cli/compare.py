"""``revise compare``: revision mode against watermark mode (see :mod:`revise.compare`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from revise.cli.args import (
    absolute_path,
    add_engine_options,
    add_field_options,
    add_generator_options,
    duration_type,
    engine_config,
    generator_config,
    maybe_duration,
    maybe_float,
    maybe_int,
)
from revise.cli.kafka import kafka_settings
from revise.config import parse_duration
from revise.errors import ConfigError
from revise.kafka import add_kafka_arguments

if TYPE_CHECKING:  # revise.compare (pandas, the engine, metrics) loads when compare runs
    from revise.compare import CompareConfig
    from revise.compare.sweep import SweepGrid

__all__ = ["add_parser", "cmd_compare", "config_from_args", "sweep_grid"]


def add_parser(sub: Any) -> None:
    """Register ``revise compare``."""
    p = sub.add_parser(
        "compare", help="run revision and watermark mode on the same input and compare",
        description="Run revision mode and watermark mode on the same input (an existing topic "
        "or a generated one), then report latency, output volume, accuracy over time and "
        "completeness side by side; figures go to OUTPUT as JSON and PNG and to the Delta "
        "table <delta-path>/comparisons.",
    )
    p.add_argument("--bootstrap-servers", help="Kafka HOST:PORT (default: the embedded broker, "
                   "started if needed; a secure one is used as its `revise` user)")
    add_kafka_arguments(p)
    p.add_argument("--input-topic", help="compare on this existing topic instead of generating")
    add_generator_options(p, events_required=False, keys=20, disorder="2s", late_fraction=0.05,
                          late_by="5s", events_help="generate this many records (default 5000 "
                          "when no --input-topic)")
    p.add_argument("--step", default="10ms", type=duration_type("--step"),
                   help="event-time advance per generated record")
    add_engine_options(p, mode=False)
    add_field_options(p)
    p.add_argument("--max-records-per-batch", type=int, default=1000,
                   help="records per micro-batch in both runs")
    p.add_argument("--rate", type=float, help="replay the input at this many records/s while "
                   "each job runs, to measure wall-clock latency")
    p.add_argument("--trigger", type=duration_type("--trigger"),
                   help="micro-batch interval of the --rate runs (default 500ms)")
    p.add_argument("--shards", type=int, default=4, help="key shards of both jobs")
    p.add_argument("--delta-path", help="Delta root (default OUTPUT/delta)")
    p.add_argument("--output", required=True, help="folder for comparison.json, windows.csv "
                   "and the PNG plots")
    p.add_argument("--timeout", type=duration_type("--timeout"),
                   help="give up a job after this long")
    s = p.add_argument_group(
        "sweep", "replay the recorded input offline over many settings and recommend one "
        "(docs/SEMANTICS.md, 'Choosing settings')")
    s.add_argument("--sweep", action="store_true",
                   help="try every combination of the --sweep-* values (grace, watermark "
                   "delay, emission policy) on the recorded micro-batches; adds sweep.png, "
                   "the table's sweep rows and a recommendation")
    s.add_argument("--target-accuracy", type=float, default=0.9,
                   help="accuracy over time (0-1) the recommendation must reach (default 0.9)")
    s.add_argument("--sweep-grace", default="0.5,1,2",
                   help="grace multipliers of --grace to try (default 0.5,1,2)")
    s.add_argument("--sweep-delay", default="0ms",
                   help="watermark delays to try, e.g. 0ms,2s (default 0ms)")
    s.add_argument("--sweep-min-change", default="0.05,0.2",
                   help="--emit-min-change values to try in revision mode (default 0.05,0.2)")
    s.add_argument("--sweep-every", default="",
                   help="--emit-every values to try in revision mode, e.g. 5s (default none)")
    p.set_defaults(handler=cmd_compare)


def _numbers(text: str, option: str) -> tuple[float, ...]:
    """``0.5,1,2`` → (0.5, 1.0, 2.0); a clear ConfigError for anything else."""
    return tuple(v for v in (maybe_float(t.strip(), option) for t in text.split(",") if t.strip())
                 if v is not None)


def _durations(text: str, option: str) -> tuple[int, ...]:
    """``0ms,2s`` → (0, 2000)."""
    return tuple(parse_duration(t.strip(), option=option) for t in text.split(",") if t.strip())


def sweep_grid(args: argparse.Namespace) -> SweepGrid | None:
    """The :class:`~revise.compare.sweep.SweepGrid` of ``--sweep``'s options, None without it."""
    from revise.compare.sweep import SweepGrid

    if not args.sweep:
        return None
    return SweepGrid(grace_factors=_numbers(args.sweep_grace, "--sweep-grace"),
                     delays_ms=_durations(args.sweep_delay, "--sweep-delay") or (0,),
                     min_changes=_numbers(args.sweep_min_change, "--sweep-min-change"),
                     every_ms=_durations(args.sweep_every, "--sweep-every"))


def config_from_args(args: argparse.Namespace) -> CompareConfig:
    """Build the :class:`~revise.compare.CompareConfig` of ``revise compare``'s arguments."""
    from revise.compare import CompareConfig

    events = maybe_int(args.events, "--events")
    if args.input_topic and events is not None:
        msg = "give --input-topic or --events, not both"
        raise ConfigError(msg)
    kafka = kafka_settings(args, start=True, topics=[args.input_topic])
    generator = None if args.input_topic else generator_config(args, default_events=5000)
    output = str(Path(args.output).expanduser().resolve())
    delta = absolute_path(args.delta_path or os.path.join(output, "delta"))
    timeout = maybe_duration(args.timeout, "--timeout")
    return CompareConfig(
        bootstrap_servers=str(kafka.bootstrap_servers), kafka=kafka, output=output,
        delta_path=delta, engine=engine_config(args),
        input_topic=args.input_topic or None, generator=generator,
        max_records_per_batch=maybe_int(args.max_records_per_batch, "--max-records-per-batch")
        or 1000,
        rate=maybe_float(args.rate, "--rate"), trigger_ms=maybe_duration(args.trigger, "--trigger"),
        shards=maybe_int(args.shards, "--shards") or 4,
        timeout_s=None if timeout is None else timeout / 1000,
        key_field=args.key_field, ts_field=args.ts_field, ts_format=args.ts_format,
        value_field=args.value_field, sweep=sweep_grid(args),
        target_accuracy=float(args.target_accuracy),
    )


def cmd_compare(args: argparse.Namespace) -> int:
    """``revise compare``: run both modes, print the table, write the files."""
    from revise.compare import format_table, run_compare

    cfg = config_from_args(args)
    c = run_compare(cfg, echo=lambda s: print(s, flush=True))
    print()
    print(format_table(c))
    print()
    print(f"figures: {c.json_path}")
    for p in c.plot_paths:
        print(f"plot:    {p}")
    print(f"table:   {c.delta_path}/comparisons  (delta; one row per run, mode and metric)")
    print(f'try:     revise query "SELECT timing, count(*) FROM revision_history GROUP BY timing"'
          f" --delta-path {c.delta_path}/revision")
    return 0
