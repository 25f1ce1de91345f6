"""Authorization of consumer groups and committed offsets, on logbroker and on Apache Kafka with ACLs
(the harness is test_authz_data's): FindCoordinator, the classic group protocol, OffsetCommit/OffsetFetch/
OffsetDelete, DescribeGroups, ListGroups, DeleteGroups and the KIP-848 heartbeat, with real consumers and raw
requests where a client hides the code. Every refusal leaves the group and its offsets as they were."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType
from kafka.protocol.admin import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest

from logbroker.protocol.errors import ErrorCode as E
from logbroker.protocol.kip848 import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest
from logbroker_devtools.client.connection import Connection
from support import assert_equal, both_targets, eventually, unique
from test_authz_data import AuthzTarget, NewRecord, ProduceRequest, acl, build_batch, start_authz_target

pytestmark = pytest.mark.timeout(300)
OC = OffsetCommitRequest
OF = OffsetFetchRequest
J = JoinGroupRequest
GROUP, TOPIC = ResourceType.GROUP, ResourceType.TOPIC
READ, DESCRIBE, DELETE = AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthzTarget]:
    with start_authz_target(request.param, tmp_path_factory.mktemp("authz-groups")) as t:
        yield t


def commit(gid: str, offsets: dict[str, int]) -> OC:
    T = OC.OffsetCommitRequestTopic
    topics = [T(name=t, partitions=[T.OffsetCommitRequestPartition(partition_index=0, committed_offset=o,
                                                                   committed_leader_epoch=-1, committed_metadata="")])
              for t, o in offsets.items()]  # fmt: skip
    return OC(group_id=gid, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
              retention_time_ms=-1, topics=topics)  # fmt: skip


def commit_errors(c: Connection, gid: str, offsets: dict[str, int]) -> dict[str, int]:
    r = c.do(commit(gid, offsets), 8)
    return {t.name: p.error_code for t in r.topics for p in t.partitions}


def offsets_of(c: Connection, gid: str, topics: list[str] | None) -> tuple[int, list[tuple[str, int, int]]]:
    """OffsetFetch v8 of one group: its error and (topic, offset, error) in the broker's order."""
    G = OF.OffsetFetchRequestGroup
    wanted = None if topics is None else [G.OffsetFetchRequestTopics(name=t, partition_indexes=[0]) for t in topics]
    r = c.do(OF(groups=[G(group_id=gid, topics=wanted)], require_stable=False), 8)
    [g] = r.groups
    return g.error_code, [(t.name, p.committed_offset, p.error_code) for t in g.topics for p in t.partitions]


def committed(target: AuthzTarget, gid: str, topics: list[str]) -> dict[str, int]:
    with target.connection("admin") as c:
        err, rows = offsets_of(c, gid, topics)
    assert err == 0
    return {t: o for t, o, _ in rows}


def described(c: Connection, *gids: str, ops: bool = False) -> list[tuple[str, int, str, Any]]:
    r = c.do(DescribeGroupsRequest(groups=list(gids), include_authorized_operations=ops), 5)
    return [(g.group_id, g.error_code, g.group_state, g.authorized_operations) for g in r.groups]


def listed(c: Connection) -> set[str]:
    return {g.group_id for g in c.do(ListGroupsRequest(states_filter=[]), 4).groups}


def test_find_coordinator_needs_describe(target: AuthzTarget) -> None:
    seen, hidden = unique("authz-fc"), unique("authz-fc")
    target.grant(acl(GROUP, seen, DESCRIBE))
    with target.connection() as c:

        def coordinators() -> dict[str, tuple[int, int, str, int]]:
            r = c.do(FindCoordinatorRequest(key_type=0, coordinator_keys=[seen, hidden]), 4)
            return {k.key: (k.error_code, k.node_id, k.host, k.port) for k in r.coordinators}

        # Kafka's first answers are COORDINATOR_NOT_AVAILABLE while it creates its offsets topic.
        def found() -> dict[str, tuple[int, int, str, int]]:
            answer = coordinators()
            assert answer[seen][0] == 0, answer
            return answer

        by_key = eventually(found)
        assert by_key[seen][1] >= 0
        assert by_key[hidden] == (E.GROUP_AUTHORIZATION_FAILED, -1, "", -1)
        old = c.do(FindCoordinatorRequest(key=hidden, key_type=0), 3)
        assert (old.error_code, old.error_message, old.node_id) == (
            E.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.", -1)  # fmt: skip
        old = c.do(FindCoordinatorRequest(key=unique("tid"), key_type=1), 3)
        assert (old.error_code, old.error_message) == (
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "Transactional Id authorization failed.")  # fmt: skip


def test_consumer_in_a_group_named_by_prefix(target: AuthzTarget) -> None:
    """READ on groups by prefix: a consumer joins a group under it and commits; one outside it is refused."""
    topic, prefix = unique("authz-gt"), unique("authz-gp") + "-"
    target.create_topic(topic)
    with target.connection("admin") as c:
        c.do(_produce(topic), 9)
    target.grant(acl(TOPIC, topic, READ), acl(GROUP, prefix, READ, pattern=ResourcePatternType.PREFIXED))
    inside, outside = prefix + "in", unique("authz-gq")
    consumer = ck.Consumer(target.conf(**{"group.id": inside, "auto.offset.reset": "earliest",
                                          "enable.auto.commit": False}))  # fmt: skip
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        m = None
        while m is None and time.monotonic() < deadline:
            m = consumer.poll(1)
            if m is not None and m.error() is not None:
                pytest.fail(str(m.error()))
        assert m is not None and m.value() == b"v"
        consumer.commit(message=m, asynchronous=False)
    finally:
        consumer.close()
    assert committed(target, inside, [topic]) == {topic: 1}
    consumer = ck.Consumer(target.conf(**{"group.id": outside, "auto.offset.reset": "earliest"}))
    try:
        consumer.subscribe([topic])
        err = None
        deadline = time.monotonic() + 60
        while err is None and time.monotonic() < deadline:
            m = consumer.poll(1)
            if m is not None:
                assert m.error() is not None, "a message reached a consumer of a forbidden group"
                err = m.error()
        assert err is not None and err.code() == ck.KafkaError.GROUP_AUTHORIZATION_FAILED, err
    finally:
        consumer.close()


def test_denied_group_requests_change_nothing(target: AuthzTarget) -> None:
    """With DESCRIBE but not READ on a group, joining, syncing, heartbeats, leaving and committing are refused
    (GROUP_AUTHORIZATION_FAILED, as Kafka shapes each answer); the group keeps its offset."""
    topic, gid = unique("authz-dt"), unique("authz-dg")
    target.create_topic(topic)
    with target.connection("admin") as c:
        assert commit_errors(c, gid, {topic: 5}) == {topic: 0}
    target.grant(acl(GROUP, gid, DESCRIBE), acl(TOPIC, topic, READ))
    with target.connection() as c:
        protocols = [J.JoinGroupRequestProtocol(name="range", metadata=b"")]
        j = c.do(J(group_id=gid, session_timeout_ms=30000, rebalance_timeout_ms=10000, member_id="",
                   group_instance_id=None, protocol_type="consumer", protocols=protocols, reason=None), 7)  # fmt: skip
        assert (j.error_code, j.generation_id, j.member_id, j.leader, j.protocol_name, j.members) == (
            E.GROUP_AUTHORIZATION_FAILED, -1, "", "", None, [])  # fmt: skip
        s = c.do(SyncGroupRequest(group_id=gid, generation_id=1, member_id="m", group_instance_id=None,
                                  protocol_type="consumer", protocol_name="range", assignments=[]), 5)  # fmt: skip
        assert (s.error_code, s.assignment) == (E.GROUP_AUTHORIZATION_FAILED, b"")
        # v5 without the protocol type and name: Kafka says so before it checks the ACLs.
        s = c.do(SyncGroupRequest(group_id=gid, generation_id=1, member_id="m", group_instance_id=None,
                                  protocol_type=None, protocol_name=None, assignments=[]), 5)  # fmt: skip
        assert s.error_code == E.INCONSISTENT_GROUP_PROTOCOL
        hb = c.do(HeartbeatRequest(group_id=gid, generation_id=1, member_id="m", group_instance_id=None), 3)
        assert hb.error_code == E.GROUP_AUTHORIZATION_FAILED
        leave = c.do(LeaveGroupRequest(group_id=gid, members=[LeaveGroupRequest.MemberIdentity(member_id="m")]), 4)
        assert (leave.error_code, leave.members) == (E.GROUP_AUTHORIZATION_FAILED, [])
        assert commit_errors(c, gid, {topic: 9}) == {topic: E.GROUP_AUTHORIZATION_FAILED}
        # DESCRIBE on the group is enough to read its offsets.
        assert offsets_of(c, gid, [topic]) == (0, [(topic, 5, 0)])
    assert committed(target, gid, [topic]) == {topic: 5}


def test_offsets_of_topics_that_may_not_be_seen(target: AuthzTarget) -> None:
    """A commit to a topic without READ is refused for that topic only; a fetch names a forbidden topic
    TOPIC_AUTHORIZATION_FAILED after the others, and a fetch of everything leaves it out."""
    seen, hidden, gid = unique("authz-os"), unique("authz-oh"), unique("authz-og")
    for t in (seen, hidden):
        target.create_topic(t)
    with target.connection("admin") as c:
        assert commit_errors(c, gid, {seen: 1, hidden: 2}) == {seen: 0, hidden: 0}
    target.grant(acl(GROUP, gid, READ), acl(TOPIC, seen, READ))
    with target.connection() as c:
        assert commit_errors(c, gid, {hidden: 7, seen: 3}) == {seen: 0, hidden: E.TOPIC_AUTHORIZATION_FAILED}
        assert commit_errors(c, gid, {hidden: 8}) == {hidden: E.TOPIC_AUTHORIZATION_FAILED}
        assert offsets_of(c, gid, [hidden, seen]) == (0, [(seen, 3, 0), (hidden, -1, E.TOPIC_AUTHORIZATION_FAILED)])
        assert offsets_of(c, gid, None) == (0, [(seen, 3, 0)])
        other = unique("authz-og")
        assert offsets_of(c, other, [seen]) == (E.GROUP_AUTHORIZATION_FAILED, [])
        # v1-7 carry one group, with its error at the top.
        old = c.do(OF(group_id=other, topics=[OF.OffsetFetchRequestTopic(name=seen, partition_indexes=[0])]), 5)
        assert (old.error_code, old.topics) == (E.GROUP_AUTHORIZATION_FAILED, [])
    assert committed(target, gid, [seen, hidden]) == {seen: 3, hidden: 2}


def test_deleting_needs_delete(target: AuthzTarget) -> None:
    """DeleteGroups and OffsetDelete need DELETE on the group (and OffsetDelete READ on each topic)."""
    topic, hidden = unique("authz-xt"), unique("authz-xh")
    kept, doomed = unique("authz-xk"), unique("authz-xd")
    for t in (topic, hidden):
        target.create_topic(t)
    with target.connection("admin") as c:
        for g in (kept, doomed):
            assert commit_errors(c, g, {topic: 4, hidden: 4}) == {topic: 0, hidden: 0}
    target.grant(acl(GROUP, kept, READ), acl(GROUP, doomed, DELETE), acl(TOPIC, topic, READ))
    with target.connection() as c:
        D = OffsetDeleteRequest.OffsetDeleteRequestTopic
        r = c.do(OffsetDeleteRequest(group_id=kept, topics=[
            D(name=topic, partitions=[D.OffsetDeleteRequestPartition(partition_index=0)])]), 0)  # fmt: skip
        assert (r.error_code, r.topics) == (E.GROUP_AUTHORIZATION_FAILED, [])
        both = [D(name=t, partitions=[D.OffsetDeleteRequestPartition(partition_index=0)]) for t in (hidden, topic)]
        r = c.do(OffsetDeleteRequest(group_id=doomed, topics=both), 0)
        assert r.error_code == 0
        assert {t.name: t.partitions[0].error_code for t in r.topics} == {
            topic: 0,
            hidden: E.TOPIC_AUTHORIZATION_FAILED,
        }
        r = c.do(DeleteGroupsRequest(groups_names=[kept, doomed]), 2)
        # Kafka answers the groups it refuses after the others.
        assert [(g.group_id, g.error_code) for g in r.results] == [(doomed, 0), (kept, E.GROUP_AUTHORIZATION_FAILED)]
    assert committed(target, kept, [topic, hidden]) == {topic: 4, hidden: 4}
    assert committed(target, doomed, [topic, hidden]) == {topic: -1, hidden: -1}


def test_describe_and_list_groups(target: AuthzTarget) -> None:
    """DescribeGroups refuses groups without DESCRIBE (first, empty) and reports KIP-430 operations; ListGroups
    shows only describable groups, unless the principal may DESCRIBE the cluster."""
    topic, seen, hidden = unique("authz-lt"), unique("authz-ls"), unique("authz-lh")
    target.create_topic(topic)
    with target.connection("admin") as c:
        for g in (seen, hidden):
            assert commit_errors(c, g, {topic: 1}) == {topic: 0}
    target.grant(acl(GROUP, seen, READ))
    with target.connection() as c:
        assert described(c, seen, hidden, ops=True) == [
            (hidden, E.GROUP_AUTHORIZATION_FAILED, "", None),
            (seen, 0, "Empty", {READ.value, DESCRIBE.value}),
        ]
        assert described(c, seen) == [(seen, 0, "Empty", None)]
        names = listed(c)
        assert seen in names and hidden not in names
    with target.connection("bob") as c:
        assert not {seen, hidden} & listed(c)
    cluster = acl(ResourceType.BROKER, "kafka-cluster", DESCRIBE, principal="User:bob")
    with target.granted(cluster), target.connection("bob") as c:
        eventually(lambda: assert_equal({seen, hidden} <= listed(c), True))


def test_consumer_group_heartbeat_checks_group_then_topics(target: AuthzTarget) -> None:
    """KIP-848: READ on the group, then DESCRIBE on every subscribed topic (Kafka 4), answered with the
    code alone; a refused member does not join."""
    seen, hidden, gid = unique("authz-ht"), unique("authz-hh"), unique("authz-hg")
    for t in (seen, hidden):
        target.create_topic(t)
    target.grant(acl(TOPIC, seen, DESCRIBE))

    def beat(c: Connection, topics: list[str]) -> tuple[int, Any, int]:
        r = c.do(ConsumerGroupHeartbeatRequest(group_id=gid, member_id=unique("m"), member_epoch=0,
                                               rebalance_timeout_ms=30000, subscribed_topic_names=topics,
                                               topic_partitions=[]), 0)  # fmt: skip
        return r.error_code, r.error_message, r.member_epoch

    with target.connection() as c:
        assert beat(c, [seen]) == (E.GROUP_AUTHORIZATION_FAILED, None, 0)
        target.grant(acl(GROUP, gid, READ))
        assert beat(c, [seen, hidden]) == (E.TOPIC_AUTHORIZATION_FAILED, None, 0)
        with target.connection("admin") as admin:
            assert described(admin, gid) == [(gid, 0, "Dead", None)]
        err, _, epoch = beat(c, [seen])
        assert err == 0 and epoch >= 1


def _produce(topic: str) -> Any:
    P = ProduceRequest.TopicProduceData
    batch = build_batch([NewRecord(b"k", b"v")])
    data = [P(name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])]
    return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=data)


def test_consumer_group_describe_hides_groups_with_forbidden_topics(target: AuthzTarget) -> None:
    """KIP-848 describe (Kafka 4): DESCRIBE on the group, and then on every topic its members' assignments
    name, else TOPIC_AUTHORIZATION_FAILED with Kafka's message and no members."""
    seen, hidden, gid, other = unique("authz-cs"), unique("authz-ch"), unique("authz-cg"), unique("authz-cg")
    for t in (seen, hidden):
        target.create_topic(t)

    def describe(c: Connection, *gids: str) -> list[tuple[str, int, str | None, set[str]]]:
        r = c.do(ConsumerGroupDescribeRequest(group_ids=list(gids), include_authorized_operations=True), 0)
        shown = [{tp.topic_name for m in g.members for tp in m.assignment.topic_partitions} for g in r.groups]
        return [(g.group_id, g.error_code, g.error_message, s) for g, s in zip(r.groups, shown, strict=True)]

    with target.connection("admin") as c:
        member, epoch = unique("m"), 0
        # As a client does: find the coordinator first (on Kafka this creates __consumer_offsets, without which
        # a heartbeat is answered NOT_COORDINATOR).
        eventually(lambda: assert_equal(
            [x.error_code for x in c.do(FindCoordinatorRequest(key_type=0, coordinator_keys=[gid]), 4).coordinators],
            [0]))  # fmt: skip

        def heartbeat_then_describe() -> None:
            # The member heartbeats until its assignment names both topics: Kafka's coordinator sees a topic
            # just created only once its metadata image has it, and assigns it at a later heartbeat.
            nonlocal epoch
            r = c.do(ConsumerGroupHeartbeatRequest(group_id=gid, member_id=member, member_epoch=epoch,
                                                   rebalance_timeout_ms=30000, subscribed_topic_names=[seen, hidden],
                                                   topic_partitions=[]), 0)  # fmt: skip
            assert r.error_code == 0, r
            epoch = r.member_epoch
            assert_equal(describe(c, gid), [(gid, 0, None, {seen, hidden})])

        eventually(heartbeat_then_describe, timeout=60)
    target.grant(acl(GROUP, gid, DESCRIBE), acl(TOPIC, seen, DESCRIBE))
    hidden_topics = "The group has described topic(s) that the client is not authorized to describe."
    with target.connection() as c:
        assert describe(c, gid, other) == [
            (other, E.GROUP_AUTHORIZATION_FAILED, None, set()),
            (gid, E.TOPIC_AUTHORIZATION_FAILED, hidden_topics, set()),
        ]
    target.grant(acl(TOPIC, hidden, DESCRIBE))
    with target.connection() as c:
        r = c.do(ConsumerGroupDescribeRequest(group_ids=[gid], include_authorized_operations=True), 0)
        [g] = r.groups
        assert (g.error_code, g.authorized_operations) == (0, 1 << DESCRIBE.value)
