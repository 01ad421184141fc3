"""The stateful operator's processor against a stand-in for Spark's state store (issue 12).

Spark's part (that timers fire as the watermark passes them, that late rows still arrive, one
global watermark) is pinned by tests/integration/test_spark_semantics.py, and the whole job
against real Spark by the integration suite; this checks the processor's side of the contract:
its timer, that what it stores rebuilds the engine it had (base + log, with or without the
worker's cached engine), that it writes a step rather than the whole state once the state
outgrows a batch, and that a cached engine ahead of the restored state is never used.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pandas as pd
import pytest
from helpers import message_revisions

from revise.config import EngineConfig, WindowSpec
from revise.engine import Engine, InputBatch
from revise.spark import operator
from revise.spark.operator import ShardProcessor
from revise.spark.shard_keys import shard_keys
from revise.spark.shard_state import EngineCache, Meta, Step, apply_step


class FakeValue:
    def __init__(self, store: dict[str, Any], name: str) -> None:
        self.store, self.name = store, name

    def get(self) -> tuple | None:
        return self.store.get(self.name)

    def update(self, value: tuple) -> None:
        self.store[self.name] = tuple(value)

    def clear(self) -> None:
        self.store.setdefault("_clears", []).append(self.name)
        self.store.pop(self.name, None)


class FakeList(FakeValue):
    def get(self) -> Any:
        self.store.setdefault("_reads", []).append(self.name)
        return iter(list(self.store.get(self.name, [])))

    def put(self, values: list[tuple]) -> None:
        self.store[self.name] = [tuple(v) for v in values]
        self.store.setdefault("_writes", []).append((self.name, "put", len(values)))

    def appendValue(self, value: tuple) -> None:
        self.store.setdefault(self.name, []).append(tuple(value))
        self.store.setdefault("_writes", []).append((self.name, "append", 1))


class FakeHandle:
    """The part of Spark's StatefulProcessorHandle the processor uses, over a dict."""

    def __init__(self, store: dict[str, Any]) -> None:
        self.store = store
        store.setdefault("_timers", set())

    def getValueState(self, name: str, schema: str) -> FakeValue:
        return FakeValue(self.store, name)

    def getListState(self, name: str, schema: str) -> FakeList:
        return FakeList(self.store, name)

    def registerTimer(self, ms: int) -> None:
        self.store["_timers"].add(ms)

    def deleteTimer(self, ms: int) -> None:
        # Spark logs a warning for a timer that does not exist: count them.
        if ms not in self.store["_timers"]:
            self.store["_missing_deletes"] = self.store.get("_missing_deletes", 0) + 1
        self.store["_timers"].discard(ms)


class Fired:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def getExpiryTimeInMs(self) -> int:
        return self.ms


class Times:
    def __init__(self, watermark_ms: int, now_ms: int = 0) -> None:
        self.w, self.now = watermark_ms, now_ms

    def getCurrentWatermarkInMs(self) -> int:
        return self.w

    def getCurrentProcessingTimeInMs(self) -> int:
        return self.now


CFG = EngineConfig(WindowSpec.parse("tumbling:10s"), grace_ms=5_000, query_id="q")


def rows(*recs: tuple[str, int], command: str | None = None) -> pd.DataFrame:
    n = len(recs)
    return pd.DataFrame({
        "key": [k for k, _ in recs], "ts_ms": [t for _, t in recs],
        "value": [float(i + 1) for i in range(n)], "partition": [0] * n,
        "offset": list(range(n)), "reason": [None] * n, "raw_value": [None] * n,
        "command": [command] * n, "shard": [0] * n,
    })


def call(store: dict[str, Any], frames: list[pd.DataFrame] | None, watermark_ms: int,
         batch_id: int = 0, token: str = "t", shards: int = 1, key: int = 0) -> Any:
    """One Spark call of the processor with grouping value ``key`` (shard 0 of 1): rows, or the
    timer when ``frames`` is None."""
    p = ShardProcessor(CFG, "topic", shards=shards, token=token)
    handle = FakeHandle(store)
    p.init(handle)
    times = Times(watermark_ms, now_ms=1_000 + batch_id)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(operator, "_batch_id", lambda: batch_id)
        if frames is None:
            # As Spark does: the handler for the due timer, then the timer's deletion.
            fired = min(t for t in store["_timers"] if t <= watermark_ms)
            out = list(p.handleExpiredTimer((key,), times, Fired(fired)))
            handle.deleteTimer(fired)
        else:
            out = list(p.handleInputRows((key,), iter(frames), times))
        assert out == [], "a call's output waits for the end of the task"
        out = list(p.end_of_task())
    return message_revisions(pd.concat(out, ignore_index=True) if out else None)


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch: pytest.MonkeyPatch) -> EngineCache:
    cache = EngineCache()
    monkeypatch.setattr(operator, "_CACHE", cache)
    return cache


def test_timer_is_the_watermark_that_closes_the_next_window_and_cleared_when_none():
    store: dict[str, Any] = {}
    call(store, [rows(("a", 1_000), ("b", 21_000))], 0)
    # [0, 10000) closes at W >= 15000; a timer at T fires once the watermark reaches T.
    assert store["_timers"] == {15_000}
    assert Meta.of(store["meta"]).timer_ms == 15_000
    out = call(store, None, 15_000, batch_id=1)  # the timer fired: called without rows
    assert [(r["key"], r["timing"]) for r in out] == [("a", "FINAL")]
    assert store["_timers"] == {35_000}
    call(store, None, 35_000, batch_id=2)
    assert store["_timers"] == set()
    assert store.get("_missing_deletes", 0) == 0, "deleted a timer Spark deletes itself"
    assert not any(k in store for k in ("meta", "base", "log")), "no window open: no state"


def test_a_grouping_value_stands_for_its_shard(fresh_cache):
    store: dict[str, Any] = {}
    key = shard_keys(8, 2)[5]
    assert key != 5  # shard 5's bare number is on the other partition: its key is another
    call(store, [rows(("a", 1_000))], 0, shards=8, key=key)
    assert fresh_cache.take("t", 5) is not None, "the engine is shard 5's"
    assert fresh_cache.take("t", key) is None
    store.clear()
    out = call(store, [rows(("b", 1_000))], 0, shards=8, key=key, batch_id=1)
    assert [r["key"] for r in out] == ["b"]


def random_batches(seed: int, n_batches: int, keys: int) -> list[tuple[list, int]]:
    rng = np.random.default_rng(seed)
    out, w = [], 0
    for _ in range(n_batches):
        n = int(rng.integers(0, 40))
        ks = rng.integers(0, keys, n)
        ts = w + rng.integers(-20_000, 30_000, n)
        out.append(([(f"k{k}", int(max(t, 0))) for k, t in zip(ks, ts, strict=True)], w))
        w += int(rng.integers(0, 6_000))
    return out


def reference(batches: list[tuple[list, int]]) -> tuple[list[list[dict]], Engine]:
    """What an engine that never leaves memory emits for the same calls."""
    engine = Engine(CFG)
    outs = []
    for b, (recs, w) in enumerate(batches):
        frame = rows(*recs)
        batch = InputBatch.from_arrays(frame["key"].to_numpy(object), frame["ts_ms"].to_numpy(),
                                       frame["value"].to_numpy(), frame["partition"].to_numpy(),
                                       frame["offset"].to_numpy(), topic="topic")
        revs, _late = apply_step(engine, Step(b, w, 1_000 + b, False, batch))
        outs.append([r for t in revs for r in t.to_arrow().to_pylist()])
    return outs, engine


@pytest.fixture
def list_base(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every base in the ``base`` list, however small (none inline in ``meta``)."""
    monkeypatch.setattr(operator, "INLINE_BASE_BYTES", 0)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("cached", [True, False])
@pytest.mark.parametrize("inline_bytes", [0, 8_000, None])
def test_stored_state_rebuilds_the_engine_it_had(seed, cached, inline_bytes, fresh_cache,
                                                 monkeypatch):
    """``inline_bytes``: every base in the list (0), bases moving between ``meta`` and the
    list as the shard grows and shrinks (8,000 bytes: ~70 windows), the default (all inline)."""
    if inline_bytes is not None:
        monkeypatch.setattr(operator, "INLINE_BASE_BYTES", inline_bytes)
    batches = random_batches(seed, 30, keys=60)
    want, engine = reference(batches)
    store: dict[str, Any] = {}
    inline = []
    for b, (recs, w) in enumerate(batches):
        if not cached:
            fresh_cache.take("t", 0)  # another worker each time: rebuild from base + log
        got = call(store, [rows(*recs)] if recs else [], w, batch_id=b)
        assert got == want[b], f"batch {b}"
        if "meta" in store:
            inline.append(Meta.of(store["meta"]).inline is not None)
    if inline_bytes != 0:
        assert any(inline), "no base was inline"
    if inline_bytes is not None:
        assert any(op == "append" for _n, op, _k in store["_writes"]), "never logged a step"
    if inline_bytes == 8_000:
        assert not all(inline), "the base never moved to the list"
    fresh_cache.take("t", 0)
    rebuilt = ShardProcessor(CFG, "topic", shards=1, token="t")
    rebuilt.init(FakeHandle(store))
    assert rebuilt._engine(0, Meta.of(store["meta"])).snapshot() == engine.snapshot()


def test_a_batch_writes_its_step_not_the_state_once_the_state_outgrows_it(list_base):
    store: dict[str, Any] = {}
    call(store, [rows(*[(f"k{i}", 1_000) for i in range(500)])], 0)
    assert store["_writes"] == [("base", "put", 1)]
    for b in range(1, 6):  # 20 records a batch against 500 open windows
        call(store, [rows(*[(f"k{i}", 2_000) for i in range(20)])], 0, batch_id=b)
    assert store["_writes"][1:] == [("log", "append", 1)] * 5
    assert Meta.of(store["meta"]).log_records == 100
    # A batch larger than the open windows rewrites the base and empties the log.
    call(store, [rows(*[(f"k{i % 500}", 3_000) for i in range(600)])], 0, batch_id=6)
    assert store["_writes"][-1] == ("base", "put", 1) and not store.get("log")
    assert Meta.of(store["meta"]).log_entries == 0


def test_a_worker_reads_only_the_steps_it_has_not_applied(monkeypatch, list_base):
    store: dict[str, Any] = {}
    worker_a, worker_b = EngineCache(), EngineCache()
    monkeypatch.setattr(operator, "_CACHE", worker_a)
    call(store, [rows(*[(f"k{i}", 1_000) for i in range(100)])], 0, batch_id=0)
    call(store, [rows(("k1", 2_000))], 0, batch_id=1)
    assert store.get("_reads", []) == [], "the cached engine is the stored state: no reads"
    monkeypatch.setattr(operator, "_CACHE", worker_b)  # a worker that never ran the shard
    call(store, [rows(("k2", 2_000))], 0, batch_id=2)
    assert store.pop("_reads") == ["base", "log"]
    monkeypatch.setattr(operator, "_CACHE", worker_a)  # one step behind: replays it only
    got = call(store, [rows(("k1", 3_000))], 0, batch_id=3)
    assert store.pop("_reads") == ["log"]
    assert [(r["key"], r["count"], r["revision"]) for r in got] == [("k1", 3, 2)]


def test_a_small_shard_keeps_its_base_in_meta_and_touches_no_list():
    """A shard of a few windows: each call reads and writes ``meta`` only, and the base it
    stores there rebuilds the engine in a worker that never ran the shard."""
    store: dict[str, Any] = {}
    for b in range(5):
        call(store, [rows(*[(f"k{i}", 1_000 + b) for i in range(20)])], 0, batch_id=b)
    assert "_writes" not in store and "_clears" not in store and "_reads" not in store
    meta = Meta.of(store["meta"])
    assert meta.inline is not None and meta.log_entries == 0
    operator._CACHE.take("t", 0)
    got = call(store, [rows(("k1", 2_000))], 0, batch_id=5)
    assert [(r["key"], r["count"], r["revision"]) for r in got] == [("k1", 6, 5)]
    assert "_reads" not in store, "rebuilt from meta alone"


def test_a_base_moves_between_meta_and_the_list_as_the_shard_grows_and_shrinks(monkeypatch):
    monkeypatch.setattr(operator, "INLINE_BASE_BYTES", 4_000)  # ~30 windows
    store: dict[str, Any] = {}
    call(store, [rows(*[(f"k{i}", 1_000) for i in range(10)])], 0)
    assert Meta.of(store["meta"]).inline is not None
    call(store, [rows(*[(f"k{i}", 1_000) for i in range(200)])], 0, batch_id=1)
    assert Meta.of(store["meta"]).inline is None and store["_writes"] == [("base", "put", 1)]
    call(store, [rows(("k1", 2_000))], 0, batch_id=2)  # small against 200 windows: logged
    assert store["_writes"][-1] == ("log", "append", 1)
    # [0, 10000) closes at 15,000; one window of a new key stays open: back into meta.
    operator._CACHE.take("t", 0)
    out = call(store, [rows(("z", 20_000))], 15_000, batch_id=3)
    assert sum(r["timing"] == "FINAL" for r in out) == 200
    meta = Meta.of(store["meta"])
    assert meta.inline is not None and meta.log_entries == 0
    assert store["_clears"] == ["base", "log"] and "base" not in store and "log" not in store
    got = call(store, [rows(("z", 21_000))], 15_000, batch_id=4)
    assert [(r["key"], r["count"]) for r in got] == [("z", 2)]


def test_a_cached_engine_ahead_of_the_restored_state_is_not_used():
    store: dict[str, Any] = {}
    batches = [([("a", 1_000)], 0), ([("a", 2_000)], 0), ([("a", 3_000)], 0)]
    for b, (recs, w) in enumerate(batches[:2]):
        call(store, [rows(*recs)], w, batch_id=b)
    committed = copy.deepcopy(store)
    # Batch 2 runs, leaves its engine in the cache, but is never committed (the driver's
    # transaction failed); Spark restores the state of batch 1 and runs batch 2 again with
    # other input (here: none).
    assert call(store, [rows(("a", 3_000))], 0, batch_id=2)[0]["count"] == 3
    got = call(committed, [rows(("b", 4_000))], 0, batch_id=2)
    assert [(r["key"], r["count"]) for r in got] == [("b", 1)]
    # ...and a's window holds 2 records, not the 3 the uncommitted attempt had seen.
    got = call(committed, [rows(("a", 5_000))], 0, batch_id=3)
    assert [(r["key"], r["count"], r["revision"]) for r in got] == [("a", 3, 2)]


def test_a_cached_engine_of_a_diverged_log_is_not_used(list_base):
    store: dict[str, Any] = {}
    call(store, [rows(*[(f"k{i}", 1_000) for i in range(50)])], 0, batch_id=0)
    call(store, [rows(("k1", 2_000))], 0, batch_id=1)
    before = copy.deepcopy(store)
    call(store, [rows(("k1", 3_000))], 0, batch_id=2)  # cache: base + 2 steps (attempt 1)
    # Attempt 2 of batch 2, another worker: stores a different step 2 (other nonce)...
    other = copy.deepcopy(before)
    saved = operator._CACHE.take("t", 0)
    call(other, [rows(("k2", 3_000))], 0, batch_id=2)
    # ...and the attempt-1 engine comes back into this worker's cache: same base, same log
    # length, but not the stored log. It must not be used.
    assert saved is not None
    operator._CACHE.put("t", 0, saved[0], saved[1])
    got = call(other, [rows(("k1", 4_000))], 0, batch_id=3)
    assert [(r["key"], r["count"]) for r in got] == [("k1", 3)]  # 1,000 / 2,000 / 4,000


def test_a_step_survives_its_encoding():
    batch = InputBatch.from_arrays(
        ["a", "b"], [1, 2], [0.5, 1.5], [3, 4], [10, 11], topic=np.array(["x", "y"], object),
        numeric={"m.n": [1.0, 2.0]}, distinct={"u": ["p", "q"]})
    back = Step.decode(Step(7, 1_000, 2_000, True, batch).encode())
    assert (back.batch_id, back.watermark_ms, back.now_ms, back.close_all) == (7, 1_000, 2_000,
                                                                               True)
    b = back.batch
    assert list(b.keys) == ["a", "b"] and list(b.ts_ms) == [1, 2] and list(b.values) == [0.5, 1.5]
    assert list(b.partitions) == [3, 4] and list(b.offsets) == [10, 11]
    assert list(b.topic) == ["x", "y"]
    assert list(b.numeric["m.n"]) == [1.0, 2.0]
    assert list(b.distinct["u"]) == list(batch.distinct["u"])


@pytest.mark.parametrize(("input_end", "closes"), [({0: 3}, True), ({0: 2}, False), (None, False)])
def test_a_conditional_close_all_closes_after_the_calls_rows_only_where_the_input_ended(
        monkeypatch: pytest.MonkeyPatch, input_end: dict[int, int] | None, closes: bool) -> None:
    """The rest of the input and the command in one call: the rows first, then the close —
    if the micro-batch's input (the tasks' property) reaches the command's offsets."""
    store: dict[str, Any] = {}
    call(store, [rows(("a", 1_000))], 0)
    monkeypatch.setattr(operator, "input_end_of_task", lambda: input_end)
    command = rows(("", 0), command='close_all_at:{"0":3}')
    command["key"] = [None]
    out = call(store, [rows(("a", 2_000), ("b", 21_000)), command], 0, batch_id=1)
    got = [(r["key"], r["revision"], r["timing"], r["count"]) for r in out]
    if closes:
        assert got == [("a", 1, "EARLY", 2), ("b", 0, "EARLY", 1),
                       ("a", 2, "FINAL", 2), ("b", 1, "FINAL", 1)]
        assert store["_timers"] == set()
    else:
        assert got == [("a", 1, "EARLY", 2), ("b", 0, "EARLY", 1)]
        assert store["_timers"] == {15_000}
