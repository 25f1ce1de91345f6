"""Authorization of the data plane (Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, Metadata) with ACLs,
on logbroker and on Apache Kafka with its StandardAuthorizer, configured alike.

Both brokers have a PLAINTEXT listener, where every client is User:ANONYMOUS, and a SASL_PLAINTEXT one
where PLAIN users log in: `admin` (a super user, who creates topics and ACLs through the admin client),
`alice` and `bob`. ACLs are created over the wire (CreateAcls) and the tests wait until the broker's own
DescribeAcls shows them (Kafka applies them from its metadata log a moment after answering).

The `AuthzTarget` harness here is shared by test_authz_groups.py and test_authz_txn.py.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from logbroker.protocol import ApiKey, api
from logbroker.protocol.errors import ErrorCode
from logbroker.protocol.records import NewRecord, build_batch
from logbroker_devtools.client.connection import Connection, fetch_request, parse_bootstrap
from logbroker_devtools.testing.net import free_ports
from logbroker_devtools.testing.process import BrokerProcess
from support import assert_equal, authz_kafka_peer, both_targets, eventually, unique

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
ANONYMOUS = "User:ANONYMOUS"
ListOffsetsRequest = api(ApiKey.ListOffsets).request
MetadataRequest = api(ApiKey.Metadata).request
OffsetForLeaderEpochRequest = api(ApiKey.OffsetForLeaderEpoch).request
ProduceRequest = api(ApiKey.Produce).request
E = ErrorCode


def acl(
    rtype: ResourceType,
    name: str,
    op: AclOperation,
    principal: str = ANONYMOUS,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, permission)


@dataclass
class AuthzTarget:
    """One broker with an authorizer: `bootstrap` for ANONYMOUS clients, `sasl_bootstrap` for USERS."""

    kind: str
    bootstrap: str
    sasl_bootstrap: str
    _admins: dict[str | None, AdminClient] = field(default_factory=dict)

    def conf(self, user: str | None = None, **extra: Any) -> dict[str, Any]:
        """confluent-kafka settings: PLAINTEXT (ANONYMOUS), or a PLAIN login as `user`."""
        if user is None:
            return {"bootstrap.servers": self.bootstrap, **extra}
        return {"bootstrap.servers": self.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "PLAIN", "sasl.username": user, "sasl.password": USERS[user], **extra}  # fmt: skip

    def admin(self, user: str | None = "admin") -> AdminClient:
        """One admin client per user, kept: a dropped one fails its pending futures."""
        if user not in self._admins:
            self._admins[user] = AdminClient(self.conf(user))
        return self._admins[user]

    def connection(self, user: str | None = None) -> Connection:
        """A raw connection (to see the codes clients hide), as ANONYMOUS or logged in as `user`."""
        if user is None:
            return Connection(*parse_bootstrap(self.bootstrap))
        return Connection(*parse_bootstrap(self.sasl_bootstrap), sasl=("PLAIN", user, USERS[user]))

    def create_topic(self, name: str, partitions: int = 1) -> None:
        for f in self.admin().create_topics([NewTopic(name, partitions, 1)]).values():
            f.result(30)
        # Kafka's partitions need a leader before they are served: the metadata names one a moment before
        # the partition answers (a produce then gets NOT_LEADER_OR_FOLLOWER), so wait for ListOffsets too.
        eventually(lambda: assert_equal(self.metadata_error(name, user="admin"), 0))
        eventually(lambda: assert_equal(end_offset(self, name), 0))

    def topic_exists(self, name: str) -> bool:
        return name in self.admin().list_topics(timeout=10).topics

    def metadata_error(self, name: str, user: str | None = None) -> int:
        with self.connection(user) as c:
            r = c.do(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name, topic_id=None)],
                                     allow_auto_topic_creation=False, include_topic_authorized_operations=False,
                                     include_cluster_authorized_operations=False), 9)  # fmt: skip
        [t] = r.topics
        return t.error_code

    def grant(self, *acls: AclBinding) -> None:
        for f in self.admin().create_acls(list(acls)).values():
            f.result(30)
        self._wait(acls, present=True)

    def revoke(self, *acls: AclBinding) -> None:
        filters = [AclBindingFilter(a.restype, a.name, a.resource_pattern_type, a.principal, a.host, a.operation,
                                    a.permission_type) for a in acls]  # fmt: skip
        for f in self.admin().delete_acls(filters).values():
            f.result(30)
        self._wait(acls, present=False)

    @contextlib.contextmanager
    def granted(self, *acls: AclBinding) -> Iterator[None]:
        """ACLs for the duration of a block (for cluster-wide or wildcard ones other tests would see)."""
        self.grant(*acls)
        try:
            yield
        finally:
            self.revoke(*acls)

    def _wait(self, acls: tuple[AclBinding, ...], present: bool) -> None:
        admin = self.admin()

        def applied() -> None:
            for a in acls:
                f = AclBindingFilter(a.restype, a.name, a.resource_pattern_type, a.principal, a.host, a.operation,
                                     a.permission_type)  # fmt: skip
                assert bool(admin.describe_acls(f).result(30)) == present, (a, present)

        eventually(applied)


@contextlib.contextmanager
def start_authz_target(kind: str, tmp: Path) -> Iterator[AuthzTarget]:
    """logbroker or Kafka with the same listeners, users and super user."""
    if kind == "kafka":
        with authz_kafka_peer(super_users=("User:admin",), users=USERS) as peer:
            yield AuthzTarget(kind, peer.bootstrap, peer.listener_bootstrap("SASL_PLAINTEXT"))
        return
    users = tmp / "plain-users"
    users.write_text("".join(f"{u}={p}\n" for u, p in USERS.items()))
    plain, sasl = free_ports(2)
    proc = BrokerProcess(tmp / "data", port=plain, extra_args=[
        "--listeners", f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "--sasl-enabled-mechanisms", "PLAIN", "--sasl-plain-users-file", str(users),
        "--authorizer", "--super-users", "User:admin", "--num-partitions", "1",
    ])  # fmt: skip
    proc.start()
    try:
        yield AuthzTarget(kind, proc.bootstrap, f"127.0.0.1:{sasl}")
    finally:
        rc = proc.stop()
        assert rc == 0, f"broker exited with {rc}:\n{proc.log_tail()}"


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthzTarget]:
    with start_authz_target(request.param, tmp_path_factory.mktemp("authz-data")) as t:
        yield t


# ------------------------------------------------------------------ raw requests


def produce(c: Connection, topic: str, acks: int = -1, partitions: tuple[int, ...] = (0,)) -> dict[int, int]:
    """Produce one record to each partition; the error code per partition."""
    P = ProduceRequest.TopicProduceData
    data = [P.PartitionProduceData(index=i, records=build_batch([NewRecord(b"k", b"v")])) for i in partitions]
    req = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=10_000,
                         topic_data=[P(name=topic, partition_data=data)])  # fmt: skip
    r = c.do(req, 9)
    return {p.index: p.error_code for t in r.responses for p in t.partition_responses}


def fetch(c: Connection, topic: str, replica_id: int = -1) -> tuple[int, int, int]:
    """(error, high watermark, bytes of records) of partition 0."""
    req = fetch_request(topic, 0, 0, max_wait_ms=0)
    req.replica_id = replica_id
    r = c.do(req, 11)
    [t] = r.responses
    [p] = t.partitions
    return p.error_code, p.high_watermark, len(p.records or b"")


def list_offsets(c: Connection, *topics: str) -> list[tuple[str, int, int, int, int]]:
    """(topic, partition, error, timestamp, offset) in the broker's order, for latest offsets."""
    T = ListOffsetsRequest.ListOffsetsTopic
    req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        T(name=t, partitions=[T.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])
        for t in topics
    ])  # fmt: skip
    r = c.do(req, 7)
    return [(t.name, p.partition_index, p.error_code, p.timestamp, p.offset) for t in r.topics for p in t.partitions]


def metadata(c: Connection, topics: list[str] | None, auto: bool = False, version: int = 9) -> Any:
    T = MetadataRequest.MetadataRequestTopic
    return c.do(MetadataRequest(topics=None if topics is None else [T(name=n, topic_id=None) for n in topics],
                                allow_auto_topic_creation=auto, include_topic_authorized_operations=True,
                                include_cluster_authorized_operations=True), version)  # fmt: skip


def end_offset(target: AuthzTarget, topic: str) -> int:
    with target.connection("admin") as c:
        [(_, _, err, _, offset)] = list_offsets(c, topic)
    assert err == 0
    return offset


def closed_by_peer(c: Connection, timeout: float = 10.0) -> bool:
    """Whether the broker closes the connection (Kafka's only answer to a failed acks=0 produce)."""
    c.sock.settimeout(timeout)
    try:
        return c.sock.recv(1) == b""
    except (TimeoutError, ConnectionResetError):
        return False


# ------------------------------------------------------------------ tests


def test_write_without_read(target: AuthzTarget) -> None:
    """WRITE on a topic lets ANONYMOUS produce (and describe) but not fetch it."""
    topic = unique("authz-w")
    target.create_topic(topic)
    target.grant(acl(ResourceType.TOPIC, topic, AclOperation.WRITE))
    p = ck.Producer(target.conf())
    delivered: list[Any] = []
    p.produce(topic, b"v", on_delivery=lambda err, msg: delivered.append(err))
    p.flush(30)
    assert delivered == [None]
    with target.connection() as c:
        assert produce(c, topic) == {0: 0}
        assert fetch(c, topic) == (E.TOPIC_AUTHORIZATION_FAILED, -1, 0)
        # WRITE implies DESCRIBE: offsets may be listed.
        assert list_offsets(c, topic) == [(topic, 0, 0, -1, 2)]
    group = unique("g")
    target.grant(acl(ResourceType.GROUP, group, AclOperation.READ))
    consumer = ck.Consumer(target.conf(**{"group.id": group, "enable.auto.commit": False}))
    try:
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        err = None
        deadline = time.monotonic() + 30
        while err is None and time.monotonic() < deadline:
            m = consumer.poll(1)
            if m is not None and m.error() is not None:
                err = m.error()
        assert err is not None and err.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    finally:
        consumer.close()


def test_read_without_write(target: AuthzTarget) -> None:
    """READ lets ANONYMOUS fetch but not produce: TOPIC_AUTHORIZATION_FAILED per partition, nothing stored."""
    topic = unique("authz-r")
    target.create_topic(topic, partitions=2)
    with target.connection("admin") as c:
        assert produce(c, topic) == {0: 0}
    target.grant(acl(ResourceType.TOPIC, topic, AclOperation.READ))
    with target.connection() as c:
        assert produce(c, topic, partitions=(0, 1)) == {
            0: E.TOPIC_AUTHORIZATION_FAILED,
            1: E.TOPIC_AUTHORIZATION_FAILED,
        }
        err, hwm, size = fetch(c, topic)
        assert (err, hwm) == (0, 1) and size > 0
    assert end_offset(target, topic) == 1
    p = ck.Producer(target.conf(**{"message.timeout.ms": 10_000}))
    delivered: list[Any] = []
    p.produce(topic, b"v", partition=0, on_delivery=lambda err, msg: delivered.append(err))
    p.flush(30)
    assert [e.code() for e in delivered] == [ck.KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert end_offset(target, topic) == 1


def test_acks_0_produce_to_a_forbidden_topic_closes_the_connection(target: AuthzTarget) -> None:
    topic = unique("authz-a0")
    target.create_topic(topic)
    with target.connection() as c:
        P = ProduceRequest.TopicProduceData
        batch = build_batch([NewRecord(b"k", b"v")])
        data = [P(name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])]
        req = ProduceRequest(transactional_id=None, acks=0, timeout_ms=1000, topic_data=data)
        c.send(req, 9)
        assert closed_by_peer(c)
    assert end_offset(target, topic) == 0


def test_metadata_hides_what_may_not_be_described(target: AuthzTarget) -> None:
    seen, hidden = unique("authz-m"), unique("authz-m")
    missing = unique("authz-m-missing")
    for t in (seen, hidden):
        target.create_topic(t)
    target.grant(acl(ResourceType.TOPIC, seen, AclOperation.READ))
    with target.connection() as c:
        everything = metadata(c, None)
        names = {t.name for t in everything.topics}
        assert seen in names and hidden not in names
        r = metadata(c, [seen, hidden, missing])
        by_name = {t.name: t for t in r.topics}
        assert r.topics[0].name == seen  # those refused come after the others
        # READ implies DESCRIBE; the bitfield lists what the principal holds.
        read_describe = {AclOperation.READ.value, AclOperation.DESCRIBE.value}
        assert (by_name[seen].error_code, by_name[seen].authorized_operations) == (0, read_describe)
        for name in (hidden, missing):  # a forbidden topic's existence is not told
            t = by_name[name]
            assert (t.error_code, t.partitions, t.authorized_operations) == (E.TOPIC_AUTHORIZATION_FAILED, [], None)
        # Without DESCRIBE on the cluster the cluster's operations are 0, not "not requested".
        assert r.authorized_operations == set()
        assert (r.cluster_id, len(r.brokers)) == (everything.cluster_id, 1)
    with target.connection("admin") as c:
        r = metadata(c, [seen])
        assert r.topics[0].authorized_operations == {3, 4, 5, 6, 7, 8, 10, 11}
        assert r.authorized_operations == {5, 7, 8, 9, 10, 11, 12}


def test_auto_creation_needs_create(target: AuthzTarget) -> None:
    """DESCRIBE alone does not auto-create a topic; CREATE on it (here by prefix) does."""
    prefix = unique("authz-ac") + "-"
    name = prefix + "x"
    target.grant(acl(ResourceType.TOPIC, name, AclOperation.DESCRIBE))
    with target.connection() as c:
        [t] = metadata(c, [name], auto=True).topics
        assert (t.name, t.error_code, t.is_internal) == (name, E.TOPIC_AUTHORIZATION_FAILED, False)
    assert not target.topic_exists(name)
    target.grant(acl(ResourceType.TOPIC, prefix, AclOperation.CREATE, pattern=ResourcePatternType.PREFIXED))
    with target.connection() as c:
        [t] = metadata(c, [name], auto=True).topics
        # Kafka's first answer comes before its controller has created the topic.
        assert t.error_code in (0, E.LEADER_NOT_AVAILABLE, E.UNKNOWN_TOPIC_OR_PARTITION)
    eventually(lambda: assert_equal(target.topic_exists(name), True))


def test_prefixed_acls_and_deny_over_allow(target: AuthzTarget) -> None:
    prefix = unique("authz-p") + "-"
    a, b, other = prefix + "a", prefix + "b", unique("authz-q")
    for t in (a, b, other):
        target.create_topic(t)
    target.grant(
        acl(ResourceType.TOPIC, prefix, AclOperation.READ, pattern=ResourcePatternType.PREFIXED),
        acl(ResourceType.TOPIC, b, AclOperation.READ, permission=AclPermissionType.DENY),
    )
    with target.connection() as c:
        assert fetch(c, a)[0] == 0
        assert fetch(c, b)[0] == E.TOPIC_AUTHORIZATION_FAILED  # a DENY wins over any ALLOW
        assert fetch(c, other)[0] == E.TOPIC_AUTHORIZATION_FAILED
        # ListOffsets answers the refused topics after the others, with no offset or timestamp.
        # (b: the DENY is for READ, and the prefixed READ implies the DESCRIBE ListOffsets needs.)
        # (Kafka orders the answered ones as its partition map has them.)
        answer = list_offsets(c, other, b, a)
        assert sorted(answer[:2]) == [(a, 0, 0, -1, 0), (b, 0, 0, -1, 0)]
        assert answer[2:] == [(other, 0, E.TOPIC_AUTHORIZATION_FAILED, -1, -1)]
        T = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
        r = c.do(OffsetForLeaderEpochRequest(replica_id=-1, topics=[
            T(topic=t, partitions=[T.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)])
            for t in (other, a)
        ]), 4)  # fmt: skip
        assert [(t.topic, [(p.error_code, p.end_offset) for p in t.partitions]) for t in r.topics] == [
            (a, [(0, 0)]),
            (other, [(E.TOPIC_AUTHORIZATION_FAILED, -1)]),
        ]


def test_a_replica_fetch_needs_cluster_action(target: AuthzTarget) -> None:
    """A fetch with a replica id is a follower's: READ on the topic is not enough."""
    topic = unique("authz-rep")
    target.create_topic(topic)
    target.grant(acl(ResourceType.TOPIC, topic, AclOperation.READ))
    with target.connection() as c:
        assert fetch(c, topic, replica_id=-1)[0] == 0
        assert fetch(c, topic, replica_id=7) == (E.TOPIC_AUTHORIZATION_FAILED, -1, 0)


def test_super_user_and_named_principals(target: AuthzTarget) -> None:
    """The super user needs no ACL; an ACL for alice lets her in and not bob (nor ANONYMOUS)."""
    topic = unique("authz-u")
    target.create_topic(topic)
    with target.connection("admin") as c:
        assert produce(c, topic) == {0: 0}
        assert fetch(c, topic)[0] == 0
    target.grant(acl(ResourceType.TOPIC, topic, AclOperation.ALL, principal="User:alice"))
    with target.connection("alice") as c:
        assert produce(c, topic) == {0: 0}
        assert fetch(c, topic)[:2] == (0, 2)
    for user in ("bob", None):
        with target.connection(user) as c:
            assert produce(c, topic) == {0: E.TOPIC_AUTHORIZATION_FAILED}
            assert fetch(c, topic)[0] == E.TOPIC_AUTHORIZATION_FAILED
    consumer = ck.Consumer(target.conf("alice", **{"group.id": unique("g"), "enable.auto.commit": False}))
    try:
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            m = consumer.poll(1)
            if m is not None and m.error() is None:
                got.append(m.value())
        assert got == [b"v", b"v"]
    finally:
        consumer.close()
