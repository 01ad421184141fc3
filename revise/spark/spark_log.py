"""Spark's checkpoint logs as the driver reads them: the offset log and the commit log.

Under ``<checkpoint>/spark`` Spark writes, per micro-batch, an ``offsets/<id>`` entry before it
runs the batch (the end offsets of each source) and a ``commits/<id>`` entry once the batch's
sink returned. revise reads them for a bounded run's close (:mod:`revise.spark.close_all`),
to tell a fenced instance (:mod:`revise.spark.failures`) and to rewind a batch its sinks did
not finish (:mod:`revise.spark.rewind`); the folders' names are :mod:`revise.checkpoint`'s.
Standard library only: the Python workers import this module too.
"""

from __future__ import annotations

import json

from revise.checkpoint import COMMITS_LOG, OFFSETS_LOG, SparkLog, spark_log_dir

__all__ = ["batch_offsets", "batch_timestamp", "batch_watermark", "last_committed_batch",
           "last_entry", "recorded_shuffle_partitions"]


def last_entry(checkpoint: str, log: SparkLog) -> int:
    """The highest micro-batch id in Spark's ``log`` (``offsets``, ``commits``; -1: none)."""
    try:
        return max((int(p.name) for p in spark_log_dir(checkpoint, log).iterdir()
                    if p.name.isdigit()), default=-1)
    except OSError:
        return -1


def last_committed_batch(checkpoint: str) -> int:
    """The highest batch id in Spark's commit log under ``checkpoint`` (-1: none, or unreadable).

    A failed instance whose checkpoint holds batches it never ran was overtaken by another
    instance, whatever error text Spark gave it
    (:func:`~revise.spark.failures.checkpoint_taken_over`).
    """
    return last_entry(checkpoint, COMMITS_LOG)


def batch_offsets(checkpoint: str, batch_id: int,
                  topic: str) -> tuple[dict[int, int] | None, int]:
    """Micro-batch ``batch_id``'s end offsets in Spark's offset log: the input's, the control's.

    The input's by partition (None when the entry cannot be read or holds none for ``topic``),
    and the control source's ``logOffset`` (-1: no file read yet). Spark writes the entry
    before it runs the micro-batch's sink; its third line holds the first source's offsets
    (the Kafka input), its fourth the second's (the control files).
    """
    path = spark_log_dir(checkpoint, OFFSETS_LOG) / str(batch_id)
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


def batch_watermark(checkpoint: str, batch_id: int) -> int | None:
    """The watermark (epoch ms) Spark's offset log records for micro-batch ``batch_id``.

    The one in force during that batch (its second line's ``batchWatermarkMs``); None when
    the entry cannot be read.
    """
    return _batch_metadata(checkpoint, batch_id, "batchWatermarkMs")


def batch_timestamp(checkpoint: str, batch_id: int) -> int | None:
    """When micro-batch ``batch_id`` was triggered (epoch ms), as Spark's offset log records it.

    Spark writes the entry (its second line's ``batchTimestampMs``) before the batch runs and
    runs a replayed batch with the recorded value: the same batch has the same timestamp in
    every run. None when the entry cannot be read.
    """
    return _batch_metadata(checkpoint, batch_id, "batchTimestampMs")


def _batch_metadata(checkpoint: str, batch_id: int, *keys: str) -> int | None:
    """The number at ``keys`` in offset log entry ``batch_id``'s metadata (its second line).

    None when the entry cannot be read or holds no number there.
    """
    path = spark_log_dir(checkpoint, OFFSETS_LOG) / str(batch_id)
    try:
        value = json.loads(path.read_text().splitlines()[1])
        for key in keys:
            value = value[key]
        return int(value)
    except (OSError, IndexError, KeyError, TypeError, ValueError):
        return None


def recorded_shuffle_partitions(checkpoint: str) -> int | None:
    """The stateful operator's partition count the checkpoint fixed (None: no batch yet).

    Spark records ``spark.sql.shuffle.partitions`` in each offset log entry's second line
    (the batch's metadata) and keeps using it on every restart.
    """
    last = last_entry(checkpoint, OFFSETS_LOG)
    if last < 0:
        return None
    return _batch_metadata(checkpoint, last, "conf", "spark.sql.shuffle.partitions")
