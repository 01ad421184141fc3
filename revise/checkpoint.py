"""The checkpoint folder: every path in it, and how revise writes there.

Layout of ``<checkpoint>`` (``--checkpoint``, a local or mounted folder)::

    revise-job.json    CHECKPOINT_META  the settings the job was started with (its fingerprint)
    revise-run.json    RUN_FILE         where the job writes, pid, heartbeat (revise.ops.runfile)
    sinks-done         DONE_FILE        the last micro-batch the sinks finished (spark.rewind)
    delta-files/       STAGE_DIR        micro-batches' data files waiting for their Delta commit
                                        (sinks.file_stage)
    control/           CONTROL_DIR      close-all command files of a bounded run, read by
                                        Spark's file source (spark.close_all)
    spark/             SPARK_DIR        Spark's checkpointLocation: offsets/<id> and
                                        commits/<id> (OFFSETS_LOG, COMMITS_LOG; read by
                                        spark.spark_log), sources/ and state/ (SOURCES_DIR,
                                        STATE_DIR: Spark's own)

Every file revise writes here goes through :func:`write_atomic` (temporary file, fsync,
rename, fsync of the folder: a reader or a restart sees the old content or the new, never part
of it). Standard library only: ``revise status`` and the Python workers import it without
Spark.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final, Literal

from sinks.atomic import write_atomic

__all__ = [
    "CHECKPOINT_META",
    "COMMITS_LOG",
    "CONTROL_DIR",
    "DONE_FILE",
    "OFFSETS_LOG",
    "RUN_FILE",
    "SOURCES_DIR",
    "SPARK_DIR",
    "STAGE_DIR",
    "STATE_DIR",
    "SparkLog",
    "checkpoint_fingerprint",
    "control_dir",
    "spark_dir",
    "spark_log_dir",
    "stage_dir",
    "write_atomic",
    "write_fingerprint",
]

CHECKPOINT_META: Final = "revise-job.json"
"""The file in a checkpoint holding its :meth:`~revise.jobconfig.JobConfig.fingerprint`."""
RUN_FILE: Final = "revise-run.json"
"""The run file (:mod:`revise.ops.runfile`): what ``revise status`` learns a job from."""
DONE_FILE: Final = "sinks-done"
"""The file holding the last micro-batch the sinks finished (:mod:`revise.spark.rewind`)."""
STAGE_DIR: Final = "delta-files"
"""The sub-folder where micro-batches' data files wait for their Delta history commit
(``sinks.file_stage``: one record per batch)."""
CONTROL_DIR: Final = "control"
"""The sub-folder Spark's file source reads close-all commands from."""
SPARK_DIR: Final = "spark"
"""The sub-folder given to Spark as its ``checkpointLocation``."""
SOURCES_DIR: Final = "sources"
"""Spark's per-source metadata under :data:`SPARK_DIR` (``sources/<n>/<id>``: the files a file
source read in batch ``id``)."""
STATE_DIR: Final = "state"
"""Spark's state store under :data:`SPARK_DIR` (written by the executors)."""
OFFSETS_LOG: Final = "offsets"
"""Spark's offset log under :data:`SPARK_DIR`: ``<id>`` written before batch ``id`` runs."""
COMMITS_LOG: Final = "commits"
"""Spark's commit log under :data:`SPARK_DIR`: ``<id>`` written once batch ``id``'s sink
returned."""

SparkLog = Literal["offsets", "commits"]
"""The name of one of Spark's two logs (:data:`OFFSETS_LOG`, :data:`COMMITS_LOG`)."""


def spark_dir(checkpoint: str | Path) -> Path:
    """Spark's ``checkpointLocation`` inside ``checkpoint``."""
    return Path(checkpoint) / SPARK_DIR


def spark_log_dir(checkpoint: str | Path, log: SparkLog) -> Path:
    """The folder of Spark's offset or commit log (one file per micro-batch id)."""
    return spark_dir(checkpoint) / log


def control_dir(checkpoint: str | Path) -> Path:
    """The control source's folder (close-all command files)."""
    return Path(checkpoint) / CONTROL_DIR


def stage_dir(checkpoint: str | Path) -> Path:
    """The folder of the micro-batches staged for the Delta history tables."""
    return Path(checkpoint) / STAGE_DIR


def checkpoint_fingerprint(checkpoint: str | Path) -> dict[str, object] | None:
    """The fingerprint the checkpoint at ``checkpoint`` was started with.

    None for a new checkpoint (no :data:`CHECKPOINT_META` in it yet).
    """
    meta = Path(checkpoint) / CHECKPOINT_META
    if not meta.is_file():
        return None
    have: dict[str, object] = json.loads(meta.read_text())
    return have


def write_fingerprint(checkpoint: str | Path, fingerprint: dict[str, object]) -> None:
    """Create the checkpoint folder and record the job's fingerprint in it (atomically)."""
    path = Path(checkpoint)
    path.mkdir(parents=True, exist_ok=True)
    write_atomic(path / CHECKPOINT_META, json.dumps(fingerprint, indent=2))
