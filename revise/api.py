"""The functions of revise's public surface: run a job, query its tables, compare the modes.

Re-exported at the package root (``revise.run``, ``revise.read_sql``, ``revise.compare_modes``)
and loaded on first use, so ``import revise`` stays light. Each wraps the one function that the
command line calls (:func:`revise.spark.driver.run_job`, :func:`revise.query.run_query` /
:func:`revise.query.local.run_query_local`, :func:`revise.compare.run_compare`).
"""

from __future__ import annotations

import datetime as dt
import threading
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

    from revise.compare import CompareConfig
    from revise.compare.results import Comparison
    from revise.generate import EventStream, GeneratorConfig
    from revise.jobconfig import JobConfig
    from revise.kafka import KafkaSettings
    from revise.spark.committer import JobResult

__all__ = ["compare_modes", "produce_events", "read_sql", "run"]

Engine = Literal["local", "spark"]
"""Where :func:`read_sql` runs: in-process (delta-rs's DataFusion, no JVM) or on Spark."""


def run(
    config: JobConfig,
    *,
    spark: SparkSession | None = None,
    stop_event: threading.Event | None = None,
    timeout_s: float | None = None,
) -> JobResult:
    """Run the streaming job of ``config`` (``revise run``), until stopped or, once, to the end.

    With ``config.once`` it reads what the input topic holds at start, closes every window
    (``[start_ms, end_ms)``) with a FINAL revision and returns; otherwise it runs until
    ``stop_event`` is set.

    Args:
        config: Where the job reads and writes, and the engine's settings.
        spark: A session to run in; None starts the project's session.
        stop_event: Set it to stop an unbounded run cleanly.
        timeout_s: Give up (``JobError``) after this many seconds; None: no limit.

    Returns:
        What the run committed (micro-batches, revisions, too-late records, dead letters).

    Raises:
        ConfigError: A setting the job cannot run with (missing topic, a checkpoint of other
            settings, Delta tables with other aggregate columns).
        JobError: The streaming query failed.

    Example:
        >>> import revise
        >>> cfg = revise.JobConfig(
        ...     kafka=revise.KafkaIO(bootstrap_servers="localhost:9092", input_topic="events",
        ...                          changelog_topic="events-changelog"),
        ...     delta=revise.DeltaOutput(path="/tmp/delta"), checkpoint="/tmp/ckpt", once=True,
        ...     engine=revise.EngineConfig(window=revise.WindowSpec.parse("tumbling:10s"),
        ...                                grace_ms=5000, query_id="events"))
        >>> result = revise.run(cfg)  # doctest: +SKIP
        >>> result.revisions  # doctest: +SKIP
        42
    """
    from revise.spark.driver import run_job

    return run_job(config, spark=spark, stop_event=stop_event, timeout_s=timeout_s)


def read_sql(
    sql: str,
    delta_path: str,
    *,
    engine: Engine = "local",
    spark: SparkSession | None = None,
    as_of_version: int | None = None,
    as_of_timestamp: str | dt.datetime | None = None,
    as_known_at: int | str | dt.datetime | None = None,
    as_of_watermark: int | None = None,
) -> pd.DataFrame:
    """Run ``sql`` over a job's Delta tables and views (``revise query``); a pandas frame.

    The views (``latest``, ``final_windows``, ``provisional_windows``, ``revision_history``,
    ``late_records``, ``dead_letters``) are those of docs/QUERYING.md. Both engines return the
    same columns, dtypes and rows for the portable SQL described there.

    Args:
        sql: The query.
        delta_path: The job's ``delta_path``.
        engine: ``local`` (in-process, no JVM) or ``spark``.
        spark: The session for ``engine="spark"``; None starts the project's session.
        as_of_version: Read the tables as of this Delta version of ``latest``.
        as_of_timestamp: Or as committed at this time (``'2026-01-01 10:00:00'`` UTC, or a
            datetime).
        as_known_at: Or answer from the revisions emitted by then (epoch ms, or a time).
        as_of_watermark: Or from the revisions whose watermark was at most this (epoch ms).
            At most one of the four ``as_*`` options.

    Returns:
        The result; row order only where the SQL orders it.

    Raises:
        ConfigError: Bad SQL, an unknown table or column, no revise tables under the path,
            more than one ``as_*`` option, or ``spark`` given with ``engine="local"``.

    Example:
        >>> import revise
        >>> revise.read_sql(  # doctest: +SKIP
        ...     "SELECT key, window_start_ms, count FROM final_windows", "/tmp/delta",
        ...     as_of_watermark=1_795_000_060_000)
    """
    if engine == "spark":
        from revise.query import run_query

        return run_query(sql, delta_path, spark=spark, version=as_of_version,
                         timestamp=as_of_timestamp, known_at=as_known_at,
                         watermark=as_of_watermark)
    if engine != "local":
        from revise.errors import ConfigError

        msg = f"engine must be 'local' or 'spark', got {engine!r}"
        raise ConfigError(msg)
    if spark is not None:
        from revise.errors import ConfigError

        msg = "spark= is for engine='spark'; the local engine runs in-process"
        raise ConfigError(msg)
    from revise.query.local import run_query_local

    return run_query_local(sql, delta_path, version=as_of_version, timestamp=as_of_timestamp,
                           known_at=as_known_at, watermark=as_of_watermark)


def compare_modes(
    config: CompareConfig,
    *,
    spark: SparkSession | None = None,
    quiet: bool = False,
) -> Comparison:
    """Run revision mode and watermark mode on the same input and compare them (``revise compare``).

    Writes ``comparison.json``, ``windows.csv`` and the plots into ``config.output`` and the
    totals into ``<delta_path>/comparisons``; see docs/SEMANTICS.md for the figures.

    Args:
        config: The input (a topic, or a generated stream), the engine's settings and output.
        spark: The session both runs use; None starts the project's session.
        quiet: Print no progress lines.

    Returns:
        The comparison: per mode latency, accuracy and volume; the grace what-if; the sweep.

    Example:
        >>> import revise
        >>> cfg = revise.CompareConfig(
        ...     bootstrap_servers="localhost:9092", output="/tmp/compare",
        ...     delta_path="/tmp/delta",
        ...     engine=revise.EngineConfig(window=revise.WindowSpec.parse("tumbling:2s"),
        ...                                grace_ms=1000),
        ...     generator=revise.GeneratorConfig(events=1500, keys=4, seed=7))
        >>> c = revise.compare_modes(cfg)  # doctest: +SKIP
        >>> print(revise.format_comparison(c))  # doctest: +SKIP
    """
    from revise.compare import run_compare

    return run_compare(config, spark=spark, echo=(lambda _line: None) if quiet else print)


def produce_events(
    config: GeneratorConfig,
    *,
    bootstrap_servers: str,
    topic: str,
    partitions: int | None = None,
    rate: float | None = None,
    kafka: KafkaSettings | None = None,
) -> EventStream:
    """Generate the seeded out-of-order stream of ``config`` and write it to ``topic``.

    What ``revise generate`` does: the same seed gives the same records (JSON events with
    ``key``, ``ts`` in epoch ms and ``value``; the late and malformed ones the config asks for),
    in arrival order, keyed so one key's records stay in one partition.

    Args:
        config: Events, keys, seed, disorder, late and bad fractions.
        bootstrap_servers: The Kafka cluster.
        topic: Created if missing, with ``partitions`` partitions (default 4).
        partitions: Partitions of a new topic.
        rate: Records per second; None: as fast as possible.
        kafka: The client settings (SASL, TLS …); None: plaintext.

    Returns:
        The stream written (its ``payloads``, ``ts_ms``, ``keys`` in arrival order).

    Example:
        >>> import revise
        >>> stream = revise.produce_events(  # doctest: +SKIP
        ...     revise.GeneratorConfig(events=1200, keys=4, seed=11, late_fraction=0.08),
        ...     bootstrap_servers="localhost:9092", topic="events", partitions=2)
        >>> len(stream)  # doctest: +SKIP
        1200
    """
    from revise.generate import generate, produce

    stream = generate(config)
    produce(stream, bootstrap_servers=bootstrap_servers, topic=topic, rate=rate,
            partitions=partitions, kafka=kafka)
    return stream
