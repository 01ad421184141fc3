"""The transactional changelog against the real broker: what a read_committed consumer sees."""

from __future__ import annotations

import math
from collections import defaultdict

import orjson
import pyarrow as pa
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from revise.records import REVISION_SCHEMA
from sinks.kafka import (
    ChangelogCommitError,
    ChangelogConfig,
    ProducerFencedError,
    TransactionalChangelog,
    decode_dead_letter,
    decode_late,
    decode_revision,
    encode_dead_letters,
    encode_late,
    encode_revisions,
    read_committed,
    revision_key,
)


def _cfg(kafka_bootstrap, new_topic, unique_id, *, partitions=3, **kw):
    return ChangelogConfig(
        bootstrap_servers=kafka_bootstrap,
        query_id=kw.pop("query_id", None) or unique_id("q"),
        changelog_topic=new_topic("changelog", partitions=partitions),
        late_topic=new_topic("late", partitions=1),
        dead_letter_topic=new_topic("dead", partitions=1),
        progress_topic=kw.pop("progress_topic", None) or unique_id("progress"),
        **kw,
    )


def _revisions(kafka_bootstrap, topic):
    msgs = read_committed(kafka_bootstrap, topic, timeout_s=30)
    return [decode_revision(m.value()) for m in msgs]


# ---- encoding ------------------------------------------------------------------------------


def test_encode_decode_round_trip(make_revision, make_late, make_dead, rev_table, late_table,
                                  dead_table):
    r0 = make_revision('k "quoted" é\n', 0, 10_000, 0, count=3, total=3.0)
    r1 = make_revision('k "quoted" é\n', 0, 10_000, 1, count=4, total=1e20, timing="LATE")
    r2 = make_revision("other", -10_000, 0, 0, timing="FINAL")
    revs = rev_table([r0, r1, r2])
    keys, values = encode_revisions(revs)
    assert [decode_revision(v) for v in values] == [r0, r1, r2]
    # Every SPEC §4 field is present, in schema order, nulls as null, doubles stay doubles.
    obj = orjson.loads(values[0])
    assert list(obj) == REVISION_SCHEMA.names
    assert obj["prev_count"] is None and obj["prev_mean"] is None
    assert b'"sum":3.0' in values[0]
    # The key is canonical: same bytes for the same window, the documented JSON, nothing else.
    assert keys[0] == keys[1] != keys[2]
    assert keys[0] == revision_key('k "quoted" é\n', 0, 10_000)
    assert orjson.loads(keys[2]) == {"key": "other", "window_start_ms": -10_000, "window_end_ms": 0}
    # Non-finite doubles have no JSON form: they become null rather than invalid JSON.
    nan = revs.set_column(REVISION_SCHEMA.get_field_index("mean"), "mean",
                          pa.array([math.nan, math.inf, 1.5]))
    _, nan_values = encode_revisions(nan)
    assert [orjson.loads(v)["mean"] for v in nan_values] == [None, None, 1.5]

    late = [make_late("a", 5, offset=1), make_late("b", 7, offset=2)]
    lk, lv = encode_late(late_table(late))
    assert lk == [b"a", b"b"] and [decode_late(v) for v in lv] == late
    dead = [make_dead("{oops"), make_dead(None, offset=9)]
    dk, dv = encode_dead_letters(dead_table(dead))
    assert dk == [None, None] and [decode_dead_letter(v) for v in dv] == dead
    assert encode_revisions(rev_table([])) == ([], [])


def test_encode_rejects_a_table_without_spec_fields(rev_table, make_revision):
    from sinks.kafka import ChangelogEncodeError

    with pytest.raises(ChangelogEncodeError, match="revision"):
        encode_revisions(rev_table([make_revision()]).drop_columns(["revision"]))


# ---- the transactional changelog -----------------------------------------------------------


@pytest.mark.kafka
def test_commit_batch_is_seen_exactly_once_with_its_keys(
    kafka_bootstrap, new_topic, unique_id, make_revision, make_late, make_dead, rev_table,
    late_table, dead_table,
):
    cfg = _cfg(kafka_bootstrap, new_topic, unique_id)
    revs = [make_revision(f"k{i}", 0, 10_000, 0, query_id=cfg.query_id) for i in range(20)]
    late = [make_late("k1", 3, offset=11)]
    dead = [make_dead("{bad", offset=12), make_dead(None, offset=13)]
    with TransactionalChangelog(cfg) as log:
        assert log.last_committed_batch is None
        res = log.commit_batch(0, rev_table(revs), late_table(late), dead_table(dead))
        assert (res.batch_id, res.skipped, res.messages) == (0, False, 20 + 1 + 2 + 1)
        assert log.last_committed_batch == 0

    msgs = read_committed(kafka_bootstrap, cfg.changelog_topic, timeout_s=30)
    assert sorted((decode_revision(m.value()) for m in msgs), key=lambda r: r.key) == sorted(
        revs, key=lambda r: r.key)
    for m in msgs:
        r = decode_revision(m.value())
        assert m.key() == revision_key(r.key, r.window_start_ms, r.window_end_ms)
    late_msgs = read_committed(kafka_bootstrap, cfg.late_topic, timeout_s=30)
    assert [(m.key(), decode_late(m.value())) for m in late_msgs] == [(b"k1", late[0])]
    dead_msgs = read_committed(kafka_bootstrap, cfg.dead_letter_topic, timeout_s=30)
    assert sorted(decode_dead_letter(m.value()).offset for m in dead_msgs) == [12, 13]
    assert all(m.key() is None for m in dead_msgs)
    # The progress marker, keyed by query id, in a compacted topic created by open().
    (marker,) = read_committed(kafka_bootstrap, cfg.progress_topic, timeout_s=30)
    assert marker.key() == cfg.query_id.encode()
    body = orjson.loads(marker.value())
    assert {k: body[k] for k in ("query_id", "batch_id", "revisions", "late", "dead_letters")} == {
        "query_id": cfg.query_id, "batch_id": 0, "revisions": 20, "late": 1, "dead_letters": 2}
    res = ConfigResource(ConfigResource.Type.TOPIC, cfg.progress_topic)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    conf = admin.describe_configs([res])[res].result(30)
    assert conf["cleanup.policy"].value == "compact"


@pytest.mark.kafka
def test_optional_topics_are_skipped(kafka_bootstrap, new_topic, unique_id, make_revision,
                                     make_late, rev_table, late_table, dead_table):
    cfg = ChangelogConfig(kafka_bootstrap, unique_id("q"), new_topic("changelog"),
                          progress_topic=unique_id("progress"))
    with TransactionalChangelog(cfg) as log:
        res = log.commit_batch(0, rev_table([make_revision()]), late_table([make_late()]),
                               dead_table([]))
    assert res.messages == 2  # one revision + the marker; late records had no topic
    assert len(read_committed(kafka_bootstrap, cfg.changelog_topic, timeout_s=30)) == 1


@pytest.mark.kafka
def test_replayed_batch_is_skipped(kafka_bootstrap, new_topic, unique_id, make_revision,
                                   rev_table, late_table, dead_table):
    cfg = _cfg(kafka_bootstrap, new_topic, unique_id)
    batch0 = rev_table([make_revision("a", rev=0, batch_id=0)])
    batch1 = rev_table([make_revision("a", rev=1, batch_id=1)])
    with TransactionalChangelog(cfg) as log:
        log.commit_batch(0, batch0, late_table(), dead_table())
        log.commit_batch(1, batch1, late_table(), dead_table())
    # A restarted job replays batches 0 and 1 (e.g. Spark had not recorded them), then goes on.
    with TransactionalChangelog(cfg) as log:
        assert log.last_committed_batch == 1
        assert log.commit_batch(1, batch1, late_table(), dead_table()).skipped
        assert log.commit_batch(0, batch0, late_table(), dead_table()).skipped
        res = log.commit_batch(2, rev_table([make_revision("a", rev=2, batch_id=2)]),
                               late_table(), dead_table())
        assert not res.skipped
    assert [r.revision for r in _revisions(kafka_bootstrap, cfg.changelog_topic)] == [0, 1, 2]


@pytest.mark.kafka
def test_error_mid_batch_aborts_and_raises(kafka_bootstrap, new_topic, unique_id, make_revision,
                                           make_late, make_dead, rev_table, late_table,
                                           dead_table):
    cfg = _cfg(kafka_bootstrap, new_topic, unique_id)
    revs = rev_table([make_revision(f"k{i}") for i in range(50)])
    # Revisions and late records are produced, then a dead letter larger than
    # message.max.bytes fails the batch half way.
    huge = dead_table([make_dead("x" * 2_000_000)])
    with TransactionalChangelog(cfg) as log:
        with pytest.raises(ChangelogCommitError, match="aborted"):
            log.commit_batch(0, revs, late_table([make_late()]), huge)
        assert log.last_committed_batch is None
        assert read_committed(kafka_bootstrap, cfg.changelog_topic, timeout_s=30) == []
        assert read_committed(kafka_bootstrap, cfg.late_topic, timeout_s=30) == []
        assert read_committed(kafka_bootstrap, cfg.progress_topic, timeout_s=30) == []
        # The job retries the batch (here: the same instance) and it lands once.
        log.commit_batch(0, revs, late_table([make_late()]), dead_table([make_dead()]))
    assert len(_revisions(kafka_bootstrap, cfg.changelog_topic)) == 50
    assert len(read_committed(kafka_bootstrap, cfg.late_topic, timeout_s=30)) == 1


@pytest.mark.kafka
def test_second_instance_fences_the_first(kafka_bootstrap, new_topic, unique_id, make_revision,
                                          rev_table, late_table, dead_table):
    cfg = _cfg(kafka_bootstrap, new_topic, unique_id)

    def batch(b):
        return rev_table([make_revision(f"k{i}", rev=b, batch_id=b) for i in range(5)])

    first = TransactionalChangelog(cfg).open()
    first.commit_batch(0, batch(0), late_table(), dead_table())
    second = TransactionalChangelog(cfg).open()  # same query id: takes over
    assert second.last_committed_batch == 0
    with pytest.raises(ProducerFencedError, match=f"query id '{cfg.query_id}' has taken over"):
        first.commit_batch(1, batch(1), late_table(), dead_table())
    with pytest.raises(ProducerFencedError):  # and stays fenced
        first.commit_batch(2, batch(2), late_table(), dead_table())
    second.commit_batch(0, batch(0), late_table(), dead_table())  # replay: skipped
    second.commit_batch(1, batch(1), late_table(), dead_table())
    first.close()
    second.close()
    seen = [(r.key, r.revision) for r in _revisions(kafka_bootstrap, cfg.changelog_topic)]
    assert sorted(seen) == sorted((f"k{i}", b) for i in range(5) for b in (0, 1))


@pytest.mark.kafka
def test_revisions_of_a_window_stay_in_one_partition_in_order(
    kafka_bootstrap, new_topic, unique_id, make_revision, rev_table, late_table, dead_table,
):
    cfg = _cfg(kafka_bootstrap, new_topic, unique_id, partitions=4)
    windows = [(f"key-{i}", s) for i in range(12) for s in (0, 10_000)]
    with TransactionalChangelog(cfg) as log:
        for b in range(4):
            log.commit_batch(b, rev_table([make_revision(k, s, s + 10_000, b, batch_id=b)
                                           for k, s in windows]), late_table(), dead_table())
    by_window: dict[bytes, list[tuple[int, int, int]]] = defaultdict(list)
    for m in read_committed(kafka_bootstrap, cfg.changelog_topic, timeout_s=30):
        by_window[m.key()].append((m.partition(), m.offset(), decode_revision(m.value()).revision))
    assert len(by_window) == len(windows)
    used = set()
    for entries in by_window.values():
        assert len({p for p, _, _ in entries}) == 1  # one partition per window
        used |= {p for p, _, _ in entries}
        assert [rev for _, _, rev in sorted(entries)] == [0, 1, 2, 3]  # offset order = revisions
    assert len(used) > 1  # and windows do spread over partitions


@pytest.mark.kafka
def test_last_committed_batch_survives_a_new_instance(
    kafka_bootstrap, new_topic, unique_id, make_revision, rev_table, late_table, dead_table,
):
    cfg = _cfg(kafka_bootstrap, new_topic, unique_id)
    other = ChangelogConfig(kafka_bootstrap, unique_id("other"), cfg.changelog_topic,
                            progress_topic=cfg.progress_topic)
    with TransactionalChangelog(cfg) as log:
        for b in range(3):
            log.commit_batch(b, rev_table([make_revision(rev=b)]), late_table(), dead_table(),
                             emitted_at_ms=1_000 + b)
    with TransactionalChangelog(other) as log:  # another query sharing the progress topic
        log.commit_batch(9, rev_table([]), late_table(), dead_table())
    with TransactionalChangelog(cfg) as log:
        assert log.last_committed_batch == 2
        # The replay of the last batch learns the emitted_at_ms its commit recorded, so the
        # job stamps Delta with what Kafka holds; older batches' are not kept.
        replay = log.commit_batch(2, rev_table([make_revision(rev=2)]), late_table(),
                                  dead_table(), emitted_at_ms=5_000)
        assert (replay.skipped, replay.emitted_at_ms) == (True, 1_002)
        older = log.commit_batch(1, rev_table([]), late_table(), dead_table())
        assert (older.skipped, older.emitted_at_ms) == (True, None)
    with TransactionalChangelog(other) as log:
        assert log.last_committed_batch == 9


@pytest.mark.kafka
def test_non_transactional_mode_is_at_least_once(
    kafka_bootstrap, new_topic, unique_id, make_revision, rev_table, late_table, dead_table,
):
    cfg = _cfg(kafka_bootstrap, new_topic, unique_id, transactional=False)
    batch = rev_table([make_revision("a"), make_revision("b")])
    with TransactionalChangelog(cfg) as log:
        assert not log.commit_batch(0, batch, late_table(), dead_table()).skipped
        assert not log.commit_batch(0, batch, late_table(), dead_table()).skipped  # no check
    assert len(_revisions(kafka_bootstrap, cfg.changelog_topic)) == 4  # the replay duplicated
