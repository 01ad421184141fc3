"""A bounded run's close-all command, and when it takes effect.

A bounded run (``--once``) reads the input up to the end offsets it found at start, then closes
every open window (SPEC §3). The close comes through the query's control source: one command
row per shard (:func:`write_close_all`), so that every shard is called in the micro-batch that
reads it, whether or not it has input there.

The driver writes ``close_all_at:{"p": offset, …}`` (:class:`BoundedEnd`): close only in a
micro-batch whose input reaches these offsets, the end offsets (every partition at or past
its own). It writes it as soon as what is left of the input fits in one micro-batch
(``--max-records-per-batch``), so that the next micro-batch reads the rest of the input and
the command together and closes after applying that input: the close takes no micro-batch of
its own. If that micro-batch stops short of the offsets (records written after the run
started made Spark split what is left across partitions), the command does nothing there,
and the driver writes another when the input is short enough again. A plain ``close_all``
(what revise wrote before, once the input was read) closes at once.

Whether a conditional command takes effect depends only on what Spark's checkpoint fixes for
that micro-batch: its offsets (the command, in the control file it read; the input's end
offsets, in the offset log). The committer reads the latter before it computes the batch and
hands them to the tasks as a job property (:func:`set_input_end`), so a replayed micro-batch
decides as the first attempt did.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["CLOSE_ALL", "CLOSE_ALL_AT", "INPUT_END_PROPERTY", "BoundedEnd", "batch_offsets",
           "close_all_due", "input_end_of_task", "input_reached", "last_planned_batch",
           "set_input_end", "source_end", "write_close_all"]

CLOSE_ALL: Final = "close_all"
"""The control command that closes every open window of a shard."""
CLOSE_ALL_AT: Final = "close_all_at:"
"""Prefix of the conditional command; the rest is JSON ``{"partition": offset}``."""
INPUT_END_PROPERTY: Final = "revise.inputEnd"
"""The job property holding the running micro-batch's input end offsets (JSON, or unset)."""


def write_close_all(control_dir: str, shards: int,
                    until: Mapping[int, int] | None = None) -> Path:
    """Drop one close-all command per shard into the control source (atomic rename).

    ``until``: the input offsets the micro-batch must reach for the command to take effect
    (None: at once).
    """
    command = CLOSE_ALL if until is None else CLOSE_ALL_AT + json.dumps(
        {str(p): int(o) for p, o in sorted(until.items())}, separators=(",", ":"))
    name = f"close-{int(time.time() * 1000)}-{uuid.uuid4().hex[:6]}.json"
    tmp = Path(control_dir) / f".{name}.tmp"
    tmp.write_text("".join(json.dumps({"command": command, "shard": s}) + "\n"
                           for s in range(shards)))
    final = Path(control_dir) / name
    os.replace(tmp, final)
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
        if command.startswith(CLOSE_ALL_AT) and input_end is not None:
            until = {int(p): int(o) for p, o in json.loads(command[len(CLOSE_ALL_AT):]).items()}
            if input_reached(input_end, until):
                return True
    return False


def batch_offsets(checkpoint: str, batch_id: int,
                  topic: str) -> tuple[dict[int, int] | None, int]:
    """Micro-batch ``batch_id``'s end offsets in Spark's offset log: the input's, the control's.

    The input's by partition (None when the entry cannot be read or holds none for ``topic``),
    and the control source's ``logOffset`` (-1: no file read yet). Spark writes the entry
    before it runs the micro-batch's sink; its third line holds the first source's offsets
    (the Kafka input), its fourth the second's (the control files).
    """
    path = Path(checkpoint) / "spark" / "offsets" / str(batch_id)
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None, -1
    parsed = []
    for line in lines[2:4]:
        try:
            parsed.append(json.loads(line) if line != "-" else None)
        except ValueError:
            parsed.append(None)
    kafka, control = (parsed + [None, None])[:2]
    read = ({int(p): int(o) for p, o in kafka[topic].items()}
            if isinstance(kafka, dict) and isinstance(kafka.get(topic), dict) else None)
    logged = int(control["logOffset"]) if isinstance(control, dict) else -1
    return read, logged


def last_planned_batch(checkpoint: str) -> int:
    """The highest micro-batch id in Spark's offset log under ``checkpoint`` (-1: none)."""
    try:
        return max((int(p.name) for p in (Path(checkpoint) / "spark" / "offsets").iterdir()
                    if p.name.isdigit()), default=-1)
    except OSError:
        return -1


def set_input_end(spark: SparkSession, offsets: Mapping[int, int] | None) -> None:
    """Hand the micro-batch's input end offsets to the tasks the calling thread submits next.

    Called by the committer on Spark's stream thread, before it computes the batch; None
    clears what an earlier micro-batch set.
    """
    value = None if offsets is None else json.dumps(
        {str(p): int(o) for p, o in sorted(offsets.items())}, separators=(",", ":"))
    spark.sparkContext.setLocalProperty(INPUT_END_PROPERTY, value)  # type: ignore[arg-type]


def input_end_of_task() -> dict[int, int] | None:
    """In a task: the input end offsets :func:`set_input_end` gave its micro-batch (or None)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    raw = ctx.getLocalProperty(INPUT_END_PROPERTY) if ctx else None
    if not raw:
        return None
    return {int(p): int(o) for p, o in json.loads(raw).items()}


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
    starts, with the offsets the checkpoint's last micro-batch read): once what is left of the
    input after it fits in the next micro-batch (at most ``limit`` records; anything without
    a limit), it writes the conditional command, which the next micro-batch then reads with
    the rest of the input, and closes in (:func:`close_all_due`). An input that fits in one
    micro-batch is read and closed in one. The driver's watch loop calls
    :meth:`see` with the progress report of every micro-batch, in order: the first one past
    the command's control offset read it, and closed iff it read to the end offsets; if it
    did not (records written after the start made Spark split the rest across partitions),
    the next :meth:`start_batch` whose input is short enough writes another.

    The two run on different threads (Spark's stream thread, the driver's main thread).

    Args:
        topic: The input topic.
        ends: The input's end offsets at start, by partition.
        limit: Records per micro-batch (``--max-records-per-batch``); None or 0: no limit.
        control_dir: The control source's directory.
        shards: The job's shards (one command row each).
    """

    def __init__(self, topic: str, ends: dict[int, int], limit: int | None, control_dir: str,
                 shards: int) -> None:
        self.topic = topic
        self.ends = dict(ends)
        self.limit = limit or 0
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
            left = sum(max(0, hi - read.get(p, 0)) for p, hi in self.ends.items())
            if self.limit and left > self.limit:  # no limit: the next one reads all there is
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
            kafka = source_end(progress, 0) or {}
            read = {int(p): int(o) for p, o in (kafka.get(self.topic) or {}).items()}
            # This micro-batch read the command: it closed iff it read to the end.
            self.closed = input_reached(read, self.ends)
            self._pending_after = None
