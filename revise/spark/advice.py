"""What a job should tell its user at start: settings that will hurt a run of this kind.

Pure functions of the job's configuration (and, for the Delta log, the tables' retention,
read only when it matters); :mod:`revise.spark.driver` logs what they return.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sinks.delta_layout import local_path, log_retention_value

if TYPE_CHECKING:
    from revise.jobconfig import JobConfig

__all__ = ["DAY_MS", "retention_note"]


DAY_MS = 86_400_000


def retention_note(cfg: JobConfig, kept: Callable[[], int | None]) -> str | None:
    """What an unbounded run whose Delta tables keep their log for days should know.

    ``kept``: reads the tables' longest log retention
    (:meth:`~sinks.delta_tables.DeltaTables.longest_log_retention_ms`), called only when the
    note could apply. None when the run is bounded, ``--delta-log-retention`` was given, the
    Delta root is not a local path (object stores were not measured), or no table keeps its
    log longer than a day.
    """
    if cfg.once or cfg.delta.log_retention_ms is not None or local_path(cfg.delta.path) is None:
        return None
    kept_ms = kept()
    if kept_ms is None or kept_ms <= DAY_MS:
        return None
    how_long = log_retention_value(kept_ms).removeprefix("interval ")
    return (f"the Delta tables under {cfg.delta.path} keep every commit of their log for "
            f"{how_long}; on a local disk each one kept costs every later Delta "
            "write ~8 us (at one commit per 5 s: ~150 ms a write after a day, ~4 s after 30 "
            "days): --delta-log-retention 1d bounds it, and time travel with it "
            "(docs/RELIABILITY.md, Beyond 30 minutes)")
