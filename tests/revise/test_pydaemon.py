"""``revise.spark.pydaemon``: Spark's Python daemon with the workers' modules preloaded.

Each check runs in a fresh interpreter (the daemon is one): whether the preload leaves the
process single-threaded (the condition for forking workers from it), that the daemon execs
PySpark's own when it does not, and which path the workers import pyspark from. That Spark's
local workers really come from it is checked in tests/integration/test_infra.py.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pyspark

from revise.spark import pydaemon

INSTALLED = Path(pyspark.__file__).parent  # pip's pyspark: $SPARK_HOME is this package
ARCHIVES = [str(INSTALLED / "python" / "lib" / "pyspark.zip"),
            *map(str, sorted((INSTALLED / "python" / "lib").glob("py4j-*.zip")))]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in pydaemon.ONE_THREAD_ENV}
    return {**env, "SPARK_HOME": str(INSTALLED), **extra}


def _python(code: str, **env: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], env=_env(**env), capture_output=True,
                          text=True, timeout=120, check=True)
    return done.stdout.strip()


def test_the_preload_starts_no_thread() -> None:
    code = ("import os; from revise.spark import pydaemon; ok = pydaemon.preload(); "
            "print(ok, len(os.listdir('/proc/self/task')))")
    assert _python(code) == "True 1"


def test_a_thread_started_all_the_same_is_seen() -> None:
    code = "from revise.spark import pydaemon; print(pydaemon.preload())"
    # The user's OpenBLAS setting wins over the daemon's default: numpy starts its threads.
    assert _python(code, OPENBLAS_NUM_THREADS="2") == "False"


def test_workers_import_the_installed_pyspark_not_sparks_archives() -> None:
    code = ("import sys; from revise.spark import pydaemon; pydaemon.preload(); "
            "import pyspark, py4j; "
            f"inside = [p for p in [*sys.path, *sys.path_importer_cache] "
            f"if p.startswith(('{INSTALLED / 'python' / 'lib'}', '{INSTALLED / 'jars'}'))]; "
            "print(pyspark.__file__, py4j.__file__, len(inside))")
    pythonpath = os.pathsep.join(ARCHIVES)
    pyspark_file, py4j_file, archives_left = _python(code, PYTHONPATH=pythonpath).split()
    assert pyspark_file == str(INSTALLED / "__init__.py")
    assert ".zip" not in py4j_file
    assert archives_left == "0"


def test_a_spark_distribution_keeps_its_archives(tmp_path: Path) -> None:
    code = ("import sys; from revise.spark import pydaemon; "
            "print(pydaemon.installed_pyspark_first(), sys.path[1])")
    # $SPARK_HOME of a Spark distribution (no version.py at its root): its zips are its Python.
    home = tmp_path / "spark"
    (home / "python" / "lib").mkdir(parents=True)
    archive = home / "python" / "lib" / "pyspark.zip"
    archive.write_bytes(b"")
    assert _python(code, SPARK_HOME=str(home), PYTHONPATH=str(archive)) == f"False {archive}"


def _daemon(**env: str) -> tuple[str, dict[str, str]]:
    """Start the daemon as Spark does; its command line and environment once it listens."""
    proc = subprocess.Popen([sys.executable, "-m", "revise.spark.pydaemon", "pyspark.worker"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_env(**env))
    try:
        assert proc.stdout is not None
        port = struct.unpack("!i", proc.stdout.read(4))[0]
        assert port > 0
        line = Path(f"/proc/{proc.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes().decode().split("\0")
        return line, dict(e.split("=", 1) for e in environ if "=" in e)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the daemon stops when its input closes
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_the_daemon_listens_as_itself_when_single_threaded() -> None:
    line, _ = _daemon()
    assert "-m revise.spark.pydaemon pyspark.worker" in line


def test_the_daemon_becomes_pysparks_own_when_a_thread_runs() -> None:
    line, environ = _daemon(OPENBLAS_NUM_THREADS="2")
    assert "-m pyspark.daemon pyspark.worker" in line
    assert "revise.spark.pydaemon" not in line
    # PySpark's daemon runs with the environment it was given, not the preload's settings.
    assert environ["OPENBLAS_NUM_THREADS"] == "2"
    assert not {"OMP_NUM_THREADS", "JE_ARROW_MALLOC_CONF"} & environ.keys()
