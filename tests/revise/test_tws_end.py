"""The task's timer phase ends with the processor's ``end_of_task()`` rows (revise.spark.tws_end).

Against PySpark's own ``TransformWithStateInPandasUdfUtils`` with a stand-in for its state
client; that the rows then reach the JVM writer and the driver is what every job of the
integration suite checks (a job's whole output comes this way).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql.streaming.stateful_processor_util import (
    TransformWithStateInPandasFuncMode as Mode,
)
from pyspark.sql.streaming.stateful_processor_util import (
    TransformWithStateInPandasUdfUtils as Utils,
)

from revise.spark import tws_end


class Client:
    """The part of PySpark's state client that the timer phase calls, timers listed."""

    def __init__(self, timers: list[int]) -> None:
        self.timers = timers
        self.handle_state = None
        self.deleted: list[int] = []

    def set_handle_state(self, state: Any) -> None:
        self.handle_state = state

    def get_timestamps(self, _mode: str) -> tuple[int, int]:
        return 0, 100

    def set_implicit_key(self, _key: Any) -> None:
        pass

    def delete_timer(self, t: int) -> None:
        self.deleted.append(t)


class TimersOnly:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def handleExpiredTimer(self, key: Any, timerValues: Any,
                           expiredTimerInfo: Any) -> Iterator[str]:
        self.calls.append(f"timer {expiredTimerInfo.getExpiryTimeInMs()}")
        yield f"timer {expiredTimerInfo.getExpiryTimeInMs()}"


class Processor(TimersOnly):
    def end_of_task(self) -> Iterator[str]:
        self.calls.append("end")
        yield "the task's output"


def timer_phase(processor: Any, timers: list[int], monkeypatch: pytest.MonkeyPatch) -> list:
    from pyspark.sql.streaming import stateful_processor_util

    monkeypatch.setattr(stateful_processor_util, "ExpiredTimerIterator",
                        lambda client, _w: iter([((("k",), t)) for t in client.timers]))
    utils = Utils(processor, "eventtime")
    return list(utils.transformWithStateUDF(Client(timers), Mode.PROCESS_TIMER, None, iter([])))


def test_the_timer_phase_ends_with_the_processors_end_of_task(monkeypatch):
    assert tws_end.install() and tws_end.installed()
    assert tws_end.install()  # idempotent: wrapped once
    p = Processor()
    assert timer_phase(p, [10, 20], monkeypatch) == ["timer 10", "timer 20", "the task's output"]
    assert p.calls == ["timer 10", "timer 20", "end"]
    assert timer_phase(Processor(), [], monkeypatch) == ["the task's output"]  # no timer due


def test_a_processor_without_end_of_task_gets_pysparks_timer_phase(monkeypatch):
    tws_end.install()
    assert timer_phase(TimersOnly(), [10], monkeypatch) == ["timer 10"]


def test_the_operator_refuses_to_run_without_its_end_of_task(monkeypatch):
    """Without the wrapper its output would never leave the task: it fails the task instead."""
    from revise.config import EngineConfig, WindowSpec
    from revise.errors import InfraError
    from revise.spark import operator

    processor = operator.ShardProcessor(
        EngineConfig(WindowSpec.parse("tumbling:10s"), grace_ms=0), "t", shards=1)
    monkeypatch.setattr(operator, "tws_end_installed", lambda: False)
    with pytest.raises(InfraError, match="timer phase to end its task with its output"):
        processor.init(object())
