"""Which micro-batches the sinks finished, and the rewind of Spark's checkpoint past them.

With ``--overlap-commit`` the committer returns a micro-batch to Spark before its Kafka
transaction and Delta writes have run (they run while Spark computes the next batch), so
Spark's commit log may hold one batch that the sinks never finished. The committer records each
batch it finished in ``<checkpoint>/sinks-done`` (:func:`record_done`, in every mode); at start,
before the query, :func:`rewind_unfinished` removes Spark's record of the batch past it (its
commit-log entry, and the offset-log entry of the batch after it, which that run may have
planned). Spark then runs that batch again from its recorded offsets and state, which gives
the same revisions; the sinks' replay rules (the progress topic, Delta's app transactions)
turn whatever part of it had happened into no-ops.

Only ever one batch: the committer finishes batch ``N`` before it returns batch ``N + 1``, so
Spark cannot have recorded more than one batch past ``sinks-done``. A checkpoint written
without the file (an older revise) finished every batch it recorded, so its first start records
the last one. The checkpoint must be a local or mounted folder (as for
:func:`~revise.spark.spark_log.last_committed_batch`).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from revise.checkpoint import COMMITS_LOG, DONE_FILE, OFFSETS_LOG, spark_log_dir, write_atomic
from revise.spark.failures import JobError
from revise.spark.spark_log import last_committed_batch

__all__ = ["read_done", "record_done", "rewind_unfinished"]

log = logging.getLogger("revise.job")


def read_done(checkpoint: str) -> int | None:
    """The last micro-batch the sinks finished (-1: none yet; None: no record, an older run)."""
    try:
        return int((Path(checkpoint) / DONE_FILE).read_text().strip())
    except FileNotFoundError:
        return None


def record_done(checkpoint: str, batch_id: int) -> None:
    """Record that the sinks finished ``batch_id`` (atomically, durably: :func:`write_atomic`).

    Never lowers the record: a fenced instance that wakes after a newer one moved on (its
    Kafka transaction committed before the fencing, its Delta writes after) leaves it be.
    """
    have = read_done(checkpoint)
    if have is not None and have >= batch_id:
        return
    write_atomic(Path(checkpoint) / DONE_FILE, f"{batch_id}\n")


def _remove_log_entry(folder: Path, batch_id: int) -> None:
    """Remove Spark's log entry ``batch_id`` and its Hadoop checksum file, where they exist."""
    for name in (f".{batch_id}.crc", str(batch_id)):
        with contextlib.suppress(FileNotFoundError):
            (folder / name).unlink()


def rewind_unfinished(checkpoint: str) -> int | None:
    """Make Spark run again the batch its checkpoint records past ``sinks-done``; that batch.

    None when there is none (the usual case). Run before the query starts, after this
    instance's transactional producer has fenced any older one.

    Raises:
        JobError: Spark's commit log is more than one batch past ``sinks-done``, which no
            run of revise leaves; nothing is removed.
    """
    last = last_committed_batch(checkpoint)
    done = read_done(checkpoint)
    if done is None:  # an older revise's checkpoint (which finished what it recorded), or new
        record_done(checkpoint, last)
        return None
    if done >= last:  # done > last: the sinks finished a batch Spark had not recorded yet
        return None
    if last > done + 1:
        msg = (f"--checkpoint {checkpoint}: Spark recorded micro-batch {last} but the sinks "
               f"finished only {done} ({DONE_FILE}); revise leaves at most one batch between "
               "them, so the checkpoint was changed by hand: restore it, or start over with "
               "a new --checkpoint and --query-id")
        raise JobError(msg)
    _remove_log_entry(spark_log_dir(checkpoint, OFFSETS_LOG), last + 1)
    _remove_log_entry(spark_log_dir(checkpoint, COMMITS_LOG), last)
    log.warning("micro-batch %d was recorded by Spark but its Kafka and Delta writes did not "
                "finish (the last run stopped in between): it runs again", last)
    return last
