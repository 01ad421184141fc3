"""The query side: SQL over a run's Delta tables (``revise query``), with Spark and delta-spark.

- :mod:`revise.query.views` — the views over the tables and time travel (the read side of
  :mod:`sinks.delta_tables`).
- :mod:`revise.query.run` — open the views in a Spark session, run SQL, format the result.
- :mod:`revise.query.local` — the same views and SQL in-process (delta-rs + DataFusion, no JVM):
  what ``revise query`` uses by default.
- :mod:`revise.query.known` — what was known when: the views as of an emission time or a
  watermark (``--as-known-at``, ``--as-of-watermark``), on both engines.
"""

from __future__ import annotations

from revise.query.run import ENGINES, Format, format_frame, open_views, run_query

__all__ = ["ENGINES", "Format", "format_frame", "open_views", "run_query"]
