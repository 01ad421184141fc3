"""Soak: the job unbounded at a steady input rate, sampled every minute.

``python -m benchmarks.soak --minutes 30 --rate 2000 [--bootstrap-servers HOST:PORT]
[--delta-log-retention DUR]``

Starts the embedded broker (unless ``--bootstrap-servers``), runs ``python -m revise run``
without ``--once`` as a subprocess (its own process group), and feeds the input topic from a
thread at ``--rate`` records/s: ``--keys`` keys, event time = wall-clock time minus a uniform
disorder, so windows open and close in real time. The clock of ``--minutes`` starts once the
job has logged its first micro-batch (Spark's start-up, up to a minute on a loaded machine, is
not part of the run); from then, every ``--sample-s`` seconds (60) it records:

- resident memory (RSS, MiB) of the Python driver (the ``revise run`` process), the driver JVM
  (its ``java`` child) and the Python workers (its Python descendants: PySpark's daemon and
  its workers, under the JVM), found with psutil over the process tree
  (:mod:`benchmarks.proc_tree`);
- the driver JVM's open file descriptors and its TCP sockets in ``CLOSE_WAIT`` (a socket the
  peer closed and the JVM did not: Spark 4.2.0 leaked one per ``transformWithStateInPandas``
  task, SPARK-58932);
- micro-batch duration (ms; median and max of the job's ``batch_ms=`` progress lines in the
  interval);
- input lag (records): the input topic's end offsets minus the offsets of the newest entry of
  the checkpoint's offset log (what the job has taken on);
- first-result latency (ms): for each window, Kafka timestamp of its first record (the feeder
  stamps records with the wall clock) to the Kafka timestamp of its revision 0 in the committed
  changelog (when the stateful task sent it, right before its transaction committed; the
  revision's ``emitted_at_ms`` is the micro-batch's stamp, taken before the batch ran); p50 /
  p95 of the windows whose first revision came in the interval.

Prints a table, writes every sample as JSON (``--json``), and at the end compares the total
memory of the last sample with the one at ``--baseline-minute`` (5; goal: within 5 %) and says
whether batch duration and lag stayed flat (second half vs first half after the baseline).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson
import psutil

from benchmarks.chaos import CliRun, create_topics, use_repo_pythonpath
from benchmarks.proc_tree import rss_by_kind
from revise.checkpoint import OFFSETS_LOG, spark_log_dir

__all__ = ["Sample", "driver_settings", "main"]

MIB = 1024 * 1024
_BATCH_MS = re.compile(r"batch=(\d+) .*batch_ms=(\d+)")


@dataclass(frozen=True, slots=True)
class Sample:
    """One interval's figures (memory in MiB, durations in ms, lag in records)."""

    minute: float
    rss_driver_jvm_mib: float
    rss_python_driver_mib: float
    rss_python_workers_mib: float
    python_workers: int
    jvm_fds: int
    jvm_close_wait: int
    batches: int
    batch_ms_p50: float | None
    batch_ms_max: float | None
    input_lag: int
    first_result_ms_p50: float | None
    first_result_ms_p95: float | None
    windows: int
    produced: int

    @property
    def rss_total_mib(self) -> float:
        """Driver JVM + Python driver + Python workers."""
        return self.rss_driver_jvm_mib + self.rss_python_driver_mib + self.rss_python_workers_mib


class Feeder(threading.Thread):
    """Writes records at a steady rate; remembers when each window's first record went out."""

    def __init__(self, bootstrap: str, topic: str, rate: float, keys: int, window_ms: int,
                 disorder_ms: int, seed: int, *, track_windows: bool = False) -> None:
        super().__init__(daemon=True, name="soak-feeder")
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.keys, self.window_ms, self.disorder_ms = keys, window_ms, disorder_ms
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.first_ms: dict[tuple[str, int], int] = {}  # (key, window_start_ms) -> Kafka ts
        self.produced = 0
        self.lock = threading.Lock()
        # With track_windows: (key, window_start_ms) -> records and Kafka ts of the last one.
        self.track_windows = track_windows
        self.counts: dict[tuple[str, int], int] = {}
        self.last_ms: dict[tuple[str, int], int] = {}

    def run(self) -> None:
        """Produce until stopped, ``rate`` records/s in 50 ms slices."""
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                      "linger.ms": 20})
        t0 = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - t0) * self.rate) - self.produced
            now = int(time.time() * 1000)
            for _ in range(max(0, due)):
                key = f"k{self.rng.randrange(self.keys):04d}"
                ts = now - self.rng.randrange(self.disorder_ms + 1)
                value = round(self.rng.gammavariate(2.0, 10.0), 3)
                payload = f'{{"key":"{key}","ts":{ts},"value":{value}}}'.encode()
                p.produce(self.topic, value=payload, key=key.encode(), timestamp=now)
                ws = ts - ts % self.window_ms
                with self.lock:
                    self.first_ms.setdefault((key, ws), now)
                    if self.track_windows:
                        self.counts[key, ws] = self.counts.get((key, ws), 0) + 1
                        self.last_ms[key, ws] = now
                self.produced += 1
            p.poll(0)
            time.sleep(0.05)
        p.flush(30)

    def first(self, key: str, window_start_ms: int) -> int | None:
        """Kafka timestamp of the window's first record (popped: each is used once)."""
        with self.lock:
            return self.first_ms.pop((key, window_start_ms), None)


class CommittedRows(threading.Thread):
    """A topic's JSON rows as a ``read_committed`` consumer gets them, from its start.

    It reads until :attr:`stop` is set. Each row goes to :meth:`seen` with the message's own
    Kafka timestamp and the wall clock when the row reached the consumer (ms): a fetch waits at
    most 10 ms for data, and ``poll`` hands a fetched message over at once (``consume(n, t)``
    would wait for ``n`` messages or the timeout).
    """

    def __init__(self, bootstrap: str, topic: str, name: str) -> None:
        super().__init__(daemon=True, name=name)
        self.bootstrap, self.topic = bootstrap, topic
        self.stop = threading.Event()

    def run(self) -> None:
        """Consume ``read_committed`` until stopped."""
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": self.bootstrap,
                      "group.id": f"{self.name}-{uuid.uuid4()}",
                      "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 10})
        c.subscribe([self.topic])
        try:
            while not self.stop.is_set():
                m = c.poll(0.1)
                value = None if m is None or m.error() else m.value()
                if m is None or value is None:
                    continue
                self.seen(orjson.loads(value), int(m.timestamp()[1]), int(time.time() * 1000))
        finally:
            c.close()

    def seen(self, row: dict[str, Any], sent_ms: int, at_ms: int) -> None:
        """One row: its message's Kafka timestamp and when it was received (ms)."""
        raise NotImplementedError


class ChangelogWatcher(CommittedRows):
    """Reads the committed changelog; latency of each window's revision 0.

    The latency runs to the revision's message's own Kafka timestamp.
    """

    def __init__(self, bootstrap: str, topic: str, feeder: Feeder) -> None:
        super().__init__(bootstrap, topic, name="soak-changelog")
        self.feeder = feeder
        self.latencies: list[int] = []
        self.lock = threading.Lock()

    def seen(self, row: dict[str, Any], sent_ms: int, at_ms: int) -> None:
        """Revision 0 of a window the feeder started: its latency."""
        if row["revision"] != 0:
            return
        first = self.feeder.first(row["key"], row["window_start_ms"])
        if first is not None:
            with self.lock:
                self.latencies.append(sent_ms - first)

    def take(self) -> list[int]:
        """The latencies seen since the last call (ms)."""
        with self.lock:
            out, self.latencies = self.latencies, []
        return out


def memory(driver_pid: int) -> tuple[float, float, float, int]:
    """RSS (MiB) of the driver JVM, the Python driver, the Python workers; number of workers."""
    rss, workers = rss_by_kind(driver_pid)
    return (rss.get("jvm", 0) / MIB, rss.get("driver", 0) / MIB, rss.get("workers", 0) / MIB,
            workers)


def close_wait_sockets(proc: psutil.Process, except_ports: Collection[int] = ()) -> int:
    """``proc``'s TCP sockets in ``CLOSE_WAIT``: the peer closed them, ``proc`` did not.

    Those whose peer listens on one of ``except_ports`` are left out.
    """
    return sum(1 for c in proc.net_connections(kind="tcp")
               if c.status == psutil.CONN_CLOSE_WAIT
               and not (c.raddr and c.raddr.port in except_ports))


def descriptors(driver_pid: int) -> tuple[int, int]:
    """The driver JVM's open file descriptors and its TCP sockets in ``CLOSE_WAIT``."""
    fds = close_wait = 0
    for child in psutil.Process(driver_pid).children(recursive=True):
        try:
            if child.name() == "java":
                fds += child.num_fds()
                close_wait += close_wait_sockets(child)
        except psutil.Error:
            continue
    return fds, close_wait


def driver_settings(driver_pid: int) -> dict[str, object]:
    """What keeps the job's memory flat, as the running processes have it.

    ``jvm_options``: the driver JVM's ``-X`` options (``-Xmx`` from ``spark.driver.memory``;
    ``-Xms`` and ``-XX:+AlwaysPreTouch`` from :func:`revise.spark.session.long_run_conf` in an
    unbounded run); ``malloc_conf``: delta-rs's allocator settings in the Python driver's
    environment (:data:`revise.DELTA_RS_MALLOC_CONF` unless the user set their own).
    """
    from revise import MALLOC_CONF_ENV

    driver = psutil.Process(driver_pid)
    jvm = [c for c in driver.children(recursive=True) if c.name() == "java"]
    return {
        "jvm_options": [a for a in jvm[0].cmdline() if a.startswith("-X")] if jvm else [],
        "malloc_conf": driver.environ().get(MALLOC_CONF_ENV),
    }


def input_lag(bootstrap: str, topic: str, checkpoint: Path) -> int:
    """Input end offsets minus the offsets of the checkpoint's newest offset-log entry."""
    from confluent_kafka import Consumer, TopicPartition

    taken: dict[int, int] = {}
    offsets = spark_log_dir(checkpoint, OFFSETS_LOG)
    ids = sorted((int(p.name) for p in offsets.iterdir() if p.name.isdigit()), reverse=True) \
        if offsets.is_dir() else []
    for bid in ids[:2]:  # the newest may be half-written
        lines = (offsets / str(bid)).read_text().splitlines()
        if len(lines) > 2 and lines[2] != "-":
            taken = {int(k): int(v) for k, v in json.loads(lines[2]).get(topic, {}).items()}
            break
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"soak-lag-{uuid.uuid4()}"})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in parts}
    finally:
        c.close()
    return sum(hi - taken.get(p, 0) for p, hi in ends.items())


def _pct(xs: Sequence[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return float(s[min(len(s) - 1, int(q * len(s)))])


def _batch_ms(log_text: str, after_batch: int) -> tuple[list[int], int]:
    got = [(int(b), int(ms)) for b, ms in _BATCH_MS.findall(log_text) if int(b) > after_batch]
    return [ms for _b, ms in got], max((b for b, _ms in got), default=after_batch)


def _first_batch(run: CliRun, timeout_s: float) -> int | None:
    """The id of the job's first logged micro-batch, once there is one.

    None when the job exited, or ran none within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and run.proc.poll() is None:
        _durations, last = _batch_ms(run.log(), -1)
        if last >= 0:
            return last
        time.sleep(0.5)
    return None


def _row(s: Sample) -> str:
    def f(x: float | None, w: int = 7) -> str:
        return f"{x:{w}.0f}" if x is not None else " " * (w - 1) + "-"

    return (f"{s.minute:6.1f} {s.rss_driver_jvm_mib:8.0f} {s.rss_python_driver_mib:8.0f} "
            f"{s.rss_python_workers_mib:8.0f} ({s.python_workers:2d}) {s.rss_total_mib:8.0f} "
            f"{s.jvm_fds:6d} {s.jvm_close_wait:6d} {s.batches:5d} {f(s.batch_ms_p50)} "
            f"{f(s.batch_ms_max)} {s.input_lag:8d} {f(s.first_result_ms_p50)} "
            f"{f(s.first_result_ms_p95)} {s.windows:6d}")


HEADER = ("minute  jvm_MiB  py_MiB  wrk_MiB (n)  total_MiB    fds c_wait batches  b_p50   b_max"
          "      lag  fr_p50  fr_p95 windows")


def verdict(samples: Sequence[Sample], baseline_minute: float, rate: float) -> dict[str, object]:
    """Memory at the end vs the baseline sample; batch duration and lag first vs second half.

    "Flat" means the second half's median is within 20 % (or 200 ms / the records of 2 s of
    input) of the first half's; memory meets the goal within 5 %.
    """
    base = min(samples, key=lambda s: abs(s.minute - baseline_minute))
    last = samples[-1]
    mem_change = (last.rss_total_mib - base.rss_total_mib) / base.rss_total_mib
    after = [s for s in samples if s.minute >= base.minute]
    half = max(1, len(after) // 2)
    first, second = after[:half], after[half:] or after[-1:]

    def med(xs: list[Sample], attr: str) -> float:
        vals = [getattr(s, attr) for s in xs if getattr(s, attr) is not None]
        return float(statistics.median(vals)) if vals else 0.0

    b1, b2 = med(first, "batch_ms_p50"), med(second, "batch_ms_p50")
    l1, l2 = med(first, "input_lag"), med(second, "input_lag")
    return {
        "baseline_minute": base.minute, "last_minute": last.minute,
        "memory_baseline_mib": round(base.rss_total_mib, 1),
        "memory_last_mib": round(last.rss_total_mib, 1),
        "memory_change_pct": round(100 * mem_change, 2),
        "memory_within_5pct": abs(mem_change) <= 0.05,
        "batch_ms_first_half": b1, "batch_ms_second_half": b2,
        "batch_duration_flat": b2 <= max(b1 * 1.2, b1 + 200),
        "lag_first_half": l1, "lag_second_half": l2,
        "lag_flat": l2 <= max(l1 * 1.2, l1 + 2 * rate),
    }


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.soak",
                                description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0, help="how long to run (default 30)")
    p.add_argument("--rate", type=float, default=2000.0, help="input records/s (default 2000)")
    p.add_argument("--keys", type=int, default=100, help="distinct keys (default 100)")
    p.add_argument("--window", default="tumbling:10s", help="job window (default tumbling:10s)")
    p.add_argument("--grace-ms", type=int, default=5_000, help="grace, ms (default 5000)")
    p.add_argument("--disorder-ms", type=int, default=2_000,
                   help="event time up to this far behind wall time, ms (default 2000)")
    p.add_argument("--sample-s", type=float, default=60.0, help="sampling interval, s (60)")
    p.add_argument("--baseline-minute", type=float, default=5.0,
                   help="minute whose memory the end is compared with (default 5)")
    p.add_argument("--bootstrap-servers", default=None,
                   help="an existing broker; default: start an embedded one in a temp folder")
    p.add_argument("--delta-log-retention", default=None, metavar="DUR",
                   help="revise run --delta-log-retention (default: not given, Delta's 30 days)")
    p.add_argument("--start-timeout-s", type=float, default=600.0,
                   help="how long the job may take to run its first micro-batch (600)")
    p.add_argument("--workdir", default=None, help="where the checkpoint, Delta and logs go")
    p.add_argument("--json", default=None, help="write samples and verdict to this file")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit code (0 when the run completed)."""
    args = _parser().parse_args(argv)
    use_repo_pythonpath()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="revise-soak-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    from revise.config import WindowSpec
    from revise.infra import broker

    embedded = contextlib.ExitStack()  # the broker started here, if none was given
    bootstrap = embedded.enter_context(
        broker.given_or_embedded(args.bootstrap_servers, work / "broker"))
    tag = uuid.uuid4().hex[:8]
    topics = {n: f"soak-{n}-{tag}" for n in ("in", "changelog", "late", "dead")}
    run: CliRun | None = None
    samples: list[Sample] = []
    settings: dict[str, object] = {}  # driver_settings(), once the job's JVM runs
    feeder = watcher = None
    try:
        create_topics(bootstrap, list(topics.values()), partitions=4)
        checkpoint = work / "checkpoint"
        feeder = Feeder(bootstrap, topics["in"], args.rate, args.keys,
                        WindowSpec.parse(args.window).size_ms, args.disorder_ms, seed=1)
        watcher = ChangelogWatcher(bootstrap, topics["changelog"], feeder)
        run = CliRun(
            ["run", "--bootstrap-servers", bootstrap, "--input-topic", topics["in"],
             "--changelog-topic", topics["changelog"], "--late-topic", topics["late"],
             "--dead-letter-topic", topics["dead"], "--delta-path", str(work / "delta"),
             "--checkpoint", str(checkpoint), "--query-id", f"soak-{tag}",
             "--window", args.window, "--grace", f"{args.grace_ms}ms",
             *(["--delta-log-retention", args.delta_log_retention]
               if args.delta_log_retention else [])],
            cwd=work, log=work / "job.log")
        feeder.start()
        watcher.start()
        last_batch = _first_batch(run, args.start_timeout_s)
        if last_batch is None:
            print(f"soak: the job ran no micro-batch within {args.start_timeout_s:.0f} s:\n"
                  f"{run.tail()}", file=sys.stderr)
            return 1
        print(f"soak: rate={args.rate:.0f}/s keys={args.keys} window={args.window} "
              f"minutes={args.minutes} workdir={work}\n{HEADER}", flush=True)
        t0 = time.monotonic()
        while time.monotonic() - t0 < args.minutes * 60:
            time.sleep(min(args.sample_s, args.minutes * 60 - (time.monotonic() - t0)))
            if run.proc.poll() is not None:
                print(f"soak: the job exited with {run.proc.returncode}:\n{run.tail()}",
                      file=sys.stderr)
                return 1
            durations, last_batch = _batch_ms(run.log(), last_batch)
            lat = watcher.take()
            jvm, py, wrk, n_wrk = memory(run.proc.pid)
            fds, close_wait = descriptors(run.proc.pid)
            s = Sample(
                round((time.monotonic() - t0) / 60, 2), round(jvm, 1), round(py, 1),
                round(wrk, 1), n_wrk, fds, close_wait, len(durations), _pct(durations, 0.5),
                _pct(durations, 1.0), input_lag(bootstrap, topics["in"], checkpoint),
                _pct(lat, 0.5), _pct(lat, 0.95), len(lat), feeder.produced)
            samples.append(s)
            print(_row(s), flush=True)
            if not settings.get("jvm_options"):
                settings = driver_settings(run.proc.pid)
                print(f"soak: driver {' '.join(f'{k}={v}' for k, v in settings.items())}",
                      flush=True)
    finally:
        for t in (feeder, watcher):
            if t is not None:
                t.stop.set()
        if run is not None:
            os.kill(run.proc.pid, signal.SIGTERM)
            run.wait(120)
        embedded.close()
    result = verdict(samples, args.baseline_minute, args.rate)
    print("soak: " + " ".join(f"{k}={v}" for k, v in result.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"args": vars(args), "driver": settings,
             "samples": [{**asdict(s), "rss_total_mib": s.rss_total_mib} for s in samples],
             "verdict": result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
