"""What Spark pays to write one checkpoint file atomically, by the way it writes it.

Run: ``python -m benchmarks.bench_checkpoint_files [--files 200]``.

Every micro-batch writes small files atomically into its checkpoint (an offset-log and a
commit-log entry on the driver, a state-store changelog per stateful task), each through
``CheckpointFileManager.createAtomic``: a temporary file, then a rename. This times that call
for ``--files`` files of 200 bytes under each file manager, each in its own Spark session (a
child process, since ``fs.file.impl`` is fixed once a JVM has opened the local file system):

- ``filecontext``: Spark's default, Hadoop's ``FileContext``;
- ``filesystem-hadoop``: Hadoop's ``FileSystem`` API (``revise.spark.session.
  FILE_SYSTEM_CHECKPOINTS``) on Hadoop's local file system, which forks ``chmod`` for each
  file and its ``.crc``;
- ``filesystem``: the same on ``revise.jvm.LocalFiles``, what revise's local sessions use
  (``revise.spark.session.LOCAL_FILE_SYSTEM``): the mode set with a system call;
- ``filesystem-raw``: Hadoop's raw local file system (no ``.crc`` files, ``chmod`` forked);
  not used by revise, because RocksDB's snapshot upload needs the checksummed one.

The figure includes a py4j round trip per call (a fraction of a millisecond).
docs/BENCHMARKS.md (*Every benchmark module*) has today's figures.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

from revise.spark.session import (
    CHECKPOINT_FILE_MANAGER,
    FILE_SYSTEM_CHECKPOINTS,
    LOCAL_FILE_SYSTEM,
)

__all__ = ["main"]

_FILE_CONTEXT = ("org.apache.spark.sql.execution.streaming.checkpointing."
                 "FileContextBasedCheckpointFileManager")
VARIANTS = {
    "filecontext": {CHECKPOINT_FILE_MANAGER: _FILE_CONTEXT},
    "filesystem-hadoop": {LOCAL_FILE_SYSTEM: "org.apache.hadoop.fs.LocalFileSystem"},
    "filesystem": {},
    "filesystem-raw": {LOCAL_FILE_SYSTEM: "org.apache.hadoop.fs.RawLocalFileSystem"},
}
_WARMUP = 20


def _one(variant: str, files: int) -> float:
    """Milliseconds per ``createAtomic`` in a session with ``variant``'s settings."""
    from revise.spark.session import spark_session

    spark = spark_session(f"bench-checkpoint-{variant}", ui=False, extra_conf=VARIANTS[variant])
    jvm = spark._jvm
    if jvm is None:
        msg = "the Spark session has no JVM gateway"
        raise RuntimeError(msg)
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    hadoop_path = jvm.org.apache.hadoop.fs.Path
    root = hadoop_path("file:" + tempfile.mkdtemp(prefix="revise-bench-cp-"))
    manager = (jvm.org.apache.spark.sql.execution.streaming.checkpointing
               .CheckpointFileManager.create(root, conf))
    payload = bytearray(b"x" * 200)

    def write(i: int) -> None:
        out = manager.createAtomic(hadoop_path(root, str(i)), False)
        out.write(payload)
        out.close()

    for i in range(_WARMUP):
        write(i)
    t0 = time.perf_counter()
    for i in range(_WARMUP, _WARMUP + files):
        write(i)
    return (time.perf_counter() - t0) * 1000 / files


def main(argv: Sequence[str] | None = None) -> int:
    """Time each variant in a child process; print one line each."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_checkpoint_files",
                                 description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--variant", choices=sorted(VARIANTS), help="run one variant here")
    args = ap.parse_args(argv)
    if args.variant:
        print(f"{args.variant:15s} {_one(args.variant, args.files):6.1f} ms per file", flush=True)
        return 0
    print(f"checkpoint files: {args.files} atomic writes of 200 bytes per variant "
          f"(revise uses: {FILE_SYSTEM_CHECKPOINTS.rsplit('.', 1)[1]} on LocalFiles)",
          flush=True)
    for variant in VARIANTS:
        done = subprocess.run([sys.executable, "-m", "benchmarks.bench_checkpoint_files",
                               "--variant", variant, "--files", str(args.files)],
                              capture_output=True, text=True, check=False)
        print(done.stdout.strip() or f"{variant}: failed\n{done.stderr[-2000:]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
