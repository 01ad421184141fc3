"""A real local Spark standalone cluster: lifecycle, revise shipped to executors, same revisions.

- ``revise spark start|status|stop``: Spark's own Master and Worker JVMs (pids alive, then gone,
  ports released), ``master=spark://HOST:PORT`` first in what start and status print. A
  SIGKILLed Worker: status exits 4 and names it down, start starts it again; a SIGKILLed
  Master: status exits 4 without ``master=``, stop stops the Workers left, status exits 3.
- Shipping: the executors run an interpreter that *cannot* import revise (see
  ``isolated_python``), the Workers get no PYTHONPATH and run outside the repository; a Spark
  job whose ``applyInPandas`` imports ``windows`` and ``revise.engine`` returns the same rows
  as the same function run here, and says it loaded them from the zip the driver shipped.
- The real job (``revise run --master spark://… --once``, its own process) on a 2-worker
  cluster and on ``local`` give identical revisions for the same input and micro-batches.
- The real job under ``spark-submit --master spark://…`` (docs/CLUSTER.md): the driver JVM
  spark-submit started loads the Kafka source, Delta and revise's UDFs, exactly-once holds.
- SIGKILL of one Worker's executor JVM mid-run: Spark reruns its tasks on a new executor and
  exactly-once holds.

The cluster tests share one module-scoped cluster (started once, stopped in its teardown);
Workers offer 1 core and 1 GB. The job runs with as many shuffle partitions as shards (2), so a
micro-batch is 2 state-store tasks, not the 64 of a non-local session's default.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cluster_probe
import pandas as pd
import pytest
from integration_support import REPO, CliRun, check_run, read_delta, spark_batches

from revise.checkpoint import OFFSETS_LOG, spark_log_dir
from revise.generate import GeneratorConfig, generate, produce
from revise.infra import pyfiles, spark_cluster
from revise.infra.procs import MALLOC_ARENAS, MALLOC_ARENAS_ENV
from revise.spark.driver import run_job
from revise.spark.session import JIT_OPTIONS

pytestmark = [pytest.mark.spark]

DRIVER_ENV = {"REVISE_DRIVER_MEMORY": "1g", "SPARK_LOCAL_IP": "127.0.0.1"}


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "revise", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def _parse(out: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in out.strip().splitlines())


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _sigkill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while _alive(pid):
        assert time.monotonic() < deadline, f"{pid} survived SIGKILL"
        time.sleep(0.05)


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _master_json(webui: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{webui}/json/", timeout=5) as r:
        data: dict[str, Any] = json.loads(r.read())
        return data


# --------------------------------------------------------------------------- lifecycle


def test_cli_start_status_stop(tmp_path: Path) -> None:
    home = tmp_path / "rh"
    try:
        proc = _cli("spark", "start", "--workers", "2", "--cores", "1", "--memory", "1g",
                    "--home", str(home))
        assert proc.returncode == 0, proc.stderr[-3000:]
        first = proc.stdout.splitlines()[0]
        assert re.fullmatch(r"master=spark://127\.0\.0\.1:\d+", first), proc.stdout
        info = _parse(proc.stdout)
        pids = [int(info["master.pid"]), int(info["worker.1.pid"]), int(info["worker.2.pid"])]
        assert len(set(pids)) == 3 and all(map(_alive, pids)), info
        cmdlines = [Path(f"/proc/{p}/cmdline").read_bytes() for p in pids]
        assert b"org.apache.spark.deploy.master.Master" in cmdlines[0]
        assert all(b"org.apache.spark.deploy.worker.Worker" in c for c in cmdlines[1:])
        # the Workers start the executors with their own environment
        arenas = os.environ.get(MALLOC_ARENAS_ENV, MALLOC_ARENAS)
        for pid in pids:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert f"{MALLOC_ARENAS_ENV}={arenas}".encode() in environ, pid
        state = _master_json(info["webui"])
        assert state["status"] == "ALIVE" and state["url"] == info["master"]
        workers = [w for w in state["workers"] if w["state"] == "ALIVE"]
        assert len(workers) == 2 and {w["cores"] for w in workers} == {1}
        assert {w["memory"] for w in workers} == {1024}
        assert (home / "spark" / "master.log").stat().st_size > 0

        again = _cli("spark", "status", "--home", str(home))
        assert again.returncode == 0 and again.stdout == proc.stdout
        restarted = _cli("spark", "start", "--workers", "2", "--home", str(home))
        assert _parse(restarted.stdout)["master.pid"] == info["master.pid"], "must reuse it"
        other = _cli("spark", "start", "--workers", "3", "--home", str(home))
        assert other.returncode == 1 and "already runs" in other.stderr, other.stderr

        cluster = spark_cluster.status(home / "spark")
        assert cluster is not None
        ports = [cluster.port, cluster.webui_port, *(w.port for w in cluster.workers),
                 *(w.webui_port for w in cluster.workers)]
        assert all(map(_port_in_use, ports))

        # a dead Worker: degraded, and start starts it again on the same Master
        _sigkill(pids[2])
        degraded = _cli("spark", "status", "--home", str(home))
        assert degraded.returncode == 4, degraded
        assert degraded.stdout.splitlines()[0] == f"master={info['master']}"
        state = _parse(degraded.stdout)
        assert (state["master.state"], state["worker.1.state"], state["worker.2.state"]) == (
            "up", "up", "down")
        assert state["state"] == "degraded up=master,worker.1 down=worker.2"
        assert "revise spark start" in degraded.stderr
        healed = _cli("spark", "start", "--workers", "2", "--home", str(home))
        assert healed.returncode == 0, healed.stderr[-3000:]
        again = _parse(healed.stdout)
        assert again["master.pid"] == info["master.pid"] and again["state"] == "running"
        assert again["worker.1.pid"] == info["worker.1.pid"]
        pids[2] = int(again["worker.2.pid"])
        assert _alive(pids[2]) and str(pids[2]) != info["worker.2.pid"]
        assert _cli("spark", "status", "--home", str(home)).returncode == 0
        alive = [w for w in _master_json(info["webui"])["workers"] if w["state"] == "ALIVE"]
        assert len(alive) == 2, alive
        ports += [w.port for w in spark_cluster.status(home / "spark").workers]

        # a dead Master: degraded without master=, stop stops the Workers left
        _sigkill(pids[0])
        headless = _cli("spark", "status", "--home", str(home))
        assert headless.returncode == 4, headless
        state = _parse(headless.stdout)
        assert "master" not in state and "webui" not in state, state
        assert state["state"] == "degraded up=worker.1,worker.2 down=master"
        stopped = _cli("spark", "stop", "--home", str(home))
        assert stopped.returncode == 0 and stopped.stdout.strip() == "stopped"
        assert not any(map(_alive, pids))
        assert not any(map(_port_in_use, ports)), "ports not released"
        gone = _cli("spark", "status", "--home", str(home))
        assert gone.returncode == 3 and gone.stdout.strip() == "not running"
        assert _cli("spark", "stop", "--home", str(home)).stdout.strip() == "not running"
    finally:
        spark_cluster.stop(home / "spark")


def test_cli_rejects_bad_sizes(tmp_path: Path) -> None:
    try:
        for args, text in ((["--workers", "0"], "--workers and --cores must be >= 1"),
                           (["--cores", "0"], "got workers=2 cores=0"),
                           (["--memory", "lots"], "write e.g. 1g or 512m")):
            proc = _cli("spark", "start", *args, "--home", str(tmp_path))
            assert proc.returncode == 2 and text in proc.stderr, proc.stderr
        assert not (tmp_path / "spark" / "cluster.json").exists()
    finally:
        spark_cluster.stop(tmp_path / "spark")


# --------------------------------------------------------------------------- the zip


def test_packages_zip_is_cached_by_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "src" / "shipme"
    (pkg / "__pycache__").mkdir(parents=True)
    (pkg / "__init__.py").write_text("X = 1\n")
    (pkg / "__pycache__" / "junk.pyc").write_bytes(b"\0")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    cache = tmp_path / "cache"
    first = pyfiles.packages_zip(("shipme", "windows"), cache_dir=cache)
    assert pyfiles.packages_zip(("shipme", "windows"), cache_dir=cache) == first
    names = set(zipfile.ZipFile(first).namelist())
    assert "shipme/__init__.py" in names and "windows/assign.py" in names
    assert not any("__pycache__" in n for n in names)
    (pkg / "__init__.py").write_text("X = 2\n")
    second = pyfiles.packages_zip(("shipme", "windows"), cache_dir=cache)
    assert second != first and zipfile.ZipFile(second).read("shipme/__init__.py") == b"X = 2\n"
    assert pyfiles.is_local_master("local[*]") and not pyfiles.is_local_master("spark://h:1")


# --------------------------------------------------------------------------- on the cluster


@pytest.fixture(scope="module")
def isolated_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An interpreter with revise's dependencies but without revise, windows or sinks.

    The shared venv holds revise as an *editable* install: a ``.pth`` file there installs a
    finder that maps ``revise`` to a checkout, so even ``python -I`` imports it. This venv
    instead reaches the shared site-packages through a plain path line in its own ``.pth``:
    Python appends that folder to ``sys.path`` but does not run the ``.pth`` files inside it,
    so numpy, pandas, pyarrow and pyspark import and the editable finder never loads.
    """
    root = tmp_path_factory.mktemp("isolated") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    py = root / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], check=True, capture_output=True, text=True)
    shared = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site.stdout.strip(), "shared-deps.pth").write_text("\n".join(sorted(shared)) + "\n")
    env = {"PATH": "/usr/bin:/bin"}  # no PYTHONPATH
    for mod in ("revise", "windows", "sinks"):
        proc = subprocess.run([str(py), "-c", f"import {mod}"], cwd=root, env=env,
                              capture_output=True, text=True)
        assert proc.returncode != 0 and f"No module named '{mod}'" in proc.stderr, proc.stderr
    deps = subprocess.run([str(py), "-c", "import numpy, pandas, pyarrow, pyspark"], cwd=root,
                          env=env, capture_output=True, text=True)
    assert deps.returncode == 0, deps.stderr
    return str(py)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[spark_cluster.SparkCluster]:
    home = tmp_path_factory.mktemp("spark-cluster")
    try:
        yield spark_cluster.start(home, workers=2, cores=1, memory="1g")
    finally:
        spark_cluster.stop(home)


def test_executors_import_revise_shipped_by_the_driver(
    cluster: spark_cluster.SparkCluster, isolated_python: str, tmp_path: Path
) -> None:
    out = tmp_path / "probe.json"
    proc = subprocess.run(
        [sys.executable, str(Path(cluster_probe.__file__)), cluster.master_url, str(out)],
        cwd=tmp_path, env={**_env(), "PYSPARK_PYTHON": isolated_python},
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(out.read_text())
    assert got["master"] == cluster.master_url
    (shipped,) = got["python_includes"]
    assert re.fullmatch(r"revise-[0-9a-f]{16}\.zip", shipped)
    rows = pd.DataFrame(got["rows"])
    assert set(rows["executable"]) == {isolated_python}
    assert all(f.endswith(f"{shipped}/revise/engine/__init__.py") for f in rows["revise_file"])
    assert all(f.endswith(f"{shipped}/windows/__init__.py") for f in rows["windows_file"])
    # Both executors fetched the zip into their working folder.
    for w in cluster.workers:
        assert list((Path(cluster.home) / f"worker-{w.index}").glob(f"app-*/*/{shipped}"))
    # Same answers as the function computes here.
    inp = cluster_probe.probe_input()
    want = pd.concat([cluster_probe.summarize(g) for _k, g in inp.groupby("key")])
    cols = ["key", "window_start_ms", "count", "sum", "n_revisions", "assigned"]
    got_rows = rows[cols].sort_values(cols[:2]).reset_index(drop=True)
    want_rows = want[cols].sort_values(cols[:2]).reset_index(drop=True)
    assert len(want_rows) == 72 and (want_rows["n_revisions"] > 1).any()
    pd.testing.assert_frame_equal(got_rows, want_rows, check_dtype=False)


def _env() -> dict[str, str]:
    return {**os.environ, **DRIVER_ENV}


# --------------------------------------------------------------------------- same revisions


def _last_data_batch(checkpoint: str, topic: str) -> tuple[int, list[tuple[Any, ...]]]:
    """The id of the last micro-batch that read input, and every batch up to it."""
    batches = spark_batches(checkpoint, topic)
    ends: dict[int, int] = {}
    last = -1
    for b in batches:
        if b.kafka_end != ends:
            last = b.batch_id
        ends = b.kafka_end
    return last, [(b.batch_id, b.kafka_end, b.watermark_ms) for b in batches[: last + 1]]


def _normalized(rows: list[dict[str, Any]], last_data: int) -> list[tuple[Any, ...]]:
    """Rows without ``emitted_at_ms``; batch ids after the input's end become one mark.

    The last batch that read input usually closes every window too; if it did not (records
    written after the start), the close comes in a later one, a matter of timing: the batch
    id of what is emitted after the last batch that read input is compared as "after the
    input" only.
    """
    out = []
    for r in rows:
        r = {k: v for k, v in r.items() if k != "emitted_at_ms"}
        if r["batch_id"] > last_data:
            r["batch_id"] = "after-input"
        out.append(tuple(sorted(r.items(), key=lambda kv: kv[0])))
    return sorted(out, key=repr)


@pytest.mark.slow
@pytest.mark.kafka
@pytest.mark.delta
def test_job_gives_the_same_revisions_on_the_cluster_and_locally(
    cluster: spark_cluster.SparkCluster, isolated_python: str, job_setup: Any,
    new_topic: Any, unique_id: Any, request: pytest.FixtureRequest,
) -> None:
    on_cluster = job_setup("cluster", max_records_per_batch=400)
    stream = generate(GeneratorConfig(events=1_200, keys=12, seed=11, disorder_ms=2_000,
                                      late_fraction=0.05, late_by_ms=3_000, bad_fraction=0.04))
    produce(stream, bootstrap_servers=on_cluster.bootstrap, topic=on_cluster.input_topic)

    # 1. The cluster: `revise run --master spark://…` in its own process; its executors run
    #    the interpreter without revise.
    on_cluster.workdir.mkdir(parents=True, exist_ok=True)
    run = CliRun([*on_cluster.cli_args(), "--master", cluster.master_url],
                 cwd=on_cluster.workdir, log=on_cluster.workdir / "cluster-run.log",
                 env={**DRIVER_ENV, "PYSPARK_PYTHON": isolated_python})
    t0 = time.monotonic()
    rc = run.wait(900)
    assert rc == 0, run.tail()
    cluster_s = time.monotonic() - t0
    check_run(on_cluster)  # exactly once, FINAL = the oracle, on the cluster too

    # 2. local: same input, same query id and split, its own outputs and progress topic.
    local = dataclasses.replace(
        on_cluster, changelog_topic=new_topic("local-changelog"),
        late_topic=new_topic("local-late"), dead_letter_topic=new_topic("local-dead"),
        delta_path=str(on_cluster.workdir / "local" / "delta"),
        checkpoint=str(on_cluster.workdir / "local" / "checkpoint"),
    )
    job = local.job_config()
    cfg = dataclasses.replace(job, kafka=dataclasses.replace(job.kafka,
                                                             progress_topic=unique_id("progress")))
    spark = request.getfixturevalue("spark")  # only now: one Spark driver at a time
    assert spark.sparkContext.master.startswith("local")
    run_job(cfg, spark=spark, timeout_s=600)

    # 3. The same micro-batches, then the same revisions and too-late records.
    last_c, split_c = _last_data_batch(on_cluster.checkpoint, on_cluster.input_topic)
    last_l, split_l = _last_data_batch(local.checkpoint, local.input_topic)
    assert split_c == split_l and last_c == last_l >= 2, (split_c, split_l)
    for table in ("revisions", "late", "dead_letter"):
        got_c = _normalized(read_delta(on_cluster.delta_path, table), last_c)
        got_l = _normalized(read_delta(local.delta_path, table), last_l)
        assert len(got_c) > 0 and got_c == got_l, f"{table} differ ({len(got_c)} vs {len(got_l)})"
    print(f"cluster run {cluster_s:.0f}s")


@pytest.mark.slow
@pytest.mark.kafka
@pytest.mark.delta
def test_job_under_spark_submit_on_the_cluster_is_exactly_once(
    cluster: spark_cluster.SparkCluster, isolated_python: str, job_setup: Any,
) -> None:
    """``spark-submit --master spark://… revise/__main__.py run …``, as docs/CLUSTER.md says.

    spark-submit starts the driver JVM before revise: the Kafka source, Delta's extension and
    revise's Java UDFs load in that driver only because ``spark_session`` adds its jars to the
    running class loader (before, "Failed to find data source: kafka").
    """
    setup = job_setup("submit", max_records_per_batch=400)
    stream = generate(GeneratorConfig(events=800, keys=8, seed=5, disorder_ms=2_000,
                                      late_fraction=0.05, late_by_ms=3_000, bad_fraction=0.04))
    produce(stream, bootstrap_servers=setup.bootstrap, topic=setup.input_topic)
    setup.workdir.mkdir(parents=True, exist_ok=True)
    submit = [str(spark_cluster.spark_home() / "bin" / "spark-submit"),
              "--master", cluster.master_url,
              "--conf", f"spark.pyspark.python={isolated_python}",
              "--conf", f"spark.pyspark.driver.python={sys.executable}",
              "--conf", "spark.executor.defaultJavaOptions=-Drevise.test.admin=1",
              str(REPO / "revise" / "__main__.py")]
    webui = f"http://127.0.0.1:{cluster.webui_port}"

    def apps() -> set[str]:
        state = _master_json(webui)
        return {a["id"] for a in [*state.get("activeapps", []), *state.get("completedapps", [])]}

    before = apps()
    run = CliRun(setup.cli_args(), command=submit, cwd=setup.workdir,
                 log=setup.workdir / "submit-run.log",
                 env={**DRIVER_ENV, "PYSPARK_PYTHON": isolated_python,
                      "PYSPARK_DRIVER_PYTHON": sys.executable})
    rc = run.wait(900)
    assert rc == 0, run.tail()
    (app,) = apps() - before  # the job ran as an application of the cluster
    # Its executors ran with revise's JIT thresholds and, after them, the submitted default
    # options (the launch command heads each executor's stderr).
    commands = [f.read_text().partition("\n")[0]
                for f in Path(cluster.home).glob(f"worker-*/{app}/*/stderr")]
    assert commands, f"no executor of {app}"
    jit, admin = f'"{JIT_OPTIONS[0]}"', '"-Drevise.test.admin=1"'
    for command in commands:
        assert jit in command and admin in command, command
        assert command.index(jit) < command.index(admin), command
    report = check_run(setup)  # exactly once, FINAL = the oracle, under spark-submit too
    assert report.revisions > 0 and report.dead > 0


# --------------------------------------------------------------------------- executor failure


def _executors(worker_pid: int) -> list[int]:
    """Pids of the executor JVMs (``CoarseGrainedExecutorBackend``) a Worker has launched."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == worker_pid and b"CoarseGrainedExecutorBackend" in cmdline:
            found.append(int(entry.name))
    return found


def _executor_dirs(cluster: spark_cluster.SparkCluster) -> set[Path]:
    """Every executor's working folder the Workers have made (``worker-<i>/app-*/<id>``)."""
    return {p for p in Path(cluster.home).glob("worker-*/app-*/*") if p.is_dir()}


@pytest.mark.slow
@pytest.mark.kafka
@pytest.mark.delta
def test_sigkill_of_an_executor_mid_run_keeps_exactly_once(
    cluster: spark_cluster.SparkCluster, job_setup: Any,
) -> None:
    setup = job_setup("exec-kill", max_records_per_batch=200)
    stream = generate(GeneratorConfig(events=2_000, keys=12, seed=5, disorder_ms=2_000,
                                      late_fraction=0.05, late_by_ms=3_000, bad_fraction=0.02))
    produce(stream, bootstrap_servers=setup.bootstrap, topic=setup.input_topic)
    setup.workdir.mkdir(parents=True, exist_ok=True)
    dirs_before = _executor_dirs(cluster)
    run = CliRun([*setup.cli_args(), "--master", cluster.master_url], cwd=setup.workdir,
                 log=setup.workdir / "run.log", env=DRIVER_ENV)
    try:
        assert run.wait_for("batch=1 ", 600), run.tail()  # batch 1 committed, more to come
        victim = cluster.workers[0]
        (pid,) = _executors(victim.pid)
        # revise's JIT thresholds reach the executors' JVMs (spark.executor.defaultJavaOptions)
        assert JIT_OPTIONS[0].encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), f"executor {pid} survived SIGKILL"
        assert "batch=" in run.log() and run.proc.poll() is None, "the job ended before the kill"
        rc = run.wait(900)
    finally:
        if run.proc.poll() is None:
            run.wait(1)
    assert rc == 0, run.tail()
    # The Master replaced the dead executor: this app got a third executor folder.
    new = _executor_dirs(cluster) - dirs_before
    assert len(new) >= 3, sorted(map(str, new))
    # A new checkpoint runs as many state-store tasks as shards, not the session's 64.
    meta = json.loads((spark_log_dir(setup.checkpoint, OFFSETS_LOG) / "0").read_text()
                      .splitlines()[1])
    assert meta["conf"]["spark.sql.shuffle.partitions"] == str(setup.shards), meta["conf"]
    report = check_run(setup)  # read_committed changelog = Delta, nothing lost or duplicated
    assert report.revisions > 0 and report.windows > 0, report
