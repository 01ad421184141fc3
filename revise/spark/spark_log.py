"""Spark's checkpoint logs as the driver reads them: the offset log and the commit log.

Under ``<checkpoint>/spark`` Spark writes, per micro-batch, an ``offsets/<id>`` entry before it
runs the batch (the end offsets of each source) and a ``commits/<id>`` entry once the batch's
sink returned. revise reads them for a bounded run's close (:mod:`revise.spark.close_all`),
to tell a fenced instance (:mod:`revise.spark.failures`) and to rewind a batch its sinks did
not finish (:mod:`revise.spark.rewind`). Standard library only: the Python workers import
this module too.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["batch_offsets", "batch_watermark", "last_entry"]


def last_entry(checkpoint: str, log: str) -> int:
    """The highest micro-batch id in Spark's ``log`` (``offsets``, ``commits``; -1: none)."""
    try:
        return max((int(p.name) for p in (Path(checkpoint) / "spark" / log).iterdir()
                    if p.name.isdigit()), default=-1)
    except OSError:
        return -1


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


def batch_watermark(checkpoint: str, batch_id: int) -> int | None:
    """The watermark (epoch ms) Spark's offset log records for micro-batch ``batch_id``.

    The one in force during that batch (its second line's ``batchWatermarkMs``); None when
    the entry cannot be read.
    """
    path = Path(checkpoint) / "spark" / "offsets" / str(batch_id)
    try:
        return int(json.loads(path.read_text().splitlines()[1])["batchWatermarkMs"])
    except (OSError, IndexError, KeyError, TypeError, ValueError):
        return None
