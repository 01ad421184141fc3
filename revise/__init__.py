"""revise: speculative out-of-order windowing with numbered, corrected revisions.

The package root imports nothing heavy on purpose (the CLI and the Spark workers import only
what they use). The pure core lives in :mod:`revise.engine`, :mod:`revise.records`,
:mod:`revise.config` and :mod:`revise.local`.
"""

__all__: list[str] = []
