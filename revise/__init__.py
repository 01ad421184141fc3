"""revise: speculative out-of-order windowing with numbered, corrected revisions.

The package root imports nothing heavy on purpose (the CLI and the Spark workers import only
what they use). The pure core lives in :mod:`revise.engine`, :mod:`revise.records`,
:mod:`revise.config` and :mod:`revise.local`.

It does one thing on import: it sets the default of :data:`DELTA_RS_MALLOC_CONF` (below),
which must happen before delta-rs loads, and every process that writes revise's Delta tables
imports this package first.
"""

import os as _os

__all__ = ["DELTA_RS_MALLOC_CONF", "MALLOC_CONF_ENV"]

MALLOC_CONF_ENV = "_RJEM_MALLOC_CONF"
"""The environment variable that configures delta-rs's allocator (the jemalloc linked into the
``deltalake`` package, with the ``_rjem_`` prefix; plain ``MALLOC_CONF`` does not reach it)."""

DELTA_RS_MALLOC_CONF = "dirty_decay_ms:0,muzzy_decay_ms:0"
"""jemalloc settings for delta-rs: return freed pages to the OS at once.

With jemalloc's defaults (freed pages kept for 10 s, purged only when the allocator is busy),
the process that commits to the same Delta tables once per micro-batch grows by ~40 KiB per
commit without end (an unbounded job's driver: ~3 GiB a day). With this setting it stays flat,
for ~17 % more time in the Delta writes, ≈ 9 ms a micro-batch (docs/RELIABILITY.md, ``python
-m benchmarks.bench_delta_memory``). Set on import of :mod:`revise` unless the variable is set
already (the user's value wins); jemalloc reads it once, when delta-rs is first loaded."""

_os.environ.setdefault(MALLOC_CONF_ENV, DELTA_RS_MALLOC_CONF)
