"""The transactional Kafka changelog: one Kafka transaction per micro-batch.

Guarantee (SPEC §5): a ``read_committed`` consumer of the changelog topic sees every revision
exactly once, across crashes, restarts and zombie instances, and the revisions of one window in
increasing ``revision`` order. How:

- The producer's ``transactional.id`` is ``revise-<query_id>``. ``init_transactions`` on open
  fences every older producer with that id (its next produce/commit fails with a fatal fenced
  error) and aborts the transaction it left open.
- Each micro-batch's revisions, too-late records, dead letters *and* a progress marker
  ``(query_id, batch_id)`` are written in one transaction. On open the last committed marker is
  read back (``read_committed``), so a batch replayed after a crash is skipped, not written twice.
- Kafka key of a revision = canonical JSON ``{"key","window_start_ms","window_end_ms"}``: the same
  bytes for a window every time, so all its revisions go to one partition in produce order and log
  compaction keeps its latest revision.

Trace: ``commit_batch(7, revs, late, dead)`` → begin → 3 revisions + 1 late + marker
``{"query_id":"q","batch_id":7,…}`` → commit → ``CommitResult(batch_id=7, skipped=False,
messages=5, …)``; after a crash the job replays batch 7 → ``CommitResult(7, skipped=True, …)``.

Its place in the commit of a micro-batch is step 2 of ``revise.spark.committer.BatchCommitter``
(the Delta writes, :mod:`sinks.delta_tables`, are step 3). The JSON is :mod:`sinks.kafka.codec`,
reading back :mod:`sinks.kafka.reader`, topics :mod:`sinks.kafka.admin`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any, Final

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer

from revise.records import DEAD_LETTER_SCHEMA, LATE_SCHEMA
from sinks.kafka.admin import ensure_compacted_topic
from sinks.kafka.changelog_config import (
    DEFAULT_PRODUCER_CONFIG,
    ChangelogConfig,
    CommitResult,
    Progress,
)
from sinks.kafka.codec import (
    encode_dead_letters,
    encode_late,
    encode_revisions,
    require_schema,
)
from sinks.kafka.errors import (
    ChangelogCommitError,
    ChangelogError,
    ProducerFencedError,
    is_fenced,
    kafka_error,
)
from sinks.kafka.logs import client_logging
from sinks.kafka.reader import by_partition_offset, read_committed

__all__ = ["TransactionalChangelog", "read_last_progress"]

_COMMIT_TIMEOUT_S: Final = 60.0
# --------------------------------------------------------------------------------------------
# The transactional changelog
# --------------------------------------------------------------------------------------------


class TransactionalChangelog:
    """Writes each micro-batch's revisions, late records and dead letters in one transaction.

    Usage::

        with TransactionalChangelog(cfg) as log:       # open(): fence older instances
            log.last_committed_batch                   # e.g. 6 after a restart
            log.commit_batch(7, revisions, late, dead)

    With ``transactional=False`` the same messages (progress marker included) go through a
    plain idempotent producer, flushed per batch: **at-least-once** — nothing is fenced, no
    progress is read, a replayed batch is written again. It exists to measure what exactly-once
    costs.
    """

    def __init__(self, config: ChangelogConfig) -> None:
        self.config = config
        self._producer: Producer | None = None
        self._last: Progress | None = None
        self._fenced = False

    # ---- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> TransactionalChangelog:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def open(self, *, timeout_s: float = 60.0) -> TransactionalChangelog:
        """Create the producer; in transactional mode fence older instances and read progress.

        ``init_transactions`` bumps the producer epoch of ``revise-<query_id>``: any older
        producer with that id is fenced and its open transaction aborted. Only then is the
        progress topic read (``read_committed``) for this query's last committed batch id.

        Raises:
            ProducerFencedError: another instance fenced this one during open.
            ChangelogError: the broker cannot be reached or the progress topic not read.
        """
        cfg = self.config
        conf: dict[str, Any] = {"bootstrap.servers": cfg.bootstrap_servers, **client_logging()}
        conf.update(DEFAULT_PRODUCER_CONFIG)
        if cfg.transactional:
            conf["transactional.id"] = cfg.transactional_id
        else:
            conf.pop("transaction.timeout.ms", None)
        conf.update(cfg.producer_config)
        producer = Producer(conf)
        if cfg.transactional:
            self._ensure_progress_topic(timeout_s)
            try:
                producer.init_transactions(timeout_s)
            except KafkaException as e:
                err = kafka_error(e)
                if is_fenced(err):
                    raise self._fenced_error(err) from e
                msg = f"init_transactions for {cfg.transactional_id!r} failed: {err or e}"
                raise ChangelogError(msg) from e
            self._last = self._read_last_committed(timeout_s)
        self._producer = producer
        return self

    def close(self, timeout_s: float = 30.0) -> None:
        """Flush (non-transactional) and release the producer.

        An open transaction is left to the broker: aborted at ``transaction.timeout.ms`` or by
        the next instance's ``open``.
        """
        p, self._producer = self._producer, None
        if p is not None and not self.config.transactional and not self._fenced:
            p.flush(timeout_s)

    @property
    def last_committed_batch(self) -> int | None:
        """The highest batch id committed by this query, or None.

        None when nothing was committed yet, and always None when not transactional (no
        progress is tracked then).
        """
        return None if self._last is None else self._last.batch_id

    # ---- the commit ------------------------------------------------------------------------

    # Longer than ~60 lines: the docstring carries steps 2a-2e of the commit sequence and
    # the body follows them in order, numbered.
    def commit_batch(
        self,
        batch_id: int,
        revisions: pa.Table,
        late: pa.Table,
        dead_letters: pa.Table,
        *,
        emitted_at_ms: int | None = None,
        before_commit: Callable[[], None] | None = None,
    ) -> CommitResult:
        """Commit one micro-batch to Kafka, exactly once: step 2 of the commit sequence.

        The numbers are those of the one numbering of the commit sequence
        (``revise.spark.committer.BatchCommitter``); the same numbers mark the code:

        2a. If ``batch_id <= last committed batch`` this is a replay after a crash: write
            nothing, return ``skipped=True``.
        2b. Begin a transaction.
        2c. Produce the revisions to the changelog topic (key = the window, so one window's
            revisions stay in one partition, in order), too-late records to the late topic and
            dead letters to the dead-letter topic (topics that are None are skipped). A full
            local queue (BufferError) is drained by polling, then the message is retried.
        2d. Produce the progress marker ``(query_id, batch_id, counts)`` to the progress topic.
        2e. Commit. On any error: abort the transaction (nothing of the batch becomes visible)
            and raise :class:`ChangelogCommitError`; if this producer was fenced by another
            instance with the same query id, raise :class:`ProducerFencedError` instead.

        The Delta writes (step 3) come after this and are idempotent on their own.
        With ``transactional=False`` steps 2a, 2b and 2e are a flush instead (at-least-once).

        Args:
            batch_id: The Spark micro-batch id (monotonically increasing per query).
            revisions: Revisions (SPEC §4 fields) in emission order.
            late: Too-late records (SPEC §6 fields).
            dead_letters: Dead letters (SPEC §6 fields).
            emitted_at_ms: The revisions' ``emitted_at_ms`` (recorded in the marker, so a
                replay can stamp the same value into Delta).
            before_commit: Called between 2d and 2e, inside the open transaction (crash
                tests kill the process there).

        Returns:
            A :class:`CommitResult`.

        Raises:
            ProducerFencedError: another instance with this query id has taken over.
            ChangelogCommitError: the transaction failed and was aborted.
        """
        t0 = time.perf_counter()
        cfg = self.config
        p = self._producer
        if p is None:
            msg = "commit_batch before open(); use `with TransactionalChangelog(cfg) as log:`"
            raise ChangelogError(msg)
        if self._fenced:
            raise self._fenced_error(None)
        # 2a. a replay of a committed batch writes nothing
        last = self._last
        if cfg.transactional and last is not None and batch_id <= last.batch_id:
            known = last.emitted_at_ms if batch_id == last.batch_id else None
            return CommitResult(batch_id, True, 0, time.perf_counter() - t0, known)
        # Check before the transaction opens: a bad table never opens one.
        require_schema(revisions, cfg.revision_schema, "revisions")
        require_schema(late, LATE_SCHEMA, "late")
        require_schema(dead_letters, DEAD_LETTER_SCHEMA, "dead-letter")
        outputs: list[tuple[str, pa.Table, _Encoder]] = [
            (cfg.changelog_topic, revisions,
             lambda t: encode_revisions(t, cfg.revision_schema))
        ]
        if cfg.late_topic:
            outputs.append((cfg.late_topic, late, encode_late))
        if cfg.dead_letter_topic:
            outputs.append((cfg.dead_letter_topic, dead_letters, encode_dead_letters))
        marker = Progress(
            cfg.query_id, batch_id, revisions.num_rows, late.num_rows, dead_letters.num_rows,
            int(time.time() * 1000), emitted_at_ms,
        )
        begun = False
        try:
            # 2b. begin
            if cfg.transactional:
                p.begin_transaction()
                begun = True
            # 2c. revisions, late records, dead letters, encoded on ``_ENCODE_THREADS`` helper
            # threads ahead of the producer (Arrow's kernels release the GIL)
            n = 0
            with ThreadPoolExecutor(_ENCODE_THREADS, thread_name_prefix="revise-encode") as pool:
                for topic, table, encode in outputs:
                    for keys, values in _encoded_chunks(pool, table, encode):
                        n += self._produce_all(p, topic, keys, values)
            # 2d. the progress marker
            n += self._produce_all(
                p, cfg.progress_topic, [cfg.query_id.encode()], [marker.to_json()]
            )
            if before_commit is not None:
                before_commit()
            # 2e. commit
            if cfg.transactional:
                self._commit(p)
            else:
                self._flush(p)
        except ProducerFencedError:
            raise
        except Exception as e:
            err = kafka_error(e)
            if is_fenced(err):
                self._fenced = True
                raise self._fenced_error(err) from e
            if begun:
                self._abort(p, e)
            msg = (
                f"batch {batch_id} of query {cfg.query_id!r} was not committed to "
                f"{cfg.changelog_topic!r} ({type(e).__name__}: {err or e}); the transaction "
                "was aborted, nothing of it is visible; restart the job to retry the batch"
            )
            raise ChangelogCommitError(msg) from e
        if cfg.transactional:
            self._last = marker
        return CommitResult(batch_id, False, n, time.perf_counter() - t0, emitted_at_ms)

    # ---- helpers ---------------------------------------------------------------------------

    @staticmethod
    def _produce_all(
        p: Producer, topic: str, keys: Sequence[bytes | None], values: Sequence[bytes]
    ) -> int:
        produce = p.produce
        for k, v in zip(keys, values, strict=True):
            while True:
                try:
                    produce(topic, v, k)
                    break
                except BufferError:
                    p.poll(0.05)  # the local queue is full: let librdkafka send, then retry
        p.poll(0)
        return len(values)

    def _commit(self, p: Producer) -> None:
        # A retriable commit error may be retried as is (librdkafka transactional API).
        for attempt in range(3):
            try:
                p.commit_transaction(_COMMIT_TIMEOUT_S)
                return
            except KafkaException as e:
                err = kafka_error(e)
                if err is not None and err.retriable() and attempt < 2:
                    continue
                raise

    def _flush(self, p: Producer) -> None:
        left = p.flush(_COMMIT_TIMEOUT_S)
        if left:
            msg = f"{left} message(s) not delivered within {_COMMIT_TIMEOUT_S}s"
            raise ChangelogError(msg)

    def _abort(self, p: Producer, cause: BaseException) -> None:
        try:
            p.abort_transaction(_COMMIT_TIMEOUT_S)
        except KafkaException as e:
            err = kafka_error(e)
            if is_fenced(err):
                self._fenced = True
                raise self._fenced_error(err) from cause
            msg = f"aborting the transaction of query {self.config.query_id!r} failed: {err or e}"
            raise ChangelogCommitError(msg) from cause

    def _fenced_error(self, err: KafkaError | None) -> ProducerFencedError:
        self._fenced = True
        q = self.config.query_id
        detail = f" ({err.str()})" if err is not None else ""
        msg = (
            f"another instance with query id {q!r} has taken over (transactional.id "
            f"{self.config.transactional_id!r} was fenced){detail}; this instance must stop — "
            "run only one job per query id"
        )
        return ProducerFencedError(msg)

    def _ensure_progress_topic(self, timeout_s: float) -> None:
        ensure_compacted_topic(self.config.bootstrap_servers, self.config.progress_topic,
                               timeout_s=timeout_s, client_config=self.config.admin_config)

    def _read_last_committed(self, timeout_s: float) -> Progress | None:
        cfg = self.config
        return read_last_progress(cfg.bootstrap_servers, cfg.progress_topic, cfg.query_id,
                                  timeout_s=timeout_s, client_config=cfg.consumer_config)


def read_last_progress(bootstrap_servers: str, progress_topic: str, query_id: str, *,
                       timeout_s: float = 30.0,
                       client_config: Mapping[str, Any] | None = None) -> Progress | None:
    """The last progress marker ``query_id`` committed to ``progress_topic`` (None: none).

    Read as ``read_committed``: the marker of the last micro-batch whose transaction committed.

    Raises:
        ChangelogError: the topic cannot be read.
    """
    key = query_id.encode()
    last: Progress | None = None
    for m in by_partition_offset(read_committed(bootstrap_servers, progress_topic,
                                                timeout_s=timeout_s, client_config=client_config)):
        value = m.value()
        if m.key() == key and value is not None:
            # The last marker in log order is the truth (batch ids only grow per query).
            last = Progress.from_json(value)
    return last


_ENCODE_CHUNK_ROWS: Final = 50_000
_ENCODE_THREADS: Final = 1
"""Chunks encoded at once while the calling thread produces the one before them. Two looked
better alone (800k revisions through one transaction to the embedded broker: 4.9–5.4 s against
5.9–8.0 s with one, 2 cores), but in the job, beside the background MERGE into ``latest``, the
close-all batch's 866k revisions took 7.2–7.9 s to produce against 5.3–5.9 s with one
(docs/lab/benchmarks-diary.md, 2026-11-27 18:43)."""
_Encoded = tuple[Sequence[bytes | None], Sequence[bytes]]
_Encoder = Callable[[pa.Table], _Encoded]


def _encoded_chunks(
    pool: ThreadPoolExecutor, table: pa.Table, encode: _Encoder
) -> Iterator[_Encoded]:
    """``encode`` of consecutive ``_ENCODE_CHUNK_ROWS``-row slices of ``table``, in table order.

    Up to ``_ENCODE_THREADS`` slices after the one yielded are encoding meanwhile on ``pool``;
    each is yielded only after every slice before it, whichever finishes first.
    """
    rows = _ENCODE_CHUNK_ROWS
    ahead: deque[Future[_Encoded]] = deque()
    for start in range(0, table.num_rows, rows):
        ahead.append(pool.submit(encode, table.slice(start, rows)))
        if len(ahead) > _ENCODE_THREADS:
            yield ahead.popleft().result()
    while ahead:
        yield ahead.popleft().result()
