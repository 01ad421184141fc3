"""A local Spark standalone cluster: Spark's own Master and Worker processes, one machine.

``revise spark start --workers N`` runs ``<pyspark>/bin/spark-class`` twice over: one
``org.apache.spark.deploy.master.Master`` and N ``org.apache.spark.deploy.worker.Worker``
processes, each a separate JVM with its own ports, pid and log, all on 127.0.0.1. Jobs reach it
with ``--master spark://127.0.0.1:PORT`` (what ``start`` and ``status`` print).

State lives in a home folder (``$REVISE_HOME/spark`` by default, ``~/.revise/spark``)::

    cluster.json        ports, pids, worker settings — what ``status`` prints
    master.log          the Master's output
    worker-<i>.log      each Worker's output (its executors log under its work dir)
    worker-<i>/         the Worker's --work-dir: one folder per application and executor
    conf/               SPARK_CONF_DIR (empty: no stray spark-env.sh or defaults apply)

What the Workers get, like on a real cluster: the project's interpreter as ``PYSPARK_PYTHON``
(executors run Python workers with the interpreter the driver names, normally the same one),
and *no* ``PYTHONPATH`` of the caller — revise reaches the executors the way it must on a real
cluster, shipped by the driver (:mod:`revise.infra.pyfiles`). Spark's Kafka connector and the
Delta jars come from the driver too (``spark.jars`` in :mod:`revise.spark.session`).

Readiness: the Master's web UI JSON (``http://127.0.0.1:<webui>/json/``) lists every Worker
(by its port) as ALIVE. A process is up while its recorded pid still runs its own command line
(the Master's class and ports, a Worker's ports and work dir), so a reused pid counts as down.

Starting twice reuses the running cluster. Starting a degraded one (some processes down): with
the Master up, the down Workers start again (same number and work dir, new ports) and join it;
with the Master down, what is left is stopped and a new cluster starts (a new master URL).
``stop`` sends SIGTERM to each process group still up (a Worker and the executors it launched,
then the Master), waits, SIGKILLs what is left, and removes ``cluster.json``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from revise.errors import ConfigError, InfraError
from revise.infra.procs import (
    append_options,
    cap_malloc_arenas,
    free_port,
    group_alive,
    jvm_options,
    runs_command,
)

__all__ = [
    "SparkCluster",
    "SparkClusterError",
    "SparkWorker",
    "default_home",
    "recorded",
    "start",
    "status",
    "stop",
]

HOST = "127.0.0.1"
_READY_TIMEOUT_S = 90.0
_STOP_TIMEOUT_S = 30.0
_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


class SparkClusterError(InfraError):
    """The local Spark standalone cluster cannot be started, reached or stopped."""


def default_home() -> Path:
    """``$REVISE_HOME/spark`` or ``~/.revise/spark``."""
    root = os.environ.get("REVISE_HOME")
    base = Path(root).expanduser() if root else Path.home() / ".revise"
    return (base / "spark").resolve()


@dataclass(frozen=True, slots=True)
class SparkWorker:
    """One Worker process: its number (1…N), ports, pid and resources it offers."""

    index: int
    port: int
    webui_port: int
    pid: int
    cores: int
    memory: str


@dataclass(frozen=True, slots=True)
class SparkCluster:
    """A running local standalone cluster (one Master, N Workers) and where its files are."""

    home: str
    port: int
    webui_port: int
    master_pid: int
    workers: tuple[SparkWorker, ...]

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:PORT``: what ``--master`` takes."""
        return f"spark://{HOST}:{self.port}"

    @property
    def webui_url(self) -> str:
        """The Master's web UI (``/json/`` under it is machine-readable)."""
        return f"http://{HOST}:{self.webui_port}"

    @property
    def pids(self) -> list[int]:
        """The Master's pid, then each Worker's."""
        return [self.master_pid, *(w.pid for w in self.workers)]

    def master_up(self) -> bool:
        """Whether the Master's pid runs this cluster's Master (not a process with its pid)."""
        return runs_command(self.master_pid, _master_args(self.port, self.webui_port))

    def worker_up(self, worker: SparkWorker) -> bool:
        """Whether ``worker``'s pid runs that Worker of this cluster."""
        return runs_command(worker.pid, _worker_args(Path(self.home), self.port, worker))

    def up_workers(self) -> tuple[SparkWorker, ...]:
        """The Workers whose process runs, in index order."""
        return tuple(w for w in self.workers if self.worker_up(w))

    def alive(self) -> bool:
        """True when the Master and every Worker process are running."""
        return self.master_up() and len(self.up_workers()) == len(self.workers)

    def states(self) -> dict[str, bool]:
        """Whether each process is up: ``master``, then ``worker.<i>`` in index order."""
        up_workers = self.up_workers()
        return {"master": self.master_up()} | {f"worker.{w.index}": w in up_workers
                                               for w in self.workers}

    def describe(self, states: dict[str, bool] | None = None) -> str:
        """The ``key=value`` lines ``revise spark start|status`` print.

        ``master=`` first and ``webui=`` while the Master is up; each process's pid and
        ``up``/``down``; last ``state=running``, or ``state=degraded up=… down=…`` naming the
        processes (``master``, ``worker.<i>``) when some are down. ``states``: those of
        :meth:`states` (read now when None).
        """
        states = self.states() if states is None else states
        lines = [f"master={self.master_url}"] if states["master"] else []
        lines += [f"master.pid={self.master_pid}", f"master.state={_word(states['master'])}"]
        for w in self.workers:
            lines += [f"worker.{w.index}.pid={w.pid}",
                      f"worker.{w.index}.state={_word(states[f'worker.{w.index}'])}"]
        lines.append(f"workers={len(self.workers)}")
        lines += [f"webui={self.webui_url}"] if states["master"] else []
        lines.append(f"home={self.home}")
        if all(states.values()):
            lines.append("state=running")
        else:
            up = ",".join(k for k, v in states.items() if v) or "-"
            down = ",".join(k for k, v in states.items() if not v)
            lines.append(f"state=degraded up={up} down={down}")
        return "\n".join(lines)

    def to_json(self) -> str:
        """The ``cluster.json`` form."""
        d = asdict(self)
        d["workers"] = [asdict(w) for w in self.workers]
        return json.dumps(d, indent=2)

    @classmethod
    def from_json(cls, text: str) -> SparkCluster:
        """Inverse of :meth:`to_json`."""
        d = json.loads(text)
        workers = tuple(SparkWorker(**w) for w in d.pop("workers"))
        return cls(workers=workers, **d)


def _word(up: bool) -> str:
    return "up" if up else "down"


def _master_args(port: int, webui_port: int) -> list[str]:
    """``spark-class`` arguments of the Master on these ports."""
    return [_MASTER_CLASS, "--host", HOST, "--port", str(port), "--webui-port", str(webui_port)]


def _worker_args(home: Path, master_port: int, worker: SparkWorker) -> list[str]:
    """``spark-class`` arguments of ``worker``: its ports, resources and own work dir."""
    return [_WORKER_CLASS, f"spark://{HOST}:{master_port}", "--host", HOST,
            "--port", str(worker.port), "--webui-port", str(worker.webui_port),
            "--cores", str(worker.cores), "--memory", worker.memory,
            "--work-dir", str(home / f"worker-{worker.index}")]


def _state_file(home: Path) -> Path:
    return home / "cluster.json"


def recorded(home: Path | None = None) -> SparkCluster | None:
    """The cluster last started under ``home`` (``cluster.json``), up or not; None if none was.

    Which of its processes run: :meth:`SparkCluster.master_up`, :meth:`SparkCluster.up_workers`.
    """
    f = _state_file((home or default_home()).resolve())
    if not f.is_file():
        return None
    try:
        return SparkCluster.from_json(f.read_text())
    except (ValueError, KeyError, TypeError):
        return None


def status(home: Path | None = None) -> SparkCluster | None:
    """The running cluster under ``home``, or None when none (or only part of one) runs."""
    cluster = recorded(home)
    return cluster if cluster is not None and cluster.alive() else None


def spark_home() -> Path:
    """The installed pyspark distribution (it holds ``bin/spark-class`` and ``jars/``)."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        msg = "pyspark is not installed in this interpreter; install revise's dependencies"
        raise SparkClusterError(msg)
    root = Path(spec.origin).parent
    if not (root / "bin" / "spark-class").is_file():
        msg = f"{root} has no bin/spark-class; reinstall pyspark (pip install pyspark==4.2.1)"
        raise SparkClusterError(msg)
    return root


def _child_env(home: Path, python: str) -> dict[str, str]:
    """Environment of the Master and Workers: this pyspark, no caller PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_CONF_DIR")}
    cap_malloc_arenas(env)  # the executors' too: a Worker starts them with its environment
    conf = home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    env.update({
        "SPARK_HOME": str(spark_home()),
        "SPARK_CONF_DIR": str(conf),
        "SPARK_LOCAL_IP": HOST,
        "SPARK_DAEMON_MEMORY": os.environ.get("REVISE_SPARK_DAEMON_MEMORY", "512m"),
        "PYSPARK_PYTHON": python,
        # Each application leaves its jars and shipped code in the work dir; clean old ones.
        "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=true "
                             "-Dspark.worker.cleanup.appDataTtl=86400",
    })
    extra = jvm_options()  # $REVISE_JVM_OPTIONS: the Master's and Workers' JVMs too, last
    if extra:
        env["SPARK_DAEMON_JAVA_OPTS"] = append_options(env.get("SPARK_DAEMON_JAVA_OPTS", ""),
                                                       extra)
    return env


def _spawn(args: list[str], *, env: dict[str, str], log: Path, cwd: Path) -> int:
    """Start ``spark-class ARGS`` in its own process group; returns its pid (= the JVM's)."""
    cmd = [str(spark_home() / "bin" / "spark-class"), *args]
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, cwd=cwd, start_new_session=True,
        )
    return proc.pid


def _master_json(webui_port: int) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{webui_port}/json/", timeout=2) as r:
            data: dict[str, Any] = json.loads(r.read())
            return data
    except (OSError, ValueError, urllib.error.URLError):
        return None


def _log_tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


def _wait_ready(cluster: SparkCluster, timeout_s: float) -> None:
    """Wait until the Master is ALIVE and its JSON lists every Worker's port as ALIVE.

    Workers start only once the Master is ALIVE: one that registers earlier is ignored and
    retries 5-15 s later, which would double the start-up time.
    """
    home = Path(cluster.home)
    deadline = time.monotonic() + timeout_s
    last = "the master's web UI did not answer"
    while time.monotonic() < deadline:
        dead = [w.pid for w in cluster.workers if not cluster.worker_up(w)]
        dead = dead if cluster.master_up() else [cluster.master_pid, *dead]
        if dead:
            logs = "\n".join(f"--- {p.name}:\n{_log_tail(p)}" for p in sorted(home.glob("*.log")))
            msg = f"a Spark process (pid {dead[0]}) exited during start-up:\n{logs}"
            raise SparkClusterError(msg)
        info = _master_json(cluster.webui_port)
        if info is not None:
            alive = {w.get("port") for w in info.get("workers", []) if w.get("state") == "ALIVE"}
            joined = [w for w in cluster.workers if w.port in alive]
            if info.get("status") == "ALIVE" and len(joined) == len(cluster.workers):
                return
            last = (f"master {info.get('status')}, "
                    f"{len(joined)} of {len(cluster.workers)} workers ALIVE")
        time.sleep(0.3)
    msg = (
        f"the Spark cluster was not ready within {timeout_s:.0f}s ({last}); "
        f"see the logs in {home}"
    )
    raise SparkClusterError(msg)


def _check_args(workers: int, cores: int, memory: str) -> None:
    if workers < 1 or cores < 1:
        msg = f"--workers and --cores must be >= 1, got workers={workers} cores={cores}"
        raise ConfigError(msg)
    if not (memory[:-1].isdigit() and memory[-1].lower() in "mg"):
        msg = f"--memory {memory!r} is not a Spark memory size; write e.g. 1g or 512m"
        raise ConfigError(msg)


def start(
    home: Path | None = None,
    *,
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    python: str | None = None,
    ready_timeout_s: float = _READY_TIMEOUT_S,
) -> SparkCluster:
    """Start a Master and ``workers`` Workers (or return the cluster already running there).

    Args:
        home: state folder; ``default_home()`` when None.
        workers: number of Worker processes.
        cores: cores each Worker offers to executors.
        memory: memory each Worker offers to executors (Spark size: ``1g``, ``512m``); an
            application's ``spark.executor.memory`` (default 1g) must fit in it.
        python: interpreter the Workers advertise as ``PYSPARK_PYTHON``; this one when None.
        ready_timeout_s: how long to wait for every Worker to register (seconds).

    Raises:
        ConfigError: ``workers`` or ``cores`` below 1, ``memory`` not like ``1g``/``512m``.
        SparkClusterError: a different cluster already running under ``home``,
            a port taken, or a process that died or never registered during start-up.
    """
    _check_args(workers, cores, memory)
    home = (home or default_home()).resolve()
    last = recorded(home)
    if last is not None and last.master_up():
        if len(last.workers) != workers:
            msg = (
                f"a Spark cluster with {len(last.workers)} workers already runs under "
                f"{home}; stop it first (`revise spark stop`) or pass another --home"
            )
            raise SparkClusterError(msg)
        return _start_down_workers(last, python or sys.executable, ready_timeout_s)
    stop(home)  # what is left of a cluster whose Master is down
    home.mkdir(parents=True, exist_ok=True)
    env = _child_env(home, python or sys.executable)
    port, webui = free_port(), free_port()
    pids: list[int] = []
    try:
        master_pid = _spawn(_master_args(port, webui), env=env, log=home / "master.log",
                            cwd=home)
        pids.append(master_pid)
        deadline = time.monotonic() + ready_timeout_s
        _wait_ready(SparkCluster(str(home), port, webui, master_pid, ()), ready_timeout_s)
        started: list[SparkWorker] = []
        for i in range(1, workers + 1):
            worker = _spawn_worker(home, env, port, SparkWorker(i, 0, 0, 0, cores, memory))
            pids.append(worker.pid)
            started.append(worker)
        cluster = SparkCluster(str(home), port, webui, master_pid, tuple(started))
        _state_file(home).write_text(cluster.to_json())
        _wait_ready(cluster, max(1.0, deadline - time.monotonic()))
    except BaseException:
        for pid in reversed(pids):
            _terminate_group(pid, timeout_s=10)
        raise
    return cluster


def _spawn_worker(home: Path, env: dict[str, str], master_port: int,
                  worker: SparkWorker) -> SparkWorker:
    """Start Worker ``worker.index`` on new free ports; the record with its ports and pid."""
    work_dir = home / f"worker-{worker.index}"
    work_dir.mkdir(exist_ok=True)
    placed = dataclasses.replace(worker, port=free_port(), webui_port=free_port())
    pid = _spawn(_worker_args(home, master_port, placed), env=env,
                 log=home / f"worker-{worker.index}.log", cwd=work_dir)
    return dataclasses.replace(placed, pid=pid)


def _start_down_workers(cluster: SparkCluster, python: str, timeout_s: float) -> SparkCluster:
    """The cluster whose Master runs, with its down Workers started again and registered.

    Raises:
        SparkClusterError: A restarted Worker died or did not register (it is stopped again).
    """
    home = Path(cluster.home)
    up = cluster.up_workers()
    if len(up) == len(cluster.workers):
        return cluster
    env = _child_env(home, python)
    workers = tuple(w if w in up else _spawn_worker(home, env, cluster.port, w)
                    for w in cluster.workers)
    restarted = dataclasses.replace(cluster, workers=workers)
    _state_file(home).write_text(restarted.to_json())
    try:
        _wait_ready(restarted, timeout_s)
    except BaseException:
        for w in workers:
            if w not in up:
                _terminate_group(w.pid, timeout_s=10)
        raise
    return restarted


def _terminate_group(pid: int, *, timeout_s: float) -> None:
    """SIGTERM the process group led by ``pid``, wait, then SIGKILL what is left of it.

    Each signal goes out only while the group exists: a group's number stays taken while any
    member runs, but once it is empty the number may lead another group (one of the sessions
    revise starts), which a late signal would kill.
    """
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and group_alive(pid):
        time.sleep(0.1)
    _signal_group(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and group_alive(pid):
        time.sleep(0.05)


def _signal_group(pgid: int, sig: int) -> None:
    if group_alive(pgid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)


def stop(home: Path | None = None, *, timeout_s: float = _STOP_TIMEOUT_S) -> SparkCluster | None:
    """Stop the cluster under ``home``: Workers (and their executors) first, then the Master.

    Stops every process still up, also of a degraded cluster, and removes ``cluster.json``.
    Returns the cluster when any of its processes was running, None when none was.
    """
    home = (home or default_home()).resolve()
    cluster = recorded(home)
    if cluster is None:
        return None
    # Only processes that still run their own command line: a recorded pid may have been reused.
    live = [w.pid for w in reversed(cluster.up_workers())]
    live += [cluster.master_pid] if cluster.master_up() else []
    for pid in live:
        _signal_group(pid, signal.SIGTERM)
    for pid in live:
        _terminate_group(pid, timeout_s=timeout_s)
    _state_file(home).unlink(missing_ok=True)
    return cluster if live else None
