"""Where a micro-batch's time goes, stage by stage, from Spark's event log.

``python -m benchmarks.stage_times DIR`` summarizes the event logs under ``DIR`` (one per
application); ``python -m benchmarks.latency … --stages`` writes them for each system it runs
(:func:`conf_dir`: Spark's ``spark-defaults.conf`` in a folder of its own, given to the jobs as
``SPARK_CONF_DIR``) and prints the summary after the system's figures.

Jobs are grouped by their shape, the task count of each stage in submission order (a
micro-batch of revise's is a parse stage and a stateful stage; native's a read stage and an
aggregation stage; `latest`'s MERGE a job of one task). For each shape: how many jobs, their
median duration, and per stage the medians of its duration, of its longest task (launch to
finish) and of that task's run time. A stage longer than its longest task ran its tasks in
waves (more tasks than cores) or waited to be scheduled.

Trace: 137 jobs of shape (4, 2), job 281 ms; stage 1: 4 tasks, 102 ms, longest task 54 ms
(two waves of two on two cores); stage 2: 2 tasks, 180 ms, longest task 170 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["JobShape", "conf_dir", "main", "read_events", "summarize"]


def conf_dir(root: Path, log_dir: Path) -> Path:
    """Write ``root/spark-defaults.conf``: uncompressed event logs into ``log_dir``.

    A Spark job started with ``SPARK_CONF_DIR=root`` then logs its events there. Returns
    ``root``.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    (root / "spark-defaults.conf").write_text(
        "spark.eventLog.enabled true\n"
        f"spark.eventLog.dir {log_dir.resolve().as_uri()}\n"
        "spark.eventLog.compress false\n")
    return root


def read_events(log_dir: Path) -> list[dict[str, Any]]:
    """Every event of every uncompressed event log under ``log_dir``, in file order."""
    events: list[dict[str, Any]] = []
    for path in sorted(p for p in log_dir.rglob("*") if p.is_file()):
        if path.name.startswith(".") or path.suffix in {".zstd", ".lz4", ".snappy", ".crc"}:
            continue
        with path.open() as f:
            events.extend(json.loads(line) for line in f if line.startswith("{"))
    return events


@dataclass(frozen=True, slots=True)
class JobShape:
    """The jobs of one shape: task count of each stage, medians over the jobs (ms)."""

    tasks: tuple[int, ...]
    jobs: int
    job_ms: float
    stage_ms: tuple[float, ...]
    longest_task_ms: tuple[float, ...]
    longest_run_ms: tuple[float, ...]

    def line(self) -> str:
        """One line of text."""
        stages = " | ".join(
            f"stage {i + 1}: {n} tasks {s:.0f} ms, longest task {t:.0f} ms (run {r:.0f})"
            for i, (n, s, t, r) in enumerate(zip(self.tasks, self.stage_ms,
                                                 self.longest_task_ms, self.longest_run_ms,
                                                 strict=True)))
        return f"{self.jobs} jobs, median {self.job_ms:.0f} ms | {stages}"


def summarize(events: Iterable[dict[str, Any]]) -> list[JobShape]:
    """The completed jobs grouped by shape, the most frequent shape first."""
    jobs: dict[int, dict[str, Any]] = {}
    stages: dict[int, dict[str, Any]] = {}
    tasks: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        kind = e.get("Event")
        if kind == "SparkListenerJobStart":
            jobs[e["Job ID"]] = {"start": e["Submission Time"], "stages": e["Stage IDs"]}
        elif kind == "SparkListenerJobEnd" and e["Job ID"] in jobs:
            jobs[e["Job ID"]]["end"] = e["Completion Time"]
        elif kind == "SparkListenerStageCompleted":
            stages[e["Stage Info"]["Stage ID"]] = e["Stage Info"]
        elif kind == "SparkListenerTaskEnd":
            tasks[e["Stage ID"]].append(e)
    shapes: dict[tuple[int, ...], list[tuple[float, list[tuple[float, float, float]]]]] = (
        defaultdict(list))
    for job in jobs.values():
        ran = sorted((stages[s] for s in job["stages"]
                      if s in stages and "Submission Time" in stages[s] and tasks[s]),
                     key=lambda s: s["Submission Time"])
        if "end" not in job or not ran:
            continue
        per_stage = []
        for s in ran:
            ends = tasks[s["Stage ID"]]
            longest = max(ends, key=lambda t: t["Task Info"]["Finish Time"]
                          - t["Task Info"]["Launch Time"])
            per_stage.append((s["Completion Time"] - s["Submission Time"],
                              longest["Task Info"]["Finish Time"]
                              - longest["Task Info"]["Launch Time"],
                              longest["Task Metrics"]["Executor Run Time"]))
        shape = tuple(len(tasks[s["Stage ID"]]) for s in ran)
        shapes[shape].append((job["end"] - job["start"], per_stage))
    out = []
    for shape, runs in shapes.items():
        def med(i: int, k: int, runs: list[Any] = runs) -> float:
            return float(statistics.median(r[1][i][k] for r in runs))

        out.append(JobShape(
            tasks=shape, jobs=len(runs), job_ms=float(statistics.median(r[0] for r in runs)),
            stage_ms=tuple(med(i, 0) for i in range(len(shape))),
            longest_task_ms=tuple(med(i, 1) for i in range(len(shape))),
            longest_run_ms=tuple(med(i, 2) for i in range(len(shape)))))
    return sorted(out, key=lambda s: -s.jobs)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the job shapes of the event logs under a folder."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("dir", help="a folder of uncompressed Spark event logs")
    p.add_argument("--top", type=int, default=4, help="print this many shapes")
    args = p.parse_args(argv)
    for shape in summarize(read_events(Path(args.dir)))[:args.top]:
        print(shape.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
