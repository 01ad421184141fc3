"""``$REVISE_JVM_OPTIONS``: extra options for every JVM revise starts, after revise's own; and
the driver's class archive (:mod:`revise.infra.cds`).

That they reach the real JVMs (the broker's command line, the Spark driver's input arguments,
the archive mapped into the driver) is checked in tests/integration/test_infra.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from revise.errors import ConfigError, SetupError
from revise.infra import broker_node, cds, spark_cluster
from revise.infra.jars import revise_jar_path
from revise.infra.procs import (
    JVM_OPTIONS_ENV,
    java,
    java_feature,
    java_version,
    jvm_options,
    selects_collector,
)
from revise.spark.session import JAVA_OPTIONS, JIT_OPTIONS, _add_jvm_options


def test_options_are_split_as_a_shell_would(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(JVM_OPTIONS_ENV, "-XX:TieredStopAtLevel=1  '-Dname=a b'")
    assert jvm_options() == ["-XX:TieredStopAtLevel=1", "-Dname=a b"]
    monkeypatch.setenv(JVM_OPTIONS_ENV, "")
    assert jvm_options() == []
    monkeypatch.delenv(JVM_OPTIONS_ENV)
    assert jvm_options() == []


def test_an_unclosed_quote_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(JVM_OPTIONS_ENV, "-Dname='a b")
    with pytest.raises(ConfigError, match=JVM_OPTIONS_ENV):
        jvm_options()


def test_spark_gets_them_after_its_own_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cds.CDS_ENV, "0")
    monkeypatch.setenv(JVM_OPTIONS_ENV, "-XX:TieredStopAtLevel=1 '-Dname=a b'")
    conf = {"spark.driver.extraJavaOptions": "-Xms1024m -XX:+AlwaysPreTouch"}
    _add_jvm_options(conf)
    assert conf["spark.driver.extraJavaOptions"] == (
        "-Xms1024m -XX:+AlwaysPreTouch -XX:TieredStopAtLevel=1 '-Dname=a b'")
    assert conf["spark.executor.extraJavaOptions"] == "-XX:TieredStopAtLevel=1 '-Dname=a b'"
    monkeypatch.delenv(JVM_OPTIONS_ENV)
    untouched: dict[str, str] = {}
    _add_jvm_options(untouched)
    assert not any(key in untouched for key in JAVA_OPTIONS)


def test_the_jit_thresholds_go_before_every_other_option(monkeypatch: pytest.MonkeyPatch) -> None:
    """In Spark's defaultJavaOptions, which it puts before the extraJavaOptions: a user's
    extraJavaOptions (spark-defaults.conf, spark-submit --conf) are not replaced, and a
    value of theirs or of $REVISE_JVM_OPTIONS wins."""
    monkeypatch.setenv(cds.CDS_ENV, "0")
    monkeypatch.delenv(JVM_OPTIONS_ENV, raising=False)
    jit = " ".join(JIT_OPTIONS)
    conf = {"spark.executor.defaultJavaOptions": "-Dadmin=1"}
    _add_jvm_options(conf)
    assert conf["spark.executor.defaultJavaOptions"] == f"{jit} -Dadmin=1"
    assert conf["spark.driver.defaultJavaOptions"] == jit
    assert not any(key in conf for key in JAVA_OPTIONS)


@pytest.mark.parametrize("user", ["", "-XX:+UseParallelGC", "-XX:+UseSerialGC -Xss2m",
                                  "-XX:G1HeapRegionSize=8m"])
def test_the_broker_jvm_starts_with_whichever_collector_they_choose(
        monkeypatch: pytest.MonkeyPatch, user: str) -> None:
    """The broker's JVM names G1 with 4 MB regions; a collector of the user's replaces G1,
    since a JVM given two refuses to start, and their region size wins. Checked by starting
    the real JVM with the broker's command."""
    # a flag of a collector's own is not a choice of collector
    assert not selects_collector(["-XX:+UseAdaptiveSizePolicyWithSystemGC"])
    monkeypatch.setenv(JVM_OPTIONS_ENV, user)
    cmd = broker_node.java_command(["-XX:+PrintFlagsFinal", "-version"], heap="256m")
    own_collector = selects_collector(user.split())
    assert ("-XX:+UseG1GC" in cmd) == (not own_collector)
    ran = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    flags = [line.split() for line in ran.stdout.splitlines()]
    value = {f[1]: f[3] for f in flags if len(f) > 3 and f[2] == "="}
    chosen = {name for name in ("UseG1GC", "UseParallelGC", "UseSerialGC", "UseZGC")
              if value[name] == "true"}
    assert chosen == {user.split()[0].removeprefix("-XX:+") if own_collector else "UseG1GC"}
    if not own_collector:
        mb = 8 if "G1HeapRegionSize" in user else 4
        assert value["G1HeapRegionSize"] == str(mb * 1024 * 1024)


def test_the_local_spark_cluster_daemons_get_them(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    monkeypatch.setenv(JVM_OPTIONS_ENV, "-XX:TieredStopAtLevel=1")
    monkeypatch.setenv("SPARK_DAEMON_JAVA_OPTS", "-Dmine=1")
    env = spark_cluster._child_env(tmp_path, "python3")
    assert env["SPARK_DAEMON_JAVA_OPTS"] == "-Dmine=1 -XX:TieredStopAtLevel=1"
    monkeypatch.delenv(JVM_OPTIONS_ENV)
    monkeypatch.delenv("SPARK_DAEMON_JAVA_OPTS")
    assert "SPARK_DAEMON_JAVA_OPTS" not in spark_cluster._child_env(tmp_path, "python3")


@pytest.mark.parametrize(("feature", "option", "quiet"), [
    (17, "-XX:SharedArchiveFile", cds.QUIET), (21, "-XX:SharedArchiveFile", cds.QUIET),
    (25, "-XX:AOTCache", cds.AOT_QUIET)])
def test_the_driver_starts_from_the_archive_once_it_exists(
        feature: int, option: str, quiet: tuple[str, ...], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    monkeypatch.setattr(cds, "java_feature", lambda: feature)
    monkeypatch.setenv("REVISE_JVM_DIR", str(tmp_path))
    monkeypatch.delenv(cds.CDS_ENV, raising=False)
    monkeypatch.setenv(JVM_OPTIONS_ENV, "-XX:TieredStopAtLevel=1")
    assert cds.driver_options() == []  # not trained: no option, not a missing file's
    archive = cds.archive_path()
    assert archive.parent.parent == tmp_path
    assert archive.suffix == (".aot" if feature >= cds.AOT_FEATURE else ".jsa")
    archive.parent.mkdir()
    archive.write_bytes(b"")
    assert cds.driver_options() == [f"{option}={archive}", *quiet]
    conf: dict[str, str] = {}
    _add_jvm_options(conf)
    # the archive for the driver only (executors start elsewhere), the user's options last
    assert conf["spark.driver.extraJavaOptions"].split() == [
        f"{option}={archive}", *quiet, "-XX:TieredStopAtLevel=1"]
    assert conf["spark.executor.extraJavaOptions"] == "-XX:TieredStopAtLevel=1"
    monkeypatch.setenv(cds.CDS_ENV, "0")
    assert cds.driver_options() == []


def test_java_25_trains_an_aot_cache_and_older_ones_a_dynamic_archive(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    out = tmp_path / "x.partial"
    monkeypatch.setattr(cds, "java_feature", lambda: 17)
    assert cds.dump_options(out) == [f"-XX:ArchiveClassesAtExit={out}", *cds.QUIET]
    monkeypatch.setattr(cds, "java_feature", lambda: 25)
    assert cds.dump_options(out) == [f"-XX:AOTCacheOutput={out}", *cds.AOT_QUIET]


def test_an_archive_of_another_java_is_named_stale(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    monkeypatch.setenv("REVISE_JVM_DIR", str(tmp_path))
    monkeypatch.delenv(cds.CDS_ENV, raising=False)
    _fake_jdk(tmp_path / "jdk17", "17.0.15")
    _fake_jdk(tmp_path / "jdk25", "25.0.3")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk17"))
    old = cds.archive_path()
    old.parent.mkdir()
    old.write_bytes(b"")
    assert cds.stale_note() is None
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk25"))
    new = cds.archive_path()
    assert new.suffix == ".aot" and new.name.split("-")[1] != old.name.split("-")[1]
    note = cds.stale_note()
    assert note is not None and "another Java" in note
    (old.parent / f"{new.name}.partial").write_bytes(b"")  # being written: not an archive
    old.unlink()
    assert cds.stale_note() is None


def test_training_replaces_this_javas_archives_and_keeps_another_javas(tmp_path: Path) -> None:
    names = ["driver-0000aaaa-1111111111111111.jsa",  # this Java, other jars
             "driver-0000aaaa-2222222222222222.jsa",  # the new one
             "driver-0000bbbb-1111111111111111.aot",  # another Java
             "driver-0123456789abcdef.jsa",  # a name revise does not give
             "driver-0000aaaa-3333333333333333.aot.partial"]  # being written
    for name in names:
        (tmp_path / name).write_bytes(b"")
    cds.remove_replaced(tmp_path / names[1])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [names[1], names[2], names[4]])


def _fake_jdk(home: Path, release: str | None) -> Path:
    """A JDK folder whose ``java -version`` says 21.0.2 and whose ``release`` says ``release``."""
    (home / "bin").mkdir(parents=True)
    if release is not None:
        (home / "release").write_text(f'IMPLEMENTOR="x"\nJAVA_VERSION="{release}"\n')
    java_bin = home / "bin" / "java"
    java_bin.write_text("#!/bin/sh\necho 'openjdk version \"21.0.2\" 2024-01-16' >&2\n")
    java_bin.chmod(0o755)
    return java_bin


@pytest.mark.parametrize(("release", "version"), [
    ("25.0.3", (25, 0, 3)), ("17.0.15", (17, 0, 15)), ("21", (21,)),
    ("1.8.0_392", (8, 0, 392)), (None, (21, 0, 2))])
def test_the_java_version_is_read_from_the_jdk(release: str | None, version: tuple[int, ...],
                                               tmp_path: Path) -> None:
    # without a release file, ``java -version`` says it (on stderr)
    assert java_version(str(_fake_jdk(tmp_path / "jdk", release))) == version


def test_a_java_older_than_17_is_refused(monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
    _fake_jdk(tmp_path / "jdk11", "11.0.22")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk11"))
    with pytest.raises(SetupError, match=r"Java 11\.0\.22; .* need Java 17 or later"):
        java()
    _fake_jdk(tmp_path / "jdk25", "25.0.3")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk25"))
    assert java() == str(tmp_path / "jdk25" / "bin" / "java")
    assert java_feature() == 25


def test_another_java_or_other_jars_use_another_archive(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    monkeypatch.setenv("REVISE_JVM_DIR", str(tmp_path))
    jars = tmp_path / "spark"
    jars.mkdir()
    (jars / "a.jar").write_bytes(b"1")
    before = cds.archive_path()
    assert cds.archive_path() == before  # stable
    (jars / "a.jar").write_bytes(b"22")
    assert cds.archive_path() != before
    # revise's own jar (revise.infra.jars.revise_jar) counts too.
    after_spark = cds.archive_path()
    own = revise_jar_path()
    own.parent.mkdir()
    own.write_bytes(b"1")
    assert cds.archive_path() != after_spark


def test_an_archive_for_other_jars_is_named_at_start(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    """After the jars change the old archive stays; the start says to retrain it."""
    monkeypatch.setenv("REVISE_JVM_DIR", str(tmp_path))
    monkeypatch.delenv(cds.CDS_ENV, raising=False)
    assert cds.stale_note() is None  # never trained: nothing to say
    archive = cds.archive_path()
    archive.parent.mkdir()
    archive.write_bytes(b"")
    assert cds.stale_note() is None  # the archive of these jars
    own = revise_jar_path()  # a new revise jar: another key, the old archive stays
    own.parent.mkdir()
    own.write_bytes(b"1")
    assert not cds.archive_path().is_file()
    note = cds.stale_note()
    assert note is not None and "python -m revise.infra.cds" in note
    monkeypatch.setenv(cds.CDS_ENV, "0")
    assert cds.stale_note() is None
