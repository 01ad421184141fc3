"""JVM artifacts from Maven Central, resolved once into a local folder.

Two classpaths, kept apart because they need different ``kafka-clients`` versions:

- ``kafka``: the Apache Kafka broker (KRaft) that ``revise broker`` runs;
- ``spark``: what the pyspark wheel lacks — Spark's Kafka connector and the Delta Lake jars.

Each is described by a pom under ``revise/infra/poms/`` and copied with
``mvn dependency:copy-dependencies`` into ``<jvm dir>/<name>/``. A stamp file holding the pom's
hash makes a second call free: nothing is downloaded unless the pom changed. Spark sessions get
these local paths (``spark.jars``); nothing is downloaded at query time.

Run ``python -m revise.infra.jars`` to resolve both (the Makefile's ``install`` does).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

from revise.errors import InfraError, SetupError

__all__ = ["JVM_CLASSPATHS", "classpath", "jvm_dir", "resolve", "resolve_all"]

JVM_CLASSPATHS = ("kafka", "spark")


def jvm_dir() -> Path:
    """The folder holding resolved jars: ``$REVISE_JVM_DIR`` or ``<repo>/.jvm`` or ``~/.cache``."""
    env = os.environ.get("REVISE_JVM_DIR")
    if env:
        return Path(env).expanduser().resolve()
    repo = Path(__file__).resolve().parents[2]
    if (repo / "pyproject.toml").is_file():
        return repo / ".jvm"
    return Path.home() / ".cache" / "revise" / "jvm"


def _pom_text(name: str) -> str:
    return resources.files("revise.infra").joinpath("poms", f"{name}.xml").read_text()


def _stamp(name: str) -> str:
    return hashlib.sha256(_pom_text(name).encode()).hexdigest()[:16]


def _is_current(target: Path, name: str) -> bool:
    stamp = target / ".stamp"
    return stamp.is_file() and stamp.read_text().strip() == _stamp(name) and any(
        target.glob("*.jar")
    )


def resolve(name: str, *, quiet: bool = True) -> Path:
    """Resolve one classpath (``kafka`` or ``spark``) and return its folder of jars.

    Idempotent and quick when already there. Raises:
        InfraError: Maven is missing or the resolution failed (its log is in the message).
    """
    if name not in JVM_CLASSPATHS:
        msg = f"unknown JVM classpath {name!r}; expected one of {', '.join(JVM_CLASSPATHS)}"
        raise InfraError(msg)
    target = jvm_dir() / name
    if _is_current(target, name):
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        msg = (
            "Maven (mvn) is not on PATH; it resolves the Kafka broker and Spark's Kafka/Delta "
            "jars. Install it (apt-get install maven) and run `python -m revise.infra.jars`."
        )
        raise SetupError(msg)
    staging = target.with_name(f".{name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    pom = staging / "pom.xml"
    pom.write_text(_pom_text(name))
    cmd = [
        mvn,
        "-B",
        *(["-q"] if quiet else []),
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging / 'jars'}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        msg = f"mvn could not resolve the {name} jars (exit {proc.returncode}):\n{tail}"
        raise InfraError(msg)
    shutil.rmtree(target, ignore_errors=True)
    (staging / "jars").rename(target)
    (target / ".stamp").write_text(_stamp(name))
    shutil.rmtree(staging, ignore_errors=True)
    return target


def classpath(name: str) -> list[Path]:
    """The resolved jars of one classpath, sorted (resolving first if needed)."""
    return sorted(resolve(name).glob("*.jar"))


def resolve_all(*, quiet: bool = True) -> dict[str, Path]:
    """Resolve every classpath; returns name → folder."""
    return {name: resolve(name, quiet=quiet) for name in JVM_CLASSPATHS}


def main() -> int:
    """Entry point of ``python -m revise.infra.jars``."""
    try:
        for name, folder in resolve_all(quiet=True).items():
            n = len(list(folder.glob("*.jar")))
            print(f"{name}: {n} jars in {folder}")
    except InfraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
