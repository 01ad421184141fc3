"""revise: speculative out-of-order windowing with numbered, corrected revisions.

The public surface (docs/PYTHON.md): :func:`run` runs a job, :func:`read_sql` queries its Delta
tables, :func:`compare_modes` compares revision and watermark mode, and the config types they
take (:class:`JobConfig` and its groups, :class:`EngineConfig`, :class:`WindowSpec`,
:class:`CompareConfig`, :class:`GeneratorConfig` …)::

    import revise
    cfg = revise.JobConfig(
        kafka=revise.KafkaIO(bootstrap_servers="localhost:9092", input_topic="events",
                             changelog_topic="events-changelog"),
        delta=revise.DeltaOutput(path="/tmp/delta"), checkpoint="/tmp/ckpt", once=True,
        engine=revise.EngineConfig(window=revise.WindowSpec.parse("tumbling:10s"),
                                   grace_ms=5000, query_id="events"))
    revise.run(cfg)
    revise.read_sql("SELECT * FROM final_windows", "/tmp/delta")

The package root imports nothing heavy on purpose (the CLI and the Spark workers import only
what they use): each public name is loaded on first access (PEP 562 ``__getattr__``), so
``import revise`` loads neither pyspark nor pandas. The pure core lives in
:mod:`revise.engine`, :mod:`revise.records`, :mod:`revise.config` and :mod:`revise.local`.

It does one thing on import: it sets the default of :data:`DELTA_RS_MALLOC_CONF` (below),
which must happen before delta-rs loads, and every process that writes revise's Delta tables
imports this package first. A bounded run switches that default to
:data:`BOUNDED_DELTA_RS_MALLOC_CONF` before it loads delta-rs (:func:`allocator_for_run`).
"""

import importlib as _importlib
import os as _os
import sys as _sys
import typing as _typing

__all__ = ["BOUNDED_DELTA_RS_MALLOC_CONF", "DELTA_RS_MALLOC_CONF", "MALLOC_CONF_ENV", "AggList",
           "CompareConfig", "Comparison", "ConfigError", "DeltaOutput", "EngineConfig",
           "GeneratorConfig", "InputFields", "JobConfig", "JobResult", "KafkaIO", "KafkaSettings",
           "ReviseError", "SparkTuning", "SweepGrid", "WindowSpec", "allocator_for_run",
           "compare_modes", "format_comparison", "produce_events", "read_sql", "run",
           "spark_session"]

MALLOC_CONF_ENV = "_RJEM_MALLOC_CONF"
"""The environment variable that configures delta-rs's allocator (the jemalloc linked into the
``deltalake`` package, with the ``_rjem_`` prefix; plain ``MALLOC_CONF`` does not reach it)."""

DELTA_RS_MALLOC_CONF = "dirty_decay_ms:0,muzzy_decay_ms:0"
"""jemalloc settings for delta-rs: return freed pages to the OS at once.

With jemalloc's defaults (freed pages kept for 10 s, purged only when the allocator is busy),
the process that commits to the same Delta tables once per micro-batch grows by ~40 KiB per
commit without end (an unbounded job's driver: ~3 GiB a day). With this setting it stays flat,
for ~17 % more time in the Delta writes, ≈ 9 ms a micro-batch (docs/RELIABILITY.md, ``python
-m benchmarks.bench_delta_memory``). Set on import of :mod:`revise` unless the user set the
variable (their value wins; revise's own value, inherited from a parent process, is not
theirs); jemalloc reads it once, when delta-rs is first loaded."""

BOUNDED_DELTA_RS_MALLOC_CONF = "dirty_decay_ms:1000,muzzy_decay_ms:0"
"""jemalloc settings for delta-rs in a bounded run (``--once``): keep freed pages for a second.

Returning every freed page at once makes delta-rs fault fresh zeroed pages in again for its
next buffer; in a MERGE into a large ``latest`` (the 1M-key daily workload: ~1M rows
rewritten) that is most of its time (kernel time: page zeroing, TLB flushes). Kept for a second,
the pages are reused: alternating runs on that workload, the driver spent 21–23 against 27–29
CPU seconds and the whole run took 0.94–0.98 of the time (docs/lab/benchmarks-diary.md, *delta-rs's
allocator in a bounded run*). The price is growth: +64.5 MiB over 2,900 commits of a
micro-batch each, against +50.5 MiB with :data:`DELTA_RS_MALLOC_CONF` (``python -m
benchmarks.bench_delta_memory --allocator revise bounded``), which a run that ends can afford
and an unbounded one, committing every few seconds for days, need not."""

_DEFAULT_MARK = "_REVISE_DEFAULT_MALLOC_CONF"
"""Holds the value revise gave :data:`MALLOC_CONF_ENV`, so that a child process (which inherits
both) tells revise's default from a value the user set."""


def _set_default(value: str) -> None:
    _os.environ[MALLOC_CONF_ENV] = value
    _os.environ[_DEFAULT_MARK] = value


_inherited = _os.environ.get(MALLOC_CONF_ENV)
_USERS_MALLOC_CONF = _inherited is not None and _inherited != _os.environ.get(_DEFAULT_MARK)
if not _USERS_MALLOC_CONF:  # unset, or revise's value in a parent (perhaps a bounded run's)
    _set_default(DELTA_RS_MALLOC_CONF)


def allocator_for_run(*, bounded: bool) -> str | None:
    """Set delta-rs's allocator settings for a bounded or an unbounded run, if still possible.

    Possible when the user did not set :data:`MALLOC_CONF_ENV` (their value wins) and delta-rs
    is not loaded yet in this process (jemalloc reads the variable once, when it loads). The
    job's driver calls it before it opens the Delta tables.

    Returns:
        The value delta-rs will read or has read: :data:`BOUNDED_DELTA_RS_MALLOC_CONF` or
        :data:`DELTA_RS_MALLOC_CONF` when this call set it, the variable's value otherwise.
    """
    if not _USERS_MALLOC_CONF and "deltalake" not in _sys.modules:
        _set_default(BOUNDED_DELTA_RS_MALLOC_CONF if bounded else DELTA_RS_MALLOC_CONF)
    return _os.environ.get(MALLOC_CONF_ENV)


_LAZY = {
    "run": ("revise.api", "run"),
    "read_sql": ("revise.api", "read_sql"),
    "compare_modes": ("revise.api", "compare_modes"),
    "produce_events": ("revise.api", "produce_events"),
    "format_comparison": ("revise.compare.report", "format_table"),
    "spark_session": ("revise.spark.session", "spark_session"),
    "JobConfig": ("revise.jobconfig", "JobConfig"),
    "KafkaIO": ("revise.jobconfig", "KafkaIO"),
    "DeltaOutput": ("revise.jobconfig", "DeltaOutput"),
    "SparkTuning": ("revise.jobconfig", "SparkTuning"),
    "InputFields": ("revise.jobconfig", "InputFields"),
    "JobResult": ("revise.spark.committer", "JobResult"),
    "EngineConfig": ("revise.config", "EngineConfig"),
    "WindowSpec": ("revise.config", "WindowSpec"),
    "AggList": ("revise.aggspec", "AggList"),
    "KafkaSettings": ("revise.kafka", "KafkaSettings"),
    "CompareConfig": ("revise.compare.config", "CompareConfig"),
    "Comparison": ("revise.compare.results", "Comparison"),
    "SweepGrid": ("revise.compare.sweep", "SweepGrid"),
    "GeneratorConfig": ("revise.generate", "GeneratorConfig"),
    "ReviseError": ("revise.errors", "ReviseError"),
    "ConfigError": ("revise.errors", "ConfigError"),
}
"""Public name → (module, attribute), imported on first access by :func:`__getattr__`."""

if _typing.TYPE_CHECKING:
    from revise.aggspec import AggList
    from revise.api import compare_modes, produce_events, read_sql, run
    from revise.compare.config import CompareConfig
    from revise.compare.report import format_table as format_comparison
    from revise.compare.results import Comparison
    from revise.compare.sweep import SweepGrid
    from revise.config import EngineConfig, WindowSpec
    from revise.errors import ConfigError, ReviseError
    from revise.generate import GeneratorConfig
    from revise.jobconfig import DeltaOutput, InputFields, JobConfig, KafkaIO, SparkTuning
    from revise.kafka import KafkaSettings
    from revise.spark.committer import JobResult
    from revise.spark.session import spark_session


def __getattr__(name: str) -> object:
    """Import a public name's module on first access and keep the name (PEP 562)."""
    try:
        module, attr = _LAZY[name]
    except KeyError:
        msg = f"module 'revise' has no attribute {name!r}"
        raise AttributeError(msg) from None
    value = getattr(_importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
