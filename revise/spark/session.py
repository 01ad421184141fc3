"""One Spark session factory for the whole project.

``local[*]`` by default; any master (``--master spark://…``, ``yarn``, ``k8s://…``) is accepted,
and under ``spark-submit`` the submitted master and settings win. Every session gets:

- Delta Lake (SQL extension and catalog) and Spark's Kafka connector, from local jar paths
  resolved by :mod:`revise.infra.jars` (``spark.jars``; nothing is downloaded at query time);
- the RocksDB state store provider, so the engine's state lives in Spark's checkpoint, and
  checkpoints written through Hadoop's ``FileSystem`` API (:data:`FILE_SYSTEM_CHECKPOINTS`);
- UTC session time, Arrow transfers, and small shuffles suited to a few cores.
"""

from __future__ import annotations

import atexit
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from revise.errors import ConfigError, InfraError
from revise.infra import cds
from revise.infra.jars import classpath, local_files_jar_path, revise_jar
from revise.infra.logfile import jvm_output
from revise.infra.procs import (
    MALLOC_ARENAS_ENV,
    append_options,
    cap_malloc_arenas,
    jvm_options,
    pid_alive,
)
from revise.infra.pyfiles import is_local_master, ship_to_executors
from revise.kafka import spark_redaction_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DEFAULT_JAVA_OPTIONS", "FILE_SYSTEM_CHECKPOINTS", "JIT_OPTIONS", "LOCAL_FILE_SYSTEM",
           "ROCKSDB_PROVIDER", "SOCKET_FOLDER_MAX", "UNIX_SOCKETS", "UNIX_SOCKET_DIR",
           "long_run_conf", "socket_dir", "spark_session", "sql_setting"]

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
UNIX_SOCKETS = "spark.python.unix.domain.socket.enabled"
UNIX_SOCKET_DIR = "spark.python.unix.domain.socket.dir"
CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
FILE_SYSTEM_CHECKPOINTS = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager")
"""How every streaming query of a revise session writes its checkpoint (offset, commit and
source logs, state store files): through Hadoop's ``FileSystem`` API, not Spark's default
``FileContext``. Without Hadoop's native library (pip's pyspark has none) ``FileContext`` on a
local folder runs six child processes for each file (``chmod`` of the file and its ``.crc``,
``readlink`` of both sides of the rename, each with its ``.crc``): ~30 ms a file against
~8 ms (``python -m benchmarks.bench_checkpoint_files``), and a micro-batch writes two on the
driver and one per stateful task
(docs/lab/benchmarks-diary.md, *An empty micro-batch and Hadoop's local file system*). Files are
still written under a temporary name and renamed into place; what this gives up is ``FileContext``'s
refusal to replace a log entry that another instance on the same checkpoint renamed into place
in the same instant (docs/RELIABILITY.md, *Spark's checkpoint on a local file system*)."""
LOCAL_FILE_SYSTEM = "spark.hadoop.fs.file.impl"
"""Hadoop's class for ``file:`` paths: a local session's is ``revise.jvm.LocalFiles``, Hadoop's
local file system setting each created file's mode with a system call where Hadoop's forks a
``chmod`` (the two per file that ``FILE_SYSTEM_CHECKPOINTS`` leaves: eight processes per
micro-batch of two state partitions, ``python -m benchmarks.bench_checkpoint_files``)."""
LOCAL_FILES = "revise.jvm.LocalFiles"
DRIVER_CLASS_PATH = "spark.driver.extraClassPath"
DRIVER_MEMORY = "3g"
"""The driver JVM's largest heap (``spark.driver.memory``) unless ``$REVISE_DRIVER_MEMORY``."""


def _driver_memory() -> str:
    """``spark.driver.memory``: ``$REVISE_DRIVER_MEMORY`` or :data:`DRIVER_MEMORY`."""
    return os.environ.get("REVISE_DRIVER_MEMORY", DRIVER_MEMORY)


DRIVER_START_HEAP = "1g"
"""The heap an unbounded run's driver JVM takes at start unless ``$REVISE_DRIVER_START_HEAP``
(:func:`long_run_conf`)."""
_SIZE = re.compile(r"(\d+)([kmgt]?)b?", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _jvm_bytes(size: str) -> int:
    """``512m``, ``3g``, ``2gb`` or plain bytes → bytes (Spark's and the JVM's memory sizes).

    Raises:
        ConfigError: Not such a size.
    """
    m = _SIZE.fullmatch(size.strip())
    if m is None:
        msg = f"JVM memory size {size!r} is not a size; write e.g. 512m or 2g"
        raise ConfigError(msg)
    return int(m[1]) * _UNITS[m[2].lower()]


def long_run_conf() -> dict[str, str]:
    """Spark settings for a driver that runs unbounded, for days: its heap fixed at start.

    The driver JVM starts with a small heap and G1 enlarges it in steps of ~100 MiB whenever
    collections take more than their share of the time, so an unbounded job's driver grew for
    its first half hour and more (+145 MiB at minute 8 and +101 MiB at minute 15 of a quiet
    soak, with ~190 MB of live heap: docs/lab/reliability-diary.md). ``-Xms`` commits
    ``$REVISE_DRIVER_START_HEAP`` (default :data:`DRIVER_START_HEAP`, at most the driver's
    memory) at start and ``-XX:+AlwaysPreTouch`` makes it resident then, so the driver's
    resident memory is set when the job starts instead of creeping up while it runs; G1 can
    still grow the heap up to ``spark.driver.memory`` if a workload needs it. ``0`` (or less
    than 1 MiB) turns this off. It only applies when revise starts the JVM (not under
    ``spark-submit``, where ``--driver-java-options`` does the same), and it replaces a
    ``spark.driver.extraJavaOptions`` of ``spark-defaults.conf`` (``0`` keeps that one).

    Raises:
        ConfigError: ``$REVISE_DRIVER_START_HEAP`` or ``$REVISE_DRIVER_MEMORY`` is not a size.
    """
    start = _jvm_bytes(os.environ.get("REVISE_DRIVER_START_HEAP", DRIVER_START_HEAP))
    most = _jvm_bytes(_driver_memory())
    heap_mib = min(start, most) >> 20
    if heap_mib == 0:
        return {}
    return {"spark.driver.extraJavaOptions": f"-Xms{heap_mib}m -XX:+AlwaysPreTouch"}


# Longer than ~60 lines: one Spark setting per line, each with its reason.
def spark_session(
    app_name: str = "revise",
    *,
    master: str | None = None,
    ui: bool | None = None,
    shuffle_partitions: int | None = None,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """Get or create the project's Spark session.

    Args:
        app_name: Spark application name.
        master: Spark master URL; ``$REVISE_SPARK_MASTER`` or ``local[*]`` when None. Ignored
            when the session already exists (e.g. under ``spark-submit``).
        ui: Spark UI on/off; off when ``$CI`` or under pytest, on otherwise.
        shuffle_partitions: ``spark.sql.shuffle.partitions``; 2 × cores on local masters, 64
            elsewhere. The job itself uses at most its shard count (``revise run
            --shuffle-partitions``), and a checkpoint keeps the value it was created with.
        extra_conf: any further Spark settings, applied before ``$REVISE_JVM_OPTIONS``,
            which are appended to the driver's and executors' Java options.

    Raises:
        ConfigError: ``$REVISE_JVM_OPTIONS`` is not a list of options.
        InfraError: The driver JVM did not start (its output on the command's log file).

    Example:
        >>> spark = revise.spark_session("my-notebook", ui=False)  # doctest: +SKIP
        >>> revise.run(cfg, spark=spark)  # doctest: +SKIP
    """
    # Python workers must run this interpreter (with pyarrow, numpy and revise), not whatever
    # python3 is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # The driver JVM (and the local Python workers) inherit this process's environment.
    arenas = cap_malloc_arenas(os.environ)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # Under spark-submit the JVM already runs with the submitted master: keep it.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    master = master or os.environ.get("REVISE_SPARK_MASTER") or (None if submitted else "local[*]")
    if ui is None:
        ui = not (os.environ.get("CI") or "pytest" in sys.modules)
    if shuffle_partitions is None:
        local = master is not None and master.startswith("local")
        shuffle_partitions = max(2, 2 * (os.cpu_count() or 2)) if local else 64
    # Maven's Kafka connector and Delta jars, and revise's own (the input parse's accepted
    # paths in Java: revise.spark.parse, fields): the driver ships them all to the executors.
    own = revise_jar()
    if own is None:
        print("revise: no javac, so no revise jar: the input parse takes its slower SQL path "
              "(install a JDK, 17 or later, and run `python -m revise.infra.jars`)",
              file=sys.stderr)
    note = cds.stale_note()
    if note:
        print(note, file=sys.stderr)
    jar_paths = [*classpath("spark"), *([own] if own else [])]
    if submitted:
        _load_in_driver(jar_paths)
    jars = ",".join(str(p) for p in jar_paths)
    conf = {
        "spark.jars": jars,
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        # Commit a micro-batch's state as a changelog of the rows it wrote, not a new RocksDB
        # checkpoint uploaded per shard (docs/lab/benchmarks-diary.md); existing
        # checkpoints switch over on their next batch.
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # Session-wide: a query's sources create their logs through the session they were
        # defined in, not the query's copy of it.
        CHECKPOINT_FILE_MANAGER: FILE_SYSTEM_CHECKPOINTS,
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": _driver_memory(),
        "spark.sql.adaptive.enabled": "false",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.databricks.delta.properties.defaults.checkpointInterval": "20",
        "spark.sql.streaming.noDataMicroBatches.enabled": "true",
        "spark.executorEnv.PYSPARK_PYTHON": os.environ["PYSPARK_PYTHON"],
        f"spark.executorEnv.{MALLOC_ARENAS_ENV}": arenas,
        "spark.python.worker.reuse": "true",
        # The executors talk to their Python workers and transformWithStateInPandas's state
        # servers over Unix domain sockets, not loopback TCP: 3-4 fewer JVM CPU seconds in a
        # 1,000-key run of 2M records, and a state variable's round trip is shorter.
        UNIX_SOCKETS: "true",
        # An unbounded job runs a few Spark jobs per micro-batch, forever: the driver's status
        # store keeps the last N jobs, stages, tasks and SQL executions (defaults 1000, 1000,
        # 100000, 1000), so its heap grows for the first half hour or more before it levels.
        # Keep enough for the UI of the recent micro-batches.
        "spark.ui.retainedJobs": "200",
        "spark.ui.retainedStages": "200",
        "spark.ui.retainedTasks": "5000",
        "spark.sql.ui.retainedExecutions": "100",
        "spark.sql.streaming.ui.retainedProgressUpdates": "100",
        # The job's plans have ~40 columns: print them whole, without a warning that they
        # were truncated at the default 25 fields.
        "spark.sql.debug.maxToStringFields": "200",
        # PySpark's DataFrame call-site capture: 3 JVM calls, a walk of the Python stack and
        # (once) an IPython import per DataFrame or Column call, for a line in the error
        # context of user code; revise's queries are its own (0.3 s of a job's start).
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # Kafka secrets (sasl.jaas.config, passwords) as *** in plans, UI and event logs;
        # spark.redaction.regex can only be set before the session starts.
        **spark_redaction_conf(),
    }
    if master is not None and is_local_master(master):
        # Workers forked with their modules already imported (revise.spark.pydaemon).
        conf["spark.python.daemon.module"] = "revise.spark.pydaemon"
        conf[UNIX_SOCKET_DIR] = str(socket_dir())
        if own is not None and not submitted:
            conf[LOCAL_FILE_SYSTEM] = LOCAL_FILES
    conf.update(extra_conf or {})
    if conf.get(LOCAL_FILE_SYSTEM) == LOCAL_FILES:
        # On the driver JVM's class path from its start (spark-submit opens the local file
        # system before it loads spark.jars), after any the caller gave; local executors run
        # in that JVM.
        given = conf.get(DRIVER_CLASS_PATH)
        conf[DRIVER_CLASS_PATH] = os.pathsep.join(
            [*([given] if given else []), str(local_files_jar_path())])
    if submitted:
        for key, value in _submitted_conf(DEFAULT_JAVA_OPTIONS).items():
            conf.setdefault(key, value)
    _add_jvm_options(conf)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    if not submitted:
        _launch_jvm({**conf, "spark.app.name": app_name,
                     **({"spark.master": master} if master is not None else {})})
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    level = os.environ.get("REVISE_SPARK_LOG_LEVEL", "WARN")
    spark.sparkContext.setLogLevel(level)
    if level.upper() in ("WARN", "ERROR"):
        _quiet_loggers(spark, QUIET_LOGGERS)
    # Executors of a real cluster may lack revise: ship this driver's copy (no-op on local[*]).
    ship_to_executors(spark)
    return spark


def socket_dir(root: Path | None = None) -> Path:
    """The calling process's folder for Spark's Unix domain socket files, gone when it exits.

    Spark names each socket file (its Python workers' daemon, a task's state server, the
    driver's accumulator server) in one folder, the temporary one by default, and removes it
    only on an orderly stop: a job ended by a signal, or a driver that exits without
    stopping its ``SparkContext`` (the CLI's), left one there per run. Here each process
    gets ``<root>/<pid>``, which it removes at exit, and each new one first removes the
    folders of processes that are gone (killed ones). ``root``: default
    ``<temporary folder>/revise-sockets-<uid>``, or under ``/tmp`` when the temporary folder
    (``TMPDIR``) is too long for a socket's path (:data:`SOCKET_FOLDER_MAX`).
    """
    root = root or _socket_root()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    for folder in root.iterdir():
        owner = int(folder.name) if folder.name.isdigit() else None
        if owner is not None and owner != os.getpid() and not pid_alive(owner):
            shutil.rmtree(folder, ignore_errors=True)
    own = root / str(os.getpid())
    if not own.is_dir():
        own.mkdir(mode=0o700)
        atexit.register(_remove_own, own, os.getpid())
    return own


SOCKET_FOLDER_MAX = 107 - len("/.") - 36 - len(".sock")
"""The longest folder for Spark's socket files: a socket's path holds at most 107 bytes, and
Spark names each file ``.<uuid>.sock``."""


def _socket_root() -> Path:
    name = f"revise-sockets-{os.getuid()}"
    root = Path(tempfile.gettempdir()) / name
    pid_part = len("/4194304")  # Linux's largest pid
    return root if len(str(root)) + pid_part <= SOCKET_FOLDER_MAX else Path("/tmp") / name


def _remove_own(folder: Path, owner: int) -> None:
    """Remove ``folder`` at exit, unless this is a forked child of its owner exiting."""
    if os.getpid() == owner:
        shutil.rmtree(folder, ignore_errors=True)


def _launch_jvm(conf: dict[str, str]) -> None:
    """Start the driver JVM with its output on the command's log file (:mod:`revise.infra.logfile`).

    What PySpark's session builder does when no JVM runs yet (``spark-submit … pyspark-shell``
    with ``conf``), with the JVM's stdout and stderr on that file: Spark's log4j lines, the
    JVM's warnings and its Python workers' output. Nothing to do when a JVM already runs or
    the output stays on the console (``revise -v``, or not the CLI); the builder then starts
    it as usual.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    output = jvm_output()
    if output is None:
        return
    with output:
        try:
            gateway = launch_gateway(SparkConf().setAll(list(conf.items())),  # type: ignore[no-untyped-call]
                                     popen_kwargs={"stdout": output, "stderr": output})
        except Exception as exc:
            output.flush()
            lines = Path(output.name).read_text(errors="replace").splitlines()
            tail = "\n".join(lines[-15:])
            msg = f"the Spark driver JVM did not start ({exc}); its last lines:\n{tail}"
            raise InfraError(msg) from exc
    SparkContext._ensure_initialized(gateway=gateway)


def _submitted_conf(keys: tuple[str, ...]) -> dict[str, str]:
    """Under ``spark-submit``: the values of ``keys`` its driver JVM was given.

    From ``spark-defaults.conf`` and ``--conf``, which the session's own settings would
    otherwise replace.
    """
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    given = SparkConf()  # the running JVM's spark.* settings
    return {key: value for key in keys if (value := given.get(key)) is not None}


def _load_in_driver(jars: list[Path]) -> None:
    """Under ``spark-submit``: put ``jars`` on the running driver JVM's class loader.

    spark-submit starts the driver JVM, with its class loader, before revise runs: the
    ``spark.jars`` given to the builder then reach the executors but not the driver, where
    Spark's Kafka source, Delta's SQL extension and catalog, and revise's Java UDFs must load
    ("Failed to find data source: kafka"). spark-submit's loader is Spark's
    ``MutableURLClassLoader``, which takes more jars at run time; any other is left alone
    (``--jars`` then does it).
    """
    from pyspark import SparkContext

    SparkContext._ensure_initialized()
    jvm = SparkContext._jvm
    assert jvm is not None
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    if loader is None or not loader.getClass().getName().endswith("MutableURLClassLoader"):
        return
    present = {url.toString() for url in loader.getURLs()}
    for jar in jars:
        url = jvm.java.io.File(str(jar)).toURI().toURL()
        if url.toString() not in present:
            loader.addURL(url)


JAVA_OPTIONS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")
DEFAULT_JAVA_OPTIONS = ("spark.driver.defaultJavaOptions", "spark.executor.defaultJavaOptions")
"""Spark's Java options that it puts before the ``extraJavaOptions`` of the same JVM."""
JIT_OPTIONS = ("-XX:CompileThresholdScaling=2",)
"""The Spark JVMs' just-in-time compiler thresholds, doubled: a method is compiled once it has
run twice the calls and loop iterations the JVM's defaults ask, so less of the code that runs
only for a while (a job's start, Spark's planning of the first micro-batches) is compiled by
C1 and then again by C2, and code that stays hot is compiled a little later. The compilers
took 11.9–12.5 of the driver JVM's 28–29 CPU seconds in a 1,000-key run of 2M records, 9.5
with this (docs/BENCHMARKS.md, *The JIT's compile thresholds doubled*)."""


def _add_jvm_options(conf: dict[str, str]) -> None:
    """Add revise's JVM options to the driver's and the executors' Java options in ``conf``.

    :data:`JIT_OPTIONS` go first in Spark's ``defaultJavaOptions`` (:data:`DEFAULT_JAVA_OPTIONS`),
    which Spark puts before the ``extraJavaOptions``, so a user's ``extraJavaOptions`` (in
    ``spark-defaults.conf`` or ``spark-submit --conf``) are neither replaced nor overruled,
    and before any ``defaultJavaOptions`` already in ``conf`` (under ``spark-submit``, those
    it was given: :func:`_submitted_conf`).
    Appended to the ``extraJavaOptions`` in ``conf``: the driver's class archive
    (:func:`revise.infra.cds.driver_options`, when trained), then ``$REVISE_JVM_OPTIONS``
    (:func:`revise.infra.procs.jvm_options`; the last wins). The driver's only take effect
    when this process starts the JVM (not under ``spark-submit``, whose
    ``--driver-java-options`` do the same).
    """
    for key in DEFAULT_JAVA_OPTIONS:
        conf[key] = " ".join(filter(None, [shlex.join(JIT_OPTIONS), conf.get(key, "")]))
    extra = jvm_options()
    added = {JAVA_OPTIONS[0]: [*cds.driver_options(), *extra], JAVA_OPTIONS[1]: extra}
    for key, options in added.items():
        if options:
            conf[key] = append_options(conf.get(key, ""), options)


QUIET_LOGGERS = {
    # "Failed to cancel job group … Cannot find active jobs for it": stopping a query between
    # micro-batches (what the driver aims for) has no job to cancel.
    "org.apache.spark.scheduler.DAGScheduler": "ERROR",
    # "Query … terminated with error" + the whole Java stack, whose message and cause each
    # embed the Python traceback of a failed micro-batch (a fenced zombie's printed it twice):
    # revise prints the failure itself, in one line that says what to do ("revise run:
    # failed: …"). Also "Disabling AQE since AQE is not supported in stateful workloads".
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution": "OFF",
}
"""Spark loggers raised to a higher level unless ``REVISE_SPARK_LOG_LEVEL`` is INFO or lower
(``revise -v`` sets INFO)."""


def _quiet_loggers(spark: SparkSession, levels: dict[str, str]) -> None:
    """Set log4j2 levels of single Spark loggers (best effort: a missing API is ignored)."""
    jvm = spark.sparkContext._jvm
    if jvm is None:
        return
    try:
        configurator = jvm.org.apache.logging.log4j.core.config.Configurator
        for name, level in levels.items():
            configurator.setLevel(name, jvm.org.apache.logging.log4j.Level.valueOf(level))
    except Exception:  # noqa: BLE001 - a different logging backend: keep Spark's levels
        return


@contextmanager
def sql_setting(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """Set one SQL setting of ``spark`` inside the block, then put the previous value back.

    A streaming query copies its session's settings when it starts, so a setting given only
    while ``writeStream…start()`` runs applies to that query and leaves the session as it was.
    """
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)
