"""Shared fixtures: one real Kafka broker and one real Spark session per test session.

- ``kafka_bootstrap``: ``$REVISE_BOOTSTRAP_SERVERS`` when set, else an embedded broker started
  under a temporary folder (real Apache Kafka, KRaft) and stopped at the end.
- ``new_topic``: factory creating a fresh uuid-named topic (and returning its name).
- ``spark``: the project's Spark session (Delta + Kafka connector + RocksDB state store).
- Delta tables go under pytest's ``tmp_path``.

In CI (``CI`` set) a skipped test fails the run: a real-system test that skips proves nothing.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from scheduling import FileSeconds, file_of, recorded_durations, slowest_first

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
"""Every JVM the tests start (brokers, Spark sessions, the CLI's jobs, the Spark cluster) runs
on the JVM's quick C1 compiler only ($REVISE_JVM_OPTIONS): the suite's runs last seconds. A
small bounded job took 0.82x the wall time so, and 0.56x with the driver's class archive as
well (docs/BENCHMARKS.md, *Start-up and the class archive*). A value set outside
wins."""
os.environ.setdefault("REVISE_JVM_OPTIONS", TEST_JVM_OPTIONS)
_file_seconds = FileSeconds()


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("REVISE_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    from revise.infra import broker

    home = tmp_path_factory.mktemp("broker")
    cluster = broker.start(home)
    try:
        yield cluster.bootstrap_servers
    finally:
        broker.stop(home)


@pytest.fixture()
def new_topic(kafka_bootstrap: str) -> Callable[..., str]:
    return topic_factory({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture(scope="session")
def topic_maker() -> Callable[[dict[str, Any]], Callable[..., str]]:
    """:func:`topic_factory` for tests that create topics on another cluster (e.g. a secure one)."""
    return topic_factory


def topic_factory(admin_conf: dict[str, Any]) -> Callable[..., str]:
    """``make(prefix, partitions=, config=)`` creating fresh topics with this admin client config
    (``bootstrap.servers`` plus any SASL/TLS settings)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from sinks.kafka.admin import await_topics

    admin = AdminClient(admin_conf)

    def make(
        prefix: str = "t", *, partitions: int = 2, config: dict[str, str] | None = None
    ) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})]
        )
        futures[name].result(30)
        await_topics(admin, [name], timeout_s=30)
        return name

    return make


@pytest.fixture()
def unique_id() -> Callable[[str], str]:
    return lambda prefix="id": f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from revise.spark.session import spark_session

    session = spark_session("revise-tests", ui=False, shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture()
def delta_path(tmp_path: Path) -> Path:
    return tmp_path / "delta"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    skipped = terminalreporter.stats.get("skipped", [])
    if os.environ.get("CI") and skipped:
        terminalreporter.write_line(
            f"CI: {len(skipped)} test(s) skipped; a skipped test is a failure here", red=True
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = session.config.getoption("--record-durations")
    if path and not hasattr(session.config, "workerinput"):  # the controller, or no xdist
        _file_seconds.write(Path(path))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if os.environ.get("CI") and skipped and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations", metavar="PATH", default=None,
        help="write each test file's seconds in this run to PATH as JSON (tests/durations.json "
             "orders the files for pytest-xdist: tests/scheduling.py)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the test files longest first (:func:`scheduling.slowest_first`)."""
    order = {f: i for i, f in enumerate(slowest_first([file_of(it.nodeid) for it in items],
                                                      recorded_durations()))}
    items.sort(key=lambda it: order[file_of(it.nodeid)])  # stable: a file keeps its order


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Under xdist the controller gets every worker's reports through this hook.
    _file_seconds.add(report)
