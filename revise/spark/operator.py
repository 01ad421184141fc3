"""The stateful operator: the revision engine inside Spark.

:class:`ShardProcessor`, under ``transformWithStateInPandas`` with event-time timers. Spark
calls it once per shard and micro-batch in which the shard has rows or the watermark reached
its next closing window, never for an idle shard with nothing due, whose stored state it then
neither reads nor rewrites. It gets the Python worker's cached engine when it matches the
stored state (else rebuilds it from a base snapshot and a log of steps,
``revise.spark.shard_state``), applies the batch against Spark's global watermark, and appends
the step — bytes that follow the records, not the state. At the end of the task
(``revise.spark.tws_end``) it writes the revisions, too-late records and dead letters of all
its calls — one data file per history table, the Kafka messages framed for the task's JVM
writer — and returns a few rows that say so (:func:`revise.spark.output.encode_output`; the
driver reads them with :func:`~revise.spark.output.decode_output`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from revise.config import EngineConfig
from revise.engine import Engine, InputBatch
from revise.errors import InfraError
from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA, revision_schema
from revise.spark.close_all import close_all_due, input_end_of_task
from revise.spark.output import REVISIONS_ONLY, MessageKinds, encode_output, stamp
from revise.spark.shard_keys import shard_of
from revise.spark.shard_state import (
    BASE_SCHEMA,
    INLINE_BASE_BYTES,
    LOG_SCHEMA,
    META_SCHEMA,
    EngineCache,
    Meta,
    Step,
    apply_step,
    base_chunks,
    new_nonce,
    replay,
    should_rebase,
    skip_applied,
)
from revise.spark.task_output import HistoryTarget, batch_stamp
from revise.spark.tws_end import install as _install_end_of_task
from revise.spark.tws_end import installed as tws_end_installed
from revise.spark.tws_input import install as _install_columnar_input

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql.types import DataType

try:  # the workers and the driver have pyspark; the engine's own tests need not
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor as _StatefulProcessor
except ImportError:  # pragma: no cover - pyspark is a dependency
    _StatefulProcessor = object  # type: ignore[assignment,misc]
else:
    # A Python worker imports this module when it unpickles the processor, before it reads
    # the input: from then on it reads it column-wise (revise.spark.tws_input), and each
    # task's timer phase ends with the processor's output (revise.spark.tws_end).
    _install_columnar_input()
    _install_end_of_task()

__all__ = [
    "VALUE_COLUMNS",
    "InputColumns",
    "ShardProcessor",
    "TaskOutput",
]


@dataclass(frozen=True, slots=True)
class InputColumns:
    """The aggregated input columns the operator receives, beside ``key`` and ``ts_ms``.

    Attributes:
        numeric: ``(column, field path)`` of each double column: ``value`` (the record's
            ``--value-field``, or 0.0 when only ``count`` is asked) for the bare ``--aggs``
            form, else one ``num_*`` column per numeric field of ``--aggs``.
        distinct: ``(column, field path)`` of each canonical-text column (``dst_*``).
    """

    numeric: tuple[tuple[str, str], ...]
    distinct: tuple[tuple[str, str], ...]

    @property
    def names(self) -> list[str]:
        """Every column, numeric first."""
        return [c for c, _ in (*self.numeric, *self.distinct)]

    def items(self) -> list[tuple[str, DataType]]:
        """``(column, Spark type)`` of every column, numeric first (type objects, not DDL)."""
        from pyspark.sql.types import DoubleType, StringType

        return ([(c, DoubleType()) for c, _ in self.numeric]
                + [(c, StringType()) for c, _ in self.distinct])


VALUE_COLUMNS: Final = InputColumns((("value", "value"),), ())
"""The default input: one ``value`` column, the record's ``value`` field."""

# The accepted records' fixed columns, with their numpy types.
_INPUT_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("key", object), ("ts_ms", np.int64), ("partition", np.int32), ("offset", np.int64),
)


class ShardProcessor(_StatefulProcessor):
    """The ``transformWithStateInPandas`` processor: one shard's engine per grouping key.

    Spark calls :meth:`handleInputRows` for a shard with rows in the micro-batch and
    :meth:`handleExpiredTimer` when the watermark reached the shard's timer (its next
    window's close, :attr:`~revise.engine.Engine.next_close_ms`); never for an idle shard with
    nothing due. Either call gets the shard's engine (:meth:`_engine`: the worker's cached one
    when it matches the stored state, else rebuilt from the stored base and log), applies the
    call's :class:`~revise.spark.shard_state.Step` against Spark's global watermark, stores
    the step (or a new base, :func:`~revise.spark.shard_state.should_rebase`), moves the
    timer, and keeps the revisions, too-late records and dead letters (:class:`TaskOutput`)
    for :meth:`end_of_task`, which writes them once for the whole task.

    Args:
        engine_cfg: The engine's configuration.
        topic: The input topic (the late records' and dead letters' ``topic``).
        fields: The aggregated input columns (``revise.spark.stream.input_columns``).
        shards: The job's shard count: a grouping value stands for shard ``value mod shards``
            (``revise.spark.shard_keys``).
        token: Names the job's state in the workers' engine cache (its checkpoint).
    """

    def __init__(self, engine_cfg: EngineConfig, topic: str,
                 fields: InputColumns = VALUE_COLUMNS, *, shards: int, token: str = "",
                 messages: MessageKinds = REVISIONS_ONLY,
                 history: HistoryTarget | None = None) -> None:
        self._cfg = engine_cfg
        self._topic = topic
        self._fields = fields
        self._shards = shards
        self._out: TaskOutput | None = None  # this task's output so far (each task unpickles)
        self._token = token
        self._messages = messages
        self._history = history
        self._schema = revision_schema(engine_cfg.aggs)

    def init(self, handle: Any) -> None:
        """Spark's hook: declare the shard's state variables."""
        if not tws_end_installed():
            msg = ("revise's operator needs PySpark's transformWithStateInPandas timer phase "
                   "to end its task with its output (revise.spark.tws_end), which this PySpark "
                   "does not have: install the PySpark release revise pins (pyproject.toml)")
            raise InfraError(msg)
        self._handle = handle
        self._out = None
        self._meta = handle.getValueState("meta", META_SCHEMA)
        self._base = handle.getListState("base", BASE_SCHEMA)
        self._log = handle.getListState("log", LOG_SCHEMA)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: Any) -> Iterator[pd.DataFrame]:
        """Spark's hook: the shard's rows of this micro-batch (output: at the task's end)."""
        self._call(shard_of(int(key[0]), self._shards), rows, timerValues)
        yield from ()

    def handleExpiredTimer(self, key: Any, timerValues: Any,
                           expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:
        """Spark's hook: the watermark reached the shard's next close (output: at the end).

        Spark deletes the fired timer itself once this returns, so the call must not.
        """
        fired = int(expiredTimerInfo.getExpiryTimeInMs())
        self._call(shard_of(int(key[0]), self._shards), [], timerValues, fired_timer_ms=fired)
        yield from ()

    def end_of_task(self) -> Iterator[pd.DataFrame]:
        """The task's output, after its last call (``revise.spark.tws_end``): written here.

        The revisions, too-late records and dead letters of every call of the task, in call
        order (so each window's revisions in revision order), as one data file per history
        table and one encoding of the Kafka messages (:func:`_write`).
        """
        out, self._out = self._out, None
        if out is not None:
            yield from _write(out, self._schema, self._messages, self._history)

    def close(self) -> None:
        """Spark's hook: nothing to release."""

    def _call(self, shard: int, frames: Iterable[pd.DataFrame], timer_values: Any, *,
              fired_timer_ms: int = -1) -> None:
        step, dead = _read_step(frames, self._topic, self._fields,
                                int(timer_values.getCurrentWatermarkInMs()),
                                int(timer_values.getCurrentProcessingTimeInMs()))
        meta = Meta.of(self._meta.get())
        engine = self._engine(shard, meta)
        (revisions, *closing), late = apply_step(engine, step)
        if self._out is None:
            self._out = TaskOutput(step.batch_id)
        self._out.add(shard, [revisions.to_arrow(), *(r.to_arrow() for r in closing)],
                      late.to_arrow(), dead, engine.open_windows, self._schema)
        self._store(shard, meta, engine, step, fired_timer_ms)

    def _engine(self, shard: int, meta: Meta | None) -> Engine:
        """The shard's engine as stored: cached and caught up, or rebuilt."""
        cached = _CACHE.take(self._token, shard)
        if meta is None:
            return Engine(self._cfg)
        if cached is not None:
            stamp, engine = cached
            if stamp == meta.stamp:  # the common case: nothing to read
                return engine
            if stamp.base_id == meta.base_id and stamp.applied < meta.log_entries:
                # Another worker ran the shard since: replay the steps it stored.
                rest = skip_applied(self._log_entries(), stamp)
                if rest is not None:
                    return replay(engine, rest)
        if meta.inline is not None:  # no log beside an inline base
            return Engine.build(self._cfg, meta.inline)
        engine = Engine.build(self._cfg, b"".join(bytes(c[0]) for c in self._base.get()))
        return replay(engine, self._log_entries())

    def _drop_lists(self, meta: Meta) -> None:
        """Empty the ``base`` and ``log`` lists that ``meta`` says hold something."""
        if meta.inline is None:
            self._base.clear()
        if meta.log_entries:
            self._log.clear()

    def _log_entries(self) -> Iterator[tuple[str, bytes]]:
        return ((str(r[0]), bytes(r[1])) for r in self._log.get())

    def _store(self, shard: int, meta: Meta | None, engine: Engine, step: Step,
               fired_timer_ms: int = -1) -> None:
        """Store the shard after ``step``: drop it, append the step, or write a new base.

        ``fired_timer_ms``: the timer whose firing made this call (-1: none), which Spark
        deletes after the call; deleting it here too would log a warning per shard. The new
        timer is never that one: the engine closed every window due at the watermark that
        fired it, so its next close is later.
        """
        due = engine.next_close_ms
        timer = -1 if due is None else due  # a timer at T fires once the watermark >= T
        old_timer = -1 if meta is None else meta.timer_ms
        if old_timer != timer:
            if old_timer >= 0 and old_timer != fired_timer_ms:
                self._handle.deleteTimer(old_timer)
            if timer >= 0:
                self._handle.registerTimer(timer)
        if due is None and not engine.sealed:
            # Nothing open and nothing to remember: no state at all.
            if meta is not None:
                self._meta.clear()
                self._drop_lists(meta)
            return
        records = (0 if meta is None else meta.log_records) + len(step.batch)
        entries = (0 if meta is None else meta.log_entries) + 1
        if (meta is None or meta.inline is not None
                or should_rebase(records, entries, engine.open_windows)):
            snapshot = engine.snapshot()
            if len(snapshot) <= INLINE_BASE_BYTES:
                new = Meta(new_nonce(), 0, 0, "", timer, snapshot)
                if meta is not None:
                    self._drop_lists(meta)
            else:
                new = Meta(new_nonce(), 0, 0, "", timer)
                self._base.put(base_chunks(snapshot))
                if meta is not None and meta.log_entries:
                    self._log.clear()
        else:
            nonce = new_nonce()
            self._log.appendValue((nonce, step.encode()))
            new = Meta(meta.base_id, entries, records, nonce, timer)
        self._meta.update(new.row())
        _CACHE.put(self._token, shard, new.stamp, engine)


def _read_step(frames: Iterable[pd.DataFrame], topic: str, fields: InputColumns,
               watermark_ms: int, now_ms: int) -> tuple[Step, list[pa.Table]]:
    """One call's :class:`~revise.spark.shard_state.Step` and the dead letters of its rows.

    ``watermark_ms`` and ``now_ms`` are what Spark gives the call (a watermark below 0, before
    the first one exists, counts as 0); the batch id is the running micro-batch's.
    """
    batch_id = _batch_id()
    batch, dead, commands = _split_input([f for f in frames if len(f)], topic, batch_id, fields)
    close_all = bool(commands) and close_all_due(commands, input_end_of_task())
    return Step(batch_id, max(0, watermark_ms), now_ms, close_all, batch), dead


@dataclass(slots=True)
class TaskOutput:
    """What a task's shard calls produced, kept for the end of the task.

    Attributes:
        batch_id: The micro-batch.
        revisions: Each call's revisions, in the job's revision schema, in call order.
        late: Each call's too-late records.
        dead: Each call's dead letters.
        open_windows: Each called shard's open windows after its last call.
    """

    batch_id: int
    revisions: list[pa.Table] = field(default_factory=list)
    late: list[pa.Table] = field(default_factory=list)
    dead: list[pa.Table] = field(default_factory=list)
    open_windows: dict[int, int] = field(default_factory=dict)

    def add(self, shard: int, revisions: list[pa.Table], late: pa.Table, dead: list[pa.Table],
            open_windows: int, revision_schema: pa.Schema) -> None:
        """Keep one call's output (``revisions``: its revisions, then a close-all's FINALs)."""
        self.revisions.extend(t.cast(revision_schema) for t in revisions if t.num_rows)
        if late.num_rows:
            self.late.append(late)
        self.dead.extend(dead)
        self.open_windows[shard] = open_windows


def _write(out: TaskOutput, revision_schema: pa.Schema, messages: MessageKinds,
           history: HistoryTarget | None) -> Iterator[pd.DataFrame]:
    """A task's output written here, and the rows that say so (in frames).

    The revisions carry the micro-batch's ``emitted_at_ms`` (:func:`batch_stamp`); the
    revisions, too-late records and dead letters are written as one data file per history
    table (``history``; none without one) and framed as the Kafka messages ``messages`` asks
    for (:func:`~revise.spark.output.encode_output`), with each shard's open windows.
    """
    revs = (pa.concat_tables(out.revisions) if out.revisions
            else revision_schema.empty_table())
    emitted_at = batch_stamp()
    if emitted_at is not None and revs.num_rows:
        revs = stamp(revs, emitted_at)
    late_table = pa.concat_tables(out.late) if out.late else LATE_SCHEMA.empty_table()
    dead_table = pa.concat_tables(out.dead) if out.dead else DEAD_LETTER_SCHEMA.empty_table()
    partition = _partition_id()
    files = (None if history is None else
             history.write(out.batch_id, partition, revs, late_table, dead_table))
    return encode_output(revisions=revs, late=late_table, dead=dead_table,
                         revision_schema=revision_schema, files=files,
                         open_windows=out.open_windows, messages=messages,
                         partition=partition)


def _partition_id() -> int:
    """The running task's partition: the state partition it computes."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx else 0


def _batch_id() -> int:
    """The running micro-batch's id (Spark's task property)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return int(ctx.getLocalProperty("streaming.sql.batchId") or 0) if ctx else 0


_CACHE = EngineCache()
"""This Python worker's engines (Spark reuses workers across micro-batches)."""


def _split_input(frames: list[pd.DataFrame], topic: str, batch_id: int,
                 fields: InputColumns) -> tuple[InputBatch, list[pa.Table], list[str]]:
    """A shard's rows → (accepted records, dead letters, the control commands that came).

    The late records' ``value`` is the first numeric column (``value`` for the default options),
    0.0 when the aggregates read no number (``count`` and ``distinct`` only).
    """
    if not frames:
        return InputBatch.empty(topic), [], []
    command = np.concatenate([f["command"].notna().to_numpy() for f in frames])
    commands = ([str(c) for f in frames for c in f["command"].dropna()] if command.any()
                else [])
    bad = np.concatenate([f["reason"].notna().to_numpy() for f in frames]) & ~command
    good = ~bad & ~command
    dead: list[pa.Table] = []
    if good.all():
        # The usual case: numpy concatenation, cheaper than pd.concat + a mask.
        def column(name: str, dtype: Any) -> npt.NDArray[Any]:
            return np.concatenate([f[name].to_numpy(dtype=dtype) for f in frames])
    else:
        import pandas as pd

        rows = pd.concat(frames, ignore_index=True)
        if bad.any():
            dead.append(_dead_letters(rows[bad], topic, batch_id))
        accepted = rows[good]  # bad rows have null ts/value: select before typing

        def column(name: str, dtype: Any) -> npt.NDArray[Any]:
            values: npt.NDArray[Any] = accepted[name].to_numpy(dtype=dtype)
            return values
    c = {name: column(name, dtype) for name, dtype in _INPUT_COLUMNS}
    numeric = {f: column(col, np.float64) for col, f in fields.numeric}
    distinct = {f: column(col, object) for col, f in fields.distinct}
    values = next(iter(numeric.values())) if numeric else np.zeros(len(c["key"]))
    batch = InputBatch.from_arrays(
        c["key"], c["ts_ms"], values, c["partition"], c["offset"], topic=topic,
        numeric=numeric, distinct=distinct,
    )
    return batch, dead, commands


def _dead_letters(rows: pd.DataFrame, topic: str, batch_id: int) -> pa.Table:
    n = len(rows)
    return pa.table(
        {
            "raw_value": pa.array(rows["raw_value"].tolist(), pa.string()),
            "reason": pa.array(rows["reason"].tolist(), pa.string()),
            "topic": pa.array([topic] * n, pa.string()),
            "partition": pa.array(rows["partition"].to_numpy(dtype=np.int32)),
            "offset": pa.array(rows["offset"].to_numpy(dtype=np.int64)),
            "batch_id": pa.array(np.full(n, batch_id, dtype=np.int64)),
        },
        schema=DEAD_LETTER_SCHEMA,
    )
