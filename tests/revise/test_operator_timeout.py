"""The stateful operator's event-time timeout (issue 12), with a stand-in for Spark's GroupState.

Spark's part (that a timed-out shard is called, that late rows still arrive) is pinned by
tests/integration/test_spark_semantics.py; this checks the function's side of the contract.
"""

from __future__ import annotations

import pandas as pd

from revise.config import EngineConfig, WindowSpec
from revise.spark.operator import make_state_fn


class FakeState:
    """The part of ``pyspark.sql.streaming.state.GroupState`` the operator uses."""

    def __init__(self, watermark_ms: int, value: tuple | None = None) -> None:
        self.watermark_ms = watermark_ms
        self.value = value
        self.timeout: int | None = None
        self.removed = False

    @property
    def exists(self) -> bool:
        return self.value is not None

    @property
    def get(self) -> tuple:
        assert self.value is not None
        return self.value

    def getCurrentWatermarkMs(self) -> int:  # noqa: N802 - Spark's name
        return self.watermark_ms

    def getCurrentProcessingTimeMs(self) -> int:  # noqa: N802 - Spark's name
        return 0

    def update(self, value: tuple) -> None:
        self.value = value

    def remove(self) -> None:
        self.value, self.removed = None, True

    def setTimeoutTimestamp(self, ts: int) -> None:  # noqa: N802 - Spark's name
        # Spark refuses a timestamp <= 0 or behind the watermark.
        assert ts > 0 and ts >= self.watermark_ms
        self.timeout = ts


def rows(*recs: tuple[str, int]) -> pd.DataFrame:
    n = len(recs)
    return pd.DataFrame({
        "key": [k for k, _ in recs], "ts_ms": [t for _, t in recs], "value": [1.0] * n,
        "partition": [0] * n, "offset": list(range(n)), "reason": [None] * n,
        "raw_value": [None] * n, "command": [None] * n, "shard": [0] * n,
    })


def test_timeout_is_the_watermark_that_closes_the_next_window_and_cleared_when_none():
    fn = make_state_fn(EngineConfig(WindowSpec.parse("tumbling:10s"), grace_ms=5_000,
                                    query_id="q"), "t")
    state = FakeState(0)
    list(fn((0,), iter([rows(("a", 1_000), ("b", 21_000))]), state))
    # [0, 10000) closes at W >= 15000: Spark times out when timestamp < W, so 14999.
    assert state.timeout == 14_999
    state.watermark_ms = 15_000  # the timeout fired: called without rows
    state.timeout = None
    out = list(fn((0,), iter([]), state))
    assert out and state.timeout == 34_999 and state.exists
    state.watermark_ms = 35_000
    state.timeout = None
    list(fn((0,), iter([]), state))
    assert state.removed and state.timeout is None
