"""Client-created group state is bounded as in Kafka 4.4, asserted on logbroker and on Apache Kafka alike.

Group ids: each API validates them as Kafka does (most take any string, control bytes and 32 KiB included;
the empty id is refused by some, accepted by others; a longer string closes the connection). Groups expire:
Kafka's periodic cleanup (every `offsets.retention.check.interval.ms`) drops expired offsets and then every
empty group left without offsets, durably. Members are bounded by `group.max.size` /
`group.consumer.max.size`. Both brokers run with a short check interval and group sizes of 1; Kafka's
smallest retention is a minute, so expiry on both is driven by OffsetCommit v2's `retention_time_ms`, and
the retention-period paths (and restarts) are checked on logbroker alone with `offsets_retention_ms`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import confluent_kafka as ck
import pytest
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
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
from kafka.protocol.metadata import FindCoordinatorRequest

from logbroker.protocol.errors import ErrorCode as E
from logbroker.protocol.kip848 import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest
from logbroker.protocol.messages import encode_request
from logbroker_devtools.client.connection import Connection, _spec_for, parse_bootstrap
from logbroker_devtools.testing.process import BrokerProcess
from support import both_targets, create_topic, eventually, kafka_peer, unique

pytestmark = pytest.mark.timeout(180)

CHECK_MS = 1500  # offsets.retention.check.interval.ms on both brokers
KAFKA_PROPS = {
    "offsets.retention.check.interval.ms": CHECK_MS,
    "offsets.retention.minutes": 1,
    "group.max.size": 1,
    "group.consumer.max.size": 1,
}
LOGBROKER_ENV = {
    "LOGBROKER_OFFSETS_RETENTION_CHECK_INTERVAL_MS": str(CHECK_MS),
    "LOGBROKER_OFFSETS_RETENTION_MINUTES": "1",
    "LOGBROKER_GROUP_MAX_SIZE": "1",
    "LOGBROKER_GROUP_CONSUMER_MAX_SIZE": "1",
}
MAX = 0x7FFF  # the most UTF-8 bytes a Kafka string holds
BAD_UTF8_MARK = "\u2603" * 2  # 6 bytes, replaced on the wire by invalid UTF-8 of the same length
BAD_UTF8 = b"\xff\xfe\xc3\x28\xed\xa0"

OC = OffsetCommitRequest
H = ConsumerGroupHeartbeatRequest
J = JoinGroupRequest


@dataclass
class Target:
    name: str
    bootstrap: str
    proc: BrokerProcess | None  # logbroker's process (None for Kafka)
    topic: str


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """logbroker or Apache Kafka with the same group settings (the param id names it)."""
    if request.param == "logbroker":
        proc = BrokerProcess(tmp_path_factory.mktemp("group-limits") / "data", env=LOGBROKER_ENV)
        proc.start()
        try:
            yield _ready(Target("logbroker", proc.bootstrap, proc, ""))
        finally:
            assert proc.stop() == 0, proc.log_tail()
        return
    with kafka_peer(**KAFKA_PROPS) as bootstrap:
        yield _ready(Target("kafka", bootstrap, None, ""))


def _ready(t: Target) -> Target:
    """A topic to commit on, and a coordinator that answers (Kafka creates its offsets topic on demand)."""
    t.topic = create_topic(t.bootstrap, unique("limits"))
    deadline = time.monotonic() + 60
    with conn(t) as c:
        while c.do(FindCoordinatorRequest(key="probe", key_type=0, coordinator_keys=["probe"]), 3).error_code:
            assert time.monotonic() < deadline, "no group coordinator"
            time.sleep(0.2)
    return t


def conn(t: Target) -> Connection:
    host, port = parse_bootstrap(t.bootstrap)
    return Connection(host, port, client_id="group-limits", timeout=20)


def raw(t: Target, request: Any, version: int, bad_utf8: bool = False) -> Any:
    """Send one request on a fresh connection; the decoded answer, or None when the broker closed the
    connection without one. `bad_utf8` swaps BAD_UTF8_MARK's bytes for invalid UTF-8 of the same length."""
    spec = _spec_for(type(request))
    frame = bytes(encode_request(spec, version, 1, "group-limits", request))
    if bad_utf8:
        assert BAD_UTF8_MARK.encode() in frame
        frame = frame.replace(BAD_UTF8_MARK.encode(), BAD_UTF8)
    with conn(t) as c:
        c.sock.sendall(frame)
        try:
            return c.receive(spec, version, 1)
        except ConnectionError:
            return None


# ------------------------------------------------------------------------------------------------ requests


def join(gid: str, member_id: str = "", metadata: bytes = b"", session_ms: int = 30000, **kw: Any) -> J:
    protocols = kw.pop("protocols", [J.JoinGroupRequestProtocol(name="range", metadata=metadata)])
    return J(group_id=gid, session_timeout_ms=session_ms, rebalance_timeout_ms=10000, member_id=member_id,
             group_instance_id=None, protocol_type="consumer", protocols=protocols, reason=None, **kw)  # fmt: skip


def commit(gid: str, topic: str, offset: int = 5, retention_ms: int = -1, member: str = "", generation: int = -1) -> OC:
    part = OC.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""
    )
    topics = [OC.OffsetCommitRequestTopic(name=topic, partitions=[part])]
    return OC(group_id=gid, generation_id_or_member_epoch=generation, member_id=member, group_instance_id=None,
              retention_time_ms=retention_ms, topics=topics)  # fmt: skip


def fetch(gid: str, topic: str) -> OffsetFetchRequest:
    R = OffsetFetchRequest
    topics = [R.OffsetFetchRequestGroup.OffsetFetchRequestTopics(name=topic, partition_indexes=[0])]
    return R(group_id=gid, topics=[R.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])],
             groups=[R.OffsetFetchRequestGroup(group_id=gid, topics=topics)], require_stable=False)  # fmt: skip


def heartbeat848(gid: str, member_id: str | None = None, epoch: int = 0, **kw: Any) -> H:
    fields: dict[str, Any] = {"rebalance_timeout_ms": 30000, "subscribed_topic_names": ["t"], "topic_partitions": []}
    fields.update(kw)
    return H(group_id=gid, member_id=member_id or str(uuid.uuid4()), member_epoch=epoch, **fields)


def committed(t: Target, gid: str) -> int:
    resp = conn_do(t, fetch(gid, t.topic), 5)
    [part] = resp.topics[0].partitions
    return part.committed_offset


def conn_do(t: Target, request: Any, version: int) -> Any:
    with conn(t) as c:
        return c.do(request, version)


def listed(t: Target) -> dict[str, str]:
    resp = conn_do(t, ListGroupsRequest(states_filter=[], types_filter=[]), 4)
    return {g.group_id: g.group_state for g in resp.groups}


def described(t: Target, gid: str) -> tuple[int, str]:
    [g] = conn_do(t, DescribeGroupsRequest(groups=[gid], include_authorized_operations=False), 5).groups
    return g.error_code, g.group_state


def wait_for(what: str, check: Callable[[], bool], timeout: float) -> float:
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < timeout, f"timed out waiting for {what}"
        time.sleep(0.1)
    return time.monotonic() - start


def one_error(resp: Any) -> int:
    return resp.topics[0].partitions[0].error_code


# ------------------------------------------------------------------------------------------------ group ids


def test_empty_group_id_per_api(target: Target) -> None:
    """Kafka refuses the empty id in the membership APIs (INVALID_GROUP_ID; KIP-848's heartbeat says
    INVALID_REQUEST) but accepts it where it only checks for null: FindCoordinator, OffsetCommit,
    OffsetFetch, DescribeGroups, DeleteGroups: a simple group named "" can be created and deleted."""
    t = target
    conn_do(t, DeleteGroupsRequest(groups_names=[""]), 2)  # from an earlier run on this broker, if any
    assert conn_do(t, FindCoordinatorRequest(key="", key_type=0), 0).error_code == 0
    coordinator = conn_do(t, FindCoordinatorRequest(key_type=0, coordinator_keys=[""]), 4).coordinators[0]
    assert (coordinator.key, coordinator.error_code, coordinator.error_message) == ("", 0, "")
    joined = conn_do(t, join("", member_id="m"), 5)
    assert (joined.error_code, joined.member_id) == (E.INVALID_GROUP_ID, "m")
    sync = SyncGroupRequest(group_id="", generation_id=1, member_id="m", group_instance_id=None, assignments=[])
    assert conn_do(t, sync, 3).error_code == E.INVALID_GROUP_ID
    beat = HeartbeatRequest(group_id="", generation_id=1, member_id="m", group_instance_id=None)
    assert conn_do(t, beat, 3).error_code == E.INVALID_GROUP_ID
    assert conn_do(t, LeaveGroupRequest(group_id="", member_id="m"), 0).error_code == E.INVALID_GROUP_ID
    leave = conn_do(t, LeaveGroupRequest(group_id="", members=[LeaveGroupRequest.MemberIdentity(member_id="m")]), 4)
    assert (leave.error_code, leave.members) == (E.INVALID_GROUP_ID, [])
    odel = OffsetDeleteRequest(group_id="", topics=[OffsetDeleteRequest.OffsetDeleteRequestTopic(
        name=t.topic, partitions=[OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(
            partition_index=0)])])  # fmt: skip
    assert conn_do(t, odel, 0).error_code == E.INVALID_GROUP_ID
    for blank in ("", " \t\n", "\x00\x01"):  # Java's trim() empties the last two
        hb = conn_do(t, heartbeat848(blank), 1)
        assert (hb.error_code, hb.error_message) == (E.INVALID_REQUEST, "GroupId can't be empty."), repr(blank)
    [cgd] = conn_do(t, ConsumerGroupDescribeRequest(group_ids=[""], include_authorized_operations=False), 0).groups
    assert (cgd.error_code, cgd.error_message, cgd.group_state) == (E.INVALID_GROUP_ID, None, "")

    assert described(t, "") == (0, "Dead")
    assert one_error(conn_do(t, commit("", t.topic, 7), 9)) == 0
    assert committed(t, "") == 7
    assert described(t, "") == (0, "Empty")
    assert listed(t).get("") == "Empty"
    assert conn_do(t, DeleteGroupsRequest(groups_names=[""]), 2).results[0].error_code == 0
    assert described(t, "") == (0, "Dead") and committed(t, "") == -1


def test_control_bytes_and_32k_group_ids_are_ordinary(target: Target) -> None:
    """Kafka puts no rule on a group id's characters or length (up to a string's 32767 bytes): such groups
    are created, listed, described, committed to and deleted like any other."""
    t = target
    ctrl = f"ctl\n2099-01-01 ERROR injected\x1b[31m\x00\x7f-{uuid.uuid4().hex[:8]}"
    huge = uuid.uuid4().hex + "\u00e9" * ((MAX - 32) // 2)  # 32766 bytes in 16399 characters
    assert len(huge.encode()) == MAX - 1
    for gid in (ctrl, huge):
        first = conn_do(t, join(gid), 5)
        assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id
        assert one_error(conn_do(t, commit(gid, t.topic, 11), 2)) == 0  # v2: a classic (int16) string
        assert committed(t, gid) == 11
        assert listed(t).get(gid) == "Empty"
        assert described(t, gid) == (0, "Empty")
        assert conn_do(t, DeleteGroupsRequest(groups_names=[gid]), 2).results[0].error_code == 0
        assert described(t, gid) == (0, "Dead")


def test_error_messages_too_long_for_kafka(target: Target) -> None:
    """ "Group <id> not found." is 17 bytes longer than the id: past 32767 bytes Kafka cannot send it and
    answers UNKNOWN_SERVER_ERROR without a message instead."""
    t = target
    fits = uuid.uuid4().hex + "x" * (MAX - 17 - 32)
    too_long = uuid.uuid4().hex + "x" * (MAX - 16 - 32)
    for gid, code, message, state in ((fits, E.GROUP_ID_NOT_FOUND, f"Group {fits} not found.", "Dead"),
                                      (too_long, E.UNKNOWN_SERVER_ERROR, None, "")):  # fmt: skip

        def described(gid: str = gid) -> Any:  # Kafka answers COORDINATOR_LOAD_IN_PROGRESS while it loads
            [dg] = conn_do(t, DescribeGroupsRequest(groups=[gid], include_authorized_operations=False), 6).groups
            assert dg.error_code not in (E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE), dg
            return dg

        dg = eventually(described, timeout=30)
        assert (dg.error_code, dg.error_message, dg.group_state, dg.group_id == gid) == (code, message, state, True)
        cgd = ConsumerGroupDescribeRequest(group_ids=[gid], include_authorized_operations=False)
        [cg] = conn_do(t, cgd, 0).groups
        assert (cg.error_code, cg.error_message) == (code, message)
        # "Consumer group <id> not found." is 9 bytes longer again: too long for both ids.
        hb = conn_do(t, heartbeat848(gid, epoch=5), 1)
        assert (hb.error_code, hb.error_message) == (E.UNKNOWN_SERVER_ERROR, None)


@pytest.mark.parametrize(
    "name, request_of, version",
    [
        ("JoinGroup", lambda gid: join(gid), 9),
        ("DescribeGroups", lambda gid: DescribeGroupsRequest(groups=[gid], include_authorized_operations=False), 5),
        ("ConsumerGroupHeartbeat", lambda gid: heartbeat848(gid), 1),
        ("OffsetFetch", lambda gid: fetch(gid, "t"), 9),
        ("FindCoordinator", lambda gid: FindCoordinatorRequest(key_type=0, coordinator_keys=[gid]), 4),
    ],
)
def test_group_id_longer_than_a_kafka_string_closes_the_connection(
    target: Target, name: str, request_of: Callable[[str], Any], version: int
) -> None:
    """A flexible version can encode a 40000-byte string; Kafka's reader refuses it and closes the
    connection, and so does logbroker (storing nothing), which goes on serving everyone else."""
    t = target
    gid = uuid.uuid4().hex + "x" * 40000
    mark = t.proc.log_path.stat().st_size if t.proc else 0
    assert raw(t, request_of(gid), version) is None
    assert gid not in listed(t)
    if t.proc is not None:
        log = t.proc.log_path.read_bytes()[mark:].decode(errors="replace")
        assert f"{name}Request v{version}: string field" in log and "invalid length 40032" in log, log[-2000:]


def test_invalid_utf8_group_id(target: Target) -> None:
    """Java decodes malformed UTF-8 into U+FFFD: Kafka serves the request (the id it answers with carries
    the replacement characters)."""
    gid = f"utf-{uuid.uuid4().hex[:8]}-{BAD_UTF8_MARK}"
    resp = raw(target, join(gid), 5, bad_utf8=True)
    assert resp is not None and resp.error_code == E.MEMBER_ID_REQUIRED
    [dg] = raw(target, DescribeGroupsRequest(groups=[gid], include_authorized_operations=False), 5, True).groups
    assert dg.error_code == 0 and dg.group_id.startswith(gid[:12]) and "\ufffd" in dg.group_id


# ------------------------------------------------------------------------------------------------ expiry


def test_failed_requests_leave_no_group(target: Target) -> None:
    """Requests Kafka refuses before it looks a group up, or that name a member of a group that does not
    exist, create nothing: a client cannot pile up groups with them."""
    t = target
    ids = [unique("nogroup") for _ in range(5)]
    assert conn_do(t, join(ids[0], member_id="someone"), 5).error_code == E.UNKNOWN_MEMBER_ID
    assert conn_do(t, join(ids[1], session_ms=1), 5).error_code == E.INVALID_SESSION_TIMEOUT
    hb = conn_do(t, heartbeat848(ids[2], server_assignor="sticky"), 1)
    assert (hb.error_code, hb.error_message) == (
        E.UNSUPPORTED_ASSIGNOR,
        "ServerAssignor sticky is not supported. Supported assignors: uniform, range.",
    )
    hb = conn_do(t, heartbeat848(ids[3], rebalance_timeout_ms=-1), 1)
    assert (hb.error_code, hb.member_epoch, hb.heartbeat_interval_ms) == (E.INVALID_REQUEST, 0, 0)
    hb = conn_do(t, heartbeat848(ids[4], epoch=3), 1)
    assert (hb.error_code, hb.error_message) == (E.GROUP_ID_NOT_FOUND, f"Consumer group {ids[4]} not found.")
    assert one_error(conn_do(t, commit(ids[4], t.topic, generation=1, member="m"), 9)) == E.GROUP_ID_NOT_FOUND
    assert one_error(conn_do(t, commit(ids[4], t.topic, generation=1, member="m"), 8)) == E.ILLEGAL_GENERATION
    now = listed(t)
    assert not [g for g in ids if g in now]


def test_empty_groups_without_offsets_go_at_the_next_check(target: Target) -> None:
    """A group made by a JoinGroup that only got a member id, or a KIP-848 group whose member left, has no
    offsets: Kafka's next cleanup removes it (a live group stays). The pending member id is then unknown."""
    t = target
    pending, left, live = unique("pending"), unique("left848"), unique("live")
    first = conn_do(t, join(pending), 5)
    assert first.error_code == E.MEMBER_ID_REQUIRED
    with conn(t) as c:
        r = c.do(heartbeat848(left, subscribed_topic_names=[t.topic]), 1)
        assert r.error_code == 0
        assert c.do(heartbeat848(left, r.member_id, -1), 1).error_code == 0
        alive = c.do(heartbeat848(live, subscribed_topic_names=[t.topic]), 1)
        assert alive.error_code == 0
        took = wait_for("empty groups to go", lambda: not {pending, left} & set(listed(t)), 3 * CHECK_MS / 1000 + 5)
        assert took < 2 * CHECK_MS / 1000 + 2
        assert listed(t).get(live) in ("Stable", "Reconciling", "Assigning")
        rejoin = c.do(join(pending, member_id=first.member_id), 5)
        assert rejoin.error_code == E.UNKNOWN_MEMBER_ID
        assert c.do(heartbeat848(live, alive.member_id, -1), 1).error_code == 0


def test_explicit_offset_retention_expires_offsets_then_the_group(target: Target) -> None:
    """OffsetCommit v2's retention_time_ms gives each offset its own expiry: a simple group goes once its
    offset has expired (one committed without it stays); a classic group keeps an expired offset of a topic
    its member subscribes to while it is Stable, and goes after the member leaves."""
    t = target
    simple, keeper, classic = unique("simple"), unique("keeper"), unique("classic")
    assert one_error(conn_do(t, commit(simple, t.topic, 3, retention_ms=500), 2)) == 0
    assert one_error(conn_do(t, commit(keeper, t.topic, 4), 2)) == 0
    sub = ConsumerProtocolSubscription(version=0, topics=[t.topic], user_data=None).encode(version=0, header=True)
    with conn(t) as c:
        first = c.do(join(classic, metadata=sub), 5)
        joined = c.do(join(classic, first.member_id, metadata=sub), 5)
        assert joined.error_code == 0
        sync = SyncGroupRequest(group_id=classic, generation_id=joined.generation_id, member_id=joined.member_id,
                                group_instance_id=None, assignments=[])  # fmt: skip
        assert c.do(sync, 3).error_code == 0
        member = {"member": joined.member_id, "generation": joined.generation_id}
        assert one_error(c.do(commit(classic, t.topic, 9, retention_ms=500, **member), 2)) == 0
        wait_for("the simple group to expire", lambda: simple not in listed(t), 3 * CHECK_MS / 1000 + 5)
        assert committed(t, simple) == -1 and described(t, simple) == (0, "Dead")
        assert committed(t, keeper) == 4 and committed(t, classic) == 9  # subscribed: kept though expired
        assert listed(t).get(classic) == "Stable"
        leave = LeaveGroupRequest(group_id=classic, members=[LeaveGroupRequest.MemberIdentity(
            member_id=joined.member_id)])  # fmt: skip
        assert c.do(leave, 3).error_code == 0
    wait_for("the emptied group to expire", lambda: classic not in listed(t), 3 * CHECK_MS / 1000 + 5)
    assert committed(t, classic) == -1 and committed(t, keeper) == 4


def test_group_max_size(target: Target) -> None:
    """group.max.size and group.consumer.max.size (1 here): a newcomer to a full group is refused with
    GROUP_MAX_SIZE_REACHED (a classic one with no member id), members already in go on."""
    t = target
    classic, kip848 = unique("full"), unique("full848")
    with conn(t) as c:
        first = c.do(join(classic), 5)
        joined = c.do(join(classic, first.member_id), 5)
        assert joined.error_code == 0
        sync = SyncGroupRequest(group_id=classic, generation_id=joined.generation_id, member_id=joined.member_id,
                                group_instance_id=None, assignments=[])  # fmt: skip
        assert c.do(sync, 3).error_code == 0
        refused = c.do(join(classic), 5)
        assert (refused.error_code, refused.member_id) == (E.GROUP_MAX_SIZE_REACHED, "")
        beat = HeartbeatRequest(group_id=classic, generation_id=joined.generation_id, member_id=joined.member_id,
                                group_instance_id=None)  # fmt: skip
        assert c.do(beat, 3).error_code == 0
        a = c.do(heartbeat848(kip848, subscribed_topic_names=[t.topic]), 1)
        assert a.error_code == 0
        b = c.do(heartbeat848(kip848, subscribed_topic_names=[t.topic]), 1)
        assert (b.error_code, b.error_message) == (
            E.GROUP_MAX_SIZE_REACHED,
            "The consumer group has reached its maximum capacity of 1 members.",
        )
        assert c.do(heartbeat848(kip848, a.member_id, a.member_epoch), 1).error_code == 0
        [d] = c.do(ConsumerGroupDescribeRequest(group_ids=[kip848], include_authorized_operations=False), 0).groups
        assert [m.member_id for m in d.members] == [a.member_id]
        assert c.do(heartbeat848(kip848, a.member_id, -1), 1).error_code == 0


# ------------------------------------------------------------------------------------------------ logbroker


def test_control_bytes_in_group_ids_are_escaped_in_the_log(broker: BrokerProcess) -> None:
    """A group id may hold a newline and escape sequences (Kafka accepts them): logbroker's log shows them
    escaped, so a client cannot forge log lines."""
    proc = broker
    target = Target("logbroker", broker.bootstrap, broker, "")
    gid = f"inj\n2099-01-01 00:00:00,000 ERROR forged\x1b[2J-{uuid.uuid4().hex[:8]}"
    mark = proc.log_path.stat().st_size
    resp = conn_do(target, join(gid, session_ms=30000), 0)  # v0: joins at once, and the rebalance is logged
    assert resp.error_code == 0
    escaped = gid.encode("unicode_escape").decode()
    wait_for("the rebalance log line", lambda: escaped in proc.log_path.read_bytes()[mark:].decode(), 10)
    log = proc.log_path.read_bytes()[mark:]
    assert b"\x1b" not in log and b"\n2099-01-01" not in log
    conn_do(target, LeaveGroupRequest(group_id=gid, member_id=resp.member_id), 0)


@pytest.mark.parametrize("kill", [False, True])
def test_expired_groups_stay_gone_after_a_restart(fresh_broker: BrokerProcess, kill: bool) -> None:
    """Real clients on logbroker with a 1 s retention: a classic group's offsets expire a retention period
    after it became empty, a KIP-848 group's after their commit; both groups go, with tombstones, so neither
    a clean restart nor kill -9 brings them back. A group still in use is kept."""
    fresh_broker.env = {
        "LOGBROKER_OFFSETS_RETENTION_MS": "1000",
        "LOGBROKER_OFFSETS_RETENTION_CHECK_INTERVAL_MS": "200",
    }
    fresh_broker.start()
    b = fresh_broker.bootstrap
    topic = create_topic(b, unique("expiry"))
    p = ck.Producer({"bootstrap.servers": b})
    for i in range(6):
        p.produce(topic, str(i).encode())
    assert p.flush(10) == 0
    groups = {"classic": unique("gone-classic"), "consumer": unique("gone-848"), "kept": unique("kept")}
    consumers = {}
    for kind, gid in groups.items():
        protocol = "consumer" if kind == "consumer" else "classic"
        c = ck.Consumer({"bootstrap.servers": b, "group.id": gid, "group.protocol": protocol,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 30
        while got < 6 and time.monotonic() < deadline:
            m = c.poll(0.2)
            got += m is not None and m.error() is None
        assert got == 6
        c.commit(asynchronous=False)
        consumers[kind] = c
    for kind in ("classic", "consumer"):
        consumers.pop(kind).close()
    t = Target("logbroker", b, fresh_broker, topic)
    took = wait_for("both idle groups to go", lambda: not {groups["classic"], groups["consumer"]} & set(listed(t)), 15)
    assert took > 0.8  # not before the retention period
    assert committed(t, groups["classic"]) == -1 and committed(t, groups["consumer"]) == -1
    assert committed(t, groups["kept"]) == 6
    consumers.pop("kept").close()
    # Restarted without cleanups for a while: only the tombstones can keep the groups away.
    fresh_broker.env = {"LOGBROKER_OFFSETS_RETENTION_MS": "1000"}
    if kill:
        fresh_broker.kill()
        fresh_broker.start()
    else:
        fresh_broker.restart()
    now = listed(t)
    assert groups["classic"] not in now and groups["consumer"] not in now
    assert described(t, groups["classic"]) == (0, "Dead") and committed(t, groups["consumer"]) == -1
