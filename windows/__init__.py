"""Pure numpy window kernels for revise: assignment, sessions, aggregates, watermarks.

This package imports only numpy and the standard library (never Spark, Kafka, Delta, or the
``revise`` / ``sinks`` packages). Times are int64 epoch milliseconds; windows are half-open
``[start_ms, end_ms)``.
"""

from windows.aggregates import (
    COUNT,
    MAX,
    MIN,
    REGISTRY,
    SUM,
    Aggregate,
    AggregateSet,
    State,
    StateColumn,
    get_aggregate,
    register,
    segment_starts,
)
from windows.assign import Assignment, HoppingAssigner, TumblingAssigner, WindowAssigner
from windows.sessions import merge_spans
from windows.watermark import WatermarkTracker

__all__ = [
    "COUNT",
    "MAX",
    "MIN",
    "REGISTRY",
    "SUM",
    "Aggregate",
    "AggregateSet",
    "Assignment",
    "HoppingAssigner",
    "State",
    "StateColumn",
    "TumblingAssigner",
    "WatermarkTracker",
    "WindowAssigner",
    "get_aggregate",
    "merge_spans",
    "register",
    "segment_starts",
]
