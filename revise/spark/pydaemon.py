"""Spark's Python worker daemon, with the workers' modules imported once, before it forks them.

On a local master (this machine's executors) Spark starts one daemon (``python -m
pyspark.daemon``) that forks a Python worker per task slot; each new worker then imports
pandas, pyarrow, PySpark's worker and revise's operator itself, about 1.4 s of CPU a worker
here, in the first micro-batch. Spark runs this module instead (``spark.python.daemon.module``,
:func:`revise.spark.session.spark_session`): it imports them (:data:`PRELOAD`) and then runs
PySpark's own daemon, whose forked workers find them already imported. (The driver-side
pre-init process of ``transformWithStateInPandas`` is started by Spark on its own, without a
daemon: it still imports what it needs.)

PySpark imports them after the fork because a process must not fork while other threads run
(a lock one of them holds stays locked in the child), and numpy (OpenBLAS) and pyarrow
(jemalloc's background thread) start threads when imported. Here they start none:
:data:`ONE_THREAD_ENV` sets OpenBLAS to one thread (an executor runs one task per core
anyway) and turns jemalloc's background thread off, unless the environment already says
otherwise. If the process has more than one thread after the imports all the same (or its
threads cannot be counted: Linux only), it replaces itself with PySpark's own daemon
(``exec``), which imports nothing before forking.

Not on a cluster: its executors' Python may not have revise installed (the driver ships it
with each task, :mod:`revise.infra.pyfiles`), so there PySpark's daemon runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Final

__all__ = ["ONE_THREAD_ENV", "PRELOAD", "installed_pyspark_first", "main", "preload",
           "single_threaded"]

PRELOAD: Final = ("numpy", "pyarrow", "pyarrow.compute", "pandas", "pyspark.worker",
                  "pyspark.sql.pandas.serializers", "revise.spark.operator")
"""What every worker of the job imports (``revise.spark.operator`` pulls in the engine)."""

ONE_THREAD_ENV: Final = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "JE_ARROW_MALLOC_CONF": "background_thread:false",
}
"""Settings under which :data:`PRELOAD` starts no thread (each only when not already set)."""


def single_threaded() -> bool:
    """Whether this process runs one thread (Linux's ``/proc/self/task``; False elsewhere)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def installed_pyspark_first() -> bool:
    """Take Spark's own archives off the path when the installed pyspark is the same release.

    Spark puts ``$SPARK_HOME/python/lib/pyspark.zip``, py4j's zip and its spark-core jar first
    on the workers' path. A process importing through them keeps a ``zipimporter`` per archive
    and per package it loaded from one (16 in a worker of this job), and each worker's first
    task calls ``importlib.invalidate_caches()`` (PySpark's ``setup_spark_files``), which makes
    every one of them read its archive's whole directory again (the jar has 5,858 entries):
    0.46-0.53 s a worker here. When ``$SPARK_HOME`` is the installed pyspark package itself
    (pip's pyspark, which carries the archives inside it), they hold that same release: the
    archives leave the path, and pyspark and py4j are imported as installed. If either is not
    importable without them, they stay, last.

    Returns whether the path changed.
    """
    home = os.environ.get("SPARK_HOME", "")
    if not os.path.isfile(os.path.join(home, "version.py")):  # a Spark distribution
        return False
    real = os.path.realpath(home)
    own = (os.path.join(real, "python", "lib"), os.path.join(real, "jars"))
    archives = [p for p in sys.path if os.path.dirname(os.path.realpath(p)) in own]
    if not archives:
        return False
    sys.path[:] = [p for p in sys.path if p not in archives]
    if any(importlib.util.find_spec(m) is None for m in ("pyspark", "py4j")):
        sys.path.extend(archives)
    else:  # finding this module on the way in opened them: forget those importers too
        for path in archives:
            sys.path_importer_cache.pop(path, None)
    return True


def preload() -> bool:
    """Import :data:`PRELOAD` under :data:`ONE_THREAD_ENV`; whether still single-threaded.

    The installed pyspark first (:func:`installed_pyspark_first`).
    """
    installed_pyspark_first()
    for name, value in ONE_THREAD_ENV.items():
        os.environ.setdefault(name, value)
    for module in PRELOAD:
        importlib.import_module(module)
    return single_threaded()


def main() -> None:
    """Preload, then run PySpark's daemon here, or exec it when a thread was started.

    The exec'd daemon gets the environment this process was started with.
    """
    env = dict(os.environ)
    if not preload():
        os.execve(sys.executable, [sys.executable, "-m", "pyspark.daemon", *sys.argv[1:]], env)
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
