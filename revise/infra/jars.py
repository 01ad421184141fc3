"""JVM artifacts from Maven Central, resolved once into a local folder.

Two classpaths, kept apart because they need different ``kafka-clients`` versions:

- ``kafka``: the Apache Kafka broker (KRaft) that ``revise broker`` runs;
- ``spark``: what the pyspark wheel lacks — Spark's Kafka connector and the Delta Lake jars.

Each is described by a pom under ``revise/infra/poms/`` and copied with
``mvn dependency:copy-dependencies`` into ``<jvm dir>/<name>/``. A stamp file holding the pom's
hash makes a second call free: nothing is downloaded unless the pom changed. Spark sessions get
these local paths (``spark.jars``); nothing is downloaded at query time.

A third artifact is revise's own: the Java classes under ``revise/infra/java/`` (the input
parse's accepted paths, ``revise.jvm.FastParse`` and ``FastFields``, the tasks' changelog
writer), compiled with ``javac`` against the installed pyspark's jars into
``<jvm dir>/revise/revise-jvm-<hash>.jar`` (:func:`revise_jar`), except ``revise.jvm.LocalFiles``,
which goes to ``revise-fs-<hash>.jar`` beside it (:func:`local_files_jar_path`). The name holds
a hash of the sources, so changed sources give a new jar and a long-lived cluster never runs a
stale copy; sessions ship it with the others (``spark.jars``).

Run ``python -m revise.infra.jars`` to resolve both and build revise's jar (the Makefile's
``install`` does).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from revise.errors import InfraError, SetupError
from revise.infra.procs import jdk_tool

__all__ = ["JVM_CLASSPATHS", "LOCAL_FILES_CLASSES", "build_revise_jar", "classpath", "jvm_dir",
           "local_files_jar_path", "resolve", "resolve_all", "revise_jar", "revise_jar_path"]

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


def _java_sources() -> list[tuple[str, bytes]]:
    """The Java sources of revise: (path under ``java/``, content), sorted."""
    root = resources.files("revise.infra").joinpath("java")
    found: list[tuple[str, bytes]] = []

    def walk(node: Traversable, prefix: str) -> None:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            rel = f"{prefix}{child.name}"
            if child.is_dir():
                walk(child, rel + "/")
            elif child.name.endswith(".java"):
                found.append((rel, child.read_bytes()))

    walk(root, "")
    return found


def _sources_digest() -> str:
    digest = hashlib.sha256()
    for rel, content in _java_sources():
        digest.update(rel.encode() + b"\0" + content + b"\0")
    return digest.hexdigest()[:16]


def revise_jar_path() -> Path:
    """Where the jar of these sources is (built or not)."""
    return jvm_dir() / "revise" / f"revise-jvm-{_sources_digest()}.jar"


LOCAL_FILES_CLASSES = "revise/jvm/LocalFiles"
"""The classes (``revise.jvm.LocalFiles`` and its nested ones) that go to their own jar."""


def local_files_jar_path() -> Path:
    """Where the jar of ``revise.jvm.LocalFiles`` alone is, built with :func:`revise_jar_path`'s.

    Hadoop opens the local file system before Spark loads its ``spark.jars``, so this class
    must be on the driver JVM's own class path (``spark.driver.extraClassPath``); the rest of
    revise's classes need the Kafka clients of ``spark.jars`` and must stay with them.
    """
    return jvm_dir() / "revise" / f"revise-fs-{_sources_digest()}.jar"


def _javac() -> str:
    found = jdk_tool("javac")
    if found is None:
        msg = ("javac is not on PATH: revise compiles its parse's Java classes at install. "
               "Install a JDK, 17 or later (apt-get install openjdk-17-jdk-headless), or set "
               "JAVA_HOME.")
        raise SetupError(msg)
    return found


def build_revise_jar() -> Path:
    """Compile revise's Java sources into their jar (nothing to do when it exists).

    Raises:
        SetupError: ``javac`` is missing.
        InfraError: the sources do not compile against the installed pyspark's jars.
    """
    from revise.infra.spark_cluster import spark_home

    target, fs_target = revise_jar_path(), local_files_jar_path()
    if target.is_file() and fs_target.is_file():
        return target
    javac = _javac()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="revise-javac-") as tmp:
        src, out = Path(tmp) / "src", Path(tmp) / "classes"
        files = []
        for rel, content in _java_sources():
            path = src / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            files.append(str(path))
        # pyspark's jars, and the spark classpath's for the Kafka clients (TaskChangelog)
        cp = os.pathsep.join([str(spark_home() / "jars" / "*"), str(resolve("spark") / "*")])
        cmd = [javac, "--release", "17", "-nowarn", "-encoding", "UTF-8",
               "-cp", cp, "-d", str(out), *files]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
            msg = f"javac could not compile revise's Java sources (exit {proc.returncode}):\n{tail}"
            raise InfraError(msg)
        classes = sorted(cls.relative_to(out).as_posix() for cls in out.rglob("*.class"))
        local_files = [c for c in classes if c.startswith(LOCAL_FILES_CLASSES)]
        _write_jar(fs_target, out, local_files)
        _write_jar(target, out, [c for c in classes if c not in local_files])
    # Older jars stay (a few KB each): a running job's driver may still serve one to executors.
    return target


def _write_jar(target: Path, classes_dir: Path, classes: list[str]) -> None:
    # Another process may build the same jar at the same time: each writes its own file.
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: revise\n")
        for cls in classes:
            jar.write(classes_dir / cls, cls)
    os.replace(partial, target)


def revise_jar() -> Path | None:
    """The jar of revise's Java classes, built first if missing; None without ``javac``.

    Without it, sessions lack the parse's Java path and every record takes the SQL path.
    """
    try:
        return build_revise_jar()
    except SetupError:
        return None


def main() -> int:
    """Entry point of ``python -m revise.infra.jars``."""
    try:
        for name, folder in resolve_all(quiet=True).items():
            n = len(list(folder.glob("*.jar")))
            print(f"{name}: {n} jars in {folder}")
        print(f"revise: {build_revise_jar()}")
    except InfraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
