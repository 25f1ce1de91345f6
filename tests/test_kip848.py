"""KIP-848 consumer groups (`group.protocol=consumer`) with server-side assignment, on the real broker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from logbroker.protocol.errors import ErrorCode
from logbroker.protocol.kip848 import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest
from logbroker_devtools.client import Connection
from logbroker_devtools.testing.process import BrokerProcess
from support import both_targets, target_bootstrap, unique


@pytest.fixture(scope="module", params=both_targets())
def either(request: pytest.FixtureRequest) -> Iterator[str]:
    """logbroker or Apache Kafka (the param id names it)."""
    yield from target_bootstrap(request)


def create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future it returns
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)


def consumer(bootstrap: str, group: str, topic: str, events: list, name: str, **extra: object) -> ck.Consumer:
    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "fetch.queue.backoff.ms": 1,
            **extra,
        }
    )
    c.subscribe(
        [topic],
        on_assign=lambda _c, ps: events.append(("assign", name, {p.partition for p in ps})),
        on_revoke=lambda _c, ps: events.append(("revoke", name, {p.partition for p in ps})),
    )
    return c


def owned(c: ck.Consumer) -> set[int]:
    return {p.partition for p in c.assignment()}


def pump(consumers: list[ck.Consumer], until, timeout: float = 20.0) -> dict[str, int]:
    seen: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            for m in c.consume(100, 0.05):
                assert m.error() is None, m.error()
                seen[m.value().decode()] = seen.get(m.value().decode(), 0) + 1
        if until(seen):
            return seen
    raise AssertionError(f"condition not reached in {timeout}s; assignments {[owned(c) for c in consumers]}")


def test_assignment_scale_up_and_down_with_no_double_ownership(broker: BrokerProcess, topic: str) -> None:
    create(broker.bootstrap, topic, 6)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(600):
        p.produce(topic, value=str(i).encode(), partition=i % 6)
    assert p.flush(30) == 0
    group = f"g848-{uuid.uuid4().hex[:8]}"
    events: list = []
    t0 = time.monotonic()
    c1 = consumer(broker.bootstrap, group, topic, events, "c1")
    pump([c1], lambda s: len(s) == 600)
    first = next(i for i, e in enumerate(events) if e[0] == "assign")
    assert events[first][2] == set(range(6))
    assert time.monotonic() - t0 < 10
    c2 = consumer(broker.bootstrap, group, topic, events, "c2")
    pump([c1, c2], lambda s: owned(c1) and owned(c2) and len(owned(c1)) + len(owned(c2)) == 6, timeout=30)
    assert owned(c1).isdisjoint(owned(c2))
    assert len(owned(c1)) == len(owned(c2)) == 3
    # c2 received nothing c1 had not first given up: every partition c2 got was revoked from c1 before.
    revoked = set().union(*[e[2] for e in events if e[0] == "revoke" and e[1] == "c1"])
    gained = set().union(*[e[2] for e in events if e[0] == "assign" and e[1] == "c2"])
    assert gained <= revoked
    # Describe shows both members at the group's assignment epoch.
    with Connection(*broker.bootstrap.split(":")[0:1], int(broker.bootstrap.split(":")[1])) as conn:
        d = conn.do(ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)).groups[0]
        assert d.error_code == 0 and d.group_state == "Stable" and len(d.members) == 2
        assert {m.member_epoch for m in d.members} == {d.assignment_epoch}
        assert d.assignor_name == "uniform"
    c2.close()
    pump([c1], lambda s: owned(c1) == set(range(6)), timeout=30)
    c1.close()


def test_range_assignor_and_commits(broker: BrokerProcess, topic: str) -> None:
    create(broker.bootstrap, topic, 4)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(40):
        p.produce(topic, value=str(i).encode(), partition=i % 4)
    assert p.flush(30) == 0
    group = f"g848r-{uuid.uuid4().hex[:8]}"
    events: list = []
    c = consumer(
        broker.bootstrap, group, topic, events, "c", **{"group.remote.assignor": "range", "enable.auto.commit": False}
    )
    pump([c], lambda s: len(s) == 40)
    c.commit(asynchronous=False)
    committed = c.committed([ck.TopicPartition(topic, i) for i in range(4)], timeout=10)
    assert [tp.offset for tp in committed] == [10, 10, 10, 10]
    c.close()


def test_protocol_errors(broker: BrokerProcess, topic: str) -> None:
    create(broker.bootstrap, topic, 2)
    host, port = broker.bootstrap.split(":")
    H = ConsumerGroupHeartbeatRequest
    group = f"g848e-{uuid.uuid4().hex[:8]}"
    with Connection(host, int(port)) as conn:
        join = conn.do(
            H(
                group_id=group,
                member_id=str(uuid.uuid4()),
                member_epoch=0,
                rebalance_timeout_ms=30000,
                subscribed_topic_names=[topic],
                topic_partitions=[],
            )
        )
        assert join.error_code == 0 and join.member_epoch > 0
        assert join.assignment is not None
        assert sorted(p for tp in join.assignment.topic_partitions for p in tp.partitions) == [0, 1]
        stale = conn.do(H(group_id=group, member_id=join.member_id, member_epoch=join.member_epoch + 5))
        assert stale.error_code == ErrorCode.FENCED_MEMBER_EPOCH
        unknown = conn.do(H(group_id=group, member_id="nobody", member_epoch=3))
        assert unknown.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        bad = conn.do(
            H(
                group_id=group,
                member_id=str(uuid.uuid4()),
                member_epoch=0,
                rebalance_timeout_ms=30000,
                server_assignor="sticky",
                subscribed_topic_names=[topic],
                topic_partitions=[],
            )
        )
        assert bad.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
        leave = conn.do(H(group_id=group, member_id=join.member_id, member_epoch=-1))
        assert leave.error_code == 0 and leave.member_epoch == -1
        d = conn.do(
            ConsumerGroupDescribeRequest(group_ids=[group, "no-such-group"], include_authorized_operations=False)
        )
        assert d.groups[0].group_state == "Empty"
        assert d.groups[1].error_code == ErrorCode.GROUP_ID_NOT_FOUND


@pytest.mark.parametrize("kill", [False, True])
def test_group_state_survives_restart(fresh_broker: BrokerProcess, topic: str, kill: bool) -> None:
    fresh_broker.start()
    create(fresh_broker.bootstrap, topic, 2)
    p = ck.Producer({"bootstrap.servers": fresh_broker.bootstrap})
    for i in range(20):
        p.produce(topic, value=str(i).encode(), partition=i % 2)
    assert p.flush(30) == 0
    group = f"g848s-{uuid.uuid4().hex[:8]}"
    c = consumer(fresh_broker.bootstrap, group, topic, [], "c", **{"enable.auto.commit": False})
    pump([c], lambda s: len(s) == 20)
    c.commit(asynchronous=False)
    c.close()
    if kill:
        fresh_broker.kill()
        fresh_broker.start()
    else:
        fresh_broker.restart()
    c = ck.Consumer({"bootstrap.servers": fresh_broker.bootstrap, "group.id": group, "group.protocol": "consumer"})
    committed = c.committed([ck.TopicPartition(topic, 0), ck.TopicPartition(topic, 1)], timeout=10)
    assert [tp.offset for tp in committed] == [10, 10]
    c.close()


def test_partitions_added_to_a_subscribed_topic_are_assigned(either: str) -> None:
    """The coordinator notices a topic growing (it reads topics on every heartbeat) and assigns the new
    partitions to the member, as Kafka does."""
    topic = unique("grow")
    create(either, topic, 2)
    events: list = []
    c = consumer(either, unique("g"), topic, events, "c")
    try:
        pump([c], lambda _seen: owned(c) == {0, 1}, timeout=30)
        admin = AdminClient({"bootstrap.servers": either})
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
        p = ck.Producer({"bootstrap.servers": either})
        p.produce(topic, b"late", partition=3)
        assert p.flush(30) == 0
        seen = pump([c], lambda seen: owned(c) == {0, 1, 2, 3} and "late" in seen, timeout=45)
        assert seen["late"] == 1
    finally:
        c.close()
