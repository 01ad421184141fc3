"""An end of task for ``transformWithStateInPandas``' processor, with output.

PySpark calls a stateful processor once per grouping key (``handleInputRows``) and once per
expired timer (``handleExpiredTimer``), then ``close()``, whose output it drops. revise's
processor groups by shard, several shards to a task, and its output costs per call as much as
per record: one data file per history table, one JSON encoding and one framing of the
messages. It therefore keeps what each call produced and writes it all at the end of the task
(``ShardProcessor.end_of_task``): one data file per table and task, one encoding.

:func:`install` wraps ``TransformWithStateInPandasUdfUtils._handle_expired_timers`` (the
task's timer phase, which PySpark runs once per task after every grouping key's call and
whose rows it sends like the others) so that, after the timers, it yields what the
processor's ``end_of_task()`` yields. The processor refuses to run where it is not installed
(:func:`installed`): its output would never leave the task.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["install", "installed"]

_ORIGINAL = "_revise_original_handle_expired_timers"


def installed() -> bool:
    """Whether :func:`install` wrapped PySpark's timer phase in this process."""
    from pyspark.sql.streaming.stateful_processor_util import (
        TransformWithStateInPandasUdfUtils as Utils,
    )

    return hasattr(Utils, _ORIGINAL)


def install() -> bool:
    """Make the timer phase end with the processor's ``end_of_task()`` rows (idempotent).

    Returns whether it is installed (False when PySpark has no such phase to wrap).
    """
    from pyspark.sql.streaming import stateful_processor_util

    utils = getattr(stateful_processor_util, "TransformWithStateInPandasUdfUtils", None)
    original = getattr(utils, "_handle_expired_timers", None)
    if utils is None or original is None:
        return False
    if not hasattr(utils, _ORIGINAL):
        setattr(utils, _ORIGINAL, original)

        def handle_expired_timers(self: Any, client: Any) -> Iterator[Any]:
            yield from original(self, client)
            end = getattr(self._stateful_processor, "end_of_task", None)
            if end is not None:
                yield from end()

        utils._handle_expired_timers = handle_expired_timers
    return True
