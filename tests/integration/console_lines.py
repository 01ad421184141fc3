"""The shapes of the lines revise itself prints on the console: an allow-list, not a deny-list.

Everything else (Spark's, the JVM's, the Python workers', py4j's, librdkafka's lines) belongs in
the command's log file (revise/infra/logfile.py). :func:`foreign_lines` returns the lines of a
command's combined stdout and stderr that match none of these shapes, and :func:`log_file` the
log file the command announced.
"""

from __future__ import annotations

import re
from pathlib import Path

LOG_RECORD = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (INFO|WARNING|ERROR|CRITICAL) "
    r"revise(\.(?!kafka\b)[a-z_]+)* \S.*")
"""A record of revise's own loggers (``revise``, ``revise.job``, ``revise.delta`` …; librdkafka's
``revise.kafka`` is not revise's own line)."""

ANNOUNCED = re.compile(r"revise: Spark's, the JVM's and the Kafka clients' lines go to (\S+) ")

REVISE_LINES = (
    LOG_RECORD,
    re.compile(r"revise( \w+)?: \S.*"),  # notes and errors: "revise run: failed: …"
    re.compile(r""),  # the demo's blank lines between sections
    # revise demo, section by section (revise/demo/run.py)
    re.compile(r"── \d\. [a-z].* ─+"),
    re.compile(r"Apache Kafka( \(KRaft\))? at \S+(, pid \d+, data in \S+| \(\S+\))"),
    re.compile(r"\d+ events over \d+ keys, \d+s of event time, to topic \S+"),
    re.compile(r"  \d+ in order \(disorder up to \d+s\), \d+ delayed by a heavy tail .*, "
               r"\d+ malformed"),
    re.compile(r"  e\.g\. .+"),
    re.compile(r"revise run --once --window \S+ --grace \S+ --query-id \S+ "
               r"--max-records-per-batch \d+"),
    re.compile(r"  batch +\d+: +\d+ records, watermark \S+"),
    re.compile(r"done in \d+s: \d+ micro-batches"),
    re.compile(r"events in +\d+"),
    re.compile(r"revisions out +\d+  \(EARLY \d+, LATE \d+, FINAL \d+\)"),
    re.compile(r"windows closed +\d+  \([\d.]+ revisions per window\)"),
    re.compile(r"too-late records \d+  \(.*\)"),
    re.compile(r"dead letters +\d+"),
    re.compile(r" +\d+  \S.*"),  # one dead-letter reason and its count
    re.compile(r"changelog \(read_committed\): \d+ revisions, \d+ duplicated"),
    re.compile(r"Delta revisions: +\d+ revisions, \d+ duplicated"),
    re.compile(r"same revisions in both: +(yes|NO)"),
    re.compile(r"key \S+, window \[\d+, \d+\)"),
    re.compile(r"  rev timing final count .*"),
    re.compile(r" +\d+ (EARLY|LATE|FINAL) +(True|False) .*"),
    re.compile(r"Delta tables: \S+"),
    re.compile(r"Changelog topic: \S+ on \S+"),
    re.compile(r'revise query ".*" --delta-path \S+'),
    re.compile(r"(OK|FAILED): demo finished in \d+s"),
)


def foreign_lines(output: str) -> list[str]:
    """The lines of ``output`` that are none of :data:`REVISE_LINES`."""
    return [line for line in output.splitlines()
            if not any(shape.fullmatch(line) for shape in REVISE_LINES)]


def log_file(output: str) -> Path:
    """The log file a command announced in ``output`` (exactly once)."""
    found = ANNOUNCED.findall(output)
    assert len(found) == 1, f"the log file announced {len(found)} times:\n{output}"
    return Path(found[0])


SPARK_LOG4J = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|ERROR|INFO) \w+: ", re.MULTILINE)
"""A line of Spark's log4j console layout (``26/11/28 19:33:20 WARN NativeCodeLoader: …``)."""
