"""The query side: SQL over a run's Delta tables (``revise query``), with Spark and delta-spark.

- :mod:`revise.query.views` — the views over the tables and time travel (the read side of
  :mod:`sinks.delta_tables`).
- :mod:`revise.query.run` — open the views in a session, run SQL, format the result.
"""

from __future__ import annotations

from revise.query.run import Format, format_frame, open_views, run_query

__all__ = ["Format", "format_frame", "open_views", "run_query"]
