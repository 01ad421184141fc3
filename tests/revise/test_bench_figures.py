"""The benchmarks' figures, computed from known arrivals and outputs, the latency benchmark's
reader on a real broker, and the benchmark commands of docs/BENCHMARKS.md, checked against
each module's own options."""

from __future__ import annotations

import time

import pytest

from benchmarks.latency import _batches, _last_batch, _latencies
from benchmarks.soak import Feeder


def _feeder() -> Feeder:
    f = Feeder("127.0.0.1:1", "t", rate=1.0, keys=1, window_ms=10_000, disorder_ms=0, seed=1,
               track_windows=True)
    # window a@0: 3 records sent at 1000..1200; window a@10000: 1 record at 9000 (before feed)
    f.first_ms = {("a", 0): 1_000, ("a", 10_000): 9_000, ("b", 0): 1_500}
    f.last_ms = {("a", 0): 1_200, ("a", 10_000): 9_000, ("b", 0): 1_500}
    f.counts = {("a", 0): 3, ("a", 10_000): 1, ("b", 0): 2}
    return f


def test_first_result_and_final_value_latency_per_window():
    rows = [  # (key, window_start_ms, count, at_ms), in arrival order at the sink
        ("a", 0, 1, 1_900), ("a", 0, 2, 2_400), ("a", 0, 3, 3_000),
        ("b", 0, 1, 2_500),  # b never reaches its final count of 2
        ("a", 10_000, 1, 9_400),
    ]
    got = _latencies(_feeder(), rows, fed_from_ms=500, fed_to_ms=2_000)
    assert got["windows"] == 2  # a@10000's first record came after the feed window
    assert got["with_result"] == 2 and got["with_final_value"] == 1
    assert got["first_result_ms"]["p50"] in (900.0, 1_000.0)  # a: 1900-1000, b: 2500-1500
    assert got["first_result_ms"]["p99"] == 1_000.0
    assert got["final_value_ms"] == {"p50": 1_800.0, "p95": 1_800.0, "p99": 1_800.0}


@pytest.mark.kafka
def test_the_latency_reader_times_a_result_when_its_transaction_commits(kafka_bootstrap,
                                                                        new_topic):
    from confluent_kafka import Producer

    from benchmarks.latency import Readable

    topic = new_topic("lat-out", partitions=2)
    reader = Readable(kafka_bootstrap, topic)
    reader.start()
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": topic})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b'{"key":"a","window_start_ms":0,"count":1}', partition=1)
    producer.flush(30)
    time.sleep(1.0)  # sent, not readable yet
    committed_at = int(time.time() * 1000)
    producer.commit_transaction(30)
    deadline = time.monotonic() + 30
    while not reader.rows and time.monotonic() < deadline:
        time.sleep(0.05)
    reader.stop.set()
    reader.join(30)
    assert [r[:3] for r in reader.rows] == [("a", 0, 1)]
    assert committed_at <= reader.rows[0][3] <= committed_at + 5_000


def test_batch_durations_split_into_batches_with_and_without_input():
    log = "\n".join([
        "INFO revise batch=0 records=0 rec_per_s=0 watermark=x input_lag=0 batch_ms=3900",
        "INFO revise batch=1 records=10 rec_per_s=1 watermark=x input_lag=0 batch_ms=900 "
        "elapsed_s=3.0 offsets_ms=10 plan_ms=40 sink_ms=800 log_ms=30 collect_ms=600 "
        "kafka_ms=50 delta_ms=150",
        "INFO revise batch=2 records=0 rec_per_s=0 watermark=x input_lag=0 batch_ms=300",
        "batch=3 records=0 batch_ms=500",  # the native child's line
        "batch=4 records=7 batch_ms=1100",
        "batch=5 records=1 batch_ms=250",  # a probe's record
        "batch=6 records=0 batch_ms=200",  # and the empty batch after it
    ])
    got = _batches(log, probes_from=5)
    # batch 0 starts the query: neither kind; the probe's own batch is not the workload's
    assert got["batches"] == 5 and got["empty_batches"] == 3
    assert got["batch_ms_p50"] in (900.0, 1_100.0) and got["empty_batch_ms_p95"] == 500.0
    assert got["empty_batch_ms_p50"] == 300.0
    # the parts of the batches with input that print them (revise's, not the native child's)
    assert got["batch_parts_ms_p50"] == {
        "offsets": 10.0, "plan": 40.0, "sink": 800.0, "log": 30.0, "collect": 600.0,
        "kafka": 50.0, "delta": 150.0}
    assert _batches(log)["batches"] == 6  # without probes every batch with input counts


def test_the_last_batch_of_a_log():
    assert _last_batch("batch=3 records=0 batch_ms=5\nbatch=12 records=4 batch_ms=9\n") == 12
    assert _last_batch("starting\n") == -1


def _probe_seconds(probe: str, *args: str) -> dict[str, float]:
    """Run ``probe`` in a Python process of its own (from the repository root); its JSON line.

    A process of its own: a test worker may hold a Spark JVM child from an earlier test, whose
    CPU would rightly count as ``jvm`` (CI once saw 0.6 s of it).
    """
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", probe, *args], cwd=root, check=True,
                          capture_output=True, text=True, timeout=60)
    seconds: dict[str, float] = json.loads(done.stdout)
    return seconds


_CPU_USE_PROBE = """
import json, subprocess, sys, time
from benchmarks.proc_tree import CpuUse

def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

burn(0.4)  # before the block: not counted
busy = ("import time\\nend = time.process_time() + 0.5\\n"
        "while time.process_time() < end: pass\\nprint('done', flush=True)\\ntime.sleep(60)")
child = subprocess.Popen([sys.executable, "-c", busy], stdout=subprocess.PIPE, text=True)
try:
    with CpuUse() as cpu:  # the child started before the block, and burns inside it
        burn(0.3)
        assert child.stdout.readline() == "done\\n"
finally:
    child.kill()  # still alive at the block's end, so read there
    child.wait()
print(json.dumps(cpu.seconds))
"""


def test_cpu_use_counts_the_block_by_process_kind():
    seconds = _probe_seconds(_CPU_USE_PROBE)
    assert 0.3 <= seconds["driver"] < 0.6, seconds  # this process, the 0.4 s before not
    assert 0.5 <= seconds["workers"] < 0.9, seconds  # a live Python child
    assert seconds["jvm"] == 0.0, seconds  # no JVM in this process tree


_BROKER_PROBE = """
import json, subprocess, sys
from benchmarks.proc_tree import CpuUse

busy = ("import sys, time\\n"
        "def burn(s):\\n    end = time.process_time() + s\\n"
        "    while time.process_time() < end: pass\\n"
        "burn(0.4)\\nprint('warm', flush=True)\\nsys.stdin.readline()\\n"
        "burn(0.5)\\nprint('done', flush=True)\\nsys.stdin.readline()")
broker = subprocess.Popen([sys.executable, "-c", busy], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True)
try:
    assert broker.stdout.readline() == "warm\\n"  # before the block: not counted
    with CpuUse(broker_pids=[broker.pid]) as cpu:
        broker.stdin.write("go\\n")
        broker.stdin.flush()
        assert broker.stdout.readline() == "done\\n"
finally:
    broker.kill()
    broker.wait()
print(json.dumps(cpu.seconds))
"""


def test_cpu_use_counts_the_brokers_processes_apart():
    # The broker's pids count as ``broker`` (here a child, so also in the tree: counted once).
    seconds = _probe_seconds(_BROKER_PROBE)
    assert 0.5 <= seconds["broker"] < 0.85, seconds  # inside the block only
    assert seconds["workers"] == 0.0, seconds  # not counted a second time as a Python worker


def test_the_latency_benchmark_finds_the_local_broker_and_reads_its_cpu(
        kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """``local_broker_pids`` names the embedded broker's processes by its home and address
    (the session's broker: a ``broker*`` folder of this session's base temp); ``cpu_seconds``
    sums what they spent, a gone process counting 0."""
    import subprocess
    import sys

    import psutil

    from benchmarks.proc_tree import cpu_seconds, local_broker_pids

    homes = sorted(tmp_path_factory.getbasetemp().glob("broker*"))
    found = {tuple(pids) for home in homes if (pids := local_broker_pids(kafka_bootstrap, home))}
    # one broker, though a home may be linked twice
    assert len(found) == 1, (homes, "the session's broker runs on this machine")
    broker = list(found.pop())
    assert all("kafka.Kafka" in psutil.Process(pid).cmdline() for pid in broker)
    assert local_broker_pids("127.0.0.1:1", homes[0]) == []
    assert cpu_seconds(broker) > 0.0

    busy = ("import sys, time\nend = time.process_time() + 0.4\n"
            "while time.process_time() < end: pass\nprint('done', flush=True)\n"
            "sys.stdin.readline()")
    child = subprocess.Popen([sys.executable, "-c", busy], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "done\n"
        spent = cpu_seconds([child.pid])  # alive, its burning done
    finally:
        child.kill()
        child.wait()
    assert 0.4 <= spent < 1.0, spent
    assert cpu_seconds([child.pid]) == 0.0  # reaped: gone


_EXECUTOR_PROBE = """
import json, subprocess, sys
from benchmarks.proc_tree import CpuUse

burn = ("import subprocess, sys, time\\n"
        "kid = subprocess.Popen([sys.executable, '-c', "
        "'import time\\\\nend = time.process_time() + 0.4\\\\nwhile time.process_time() < end: "
        "pass\\\\nprint(\\\\'kid\\\\', flush=True)\\\\ntime.sleep(60)'])\\n"
        "end = time.process_time() + 0.3\\nwhile time.process_time() < end: pass\\n"
        "print('done', flush=True)\\nkid.wait()")
marks = ["org.apache.spark.executor.CoarseGrainedExecutorBackend", "--app-id"]
# Launched through a process that exits at once: like a Worker's executors, outside this tree.
launch = ("import subprocess, sys\\n"
          "print(subprocess.Popen(sys.argv[1:], start_new_session=True).pid, flush=True)")


def start(app):
    p = subprocess.Popen([sys.executable, "-c", launch, sys.executable, "-c", burn, *marks, app],
                         stdout=subprocess.PIPE, text=True)
    pid = int(p.stdout.readline())
    p.wait()
    return pid, p.stdout


(ours, ours_out), (theirs, theirs_out) = start(sys.argv[1]), start("app-other")
try:
    with CpuUse(sys.argv[1]) as cpu:  # read once both of ours have burnt, and theirs too
        assert {ours_out.readline(), ours_out.readline()} == {"done\\n", "kid\\n"}
        assert {theirs_out.readline(), theirs_out.readline()} == {"done\\n", "kid\\n"}
finally:
    import os, signal
    for pid in (ours, theirs):
        os.killpg(pid, signal.SIGKILL)
print(json.dumps(cpu.seconds))
"""


def test_cpu_use_counts_a_standalone_applications_executors():
    # Processes outside the tree whose command line names an executor of the application (a
    # standalone cluster's executors are children of its Worker, not of the driver).
    seconds = _probe_seconds(_EXECUTOR_PROBE, "app-20261129-0001")
    assert 0.3 <= seconds["executors"] < 0.8, seconds  # from its start, only ours
    assert 0.4 <= seconds["executor_workers"] < 0.8, seconds  # its Python child
    assert seconds["workers"] == 0.0, seconds  # neither is in this process's own tree


def test_peak_rss_counts_the_children_too():
    import subprocess
    import sys

    import psutil

    from benchmarks.proc_tree import PeakRss

    hold = ("import time\nb = bytearray(200 * 2**20)\nb[::4096] = b'x' * len(b[::4096])\n"
            "print('ready', flush=True)\ntime.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        with PeakRss() as rss:
            own = psutil.Process().memory_info().rss
            time.sleep(2 * PeakRss.SAMPLE_S)
    finally:
        child.kill()
        child.wait()
    assert rss.peak_bytes - own >= 200 * 2**20, (rss.peak_bytes, own)


def test_bench_job_keeps_every_micro_batch_with_its_steps(tmp_path):
    from benchmarks.bench_job import _batch_figures

    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_bytes(b"x" * 2048)
    progress = [
        {"batchId": b, "numInputRows": rows, "durationMs": {"triggerExecution": ms},
         **({"revise": {"collect_ms": ms - 100, "kafka_ms": 60, "delta_ms": 40}} if rows else {})}
        for b, rows, ms in [(0, 5_000, 9_000), (1, 5_000, 2_000), (2, 0, 300), (3, 8, 6_000)]
    ]
    figures = _batch_figures(progress, tmp_path)
    assert [(m["batch_id"], m["rows"], m["seconds"]) for m in figures["micro_batches"]] == [
        (0, 5_000, 9.0), (1, 5_000, 2.0), (2, 0, 0.3), (3, 8, 6.0)]
    assert figures["micro_batches"][3]["collect_ms"] == 5_900  # the close-all's own steps
    assert "kafka_ms" not in figures["micro_batches"][2]  # an empty batch has none
    # The means leave out the first data batch and batches of 1,000 records or fewer.
    assert figures["batch_s_first5"] == figures["batch_s_last5"] == 2.0
    assert figures["checkpoint_mb"] == round(2048 / 2**20, 1)


def _children(tmp_path, monkeypatch, variants, **options):
    """Run ``bench_job._child`` for each variant with ``subprocess.run`` recorded, not run.

    Returns the rows and each child's (command, environment).
    """
    import argparse
    import subprocess

    from benchmarks import bench_job

    seen: list[tuple[list[str], dict[str, str]]] = []

    def run(cmd, **kwargs):
        seen.append((cmd, kwargs["env"]))
        return subprocess.CompletedProcess(cmd, 0, 'BENCH {"seconds": 1}\n', "")

    monkeypatch.setattr(bench_job.subprocess, "run", run)
    args = argparse.Namespace(**{"native_max_poll_records": None, "jvm_threads": False,
                                 "baseline": None, "java_home": None, "batch": 10, "shards": 2,
                                 "window": "tumbling:10s", "grace": "10s", **options})
    rows = [bench_job._child(args, v, "t", tmp_path, "b:1") for v in variants]
    return rows, seen


def _variant_of(cmd: list[str]) -> str:
    return cmd[cmd.index("--variant") + 1]


def test_bench_job_runs_a_c1_variant_with_only_the_quick_compiler(tmp_path, monkeypatch):
    from benchmarks import variants

    monkeypatch.setenv("REVISE_JVM_OPTIONS", "-Xss4m")
    rows, seen = _children(tmp_path, monkeypatch,
                           ["revision-eos", "revision-eos+c1", "revision-eos+c1+pgc"])
    assert [r["variant"] for r in rows if r] == [
        "revision-eos", "revision-eos+c1", "revision-eos+c1+pgc"]
    (_, plain_env), (c1_cmd, c1_env), (both_cmd, both_env) = seen
    assert plain_env["REVISE_JVM_OPTIONS"] == "-Xss4m"
    assert c1_env["REVISE_JVM_OPTIONS"] == "-Xss4m -XX:TieredStopAtLevel=1"
    assert _variant_of(c1_cmd) == "revision-eos"
    assert both_env["REVISE_JVM_OPTIONS"] == (
        "-Xss4m -XX:+UseParallelGC -XX:TieredStopAtLevel=1")
    assert _variant_of(both_cmd) == "revision-eos"
    pairs = variants.pairs(["revision-eos", "revision-eos+c1", "spark-native-kafka"])
    assert {("revision-eos+c1", "revision-eos"),
            ("revision-eos+c1", "spark-native-kafka"),
            ("revision-eos", "spark-native-kafka")} <= set(pairs)
    pairs = variants.pairs(["revision-eos", "revision-eos+pgc", "spark-native-kafka",
                            "spark-native-kafka+pgc"])
    assert {("revision-eos+pgc", "revision-eos"),
            ("spark-native-kafka+pgc", "spark-native-kafka"),
            ("revision-eos+pgc", "spark-native-kafka+pgc")} <= set(pairs)
    # +jit1: the JVM's own compile thresholds, against revise's doubled ones
    assert variants.split_jvm_suffixes("revision-eos+jit1") == (
        "revision-eos", ["-XX:CompileThresholdScaling=1"])
    assert ("revision-eos+jit1", "revision-eos") in variants.pairs(
        ["revision-eos", "revision-eos+jit1"])


def test_bench_job_runs_a_jdk_variant_on_the_other_java(tmp_path, monkeypatch):
    from benchmarks import variants

    monkeypatch.setenv("JAVA_HOME", "/jdk17")
    monkeypatch.setenv("PATH", "/usr/bin")
    rows, seen = _children(tmp_path, monkeypatch,
                           ["revision-eos", "revision-eos+jdk", "revision-eos+jdk+c1"],
                           java_home="/jdk25")
    assert [r["variant"] for r in rows if r] == [
        "revision-eos", "revision-eos+jdk", "revision-eos+jdk+c1"]
    (_, plain_env), (jdk_cmd, jdk_env), (c1_cmd, c1_env) = seen
    assert (plain_env["JAVA_HOME"], plain_env["PATH"]) == ("/jdk17", "/usr/bin")
    assert (jdk_env["JAVA_HOME"], jdk_env["PATH"]) == ("/jdk25", "/jdk25/bin:/usr/bin")
    assert _variant_of(jdk_cmd) == _variant_of(c1_cmd) == "revision-eos"
    assert c1_env["JAVA_HOME"] == "/jdk25" and "TieredStopAtLevel=1" in c1_env["REVISE_JVM_OPTIONS"]
    assert {("revision-eos+jdk", "revision-eos"),
            ("revision-eos+jdk", "spark-native-kafka+jdk")} <= set(variants.pairs(
                ["revision-eos", "revision-eos+jdk", "spark-native-kafka+jdk"]))
    rows, _ = _children(tmp_path, monkeypatch, ["revision-eos+jdk"])  # no --java-home
    assert rows == [None]


_THREADS_PROBE = """
import ctypes, sys, threading, time
libc = ctypes.CDLL(None)

burnt = threading.Semaphore(0)

def burn(name, seconds):
    libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME: this thread's /proc name
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    burnt.release()
    time.sleep(60)  # alive at the block's end: read there (a thread that ended is not)

for a in (("C2 CompilerThre", 0.6), ("Executor task l", 0.3), ("misc", 0.2)):
    threading.Thread(target=burn, args=a, daemon=True).start()
for _ in range(3):
    burnt.acquire()
print("done", flush=True)
time.sleep(60)
"""


def test_jvm_thread_cpu_sums_each_group_of_thread_names():
    import subprocess
    import sys

    from benchmarks.jvm_threads import JvmThreadCpu, group_of

    names = ("C1 CompilerThre", "GC Thread#3", "G1 Conc#0", "Executor task l",
             "Executor task i", "stateConnection", "stream executio", "Thread-12")
    assert [group_of(n) for n in names] == [
        "jit", "gc", "gc", "tasks", "tasks", "state_server", "stream", "other"]
    # Stand-in JVMs: Python children whose threads carry JVM thread names, and burn inside the
    # block (the 15-character names are what Linux keeps of the JVM's). The second one stands
    # for a broker's JVM: excluded by pid, its threads count nowhere.
    children: list[subprocess.Popen[str]] = []
    excluded: set[int] = set()
    try:
        with JvmThreadCpu(is_jvm=lambda name: name.startswith("python"),
                          exclude=excluded) as threads:
            for _ in range(2):
                children.append(subprocess.Popen([sys.executable, "-c", _THREADS_PROBE],
                                                 stdout=subprocess.PIPE, text=True))
            excluded.add(children[1].pid)
            for child in children:
                assert child.stdout is not None and child.stdout.readline() == "done\n"
    finally:
        for child in children:  # killed after the block, whose end reads them
            child.kill()
            child.wait()
    s = threads.seconds
    assert 0.5 <= s["jit"] <= 0.9, s
    assert 0.2 <= s["tasks"] <= 0.5, s
    assert s["gc"] == s["state_server"] == s["stream"] == 0.0, s
    assert s["sampled"] >= s["jit"] + s["tasks"], s


_ARGPARSE_PROBE = """
import argparse, importlib, json, sys

class Parsed(Exception):
    pass

parse = argparse.ArgumentParser.parse_args

def parse_and_stop(self, args=None, namespace=None):
    # argparse exits (status 2) on an option or value it does not accept; stop before any work
    raise Parsed(vars(parse(self, args, namespace)))

argparse.ArgumentParser.parse_args = parse_and_stop
verdicts = []
for module, argv in json.loads(sys.argv[1]):
    sys.argv = [module, *argv]  # for a main() that reads sys.argv itself
    main = importlib.import_module(module).main
    try:
        main(argv) if main.__code__.co_argcount else main()
        verdicts.append(None)
    except Parsed as parsed:
        verdicts.append(parsed.args[0])
    except SystemExit as exit:
        verdicts.append({"exit": exit.code})
print(json.dumps(verdicts, default=str))
"""


def _commands_in(doc: str) -> list[tuple[str, list[str]]]:
    """Every ``python -m benchmarks.X …`` command of a Markdown text: fenced (with ``\\``
    continuations and ``#`` comments) or in an inline code span."""
    import re
    import shlex

    texts = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", doc, flags=re.S | re.M):
        texts += block.replace("\\\n", " ").splitlines()
    texts += re.findall(r"`(python -m benchmarks\.[^`]*)`", doc)
    commands = []
    for text in texts:
        if "python -m benchmarks." in text:
            words = shlex.split(text[text.index("python -m benchmarks."):], comments=True)
            commands.append((words[2], words[3:]))
    return commands


def test_every_benchmarks_command_in_the_docs_is_one_its_module_accepts():
    import json
    import subprocess
    import sys
    from pathlib import Path

    from benchmarks.variants import ALL_VARIANTS, BASELINE_SUFFIX, JDK_SUFFIX, split_jvm_suffixes

    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "BENCHMARKS.md").read_text()
    commands = _commands_in(doc)
    named = {module.split(".")[1] for module, _ in commands}
    assert {"bench_engine", "bench_job", "latency"} <= named, named
    done = subprocess.run([sys.executable, "-c", _ARGPARSE_PROBE, json.dumps(commands)],
                          cwd=root, check=True, capture_output=True, text=True, timeout=120)
    for (module, argv), parsed in zip(commands, json.loads(done.stdout), strict=True):
        assert parsed is not None and "exit" not in parsed, (module, argv, parsed)
        if module == "benchmarks.bench_job":
            variants = {split_jvm_suffixes(v.replace(JDK_SUFFIX, ""))[0]
                        .removesuffix(BASELINE_SUFFIX) for v in parsed["variants"].split(",")}
            assert variants <= set(ALL_VARIANTS), (argv, variants - set(ALL_VARIANTS))
    # and every module of benchmarks/ is described there, by name
    modules = {p.stem for p in (root / "benchmarks").glob("*.py") if p.stem != "__init__"}
    assert {m for m in modules if f"`{m}`" not in doc} == set()


def test_bench_query_writes_its_tables_in_the_tables_schema(tmp_path):
    # The tables bench_query measures are written by the job's own Delta writer, in every
    # field of the revisions schema (a field added to the schema and not to the benchmark
    # broke it once).
    import pyarrow as pa
    from deltalake import DeltaTable

    from benchmarks.bench_query import build

    path = str(tmp_path / "delta")
    written = build(path, windows=2_000, revisions_per_window=3, batches_per_round=2, late=12,
                    dead=6)
    assert written == 6_000
    revisions = pa.table(DeltaTable(f"{path}/revisions").scan())
    latest = pa.table(DeltaTable(f"{path}/latest").scan())
    assert revisions.num_rows == 6_000
    assert latest.num_rows == 2_000
    assert set(latest.column("timing").to_pylist()) == {"FINAL"}
    assert set(latest.column("completeness").to_pylist()) == {1.0}


def _job_events(job: int, start: int, stages: list[tuple[int, int, int, list[tuple[int, int,
                                                                             int]]]]) -> list:
    """A job's events: stages of ``(id, submitted, completed, [(launch, finish, run_ms)])``."""
    events: list[dict] = [{"Event": "SparkListenerJobStart", "Job ID": job,
                           "Submission Time": start, "Stage IDs": [s[0] for s in stages]}]
    for stage, submitted, completed, tasks in stages:
        events += [{"Event": "SparkListenerTaskEnd", "Stage ID": stage,
                    "Task Info": {"Launch Time": a, "Finish Time": b},
                    "Task Metrics": {"Executor Run Time": run}} for a, b, run in tasks]
        events.append({"Event": "SparkListenerStageCompleted", "Stage Info": {
            "Stage ID": stage, "Submission Time": submitted, "Completion Time": completed}})
    end = max(s[2] for s in stages)
    events.append({"Event": "SparkListenerJobEnd", "Job ID": job, "Completion Time": end + 1})
    return events


def test_stage_times_groups_jobs_by_shape_with_per_stage_medians(tmp_path):
    import json

    from benchmarks.stage_times import read_events, summarize

    events = []
    for j, slow in enumerate((100, 180, 140)):  # three micro-batches: 4 tasks, then 2
        t = 10_000 * j
        events += _job_events(j, t, [
            (2 * j, t, t + 60, [(t, t + 30, 25)] * 2 + [(t + 30, t + 58, 20)] * 2),
            (2 * j + 1, t + 60, t + 70 + slow, [(t + 62, t + 62 + slow, slow - 5),
                                                 (t + 62, t + 80, 15)]),
        ])
    events += _job_events(9, 50_000, [(99, 50_000, 50_200, [(50_001, 50_190, 180)])])
    events.append({"Event": "SparkListenerJobStart", "Job ID": 10,  # never ended: left out
                   "Submission Time": 60_000, "Stage IDs": [100]})
    folder = tmp_path / "app-1"
    folder.mkdir()
    (folder / "events_1_app-1").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    (folder / ".hidden").write_text("not json")
    shapes = summarize(read_events(tmp_path))
    assert [(s.tasks, s.jobs) for s in shapes] == [((4, 2), 3), ((1,), 1)]
    batch = shapes[0]
    assert batch.job_ms == 211  # the median of jobs of 171, 251 and 211 ms
    assert batch.stage_ms == (60, 150)
    assert batch.longest_task_ms == (30, 140)  # the first of the equally long tasks
    assert batch.longest_run_ms == (25, 135)
    assert "3 jobs, median 211 ms" in batch.line()


@pytest.mark.spark
def test_bench_parse_plans_classify_beside_the_java_udf_alone(spark, capsys):
    import re

    from benchmarks import bench_parse

    # 0: on clean records the Java UDF's columns alone give classify's rows
    assert bench_parse.main(["--records", "2000", "--rounds", "2", "--plan", "2"]) == 0
    out = capsys.readouterr().out
    medians = dict(re.findall(r"^(this|java-only): median planning ([\d.]+) ms$", out, re.M))
    assert set(medians) == {"this", "java-only"}, out
    assert all(float(ms) > 0 for ms in medians.values()), out
    assert re.search(r"^this - java-only: -?[\d.]+ ms a planning$", out, re.M), out
    with pytest.raises(SystemExit):  # the bound is classify's; --fields has its own UDF
        bench_parse.main(["--plan", "2", "--fields"])
