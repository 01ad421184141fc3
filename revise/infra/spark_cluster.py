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
as ALIVE. Starting twice reuses the running cluster. ``stop`` sends SIGTERM to each process
group (a Worker and the executors it launched), waits, then SIGKILLs what is left.
"""

from __future__ import annotations

import contextlib
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
    free_port,
    group_alive,
    jvm_options,
    pid_alive,
)

__all__ = [
    "SparkCluster",
    "SparkClusterError",
    "SparkWorker",
    "default_home",
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

    def alive(self) -> bool:
        """True when the Master and every Worker process are running."""
        return all(pid_alive(p) for p in self.pids)

    def describe(self) -> str:
        """The ``key=value`` lines ``revise spark start|status`` print (``master=`` first)."""
        lines = [f"master={self.master_url}", f"master.pid={self.master_pid}"]
        lines += [f"worker.{w.index}.pid={w.pid}" for w in self.workers]
        lines += [
            f"workers={len(self.workers)}",
            f"webui={self.webui_url}",
            f"home={self.home}",
        ]
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


def _state_file(home: Path) -> Path:
    return home / "cluster.json"


def _recorded(home: Path) -> SparkCluster | None:
    f = _state_file(home)
    if not f.is_file():
        return None
    try:
        return SparkCluster.from_json(f.read_text())
    except (ValueError, KeyError, TypeError):
        return None


def status(home: Path | None = None) -> SparkCluster | None:
    """The running cluster under ``home``, or None when none (or only part of one) runs."""
    cluster = _recorded((home or default_home()).resolve())
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


def _wait_ready(cluster: SparkCluster, timeout_s: float, *, workers: int) -> None:
    """Wait until the Master is ALIVE and its JSON lists ``workers`` Workers as ALIVE.

    Workers start only once the Master is ALIVE: one that registers earlier is ignored and
    retries 5-15 s later, which would double the start-up time.
    """
    home = Path(cluster.home)
    deadline = time.monotonic() + timeout_s
    last = "the master's web UI did not answer"
    while time.monotonic() < deadline:
        dead = [p for p in cluster.pids if not pid_alive(p)]
        if dead:
            logs = "\n".join(f"--- {p.name}:\n{_log_tail(p)}" for p in sorted(home.glob("*.log")))
            msg = f"a Spark process (pid {dead[0]}) exited during start-up:\n{logs}"
            raise SparkClusterError(msg)
        info = _master_json(cluster.webui_port)
        if info is not None:
            alive = [w for w in info.get("workers", []) if w.get("state") == "ALIVE"]
            if info.get("status") == "ALIVE" and len(alive) >= workers:
                return
            last = f"master {info.get('status')}, {len(alive)} of {workers} workers ALIVE"
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
    running = status(home)
    if running is not None:
        if len(running.workers) != workers:
            msg = (
                f"a Spark cluster with {len(running.workers)} workers already runs under "
                f"{home}; stop it first (`revise spark stop`) or pass another --home"
            )
            raise SparkClusterError(msg)
        return running
    stop(home)  # leftovers of a partly dead cluster
    home.mkdir(parents=True, exist_ok=True)
    env = _child_env(home, python or sys.executable)
    port, webui = free_port(), free_port()
    pids: list[int] = []
    try:
        master_pid = _spawn(
            [_MASTER_CLASS, "--host", HOST, "--port", str(port), "--webui-port", str(webui)],
            env=env, log=home / "master.log", cwd=home,
        )
        pids.append(master_pid)
        deadline = time.monotonic() + ready_timeout_s
        _wait_ready(SparkCluster(str(home), port, webui, master_pid, ()), ready_timeout_s,
                    workers=0)
        started: list[SparkWorker] = []
        for i in range(1, workers + 1):
            work_dir = home / f"worker-{i}"
            work_dir.mkdir(exist_ok=True)
            w_port, w_webui = free_port(), free_port()
            pid = _spawn(
                [_WORKER_CLASS, f"spark://{HOST}:{port}", "--host", HOST, "--port", str(w_port),
                 "--webui-port", str(w_webui), "--cores", str(cores), "--memory", memory,
                 "--work-dir", str(work_dir)],
                env=env, log=home / f"worker-{i}.log", cwd=work_dir,
            )
            pids.append(pid)
            started.append(SparkWorker(i, w_port, w_webui, pid, cores, memory))
        cluster = SparkCluster(str(home), port, webui, master_pid, tuple(started))
        _state_file(home).write_text(cluster.to_json())
        _wait_ready(cluster, max(1.0, deadline - time.monotonic()), workers=workers)
    except BaseException:
        for pid in reversed(pids):
            _terminate_group(pid, timeout_s=10)
        raise
    return cluster


def _is_spark_daemon(pid: int) -> bool:
    """True when ``pid`` runs a Spark Master or Worker (guards against reused pids)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"org.apache.spark.deploy." in cmdline


def _terminate_group(pid: int, *, timeout_s: float) -> None:
    """SIGTERM the process group led by ``pid``, wait, then SIGKILL what is left of it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and group_alive(pid):
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and group_alive(pid):
        time.sleep(0.05)


def stop(home: Path | None = None, *, timeout_s: float = _STOP_TIMEOUT_S) -> SparkCluster | None:
    """Stop the cluster under ``home``: Workers (and their executors) first, then the Master.

    Also cleans up a partly dead cluster. Returns the cluster whose processes were stopped,
    or None when none of them was running.
    """
    home = (home or default_home()).resolve()
    cluster = _recorded(home)
    if cluster is None:
        return None
    # Only processes that still run a Spark daemon: a recorded pid may have been reused.
    live = [p for p in reversed(cluster.pids) if pid_alive(p) and _is_spark_daemon(p)]
    for pid in live:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    for pid in live:
        _terminate_group(pid, timeout_s=timeout_s)
    _state_file(home).unlink(missing_ok=True)
    return cluster if live else None
