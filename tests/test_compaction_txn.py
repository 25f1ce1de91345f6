"""Compaction of a topic written by transactional producers, asserted on logbroker and Apache Kafka 4.4: the
cleaner drops an aborted update without letting it hide the committed value, and never cleans past an open
transaction (Kafka's LogCleaner bounds the cleanable range by the last stable offset)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import confluent_kafka as ck
import pytest

from logbroker_devtools.testing.process import BrokerProcess
from support import both_targets, create_topic, kafka_peer, unique

pytestmark = pytest.mark.timeout(300)

TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
                "delete.retention.ms": "100"}  # fmt: skip


@pytest.fixture(scope="module", params=both_targets())
def quick(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A broker whose cleaner looks for work every 200 ms."""
    if request.param == "logbroker":
        proc = BrokerProcess(tmp_path_factory.mktemp("quick") / "data",
                             env={"LOGBROKER_LOG_CLEANER_BACKOFF_MS": "200"})  # fmt: skip
        with proc:
            yield proc.bootstrap
        return
    with kafka_peer(**{"log.cleaner.backoff.ms": 200}) as bootstrap:
        yield bootstrap


def txn_producer(bootstrap: str) -> ck.Producer:
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("txn"), "linger.ms": 0})
    p.init_transactions(30)
    return p


def transaction(p: ck.Producer, topic: str, records: list[tuple[bytes, bytes]], commit: bool) -> None:
    p.begin_transaction()
    for k, v in records:
        p.produce(topic, key=k, value=v)
    assert p.flush(30) == 0  # written before the end: an abort must have records to abort
    if commit:
        p.commit_transaction(30)
    else:
        p.abort_transaction(30)


def roll(bootstrap: str, topic: str, key: bytes) -> None:
    """A plain record after segment.ms: the segment before it is closed and can be cleaned."""
    time.sleep(0.3)
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    p.produce(topic, key=key, value=b"roll")
    assert p.flush(30) == 0


def read(bootstrap: str, topic: str, isolation: str, offsets: bool = False) -> list[tuple]:
    """The partition's (key, value) or (offset, key, value) from the earliest offset to its end (the LSO for
    read_committed)."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": unique("read"), "enable.auto.commit": False,
                     "enable.partition.eof": True, "isolation.level": isolation})  # fmt: skip
    try:
        c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        out = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == ck.KafkaError._PARTITION_EOF, msg.error()
                return out
            out.append((msg.offset(), msg.key(), msg.value()) if offsets else (msg.key(), msg.value()))
        raise AssertionError(f"no end of partition reading {topic} ({isolation})")
    finally:
        c.close()


def test_an_aborted_update_is_cleaned_away_and_the_committed_value_stays(quick: str) -> None:
    """Commit k=v1, abort k=v2: once cleaned, both isolation levels read k=v1 (Kafka removes the aborted record
    and does not let it count as k's latest value)."""
    topic = create_topic(quick, unique("ctxn"), config=TOPIC_CONFIG)
    p = txn_producer(quick)
    transaction(p, topic, [(b"k", b"v1")], commit=True)
    transaction(p, topic, [(b"k", b"v2")], commit=False)
    roll(quick, topic, b"r1")
    roll(quick, topic, b"r2")  # the markers' segment closed too, whatever segment they landed in
    deadline = time.monotonic() + 60
    while (b"k", b"v2") in read(quick, topic, "read_uncommitted"):
        assert time.monotonic() < deadline, "the aborted record was never cleaned away"
        time.sleep(0.5)
    want = [(0, b"k", b"v1"), (4, b"r1", b"roll"), (5, b"r2", b"roll")]  # v2 was offset 2, the markers 1 and 3
    assert read(quick, topic, "read_uncommitted", offsets=True) == want
    assert read(quick, topic, "read_committed", offsets=True) == want
    p.flush(10)


def test_an_open_transaction_is_never_cleaned(quick: str) -> None:
    """An open transaction's k=v3 is k's newest record, in a closed segment: the cleaner must not treat it as
    k's value (it may still abort), so the committed k=v1 stays for read_committed readers."""
    topic = create_topic(quick, unique("ctxn"), config=TOPIC_CONFIG)
    committer, opener = txn_producer(quick), txn_producer(quick)
    transaction(committer, topic, [(b"k", b"v1")], commit=True)
    transaction(committer, topic, [(b"k", b"v2")], commit=False)
    roll(quick, topic, b"r1")
    roll(quick, topic, b"r2")
    deadline = time.monotonic() + 60
    while (b"k", b"v2") in read(quick, topic, "read_uncommitted"):  # a first cleaning has run
        assert time.monotonic() < deadline, "the aborted record was never cleaned away"
        time.sleep(0.5)
    opener.begin_transaction()
    opener.produce(topic, key=b"k", value=b"v3-open")
    assert opener.flush(30) == 0
    for i in range(3):
        roll(quick, topic, b"later-%d" % i)
    time.sleep(3)  # many cleaner rounds (backoff 200 ms), with the open transaction's segment closed
    assert read(quick, topic, "read_committed") == [(b"k", b"v1"), (b"r1", b"roll"), (b"r2", b"roll")]
    assert read(quick, topic, "read_uncommitted") == [(b"k", b"v1"), (b"r1", b"roll"), (b"r2", b"roll"),
                                                      (b"k", b"v3-open")] + [
        (b"later-%d" % i, b"roll") for i in range(3)]  # fmt: skip
    opener.abort_transaction(30)
