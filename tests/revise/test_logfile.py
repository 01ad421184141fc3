"""The CLI's console and log file: revise's own records on the console, all of them in the file,
which is created (and its path printed, once) only when something is written to it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from revise.cli import setup_logging
from revise.infra import logfile


@pytest.fixture
def cli_logging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("REVISE_HOME", str(tmp_path))
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    yield tmp_path / "logs"
    for handler in root.handlers[:]:
        if handler not in before[0]:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(before[1])
    monkeypatch.setattr(logfile, "_current", None)


def test_the_console_shows_revises_records_and_the_file_has_them_all(
        cli_logging: Path, capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging(False, "run")
    assert not cli_logging.exists()  # nothing written yet: no file
    logging.getLogger("revise.job").info("batch=0 records=5")
    logging.getLogger("py4j.java_gateway").warning("a py4j line")
    logging.getLogger("revise.kafka").warning("kafka: Not coordinator: retrying")
    logging.getLogger("revise.kafka").error("kafka: fatal: the producer was fenced")
    logging.getLogger("pyspark").warning("a pyspark line")
    err = capsys.readouterr().err.splitlines()

    (path,) = cli_logging.iterdir()
    assert path.name.startswith("run-") and path.suffix == ".log"
    assert [line for line in err if "lines go to" in line] == [
        f"revise: Spark's, the JVM's and the Kafka clients' lines go to {path} "
        "(revise -v prints them here)"]
    shown = [line.split(" ", 4)[-1] for line in err if "lines go to" not in line]
    assert shown == ["batch=0 records=5", "kafka: fatal: the producer was fenced"]
    written = path.read_text()
    for text in ("batch=0 records=5", "Not coordinator", "fenced", "a pyspark line"):
        assert text in written, text
    assert "a py4j line" not in written  # py4j's gateway logger: CRITICAL only

    with logfile.jvm_output() as jvm:  # type: ignore[union-attr]  # the JVM's: same file
        jvm.write(b"26/11/28 19:33:20 WARN NativeCodeLoader: ...\n")
    assert "NativeCodeLoader" in path.read_text()
    assert "lines go to" not in capsys.readouterr().err  # announced once


def test_verbose_keeps_everything_on_the_console_and_writes_no_file(
        cli_logging: Path, capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging(False, "run")  # an earlier main() in this process
    setup_logging(True, "run")
    logging.getLogger("pyspark").warning("a pyspark line")
    logging.getLogger("revise.kafka").warning("kafka: Not coordinator: retrying")
    err = capsys.readouterr().err
    assert "a pyspark line" in err and "Not coordinator" in err
    assert logfile.current() is None and logfile.jvm_output() is None
    assert not cli_logging.exists()
