"""Where a running or stopped job stands (``revise status``, docs/OPERATIONS.md).

Everything is read from what the job leaves behind, without Spark:

- the checkpoint: the run file (:mod:`revise.ops.runfile`: the job's outputs, pid, heartbeat),
  Spark's commit and offset logs (the last committed micro-batch, its watermark and its input
  end offsets, :mod:`revise.spark.spark_log`), the staged Delta history batches
  (:func:`sinks.file_stage.staged_batches`);
- Kafka: the input topic's end offsets (lag = end − the last committed batch's end offsets,
  per partition) and the job's last progress marker (its last Kafka transaction);
- Delta: each table's version and the highest micro-batch it holds (the app transaction
  ``revise-<query_id>`` every revise write carries) with its commit time.

``latest`` has caught up with ``revisions`` when it holds every micro-batch ``revisions``
holds (the test the job's own start runs, ``DeltaTables.catch_up_latest``).

Exit codes (:attr:`JobStatus.exit_code`): :data:`OK` running and caught up; :data:`STOPPED`
not running (whatever else); :data:`BEHIND` running but stalled or trailing by more than the
limits; :data:`UNREADABLE` running but Kafka or Delta could not be read; 2 (a ``ConfigError``)
no revise checkpoint there.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from revise.checkpoint import (
    CHECKPOINT_META,
    COMMITS_LOG,
    checkpoint_fingerprint,
    spark_log_dir,
    stage_dir,
)
from revise.errors import ConfigError
from revise.ops.runfile import STALE_S, RunInfo, liveness, read_run_file
from revise.spark.spark_log import batch_offsets, batch_watermark, last_entry
from revise.vocab import TABLE_NAMES
from sinks.file_stage import staged_batches

__all__ = ["BEHIND", "DEFAULT_MAX_DELAY_S", "OK", "STOPPED", "UNREADABLE", "JobStatus",
           "TableState", "job_status"]

OK: Final = 0
"""The job runs and is caught up."""
UNREADABLE: Final = 1
"""The job runs, but Kafka or Delta could not be read: its health is unknown."""
STOPPED: Final = 3
"""The job does not run (stopped cleanly, killed, crashed, or never started)."""
BEHIND: Final = 4
"""The job runs but is stalled, or trails by more than the limits."""

DEFAULT_MAX_DELAY_S: Final = 60.0
"""How long Delta may trail the changelog (staged history, ``latest`` behind ``revisions``)
before a running job counts as behind (``--max-delay``): the job's own cadence keeps them
within ``--delta-commit-interval`` (5 s) plus a MERGE or two."""


@dataclass(frozen=True, slots=True)
class TableState:
    """One Delta table of the job.

    Attributes:
        table: ``revisions``, ``latest``, ``late`` or ``dead_letter``.
        version: The table's Delta version (None: no table).
        batch_id: The highest micro-batch of the job the table holds (None: none).
        committed_at_ms: When the table's last commit was made (epoch ms).
    """

    table: str
    version: int | None
    batch_id: int | None
    committed_at_ms: int | None


@dataclass(frozen=True, slots=True)
class JobStatus:
    """Where a job stands (see the module). Times are epoch ms, ages seconds.

    Attributes:
        checkpoint: The checkpoint folder.
        query_id: The job's id.
        running: Whether the job runs (:func:`revise.ops.runfile.liveness`).
        state: ``running`` or ``stopped``.
        why: Why it is judged so (``pid 42 is gone`` …).
        heartbeat_age_s: Seconds since the job's last heartbeat (None: no run file).
        pid: The driver's pid (None: no run file).
        metrics_port: The port of the job's ``/metrics`` (None: none).
        last_batch_id: The last micro-batch in Spark's commit log (-1: none).
        last_batch_at_ms: When Spark recorded it.
        watermark_ms: The watermark in force during that micro-batch.
        input_topic: The input topic.
        input_lag: Records not yet read, per input partition (None: unknown).
        kafka_batch_id: The highest micro-batch a state partition committed to Kafka.
        kafka_committed_at_ms: That micro-batch's ``emitted_at_ms`` (taken as it started; its
            transactions committed during it).
        delta: The four Delta tables.
        staged_batches: Micro-batches in the changelog waiting for their Delta history commit.
        staged_age_s: Age of the oldest of them.
        latest_caught_up: ``latest`` holds every micro-batch ``revisions`` holds (None: unknown).
        behind: Why a running job counts as behind (empty: it does not).
        errors: What could not be read.
    """

    checkpoint: str
    query_id: str
    running: bool
    state: str
    why: str
    heartbeat_age_s: float | None
    pid: int | None
    metrics_port: int | None
    last_batch_id: int
    last_batch_at_ms: int | None
    watermark_ms: int | None
    input_topic: str | None
    input_lag: dict[int, int] | None
    kafka_batch_id: int | None
    kafka_committed_at_ms: int | None
    delta: tuple[TableState, ...]
    staged_batches: int
    staged_age_s: float | None
    latest_caught_up: bool | None
    behind: tuple[str, ...]
    errors: tuple[str, ...]

    @property
    def input_lag_total(self) -> int | None:
        """Records not yet read over all input partitions (None: unknown)."""
        return None if self.input_lag is None else sum(self.input_lag.values())

    @property
    def exit_code(self) -> int:
        """:data:`STOPPED`, :data:`UNREADABLE`, :data:`BEHIND` or :data:`OK`, in that order."""
        if not self.running:
            return STOPPED
        if self.errors:
            return UNREADABLE
        return BEHIND if self.behind else OK

    def to_dict(self) -> dict[str, Any]:
        """The status as JSON-ready data (``--format json``)."""
        out = asdict(self)
        out["input_lag"] = (None if self.input_lag is None
                            else {str(p): n for p, n in sorted(self.input_lag.items())})
        out["input_lag_total"] = self.input_lag_total
        out["delta"] = {t.table: {k: v for k, v in asdict(t).items() if k != "table"}
                        for t in self.delta}
        out["behind"] = list(self.behind)
        out["errors"] = list(self.errors)
        out["exit_code"] = self.exit_code
        return out

    def text(self) -> str:
        """The status as aligned lines (``--format text``)."""
        lag = ("unknown" if self.input_lag is None else
               f"{self.input_lag_total} records (" + ", ".join(
                   f"p{p}={n}" for p, n in sorted(self.input_lag.items())) + ")")
        kafka = ("none" if self.kafka_batch_id is None else
                 f"batch {self.kafka_batch_id} at {_when(self.kafka_committed_at_ms)}")
        delta = "; ".join(
            f"{t.table} v{t.version} batch {'-' if t.batch_id is None else t.batch_id}"
            if t.version is not None else f"{t.table} missing" for t in self.delta) or "unknown"
        caught = {True: "yes", False: "no", None: "unknown"}[self.latest_caught_up]
        staged = (f"{self.staged_batches} batches staged for the Delta history, the oldest "
                  f"{self.staged_age_s:.0f} s old" if self.staged_batches and
                  self.staged_age_s is not None else "none")
        health = ("stopped" if not self.running else
                  "unknown: " + "; ".join(self.errors) if self.errors else
                  "behind: " + "; ".join(self.behind) if self.behind else "ok")
        rows = [
            ("query_id", self.query_id),
            ("checkpoint", self.checkpoint),
            ("state", f"{self.state} ({self.why})"),
            ("last batch", f"{self.last_batch_id} at {_when(self.last_batch_at_ms)}"
             if self.last_batch_id >= 0 else "none"),
            ("watermark", "none" if self.watermark_ms is None
             else f"{self.watermark_ms} ({_when(self.watermark_ms)})"),
            ("input lag", lag),
            ("kafka commit", kafka),
            ("delta", delta),
            ("delta staged", staged),
            ("latest caught up", caught),
            ("metrics", "-" if self.metrics_port is None else f"port {self.metrics_port}"),
            ("health", health),
        ]
        rows += [("error", e) for e in self.errors if not self.running]
        return "\n".join(f"{k:<17}{v}" for k, v in rows)


def _when(ms: int | None) -> str:
    if ms is None:
        return "?"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


# Longer than ~60 lines: the checkpoint, Kafka and Delta read in turn, each failure kept.
def job_status(checkpoint: str, *, kafka_config: Mapping[str, Any] | None = None,
               bootstrap_servers: str | None = None,
               max_delay_s: float = DEFAULT_MAX_DELAY_S, max_lag: int | None = None,
               timeout_s: float = 10.0, now_ms: int | None = None) -> JobStatus:
    """Where the job of ``checkpoint`` stands.

    Args:
        checkpoint: The job's ``--checkpoint`` folder.
        kafka_config: confluent-kafka settings of the Kafka reads (SASL, TLS …).
        bootstrap_servers: Kafka's address; None: the one the job recorded.
        max_delay_s: A running job whose Delta tables trail the changelog by longer is behind.
        max_lag: A running job with more input records not yet read is behind (None: the lag
            alone never makes it behind).
        timeout_s: Give up on a Kafka read after this long (s).
        now_ms: The wall clock (epoch ms).

    Raises:
        ConfigError: ``checkpoint`` is no revise job's checkpoint.
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    fingerprint = _fingerprint(checkpoint)
    info = read_run_file(checkpoint)
    alive = liveness(info, now_ms=now)
    query_id = str(fingerprint.get("query_id") or (info.query_id if info else ""))
    input_topic = str(fingerprint.get("input_topic") or "") or None
    errors: list[str] = []

    last = last_entry(checkpoint, COMMITS_LOG)
    last_at = _mtime_ms(spark_log_dir(checkpoint, COMMITS_LOG) / str(last)) if last >= 0 else None
    watermark = batch_watermark(checkpoint, last) if last >= 0 else None
    read, _control = (batch_offsets(checkpoint, last, input_topic)
                      if last >= 0 and input_topic else (None, -1))

    lag: dict[int, int] | None = None
    kafka_batch = kafka_at = None
    bootstrap = bootstrap_servers or (info.bootstrap_servers if info else None)
    if bootstrap and input_topic and info is not None:
        lag, kafka_batch, kafka_at = _kafka(bootstrap, input_topic, info, query_id,
                                            read or {}, kafka_config, timeout_s, errors)
    elif info is None:
        errors.append("no run file in the checkpoint: Kafka and Delta locations unknown")

    delta = _delta(info.delta_path, query_id, errors) if info is not None else ()
    staged = staged_batches(stage_dir(checkpoint))
    staged_age = (max(0.0, now / 1000 - staged[0][1]) if staged else None)
    by_table = {t.table: t for t in delta}
    caught_up = _caught_up(by_table)

    behind: list[str] = []
    if alive.heartbeat_age_s is not None and alive.running and \
            alive.heartbeat_age_s > STALE_S / 2:
        behind.append(f"no heartbeat for {alive.heartbeat_age_s:.0f} s (stalled?)")
    if staged_age is not None and staged_age > max_delay_s:
        behind.append(f"{len(staged)} micro-batches wait for their Delta history commit, the "
                      f"oldest for {staged_age:.0f} s")
    revisions = by_table.get("revisions")
    if caught_up is False and revisions is not None and revisions.committed_at_ms is not None:
        waited = (now - revisions.committed_at_ms) / 1000
        if waited > max_delay_s:
            behind.append(f"latest has not merged revisions committed {waited:.0f} s ago")
    if max_lag is not None and lag is not None and sum(lag.values()) > max_lag:
        behind.append(f"input lag {sum(lag.values())} records > {max_lag}")

    return JobStatus(
        checkpoint=checkpoint, query_id=query_id, running=alive.running,
        state="running" if alive.running else "stopped", why=alive.reason,
        heartbeat_age_s=alive.heartbeat_age_s, pid=None if info is None else info.pid,
        metrics_port=None if info is None else info.metrics_port,
        last_batch_id=last, last_batch_at_ms=last_at, watermark_ms=watermark,
        input_topic=input_topic, input_lag=lag, kafka_batch_id=kafka_batch,
        kafka_committed_at_ms=kafka_at, delta=tuple(delta), staged_batches=len(staged),
        staged_age_s=staged_age, latest_caught_up=caught_up, behind=tuple(behind),
        errors=tuple(errors),
    )


def _fingerprint(checkpoint: str) -> dict[str, object]:
    """The checkpoint's job settings; ConfigError when it is no revise checkpoint."""
    folder = Path(checkpoint)
    if not folder.is_dir():
        msg = (f"--checkpoint {checkpoint}: no such folder; give the --checkpoint folder of a "
               "job (`revise run --checkpoint DIR`)")
        raise ConfigError(msg)
    try:
        have = checkpoint_fingerprint(checkpoint)
    except ValueError:
        have = None
    if have is None:
        msg = (f"--checkpoint {checkpoint} holds no revise job ({CHECKPOINT_META} is missing "
               "or unreadable); give the --checkpoint folder of a job")
        raise ConfigError(msg)
    return have


def _kafka(bootstrap: str, topic: str, info: RunInfo, query_id: str, read: Mapping[int, int],
           config: Mapping[str, Any] | None, timeout_s: float,
           errors: list[str]) -> tuple[dict[int, int] | None, int | None, int | None]:
    """Input lag per partition, and the last committed micro-batch and its ``emitted_at_ms``.

    The last committed micro-batch is the highest any state partition committed (a partition
    without output in a batch commits nothing for it).
    """
    from sinks.kafka import end_offsets, last_committed, read_progress

    try:
        ends = end_offsets(bootstrap, topic, timeout_s=timeout_s, client_config=config)
    except Exception as exc:  # noqa: BLE001 - reported, the rest still shown
        errors.append(f"input end offsets of {topic!r} on {bootstrap}: {exc}")
        return None, None, None
    lag = {p: max(0, end - read.get(p, 0)) for p, end in sorted(ends.items())}
    try:
        last = last_committed(read_progress(bootstrap, info.progress_topic, query_id,
                                            timeout_s=timeout_s, client_config=config))
    except Exception as exc:  # noqa: BLE001 - reported, the lag still shown
        errors.append(f"progress of {info.progress_topic!r}: {exc}")
        return lag, None, None
    if last is None:
        return lag, None, None
    return lag, last.batch, last.emitted_at_ms


def _delta(path: str, query_id: str, errors: list[str]) -> list[TableState]:
    """Each table's version, the highest micro-batch of the job it holds, its last commit."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    out = []
    for table in TABLE_NAMES:
        try:
            dt = DeltaTable(f"{path.rstrip('/')}/{table}")
        except TableNotFoundError:
            out.append(TableState(table, None, None, None))
            continue
        except Exception as exc:  # noqa: BLE001 - reported, the other tables still shown
            errors.append(f"Delta table {table} under {path}: {exc}")
            out.append(TableState(table, None, None, None))
            continue
        history = dt.history(1)
        at = history[0].get("timestamp") if history else None
        batch = dt.transaction_version(f"revise-{query_id}")
        out.append(TableState(table, int(dt.version()), batch, None if at is None else int(at)))
    return out


def _caught_up(tables: Mapping[str, TableState]) -> bool | None:
    """``latest`` holds every micro-batch ``revisions`` holds (None: the tables are unknown)."""
    revisions, latest = tables.get("revisions"), tables.get("latest")
    if revisions is None or latest is None or revisions.version is None or latest.version is None:
        return None
    have = -1 if latest.batch_id is None else latest.batch_id
    want = -1 if revisions.batch_id is None else revisions.batch_id
    return have >= want


def _mtime_ms(path: Path) -> int | None:
    try:
        return int(path.stat().st_mtime * 1000)
    except OSError:
        return None
