"""Compacted topics (cleanup.policy=compact, or compact,delete), asserted on logbroker and Apache Kafka 4.4."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient

from logbroker_devtools.testing.process import BrokerProcess
from support import both_targets, create_topic, kafka_peer, read_topic, unique

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module", params=both_targets())
def quick(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A broker that checks retention every 200 ms."""
    if request.param == "logbroker":
        proc = BrokerProcess(tmp_path_factory.mktemp("quick") / "data",
                             env={"LOGBROKER_RETENTION_CHECK_INTERVAL_MS": "200",
                                  "LOGBROKER_LOG_CLEANER_BACKOFF_MS": "200"})  # fmt: skip
        with proc:
            yield proc.bootstrap
        return
    with kafka_peer(**{"log.retention.check.interval.ms": 200, "log.cleaner.backoff.ms": 200}) as bootstrap:
        yield bootstrap


Rec = tuple[bytes | None, bytes | None]


def produce(bootstrap: str, topic: str, records: list[Rec], ts: int | None = None) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for key, value in records:
        p.produce(topic, key=key, value=value, timestamp=ts or 0)
    assert p.flush(30) == 0


def low_watermark(bootstrap: str, topic: str) -> int:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": unique("wm")})
    try:
        return c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10)[0]
    finally:
        c.close()


def test_a_compact_topic_is_never_deleted_by_time(quick: str) -> None:
    """The issue's loss: a compact topic with retention.ms=60000 lost both keys within seconds. Records two
    minutes old are past retention at once; the same records in a delete topic show retention is running."""
    old = int(time.time() * 1000) - 120_000
    cfg = {"retention.ms": "60000", "segment.ms": "100"}
    compact = create_topic(quick, unique("compact"), config={**cfg, "cleanup.policy": "compact"})
    control = create_topic(quick, unique("delete"), config={**cfg, "cleanup.policy": "delete"})
    for t in (compact, control):
        produce(quick, t, [(b"k1", b"v1"), (b"k2", b"v2")], ts=old)
        time.sleep(0.3)
        produce(quick, t, [(b"k3", b"v3")], ts=old)  # rolls the segment that holds k1 and k2
    deadline = time.monotonic() + 60
    while low_watermark(quick, control) == 0:
        assert time.monotonic() < deadline, "retention never ran on the delete topic"
        time.sleep(0.2)
    time.sleep(1)  # a few more retention checks
    assert low_watermark(quick, compact) == 0
    assert [(m.key(), m.value()) for m in read_topic(quick, compact)] == [(b"k1", b"v1"), (b"k2", b"v2"),
                                                                          (b"k3", b"v3")]  # fmt: skip


def test_delete_records_on_a_compact_topic_is_a_policy_violation(quick: str) -> None:
    topic = create_topic(quick, unique("compact"), config={"cleanup.policy": "compact"})
    produce(quick, topic, [(b"k", b"v")] * 3)
    admin = AdminClient({"bootstrap.servers": quick})
    fut = admin.delete_records([ck.TopicPartition(topic, 0, 2)])
    with pytest.raises(ck.KafkaException) as exc:
        next(iter(fut.values())).result(10)
    err: Any = exc.value.args[0]
    assert err.code() == ck.KafkaError.POLICY_VIOLATION
    assert low_watermark(quick, topic) == 0


def test_records_without_a_key_are_refused_by_a_compacted_topic(quick: str) -> None:
    topic = create_topic(quick, unique("compact"), config={"cleanup.policy": "compact"})
    p = ck.Producer({"bootstrap.servers": quick, "linger.ms": 50, "enable.idempotence": False, "retries": 0})
    errs: list[Any] = []
    p.produce(topic, key=b"k", value=b"ok")
    p.produce(topic, value=b"no key", on_delivery=lambda e, _m: errs.append(e))
    p.flush(30)
    assert errs and errs[0] is not None and errs[0].code() == ck.KafkaError.INVALID_RECORD, errs
    assert read_topic(quick, topic) == []  # one batch: refused whole, nothing written
    produce(quick, topic, [(b"k", b"ok")])
    assert [(m.key(), m.value()) for m in read_topic(quick, topic)] == [(b"k", b"ok")]


def _updates(n: int, keys: int, tombstone_every: int) -> list[Rec]:
    out: list[Rec] = []
    for i in range(n):
        k = b"key-%05d" % (i % keys)
        out.append((k, None if tombstone_every and i % tombstone_every == tombstone_every - 1 else b"v%07d" % i))
    return out


def test_compaction_keeps_the_latest_value_of_every_key(quick: str) -> None:
    """100k updates over 1k keys, compressed, with tombstones: once cleaned, a full read returns each live key's
    latest value in offset order, and the log holds far fewer records (both brokers, the same assertions)."""
    topic = create_topic(quick, unique("compact"), config={
        "cleanup.policy": "compact", "segment.ms": "300", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "100", "segment.bytes": str(1 << 20)})  # fmt: skip
    updates = _updates(100_000, 1000, 97)
    p = ck.Producer({"bootstrap.servers": quick, "linger.ms": 5, "compression.type": "zstd"})
    for i, (k, v) in enumerate(updates):
        p.produce(topic, key=k, value=v)
        if i % 25_000 == 24_999:
            p.flush(30)
            time.sleep(0.4)  # segments roll by segment.ms between rounds
    assert p.flush(30) == 0
    time.sleep(0.5)
    produce(quick, topic, [(b"zz-last", b"rolls the last round's segment")])
    want: dict[bytes, bytes | None] = {}
    for k, v in [*updates, (b"zz-last", b"rolls the last round's segment")]:
        want[k] = v

    def compacted() -> list[Any]:
        got = read_topic(quick, topic)
        assert len(got) < len(updates) // 4, f"{len(got)} records: not compacted yet"
        return got

    deadline = time.monotonic() + 120
    while True:
        try:
            got = compacted()
            break
        except AssertionError:
            assert time.monotonic() < deadline, "the cleaner never compacted the topic"
            time.sleep(1)
    offsets = [m.offset() for m in got]
    assert offsets == sorted(offsets)
    latest_read: dict[bytes, bytes | None] = {}
    for m in got:
        latest_read[m.key()] = m.value()
    assert {k: v for k, v in latest_read.items() if v is not None} == {k: v for k, v in want.items() if v is not None}
    # Tombstones go after delete.retention.ms, at the next cleaning (Kafka's needs new dirty data to run).
    produce(quick, topic, [(b"other-%d" % i, b"x") for i in range(500)])
    time.sleep(0.5)
    produce(quick, topic, [(b"zz-last", b"rolls again")])

    def no_tombstones() -> None:
        left = [m.key() for m in read_topic(quick, topic) if m.value() is None]
        assert not left, f"{len(left)} tombstones left after delete.retention.ms"

    deadline = time.monotonic() + 60
    while True:
        try:
            no_tombstones()
            break
        except AssertionError:
            assert time.monotonic() < deadline, "tombstones were never removed"
            time.sleep(1)
    # A consumer positioned inside a removed range continues at the next offset kept.
    offsets = [m.offset() for m in read_topic(quick, topic)]
    gap = next(o for o in range(offsets[-1]) if o not in set(offsets))  # offset 0 went, at least
    c = ck.Consumer({"bootstrap.servers": quick, "group.id": unique("gap"), "enable.auto.commit": False})
    try:
        c.assign([ck.TopicPartition(topic, 0, gap)])
        deadline = time.monotonic() + 30
        while (m := c.poll(0.5)) is None or m.error() is not None:
            assert time.monotonic() < deadline
        assert m.offset() == min(o for o in offsets if o > gap)
    finally:
        c.close()


# Rounds of the kill -9 loop below: a few in the default tier, the long loop in the slow one (`.ci/run --full`).
@pytest.mark.parametrize("rounds", [4, pytest.param(20, marks=pytest.mark.slow)])
def test_kill_9_while_cleaning_loses_nothing_compaction_may_not_drop(tmp_path: Any, rounds: int) -> None:
    """Rounds of: updates acknowledged, the cleaner busy on small segments, kill -9 at a random moment; after
    each restart every key reads back its latest acknowledged value, and no process of the killed broker is
    left (logbroker's own: Kafka is not killed)."""
    import random

    import psutil

    rng = random.Random(14)
    proc = BrokerProcess(tmp_path / "data", env={"LOGBROKER_LOG_CLEANER_BACKOFF_MS": "20"})
    want: dict[bytes, bytes | None] = {}
    with proc:
        topic = create_topic(proc.bootstrap, unique("crash"), config={
            "cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "0"})  # fmt: skip
        n = 0
        for _round in range(rounds):
            batch = []
            for _ in range(300):
                k = b"k%02d" % rng.randrange(60)
                v = None if rng.random() < 0.05 else b"v%06d" % n
                batch.append((k, v))
                n += 1
            produce(proc.bootstrap, topic, batch)
            want.update(batch)
            time.sleep(rng.random() * 0.3)
            assert proc.proc is not None
            children = psutil.Process(proc.proc.pid).children(recursive=True)
            proc.kill()
            _gone, alive = psutil.wait_procs(children, timeout=5)  # no cleaner outlives its broker
            assert not alive, [(p.pid, p.cmdline()) for p in alive]
            proc.start()
            # The killed round's uncommitted staging is gone on open (its worker died with it); a new worker
            # needs a second or more to start, so none of this broker's is here yet.
            assert not list((tmp_path / "data" / f"{topic}-0").glob(".cleaning-*"))
            got: dict[bytes, bytes | None] = {}
            for m in read_topic(proc.bootstrap, topic):
                got[m.key()] = m.value()
            live_want = {k: v for k, v in want.items() if v is not None}
            assert {k: v for k, v in got.items() if v is not None} == live_want
        # The cleaner did run (on a loaded machine the killed rounds may all end before a cleaning does).
        deadline = time.monotonic() + 60
        while "cleaned" not in proc.log_path.read_text():
            assert time.monotonic() < deadline, proc.log_tail()
            time.sleep(0.2)


def test_a_killed_broker_leaves_no_cleaner_process_behind(tmp_path: Any) -> None:
    """kill -9 of a broker busy cleaning: its cleaner worker and multiprocessing's resource tracker go with it
    (they used to live on under pid 1, ~70 MB per kill), and the restarted broker cleans the same partition."""
    import psutil

    proc = BrokerProcess(tmp_path / "data", env={"LOGBROKER_LOG_CLEANER_BACKOFF_MS": "20"})
    with proc:
        topic = create_topic(proc.bootstrap, unique("orphans"), config={
            "cleanup.policy": "compact", "segment.bytes": "8192", "min.cleanable.dirty.ratio": "0.01"})  # fmt: skip
        for _round in range(2):
            children: list[psutil.Process] = []
            deadline = time.monotonic() + 60
            n = 0
            while not children:  # produce until the cleaner's worker (and tracker) run
                assert time.monotonic() < deadline, proc.log_tail()
                produce(proc.bootstrap, topic, [(b"k%03d" % (i % 400), b"v%06d" % (n + i)) for i in range(5000)])
                n += 5000
                children = psutil.Process(proc.proc.pid).children(recursive=True)
            proc.kill()
            _gone, alive = psutil.wait_procs(children, timeout=5)
            assert not alive, [(p.pid, p.cmdline()) for p in alive]
            proc.start()
        deadline = time.monotonic() + 60
        while "cleaned" not in proc.log_tail(400):
            assert time.monotonic() < deadline, proc.log_tail()
            time.sleep(0.2)


def test_compact_and_delete_deletes_old_segments_and_compacts_the_rest(quick: str) -> None:
    topic = create_topic(quick, unique("both"), config={
        "cleanup.policy": "compact,delete", "retention.ms": "60000", "segment.ms": "200",
        "min.cleanable.dirty.ratio": "0.01"})  # fmt: skip
    old = int(time.time() * 1000) - 120_000
    produce(quick, topic, [(b"a", b"old-a"), (b"b", b"old-b")], ts=old)
    time.sleep(0.4)
    for i in range(3):
        produce(quick, topic, [(b"c", b"c%d" % i)] * 50)
        time.sleep(0.4)
    produce(quick, topic, [(b"d", b"last")])  # rolls the segment before it

    def settled() -> None:
        got = [(m.key(), m.value()) for m in read_topic(quick, topic)]
        assert (b"a", b"old-a") not in got and (b"b", b"old-b") not in got, got
        assert [v for k, v in got if k == b"c"] == [b"c2"], got
        assert got[-1] == (b"d", b"last")

    deadline = time.monotonic() + 90
    while True:
        try:
            settled()
            return
        except AssertionError:
            assert time.monotonic() < deadline
            time.sleep(1)
