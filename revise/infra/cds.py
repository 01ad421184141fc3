"""The Spark driver JVM's class archive: a job starts several seconds sooner.

A revise job's driver JVM loads and verifies some 20,000 classes (Spark, its SQL engine, the
Kafka connector, the state store) before its first micro-batch. The JVM can write what a run
loaded into an archive and map it in the next JVM:

- Java 17 to 24 write the classes a run loaded when it exits (a dynamic CDS archive,
  ``-XX:ArchiveClassesAtExit``) and map them with ``-XX:SharedArchiveFile``. On this
  project's 2-core machine that took a small bounded job from 38.8 s to 31.1 s, and its first
  result from 28.3 s to 20.4 s after start (``python -m benchmarks.bench_startup``).
- Java 25 and later write an AOT cache instead (``-XX:AOTCacheOutput``, JEPs 483, 514 and
  515), mapped with ``-XX:AOTCache``: the classes loaded and linked, and the training run's
  method profiles, so the JIT compiles the hot methods sooner.

docs/BENCHMARKS.md, *Start-up and the class archive*, has both measured.

- ``python -m revise.infra.cds`` (the Makefile's ``install`` runs it) trains the archive: an
  embedded broker under a temporary folder, 1,000 generated records, one ``revise run --once``
  whose JVM writes the archive at exit (~200 MB, under :func:`revise.infra.jars.jvm_dir`).
- :func:`driver_options` gives the driver's options when an archive exists for this Java,
  this pyspark and these jars (the file name holds a hash of them, so an upgrade makes the
  old archive unused instead of wrong; the JVM checks the classpath itself too and ignores an
  archive that does not match). ``REVISE_CDS=0`` turns it off.
- Only the driver JVM that revise starts uses it (:func:`revise.spark.session.spark_session`).
  Under ``spark-submit`` the JVM is already running; executors of a cluster start their own.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

from revise.errors import ReviseError
from revise.infra.jars import jvm_dir, revise_jar_path
from revise.infra.procs import JVM_OPTIONS_ENV, group_alive, java, java_feature, jvm_options

__all__ = ["AOT_FEATURE", "AOT_QUIET", "CDS_ENV", "QUIET", "archive_path", "driver_options",
           "dump_options", "remove_replaced", "small_job_command", "stale_note",
           "train"]

CDS_ENV = "REVISE_CDS"
"""``0`` turns the archive off (the driver JVM starts without it)."""
AOT_FEATURE: Final = 25
"""From this Java release on, the archive is an AOT cache."""
QUIET: Final = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")
"""The JVM's own notes about the archive (classes it skipped while writing it; an archive that
does not match this classpath, which it then ignores) stay out of the job's output."""
AOT_QUIET: Final = ("-Xlog:aot=off", "-Xlog:cds=off")
"""The same for an AOT cache."""
TRAIN_TIMEOUT_S = 300.0


def _aot() -> bool:
    """Whether this Java's archive is an AOT cache."""
    return java_feature() >= AOT_FEATURE


def _fingerprint(paths: list[Path]) -> list[str]:
    out = []
    for path in paths:
        st = path.stat()
        out.append(f"{path}:{st.st_size}:{st.st_mtime_ns}")
    return out


def _digest(parts: list[str], size: int) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:size]


def _java_key() -> str:
    """A hash of the Java the archive belongs to."""
    return _digest(_fingerprint([Path(java()).resolve()]), 8)


def _key() -> str:
    """A hash of what the archive depends on: Java, and pyspark's, Maven's and revise's jars."""
    from revise.infra.spark_cluster import spark_home

    jars = [*_fingerprint(sorted((spark_home() / "jars").glob("*.jar"))),
            *_fingerprint(sorted((jvm_dir() / "spark").glob("*.jar"))),
            *_fingerprint([jar for jar in [revise_jar_path()] if jar.is_file()])]
    return f"{_java_key()}-{_digest(jars, 16)}"


_NAMED: Final = re.compile(r"driver-[0-9a-f]{8}-[0-9a-f]{16}\.(jsa|aot)")
"""The name of an archive: its Java's key, its jars' key."""


def _archives(folder: Path) -> list[Path]:
    """The archives in ``folder``, of any Java (not those being written)."""
    return [*folder.glob("driver-*.jsa"), *folder.glob("driver-*.aot")]


def archive_path() -> Path:
    """Where the archive for this Java, pyspark and these jars is (or would be)."""
    return jvm_dir() / "cds" / f"driver-{_key()}.{'aot' if _aot() else 'jsa'}"


def _archive_if_on() -> Path | None:
    """:func:`archive_path`, or None when the archive is off or Java or pyspark is missing.

    A missing Java or pyspark is not reported here: the session's start says so itself.
    """
    if os.environ.get(CDS_ENV, "1") == "0":
        return None
    try:
        return archive_path()
    except (OSError, ReviseError):
        return None


def driver_options() -> list[str]:
    """The driver JVM's options to start from the archive; none when off or not trained."""
    path = _archive_if_on()
    if path is None or not path.is_file():
        return []
    if path.suffix == ".aot":
        return [f"-XX:AOTCache={path}", *AOT_QUIET]
    return [f"-XX:SharedArchiveFile={path}", *QUIET]


def stale_note() -> str | None:
    """A line to print when archives exist but none for this Java and these jars.

    A checkout that changed revise's Java sources (a new revise jar) or the pinned jars, or
    another ``JAVA_HOME``, keeps the archive of the old ones, which the JVM would refuse: the
    driver starts without one (~8 s longer), silently, until it is retrained. None when the
    archive is there, off, or never trained.
    """
    path = _archive_if_on()
    if path is None or path.is_file() or not _archives(path.parent):
        return None
    return ("revise: the JVM class archive is for another Java or other jars, so the driver "
            "starts without it (~8 s longer): retrain it with `python -m revise.infra.cds` "
            "(or `make install`)")


def small_job_command(bootstrap: str, topic: str, query_id: str, work: Path) -> list[str]:
    """``python -m revise run --once`` of the small job the archive is trained on.

    Tumbling 2 s windows, grace 3 s, 200 records a micro-batch; the changelog is
    ``<query_id>-changelog``, the checkpoint and Delta tables go under ``work``.
    ``benchmarks/bench_startup.py`` times the same job.
    """
    return [sys.executable, "-m", "revise", "run", "--once", "--bootstrap-servers", bootstrap,
            "--input-topic", topic, "--changelog-topic", f"{query_id}-changelog",
            "--query-id", query_id, "--delta-path", str(work / "delta"),
            "--checkpoint", str(work / "ckpt"), "--window", "tumbling:2s", "--grace", "3s",
            "--max-records-per-batch", "200"]


def dump_options(path: Path) -> list[str]:
    """Options that make a JVM write the classes it loaded to ``path`` when it exits.

    On Java 25 and later an AOT cache: the JVM writes its training record at exit and starts
    a child JVM that assembles the cache.
    """
    if _aot():
        return [f"-XX:AOTCacheOutput={path}", *AOT_QUIET]
    return [f"-XX:ArchiveClassesAtExit={path}", *QUIET]


def train(*, quiet: bool = True) -> Path:
    """Write the archive: a small bounded job on an embedded broker, its JVM dumping at exit.

    Returns the archive's path. This Java's older archives (other pyspark or jars) are
    removed (:func:`remove_replaced`).

    Raises:
        ReviseError: The training job failed or its JVM wrote no archive.
    """
    import shlex

    from revise.generate import GeneratorConfig, generate, produce
    from revise.infra import broker

    target = archive_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="revise-cds-") as tmp:
        root = Path(tmp)
        partial = target.with_suffix(f"{target.suffix}.partial")
        partial.unlink(missing_ok=True)
        cluster = broker.start(root / "broker")
        try:
            stream = generate(GeneratorConfig(events=1_000, keys=10, seed=1, late_fraction=0.05,
                                              bad_fraction=0.02))
            produce(stream, bootstrap_servers=cluster.bootstrap_servers, topic="cds-in",
                    partitions=2)
            env = {**os.environ, CDS_ENV: "0",  # the user's JVM options, then the dump's
                   JVM_OPTIONS_ENV: shlex.join([*jvm_options(), *dump_options(partial)])}
            cmd = small_job_command(cluster.bootstrap_servers, "cds-in", "cds", root)
            log = root / "train.log"
            with open(log, "wb") as out:
                proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                rc = proc.wait(TRAIN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
                msg = f"the CDS training job did not end within {TRAIN_TIMEOUT_S:.0f}s"
                raise ReviseError(msg) from None
            # the JVM outlives the CLI by the time it takes to write the archive
            deadline = time.monotonic() + TRAIN_TIMEOUT_S
            while group_alive(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            gone = not group_alive(proc.pid)
            if rc != 0 or not gone or not partial.is_file():
                tail = log.read_text(errors="replace")[-2000:]
                msg = (f"training the CDS archive failed (exit {rc}, JVM gone: {gone}, "
                       f"archive written: {partial.is_file()}):\n{tail}")
                raise ReviseError(msg)
        finally:
            broker.stop(root / "broker")
    partial.replace(target)
    remove_replaced(target)
    if not quiet:
        print(f"CDS archive: {target} ({target.stat().st_size >> 20} MiB)")
    return target


def remove_replaced(target: Path) -> None:
    """Remove the archives ``target`` replaces: this Java's others, and any of an unknown name.

    Another Java's archive stays, for when ``JAVA_HOME`` names that Java again.
    """
    mine = f"driver-{target.name.split('-')[1]}-"
    for old in _archives(target.parent):
        if old != target and (old.name.startswith(mine) or not _NAMED.fullmatch(old.name)):
            old.unlink(missing_ok=True)


def main() -> int:
    """Entry point of ``python -m revise.infra.cds``: train unless the archive exists.

    A failure is reported and leaves no archive; it does not fail the install, since the
    driver then starts as it would without one.
    """
    if os.environ.get(CDS_ENV, "1") == "0":
        print(f"CDS archive: off (${CDS_ENV}=0)")
        return 0
    path = archive_path()
    if path.is_file():
        print(f"CDS archive: {path} (up to date)")
        return 0
    t0 = time.monotonic()
    try:
        train(quiet=False)
    except (OSError, ReviseError) as exc:
        print(f"warning: no CDS archive, the driver JVM starts without one: {exc}",
              file=sys.stderr)
        return 0
    print(f"CDS archive trained in {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
