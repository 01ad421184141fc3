"""A bounded run's close-all command, and when it takes effect.

A bounded run (``--once``) reads the input up to the end offsets it found at start, then closes
every open window (SPEC §3). The close comes through the query's control source: one command
row per shard (:func:`write_close_all`), so that every shard is called in the micro-batch that
reads it, whether or not it has input there.

The driver writes ``close_all_at:{"p": offset, …}`` (:class:`BoundedEnd`): close only in a
micro-batch whose input reaches these offsets, the end offsets (every partition at or past
its own). It writes it once a micro-batch reads the input to its end, so the close has a
micro-batch of its own, read after all the input: every shard then closes at Spark's global
watermark, the last real one (SPEC §3), which each task writes into its FINALs itself (the
tasks write their own output, ``revise.spark.task_output``; none of them sees the others').
A plain ``close_all`` closes at once.

Whether a conditional command takes effect depends only on what Spark's checkpoint fixes for
that micro-batch: its offsets (the command, in the control file it read; the input's end
offsets, in the offset log). The committer reads the latter before it computes the batch and
hands them to the tasks as a job property (:func:`set_input_end`), so a replayed micro-batch
decides as the first attempt did.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from revise.checkpoint import write_atomic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["CLOSE_ALL", "CLOSE_ALL_AT", "INPUT_END_PROPERTY", "BoundedEnd", "close_all_due",
           "input_end_of_task", "input_reached", "set_input_end", "source_end",
           "write_close_all"]

CLOSE_ALL: Final = "close_all"
"""The control command that closes every open window of a shard."""
CLOSE_ALL_AT: Final = "close_all_at:"
"""Prefix of the conditional command; the rest is JSON ``{"partition": offset}``."""
INPUT_END_PROPERTY: Final = "revise.inputEnd"
"""The job property holding the running micro-batch's input end offsets (JSON, or unset)."""


def _offsets_json(offsets: Mapping[int, int]) -> str:
    """``{partition: offset}`` as the compact JSON the command and the job property carry."""
    return json.dumps({str(p): int(o) for p, o in sorted(offsets.items())},
                      separators=(",", ":"))


def _int_offsets(raw: Mapping[str, int] | None) -> dict[int, int]:
    """JSON's ``{"partition": offset}`` (a command, the job property, a progress report)."""
    return {int(p): int(o) for p, o in (raw or {}).items()}


def write_close_all(control_dir: str, shards: int,
                    until: Mapping[int, int] | None = None) -> Path:
    """Drop one close-all command per shard into the control source (atomic rename).

    ``until``: the input offsets the micro-batch must reach for the command to take effect
    (None: at once).
    """
    command = CLOSE_ALL if until is None else CLOSE_ALL_AT + _offsets_json(until)
    name = f"close-{int(time.time() * 1000)}-{uuid.uuid4().hex[:6]}.json"
    final = Path(control_dir) / name
    write_atomic(final, "".join(json.dumps({"command": command, "shard": s}) + "\n"
                                for s in range(shards)))
    return final


def input_reached(read: Mapping[int, int], until: Mapping[int, int]) -> bool:
    """Whether the offsets ``read`` reach ``until`` on every partition (empty ones aside)."""
    return all(read.get(p, 0) >= hi for p, hi in until.items() if hi > 0)


def close_all_due(commands: Iterable[str], input_end: Mapping[int, int] | None) -> bool:
    """Whether a shard's commands of this micro-batch close its windows.

    ``input_end``: the micro-batch's input end offsets (None: not known, and then only an
    unconditional command closes).
    """
    for command in commands:
        if command == CLOSE_ALL:
            return True
        if command.startswith(CLOSE_ALL_AT) and input_end is not None and input_reached(
                input_end, _int_offsets(json.loads(command[len(CLOSE_ALL_AT):]))):
            return True
    return False


def set_input_end(spark: SparkSession, offsets: Mapping[int, int] | None) -> None:
    """Hand the micro-batch's input end offsets to the tasks the calling thread submits next.

    Called by the committer on Spark's stream thread, before it computes the batch; None
    clears what an earlier micro-batch set.
    """
    value = None if offsets is None else _offsets_json(offsets)
    spark.sparkContext.setLocalProperty(INPUT_END_PROPERTY, value)  # type: ignore[arg-type]


def input_end_of_task() -> dict[int, int] | None:
    """In a task: the input end offsets :func:`set_input_end` gave its micro-batch (or None)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    raw = ctx.getLocalProperty(INPUT_END_PROPERTY) if ctx else None
    return _int_offsets(json.loads(raw)) if raw else None


def source_end(progress: Mapping[str, Any], index: int) -> Any:
    """The end offsets of source ``index`` in a Spark progress report (None if absent)."""
    sources = progress.get("sources") or []
    if len(sources) <= index:
        return None
    raw = sources[index].get("endOffset")
    if raw is None:
        return None
    return json.loads(raw) if isinstance(raw, str) else raw


class BoundedEnd:
    """A bounded run's end: when to write the close-all command, and whether it has closed.

    The committer calls :meth:`start_batch` at the start of each micro-batch, with the input
    and control offsets Spark's offset log holds for it (and the driver once before the query
    starts, with the offsets the checkpoint's last micro-batch read): once that micro-batch
    reads the input to its end offsets, it writes the conditional command, which the next
    micro-batch reads and closes in (:func:`close_all_due`). The driver's watch loop calls
    :meth:`see` with the progress report of every micro-batch, in order: the first one past
    the command's control offset read it, and closed iff its input reached the end offsets.

    The two run on different threads (Spark's stream thread, the driver's main thread).

    Args:
        topic: The input topic.
        ends: The input's end offsets at start, by partition.
        control_dir: The control source's directory.
        shards: The job's shards (one command row each).
    """

    def __init__(self, topic: str, ends: dict[int, int], control_dir: str, shards: int) -> None:
        self.topic = topic
        self.ends = dict(ends)
        self.control_dir = control_dir
        self.shards = shards
        self.closed = False
        self._pending_after: int | None = None  # control offset before the unread command
        self._lock = threading.Lock()

    def start_batch(self, read: Mapping[int, int] | None, control: int) -> bool:
        """A micro-batch reading up to ``read`` starts; write the command if due.

        ``control``: the micro-batch's control offset (-1 before any file). True when it
        wrote the command.
        """
        with self._lock:
            if self.closed or self._pending_after is not None or read is None:
                return False
            if not input_reached(read, self.ends):
                return False
            write_close_all(self.control_dir, self.shards, until=self.ends)
            self._pending_after = control
            return True

    def see(self, progress: Mapping[str, Any]) -> None:
        """Account one micro-batch's progress report (every one, in batch order)."""
        with self._lock:
            if self.closed or self._pending_after is None:
                return
            ctl = source_end(progress, 1)
            if ctl is None or int(ctl["logOffset"]) <= self._pending_after:
                return
            read = _int_offsets((source_end(progress, 0) or {}).get(self.topic))
            # This micro-batch read the command: it closed iff it read to the end.
            self.closed = input_reached(read, self.ends)
            self._pending_after = None
