"""The faces (`logbroker.mq`, `logbroker.notify`) on topics that hold transactional data.

Another application may write a face's topic with a transactional producer: committed and aborted
transactions, each leaving a COMMIT/ABORT marker (a control record that takes an offset but is no
message). The faces must keep working unchanged: deliver exactly the committed messages (plus the
plain ones they sent themselves), never a marker and never an aborted record, and their offsets
(mq `ack`, notify's commits) must carry a consumer past markers and aborted ranges on restart.
Both faces use librdkafka, whose default isolation.level is read_committed, and set no other.

Runs on logbroker (the shared `broker` process) and on Apache Kafka 4.4, over the wire.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from confluent_kafka import Producer

from logbroker.mq import Client, InitialPosition, Message, MQConfig, TopicNotEmpty
from logbroker.notify import AT_LEAST_ONCE, NotificationListener, Notifier
from logbroker.notify.notifier import encode
from support import both_targets, create_topic, target_bootstrap, unique


@pytest.fixture(scope="module", params=both_targets())
def bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from target_bootstrap(request)


class Txns:
    """One transactional producer (its own transactional.id) writing whole transactions."""

    def __init__(self, bootstrap: str, timeout_ms: int = 60_000) -> None:
        self.errors: list[Any] = []
        self.p = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("faces-txn"),
                           "transaction.timeout.ms": timeout_ms, "linger.ms": 0,
                           "on_delivery": self._cb})  # fmt: skip
        self.p.init_transactions(60)

    def _cb(self, err: Any, _msg: Any) -> None:
        if err is not None and err.code() != -152:  # _PURGE_QUEUE: what an abort discards
            self.errors.append(err)

    def run(self, topic: str, records: Sequence[tuple[bytes, list[tuple[str, bytes]] | None]], commit: bool) -> None:
        self.p.begin_transaction()
        for value, headers in records:
            self.p.produce(topic, value=value, headers=headers, partition=0)
        assert self.p.flush(30) == 0  # sent (so the abort has records and a marker to skip), not yet ended
        if commit:
            self.p.commit_transaction(30)
        else:
            self.p.abort_transaction(30)
        assert not self.errors, self.errors

    def begin_open(self, topic: str, value: bytes) -> None:
        self.p.begin_transaction()
        self.p.produce(topic, value=value, partition=0)
        assert self.p.flush(30) == 0

    def close(self) -> None:
        self.p.flush(5)


def wait_for(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


# ---------------------------------------------------------------------------------------------- mq


def mq_client(bootstrap: str, **overrides: Any) -> Client:
    return Client(MQConfig.model_validate({"type": "kafka", "kafka": {"bootstrap_servers": bootstrap},
                                           "num_partitions": 1, **overrides}))  # fmt: skip


def drain(consumer: Any, quiet: float = 1.5, limit: float = 30.0) -> list[Message]:
    """Everything the consumer delivers until nothing comes for `quiet` seconds."""
    out: list[Message] = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        m = consumer.receive(quiet)
        if m is None:
            return out
        out.append(m)
    raise AssertionError(f"consumer kept delivering for {limit}s: {[m.payload for m in out][-5:]}")


def mq_history(bootstrap: str, c: Client, topic: str) -> list[bytes]:
    """The topic's history: plain sends through the face, committed and aborted transactions;
    returns what a consumer must see, in order (every payload says what it is)."""
    txn = Txns(bootstrap)
    try:
        with c.create_producer(topic) as p:
            p.send(b"plain-0", {"kind": "plain"})
            txn.run(topic, [(b"c1-a", [("kind", b"txn")]), (b"c1-b", None)], commit=True)
            txn.run(topic, [(b"x1-a", None), (b"x1-b", [("kind", b"aborted")])], commit=False)
            p.send(b"plain-1")
            txn.run(topic, [(b"c2-a", None)], commit=True)
            txn.run(topic, [(b"x2-a", None)], commit=False)  # the log ends with an ABORT marker
    finally:
        txn.close()
    return [b"plain-0", b"c1-a", b"c1-b", b"plain-1", b"c2-a"]


def test_mq_receives_exactly_the_committed_messages(bootstrap: str) -> None:
    with mq_client(bootstrap) as c:
        topic = unique("mq-txn")
        want = mq_history(bootstrap, c, topic)
        with c.subscribe(topic, unique("sub"), InitialPosition.EARLIEST) as cons:
            got = drain(cons)
        assert [m.payload for m in got] == want
        assert got[1].properties == {"kind": "txn"} and got[0].properties == {"kind": "plain"}
        offsets = [m.id.offset for m in got]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        # The markers took offsets: the committed messages are not contiguous (c1-b, marker, x1-a, ...).
        assert offsets[-1] > len(want) - 1


def test_mq_acks_carry_a_subscription_past_markers(bootstrap: str) -> None:
    """ack per message: a subscription stopped just before an aborted transaction, and one stopped
    after the last message (its commit is the offset of a marker), resume with the right message."""
    with mq_client(bootstrap, ack_commit="message") as c:
        topic, sub = unique("mq-txn-ack"), unique("sub")
        want = mq_history(bootstrap, c, topic)
        with c.subscribe(topic, sub, InitialPosition.EARLIEST) as cons:
            first = [cons.receive(15) for _ in range(3)]  # plain-0, c1-a, c1-b: the aborted x1 follows
            for m in first:
                assert m is not None
                cons.ack(m)
            committed = cons.committed()
        assert [m.payload for m in first if m is not None] == want[:3]
        assert committed == {0: first[-1].id.offset + 1}  # type: ignore[union-attr]
        with c.subscribe(topic, sub, InitialPosition.LATEST) as cons:
            rest = drain(cons)
            for m in rest:
                cons.ack(m)
            at_end = cons.committed()
        assert [m.payload for m in rest] == want[3:]
        assert at_end == {0: rest[-1].id.offset + 1}
        with c.create_producer(topic) as p:
            p.send(b"after")
        with c.subscribe(topic, sub, InitialPosition.LATEST) as cons:
            assert [m.payload for m in drain(cons)] == [b"after"]


def test_mq_latest_position_and_an_open_transaction(bootstrap: str) -> None:
    """A LATEST subscription made while a transaction is open: nothing of it arrives while it is open,
    its records arrive once it commits (they were not visible at subscribe time), then later sends."""
    with mq_client(bootstrap) as c:
        topic = unique("mq-txn-open")
        mq_history(bootstrap, c, topic)
        txn = Txns(bootstrap, timeout_ms=120_000)
        try:
            txn.begin_open(topic, b"open-1")
            with c.subscribe(topic, unique("sub"), InitialPosition.LATEST) as cons:
                assert cons.receive(2.0) is None  # read_committed: the open transaction is not readable
                txn.p.commit_transaction(30)
                with c.create_producer(topic) as p:
                    p.send(b"after")
                got = drain(cons)
        finally:
            txn.close()
        assert [m.payload for m in got] == [b"open-1", b"after"]


def test_mq_latest_message_id_is_a_message(bootstrap: str) -> None:
    """latest_message_id names the last message a consumer can receive, not the marker or aborted
    record at the end of the log (a caller waiting to reach it would wait for ever); a long aborted
    tail (past the first read window) included. check_topic_valid calls a topic that holds only an
    aborted transaction empty."""
    with mq_client(bootstrap) as c:
        topic = unique("mq-txn-latest")
        want = mq_history(bootstrap, c, topic)
        with c.subscribe(topic, unique("sub"), InitialPosition.EARLIEST) as cons:
            got = drain(cons)
            assert [m.payload for m in got] == want
            assert cons.latest_message_id() == got[-1].id
        with c.subscribe(topic, unique("sub"), InitialPosition.UNKNOWN) as cons:
            cons.seek(got[-1].id, inclusive=True)
            assert [m.payload for m in drain(cons)] == [want[-1]]
        txn = Txns(bootstrap)
        try:
            txn.run(topic, [(b"x-long-%d" % i, None) for i in range(40)], commit=False)
        finally:
            txn.close()
        with c.subscribe(topic, unique("sub"), InitialPosition.UNKNOWN) as cons:
            assert cons.latest_message_id() == got[-1].id
            with pytest.raises(TopicNotEmpty):
                cons.check_topic_valid()

        only_aborted = unique("mq-txn-aborted")
        c.ensure_topic(only_aborted)
        txn = Txns(bootstrap)
        try:
            txn.run(only_aborted, [(b"x", None), (b"y", None)], commit=False)
        finally:
            txn.close()
        with c.subscribe(only_aborted, unique("sub"), InitialPosition.EARLIEST) as cons:
            cons.check_topic_valid()  # offsets 0..2 are taken, but by no message
            assert drain(cons, quiet=1.0) == []


# ------------------------------------------------------------------------------------------ notify


def notification(event: str, payload: Any) -> bytes:
    """A record in notify's wire form, as Notifier writes it (written here by a transactional producer)."""
    return encode({"user": "txn"}, {"message_id": str(uuid.uuid4()), "publisher_id": "txn-writer",
                                    "event_type": event, "priority": "INFO", "payload": payload,
                                    "timestamp": "2026-01-01 00:00:00.000000"})  # fmt: skip


class Recorder:
    def __init__(self) -> None:
        self.got: list[Any] = []
        self.lock = threading.Lock()

    def info(self, ctxt: Any, publisher_id: Any, event_type: Any, payload: Any, metadata: Any) -> None:
        with self.lock:
            self.got.append(payload)


def notify_history(bootstrap: str, url: str, name: str, start: int) -> list[Any]:
    """Notifier sends and transactions on `<name>.info`; returns the payloads a listener must get."""
    topic = f"{name}.info"
    txn = Txns(bootstrap)
    try:
        with Notifier(url, "face", [name]) as n:
            n.info({}, "plain", f"plain-{start}")
            txn.run(topic, [(notification("txn", f"c{start}-a"), None), (notification("txn", f"c{start}-b"), None)],
                    commit=True)  # fmt: skip
            txn.run(topic, [(notification("txn", f"x{start}"), None)], commit=False)
            n.info({}, "plain", f"plain-{start + 1}")
            txn.run(topic, [(notification("txn", f"x{start}-tail"), None)], commit=False)  # ends with ABORT
    finally:
        txn.close()
    return [f"plain-{start}", f"c{start}-a", f"c{start}-b", f"plain-{start + 1}"]


@pytest.mark.parametrize("delivery", ["at-most-once", AT_LEAST_ONCE])
def test_notify_listener_gets_exactly_the_committed_and_resumes(bootstrap: str, delivery: str) -> None:
    """A listener gets the committed notifications only; stopped and restarted (same pool), it gets
    only what was written since: its commits carried it past the markers and the aborted ones."""
    url, name, pool = f"kafka://{bootstrap}", unique("nt-txn"), unique("pool")
    create_topic(bootstrap, f"{name}.info", 1)
    ep = Recorder()
    with NotificationListener(url, [name], [ep], pool=pool, delivery=delivery):
        want = notify_history(bootstrap, url, name, 0)
        wait_for(lambda: len(ep.got) >= len(want))
        time.sleep(1.0)  # anything extra (a marker, an aborted record) would arrive meanwhile
    assert ep.got == want
    ep2 = Recorder()
    more = notify_history(bootstrap, url, name, 10)  # written while no listener of the pool runs
    with NotificationListener(url, [name], [ep2], pool=pool, delivery=delivery):
        wait_for(lambda: len(ep2.got) >= len(more))
        time.sleep(1.0)
    assert ep2.got == more
