"""What keeps an unbounded run's memory flat (issue 11 item 4): the settings, and that they reach
the processes they are for.

- delta-rs's allocator: importing :mod:`revise` sets :data:`revise.DELTA_RS_MALLOC_CONF` under
  :data:`revise.MALLOC_CONF_ENV` unless the user set it, and that variable is the one the
  jemalloc inside the ``deltalake`` package reads (an unknown option makes it complain).
- a bounded run's allocator: :func:`revise.allocator_for_run` switches the default to
  :data:`revise.BOUNDED_DELTA_RS_MALLOC_CONF` when nothing stops it (the user's value, delta-rs
  already loaded), and the job's driver calls it before it opens the Delta tables.
- the driver JVM's heap: :func:`revise.spark.session.long_run_conf`.

The figures (memory flat over a 30-minute soak) are a benchmark's, in docs/RELIABILITY.md; the
short soak in tests/integration/test_soak.py checks a real unbounded run has both settings.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from revise import BOUNDED_DELTA_RS_MALLOC_CONF, DELTA_RS_MALLOC_CONF, MALLOC_CONF_ENV
from revise.errors import ConfigError
from revise.spark.session import long_run_conf


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != MALLOC_CONF_ENV}
    return subprocess.run([sys.executable, "-c", code], env={**base, **env}, text=True,
                          capture_output=True, timeout=120, check=False)


def test_importing_revise_sets_the_allocator_default_and_delta_rs_accepts_it():
    code = ("import os, revise, deltalake\n"
            f"print(os.environ[{MALLOC_CONF_ENV!r}])")
    done = _python(code, {})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == DELTA_RS_MALLOC_CONF
    assert "<jemalloc>" not in done.stderr  # every option of revise's value is known


def test_delta_rs_reads_the_variable_and_a_users_value_wins():
    # jemalloc parses the variable when deltalake loads and names an option it does not know:
    # proof that this variable reaches delta-rs's allocator, and that revise left it alone.
    done = _python("import revise, deltalake", {MALLOC_CONF_ENV: "no_such_option:1"})
    assert done.returncode == 0, done.stderr
    assert "Invalid conf pair: no_such_option:1" in done.stderr


@pytest.mark.parametrize(("bounded", "expected"), [(True, BOUNDED_DELTA_RS_MALLOC_CONF),
                                                    (False, DELTA_RS_MALLOC_CONF)])
def test_a_run_sets_its_allocator_before_delta_rs_loads(bounded, expected):
    code = ("import os, revise\n"
            f"print(revise.allocator_for_run(bounded={bounded}))\n"
            "import deltalake\n"
            f"print(os.environ[{MALLOC_CONF_ENV!r}])")
    done = _python(code, {})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [expected, expected]
    assert "<jemalloc>" not in done.stderr  # delta-rs's jemalloc knows every option


def test_a_users_value_and_a_loaded_delta_rs_keep_the_allocator():
    code = ("import os, revise\n"
            "print(revise.allocator_for_run(bounded=True))")
    done = _python(code, {MALLOC_CONF_ENV: "dirty_decay_ms:5"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "dirty_decay_ms:5"
    # Too late once delta-rs is loaded: jemalloc has read the variable; it is left as read.
    done = _python("import revise, deltalake\nprint(revise.allocator_for_run(bounded=True))", {})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == DELTA_RS_MALLOC_CONF


def test_a_child_tells_revises_value_from_the_users():
    # A bounded run's process hands its environment to its children: revise's value there is
    # not the user's, so a child starts from the unbounded default and may choose again.
    parent = ("import os, subprocess, sys, revise\n"
              "revise.allocator_for_run(bounded=True)\n"
              "child = 'import os, revise; print(os.environ[revise.MALLOC_CONF_ENV]); "
              "print(revise.allocator_for_run(bounded=True))'\n"
              "sys.stdout.write(subprocess.run([sys.executable, '-c', child], text=True,\n"
              "                                capture_output=True, check=True).stdout)")
    done = _python(parent, {})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [DELTA_RS_MALLOC_CONF, BOUNDED_DELTA_RS_MALLOC_CONF]
    # The user's value, whatever the mark of a revise parent says, stays.
    done = _python("import os, revise\nprint(revise.allocator_for_run(bounded=True))",
                   {MALLOC_CONF_ENV: "dirty_decay_ms:5",
                    "_REVISE_DEFAULT_MALLOC_CONF": DELTA_RS_MALLOC_CONF})
    assert done.stdout.strip() == "dirty_decay_ms:5", done.stderr


@pytest.mark.parametrize("once", [True, False])
def test_the_driver_chooses_the_allocator_before_it_opens_the_delta_tables(monkeypatch, tmp_path,
                                                                          once):
    from revise.config import EngineConfig, WindowSpec
    from revise.jobconfig import DeltaOutput, JobConfig, KafkaIO
    from revise.spark import driver

    calls: list[tuple[str, bool | None]] = []

    class Opened(Exception):
        pass

    def prepare(cfg, pool, after_write):  # where the Delta tables (and delta-rs) are opened
        calls.append(("prepare", None))
        raise Opened

    monkeypatch.setattr(driver, "allocator_for_run",
                        lambda *, bounded: calls.append(("allocator", bounded)))
    monkeypatch.setattr(driver, "_prepare", prepare)
    monkeypatch.setattr(driver, "long_run_conf", lambda: {})
    cfg = JobConfig(kafka=KafkaIO(bootstrap_servers="127.0.0.1:1", input_topic="in",
                                  changelog_topic="out"),
                    delta=DeltaOutput(path=str(tmp_path / "d")), checkpoint=str(tmp_path / "c"),
                    once=once,
                    engine=EngineConfig(window=WindowSpec.parse("tumbling:10s"), grace_ms=0))
    with pytest.raises(Opened):
        driver.run_job(cfg)
    assert calls == [("allocator", once), ("prepare", None)]


def test_long_run_conf_fixes_the_driver_heap_at_start(monkeypatch):
    monkeypatch.delenv("REVISE_DRIVER_START_HEAP", raising=False)
    monkeypatch.delenv("REVISE_DRIVER_MEMORY", raising=False)
    assert long_run_conf() == {"spark.driver.extraJavaOptions": "-Xms1024m -XX:+AlwaysPreTouch"}
    monkeypatch.setenv("REVISE_DRIVER_START_HEAP", "512m")
    assert long_run_conf()["spark.driver.extraJavaOptions"].startswith("-Xms512m ")
    monkeypatch.setenv("REVISE_DRIVER_START_HEAP", "2GB")
    assert long_run_conf()["spark.driver.extraJavaOptions"].startswith("-Xms2048m ")


def test_the_start_heap_is_never_above_the_drivers_memory(monkeypatch):
    monkeypatch.setenv("REVISE_DRIVER_START_HEAP", "4g")
    monkeypatch.setenv("REVISE_DRIVER_MEMORY", "768m")
    assert long_run_conf()["spark.driver.extraJavaOptions"].startswith("-Xms768m ")


@pytest.mark.parametrize("off", ["0", "0m", "512k"])
def test_a_zero_start_heap_turns_it_off(monkeypatch, off):
    monkeypatch.setenv("REVISE_DRIVER_START_HEAP", off)
    assert long_run_conf() == {}


@pytest.mark.parametrize(("var", "value"), [("REVISE_DRIVER_START_HEAP", "lots"),
                                            ("REVISE_DRIVER_MEMORY", "1.5g")])
def test_a_size_that_is_not_one_is_a_config_error(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=rf"'{value}' is not a size; write e\.g\. 512m or 2g"):
        long_run_conf()


def test_an_unbounded_run_with_a_bad_start_heap_exits_2_before_contacting_kafka(tmp_path):
    args = ["run", "--bootstrap-servers", "127.0.0.1:1", "--input-topic", "in",
            "--changelog-topic", "out", "--delta-path", str(tmp_path / "d"), "--checkpoint",
            str(tmp_path / "c"), "--query-id", "q", "--window", "tumbling:1m", "--grace", "1s"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVISE_")}
    done = subprocess.run([sys.executable, "-m", "revise", *args], capture_output=True,
                          text=True, timeout=120, check=False,
                          env={**env, "REVISE_DRIVER_START_HEAP": "lots"})
    assert done.returncode == 2, done.stderr
    assert "'lots' is not a size; write e.g. 512m or 2g" in done.stderr
    assert "Kafka" not in done.stderr and not (tmp_path / "d").exists()
