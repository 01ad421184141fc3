"""How long a bounded job takes to start, by the driver JVM's options.

Run from the repository root (after ``make install``, which trains the class archive)::

    python -m benchmarks.bench_startup [--rounds 3] [--events 1000]

An embedded broker under a temporary folder gets ``--events`` generated records on 2
partitions; then each round runs the job the class archive is trained on
(:func:`revise.infra.cds.small_job_command`: ``revise run --once``, tumbling 2 s, grace 3 s,
200 records a micro-batch, fresh checkpoint and Delta folder) once per variant, the variants
alternating so that the machine's drift hits each alike:

- ``default``: the JVM as it comes, no class archive (``REVISE_CDS=0``);
- ``c1``: only the JVM's quick C1 compiler (``REVISE_JVM_OPTIONS=-XX:TieredStopAtLevel=1``);
- ``cds``: the driver's class archive (:mod:`revise.infra.cds`), what a user gets by default;
- ``cds-c1``: both, how the test suite runs;
- ``VARIANT+jdk``: VARIANT on another Java, ``--java-home DIR`` (its archive trained
  beforehand: ``JAVA_HOME=DIR python -m revise.infra.cds``; on Java 25 an AOT cache).

Printed per variant, the median over rounds: the process's wall time, the job's first
micro-batch done (its first revisions committed: ``elapsed_s`` of ``batch=0``), and its own
``seconds``. docs/BENCHMARKS.md, *Start-up and the class archive*, has results.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.variants import JDK_SUFFIX
from revise.generate import GeneratorConfig, generate, produce
from revise.infra import broker, cds
from revise.infra.procs import JVM_OPTIONS_ENV, java_home_env

__all__ = ["VARIANTS", "main"]

C1 = "-XX:TieredStopAtLevel=1"
VARIANTS: dict[str, dict[str, str]] = {
    "default": {cds.CDS_ENV: "0", JVM_OPTIONS_ENV: ""},
    "c1": {cds.CDS_ENV: "0", JVM_OPTIONS_ENV: C1},
    "cds": {cds.CDS_ENV: "1", JVM_OPTIONS_ENV: ""},
    "cds-c1": {cds.CDS_ENV: "1", JVM_OPTIONS_ENV: C1},
}


def _env(name: str, java_home: str | None) -> dict[str, str]:
    """The environment of variant ``name`` (``VARIANT+jdk``: on ``java_home``'s Java)."""
    env = dict(VARIANTS[name.removesuffix(JDK_SUFFIX)])
    if name.endswith(JDK_SUFFIX):
        if not java_home:
            msg = f"{name} needs --java-home DIR"
            raise SystemExit(msg)
        env.update(java_home_env(java_home, os.environ.get("PATH", "")))
    return env


def _run(bootstrap: str, root: Path, name: str, env: dict[str, str]) -> dict[str, float]:
    """One bounded run; its wall time, first micro-batch done and own seconds."""
    qid = name.replace("+", "-")  # a topic's name has no '+'
    cmd = cds.small_job_command(bootstrap, "startup-in", qid, root / qid)
    t0 = time.monotonic()
    done = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=600, check=False)
    wall = time.monotonic() - t0
    out = done.stdout + done.stderr
    first = re.search(r"batch=0 .*?elapsed_s=([\d.]+)", out)
    own = re.search(r" done .*?seconds=([\d.]+)", out)
    if done.returncode != 0 or first is None or own is None:
        msg = f"{name}: exit {done.returncode}\n{out[-2000:]}"
        raise RuntimeError(msg)
    return {"wall": wall, "first": float(first[1]), "seconds": float(own[1])}


def main(argv: list[str] | None = None) -> int:
    """Run every variant ``--rounds`` times and print a table of medians."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--events", type=int, default=1_000)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--java-home", metavar="DIR", help="the Java of the VARIANT+jdk variants")
    args = p.parse_args(argv)
    names = args.variants.split(",")
    envs = {name: _env(name, args.java_home) for name in names}
    if any(n.startswith("cds") and not n.endswith(JDK_SUFFIX) for n in names) and \
            not cds.archive_path().is_file():
        print("no class archive: run python -m revise.infra.cds first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="revise-bench-startup-") as tmp:
        root = Path(tmp)
        cluster = broker.start(root / "broker")
        try:
            stream = generate(GeneratorConfig(events=args.events, keys=10, seed=3))
            produce(stream, bootstrap_servers=cluster.bootstrap_servers, topic="startup-in",
                    partitions=2)
            got: dict[str, list[dict[str, float]]] = {n: [] for n in names}
            for r in range(args.rounds):
                for name in names:
                    fig = _run(cluster.bootstrap_servers, root / f"r{r}", name, envs[name])
                    got[name].append(fig)
                    print(f"<!-- round {r + 1} {name}: wall {fig['wall']:.1f} s, first batch "
                          f"{fig['first']:.1f} s, job {fig['seconds']:.1f} s -->", flush=True)
        finally:
            broker.stop(root / "broker")
    base = statistics.median(f["wall"] for f in got[names[0]])
    print(f"| variant | wall s | first micro-batch done s | job s | wall ÷ {names[0]} |")
    print("|---|---:|---:|---:|---:|")
    for name in names:
        med = {k: statistics.median(f[k] for f in got[name]) for k in ("wall", "first", "seconds")}
        print(f"| {name} | {med['wall']:.1f} | {med['first']:.1f} | {med['seconds']:.1f} | "
              f"{med['wall'] / base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
