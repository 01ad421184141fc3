"""CPU seconds of the driver JVM by thread group, read from ``/proc`` (``bench_job --jvm-threads``).

A JVM's CPU in a run of a minute or two is not all records: the JIT compiler threads, the
garbage collector and the stream's planning thread spend their share once per process.
:class:`JvmThreadCpu` samples ``/proc/<pid>/task/<tid>/stat`` of the JVMs under this process
every :attr:`JvmThreadCpu.SAMPLE_S` and sums, per group of thread names (:data:`GROUPS`, the
names the JVM and Spark give their threads, cut by Linux to 15 characters), what each thread
spent inside the ``with`` block. A thread that started and ended between two samples is missed,
and one that ended loses what it spent since its last sample: ``sampled`` beside the process
total (``CpuUse``'s ``jvm``) says how much was seen.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Final

__all__ = ["GROUPS", "JvmThreadCpu", "group_of"]

GROUPS: Final = (
    ("jit", re.compile(r"^C\d CompilerThre")),
    ("gc", re.compile(r"^(GC Thread|G1 |VM Thread)")),
    # Spark 4.2 renames a task thread "Executor task launch worker for task …" while it runs
    # a task and "Executor task idle worker" between tasks; /proc shows whichever it is.
    ("tasks", re.compile(r"^Executor task ")),
    ("state_server", re.compile(r"^stateConnection")),
    ("stream", re.compile(r"^stream executio")),
)
"""Thread groups by name: the JIT compilers, the collector, Spark's executor task threads,
``transformWithStateInPandas``' state server, the streaming query's own thread; the rest is
``other``."""

_TICK: Final = os.sysconf("SC_CLK_TCK")


def group_of(thread_name: str) -> str:
    """The group (:data:`GROUPS`) of a thread's ``/proc`` name, else ``other``."""
    return next((g for g, pattern in GROUPS if pattern.match(thread_name)), "other")


def _threads(pid: int) -> dict[int, tuple[str, float]]:
    """Each thread of ``pid``: its name and CPU seconds (user + system) so far."""
    out: dict[int, tuple[str, float]] = {}
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                stat = (task / "stat").read_text()
            except OSError:  # the thread ended
                continue
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            out[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / _TICK)
    return out


class JvmThreadCpu:
    """Samples the JVM children's threads while the ``with`` block runs; ``seconds`` by group.

    Args:
        is_jvm: Which processes under this one to read, by process name (default: ``java``).
        exclude: Pids not to read, even if they turn up only during the block: a broker's JVM
            on this machine (``benchmarks.proc_tree.local_broker_pids``).
    """

    SAMPLE_S: Final = 0.5

    def __init__(self, is_jvm: Callable[[str], bool] = lambda name: "java" in name,
                 exclude: Collection[int] = ()) -> None:
        self._is_jvm = is_jvm
        self._exclude = exclude
        self._start: dict[tuple[int, int], float] = {}
        self._last: dict[tuple[int, int], tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.seconds: dict[str, float] = {}

    def _sample(self) -> dict[tuple[int, int], tuple[str, float]]:
        import psutil

        seen: dict[tuple[int, int], tuple[str, float]] = {}
        for proc in psutil.Process().children(recursive=True):
            if proc.pid in self._exclude:
                continue
            try:
                if not self._is_jvm(proc.name()):
                    continue
            except psutil.Error:
                continue
            seen.update({(proc.pid, tid): t for tid, t in _threads(proc.pid).items()})
        self._last.update(seen)
        return seen

    def _run(self) -> None:
        while not self._stop.wait(self.SAMPLE_S):
            self._sample()

    def __enter__(self) -> JvmThreadCpu:
        self._start = {k: cpu for k, (_name, cpu) in self._sample().items()}
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        totals = {g: 0.0 for g, _p in GROUPS} | {"other": 0.0}
        for key, (name, cpu) in self._last.items():
            if key[0] not in self._exclude:
                totals[group_of(name)] += cpu - self._start.get(key, 0.0)
        self.seconds = {g: round(s, 1) for g, s in totals.items()}
        self.seconds["sampled"] = round(sum(totals.values()), 1)
