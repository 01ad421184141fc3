"""The processes of a run, by kind: their peak memory and the CPU they spend.

A revise run is a process tree: the Python driver (the root: ``revise run``, or the benchmark
itself), the driver JVM with the local executors (``java``), and Spark's Python workers under
it (the daemon and the workers it forks). :func:`kind` names each; :class:`PeakRss` and
:class:`CpuUse` sum by kind, and :func:`rss_by_kind` reads the tree once (the soak's sample).
On a Spark standalone cluster the executors are not in the tree: :class:`CpuUse` given the
application's id also counts them (:func:`executor_processes`).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import psutil

__all__ = ["CpuUse", "PeakRss", "cpu_seconds", "executor_processes", "kind", "local_broker_pids",
           "rss_by_kind"]


def kind(p: psutil.Process, root_pid: int) -> str:
    """What process ``p`` of the tree under ``root_pid`` is, as a name of its kind.

    ``driver`` is the root, ``jvm`` a Java process, ``workers`` a Python one, ``other`` the rest.
    """
    name = p.name()
    return ("driver" if p.pid == root_pid else "jvm" if "java" in name
            else "workers" if "python" in name else "other")


class PeakRss:
    """Samples the RSS of this process and its descendants every 0.5 s; keeps the peak.

    ``peak_bytes`` is the tree's; ``peaks`` each kind's (:func:`kind`: the driver JVM with
    the local executors, the Python driver, the Python workers), each at its own peak.

    The process tree is re-read every 2 s only: finding the descendants reads every process
    of the machine (``/proc/*/stat``), ~11 ms a time here, and the sampler runs inside the
    measured driver (at 0.2 s, with the tree re-read each time, it took ~8 CPU s of a 150 s
    run, and the driver's GIL).
    """

    SAMPLE_S: Final = 0.5
    TREE_EVERY: Final = 4  # samples

    def __init__(self) -> None:
        self._proc = psutil.Process()
        self.peak_bytes = 0
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        procs = [self._proc]
        for sample in itertools.count():
            if sample % self.TREE_EVERY == 0:
                with contextlib.suppress(psutil.Error):
                    procs = [self._proc, *self._proc.children(recursive=True)]
            by_kind: dict[str, int] = {}
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    k = kind(p, self._proc.pid)
                    by_kind[k] = by_kind.get(k, 0) + p.memory_info().rss
            self.peak_bytes = max(self.peak_bytes, sum(by_kind.values()))
            for k, rss in by_kind.items():
                self.peaks[k] = max(self.peaks.get(k, 0), rss)
            if self._stop.wait(self.SAMPLE_S):
                return

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


class CpuUse:
    """CPU seconds (user + system) this process tree spends inside the ``with`` block, by kind.

    Kinds: ``jvm`` (the driver JVM, with the local executors), ``driver`` (this Python
    process: the driver's side of revise, Kafka and Delta), ``workers`` (Spark's Python
    workers under the JVM). Read from the processes alive at the block's start and end; a
    process's reaped children count in its parent (``children_*``), so a Python worker that
    exited counts in the Python daemon that forked it. What a process alive only between the
    two reads spent is missed; Spark reuses its Python workers, so that is little here.

    With ``app_id`` (a standalone cluster's application) also ``executors`` (its executor
    JVMs) and ``executor_workers`` (their Python workers), counted from their start: they
    live for this application only, and start while the block may already run.

    With ``broker_pids`` (a Kafka broker on this machine, outside the tree) also ``broker``:
    what the broker spent inside the block, which on a machine it shares with the job is part
    of what the job's output costs.
    """

    def __init__(self, app_id: str | None = None, broker_pids: Sequence[int] = ()) -> None:
        self._proc = psutil.Process()
        self._app_id = app_id
        self._broker = list(broker_pids)
        self._start: dict[int, float] = {}
        self.seconds: dict[str, float] = {}

    def _read(self) -> dict[int, tuple[str, float]]:
        out: dict[int, tuple[str, float]] = {}
        executors = dict(executor_processes(self._app_id)) if self._app_id is not None else {}
        others: dict[psutil.Process, str] = dict(executors)
        for pid in self._broker:
            with contextlib.suppress(psutil.Error):
                others[psutil.Process(pid)] = "broker"
        for p in [self._proc, *self._proc.children(recursive=True), *others]:
            try:
                t = p.cpu_times()
                k = others.get(p) or kind(p, self._proc.pid)
            except psutil.Error:
                continue
            out[p.pid] = (k, t.user + t.system + t.children_user + t.children_system)
        return out

    def __enter__(self) -> CpuUse:
        self._start = {pid: cpu for pid, (k, cpu) in self._read().items()
                       if not k.startswith("executor")}
        return self

    def __exit__(self, *_exc: object) -> None:
        totals: dict[str, float] = {"jvm": 0.0, "driver": 0.0, "workers": 0.0}
        if self._app_id is not None:
            totals |= {"executors": 0.0, "executor_workers": 0.0}
        if self._broker:
            totals["broker"] = 0.0
        for pid, (kind, cpu) in self._read().items():
            totals[kind] = totals.get(kind, 0.0) + cpu - self._start.get(pid, 0.0)
        self.seconds = {k: round(v, 1) for k, v in totals.items()}


def executor_processes(app_id: str) -> list[tuple[psutil.Process, str]]:
    """The executor JVMs of the standalone application ``app_id`` and their descendants.

    An executor is a ``CoarseGrainedExecutorBackend`` whose command line names the
    application (``--app-id``); its kind is ``executors``, and so is any process under it but
    a Python one, ``executor_workers``.
    """
    out: list[tuple[psutil.Process, str]] = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "org.apache.spark.executor.CoarseGrainedExecutorBackend" not in cmd or (
                app_id not in cmd):
            continue
        out.append((p, "executors"))
        with contextlib.suppress(psutil.Error):
            out += [(c, "executor_workers" if "python" in c.name() else "executors")
                    for c in p.children(recursive=True)]
    return out


def rss_by_kind(root_pid: int) -> tuple[dict[str, int], int]:
    """RSS in bytes of the tree under ``root_pid`` by :func:`kind`, and how many workers."""
    root = psutil.Process(root_pid)
    out: dict[str, int] = {}
    workers = 0
    for p in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            k = kind(p, root_pid)
            out[k] = out.get(k, 0) + p.memory_info().rss
            workers += k == "workers"
    return out, workers


def local_broker_pids(bootstrap: str, home: Path) -> list[int]:
    """The processes of the broker at ``bootstrap`` when it runs on this machine, else none.

    The embedded broker a benchmark started under ``home``, or the one ``revise broker start``
    started (its default home), when its address is ``bootstrap``.
    """
    from revise.infra import broker

    for where in (home, None):
        cluster = broker.status(where)  # every node up: its pids are the broker's
        if cluster is not None and cluster.bootstrap_servers == bootstrap:
            return cluster.pids
    return []


def cpu_seconds(pids: Sequence[int]) -> float:
    """The CPU seconds (user + system) the processes ``pids`` spent so far; gone ones count 0."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
    return total
