"""Streams groups (KIP-1071) on the wire, asserted alike on logbroker and Apache Kafka 4.4: a member's join with
its topology, the internal topics the broker creates, task assignment and the revoke-before-reassign handshake
between two processes, Kafka's refusals with its messages, and the group as the other group APIs see it. The
Kafka Streams application itself runs in test_frameworks.py; the durability of the group state here."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from logbroker.protocol import ApiKey, api
from logbroker.protocol.errors import ErrorCode as E
from logbroker_devtools.client.connection import Connection, parse_bootstrap
from logbroker_devtools.testing.process import BrokerProcess
from support import both_targets, create_topic, kafka_peer, unique

pytestmark = pytest.mark.timeout(240)

HB = api(ApiKey.StreamsGroupHeartbeat).request
SGD = api(ApiKey.StreamsGroupDescribe).request
LG = api(ApiKey.ListGroups).request
DGS = api(ApiKey.DescribeGroups).request
DEL = api(ApiKey.DeleteGroups).request
CGH = api(ApiKey.ConsumerGroupHeartbeat).request
OC = api(ApiKey.OffsetCommit).request
FC = api(ApiKey.FindCoordinator).request
Sub = HB.Topology.Subtopology
MISSING_SOURCE, MISSING_INTERNAL, DELAYED = 1, 3, 5
RETRIABLE = {E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR}
ENV = {"LOGBROKER_GROUP_STREAMS_INITIAL_REBALANCE_DELAY_MS": "0"}


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "logbroker":
        with BrokerProcess(tmp_path_factory.mktemp("streams-groups") / "data", env=ENV) as proc:
            yield proc.bootstrap
        return
    with kafka_peer(**{"group.streams.initial.rebalance.delay.ms": 0}) as kafka:
        yield kafka


@pytest.fixture
def conn(target: str) -> Iterator[Connection]:
    with Connection(*parse_bootstrap(target), timeout=30) as c:
        deadline = time.monotonic() + 30
        while c.do(FC(key="probe", key_type=0), 3).error_code != 0 and time.monotonic() < deadline:
            time.sleep(0.2)  # the group coordinator loads on first use
        yield c


def topology(source: str, app: str) -> Any:
    """Two subtopologies, as a word count makes them: 0 reads the source and writes the repartition topic, 1 reads
    it and keeps a counting store (its changelog)."""
    kv = HB.Topology.Subtopology.TopicInfo.KeyValue
    info = Sub.TopicInfo
    return HB.Topology(epoch=0, subtopologies=[
        Sub(subtopology_id="0", source_topics=[source], source_topic_regex=[], state_changelog_topics=[],
            repartition_sink_topics=[f"{app}-rep"], repartition_source_topics=[], copartition_groups=[]),
        Sub(subtopology_id="1", source_topics=[], source_topic_regex=[],
            state_changelog_topics=[info(name=f"{app}-store-changelog", partitions=0, replication_factor=-1,
                                         topic_configs=[kv(key="cleanup.policy", value="compact")])],
            repartition_sink_topics=[],
            repartition_source_topics=[info(name=f"{app}-rep", partitions=0, replication_factor=-1,
                                            topic_configs=[kv(key="cleanup.policy", value="delete"),
                                                           kv(key="retention.ms", value="-1")])],
            copartition_groups=[]),
    ])  # fmt: skip


def heartbeat(c: Connection, group: str, member: str, epoch: int, **fields: Any) -> Any:
    body = {"group_id": group, "member_id": member, "member_epoch": epoch, "endpoint_information_epoch": -1,
            "rebalance_timeout_ms": 30_000 if epoch == 0 else -1, **fields}  # fmt: skip
    if epoch == 0:
        body.setdefault("process_id", member + "-process")
        body.setdefault("active_tasks", [])
        body.setdefault("standby_tasks", [])
        body.setdefault("warmup_tasks", [])
    deadline = time.monotonic() + 30
    while True:
        r = c.do(HB(**body), 1)
        if r.error_code not in RETRIABLE or time.monotonic() > deadline:
            return r
        time.sleep(0.2)


def tasks(r: Any) -> set[tuple[str, int]] | None:
    if r.active_tasks is None:
        return None
    return {(t.subtopology_id, p) for t in r.active_tasks for p in t.partitions}


def owned(ts: set[tuple[str, int]]) -> dict[str, Any]:
    by: dict[str, list[int]] = {}
    for s, p in sorted(ts):
        by.setdefault(s, []).append(p)
    T = HB.TaskIds
    return {"active_tasks": [T(subtopology_id=s, partitions=ps) for s, ps in by.items()], "standby_tasks": [],
            "warmup_tasks": []}  # fmt: skip


class Member:
    """A member that heartbeats like Kafka Streams: it runs what it is given and reports what it owns."""

    def __init__(self, c: Connection, group: str, topo: Any) -> None:
        self.c, self.group, self.id = c, group, unique("member")
        self.epoch, self.tasks = 0, set()
        self.statuses: list[int] = []
        self.last = heartbeat(c, group, self.id, 0, topology=topo)
        self._apply(self.last)

    def _apply(self, r: Any) -> None:
        assert r.error_code == 0, (E(r.error_code).name, r.error_message)
        self.epoch = r.member_epoch
        self.statuses = [s.status_code for s in r.status or []]
        got = tasks(r)
        if got is not None:
            self.tasks = got

    def beat(self) -> Any:
        self.last = heartbeat(self.c, self.group, self.id, self.epoch, **owned(self.tasks))
        self._apply(self.last)
        return self.last


def settle(members: list[Member], until: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, [(m.epoch, sorted(m.tasks), m.statuses) for m in members]
        for m in members:
            m.beat()
        time.sleep(0.1)


ALL = {(s, p) for s in ("0", "1") for p in range(4)}


def test_a_join_creates_the_internal_topics_then_gets_every_task(target: str, conn: Connection) -> None:
    group, source = unique("app"), unique("src")
    create_topic(target, source, partitions=4)
    a = Member(conn, group, topology(source, group))
    # The internal topics are missing until the broker has created them; no task runs meanwhile.
    assert MISSING_INTERNAL in a.statuses and a.tasks == set()
    detail = a.last.status[0].status_detail  # the names in Kafka's set order (hash order there)
    assert detail.startswith("Internal topics are missing: ") and f"{group}-rep" in detail
    assert f"{group}-store-changelog" in detail
    settle([a], lambda: a.tasks == ALL and not a.statuses)
    admin = AdminClient({"bootstrap.servers": target})
    md = admin.list_topics(timeout=30).topics
    assert len(md[f"{group}-rep"].partitions) == 4 and len(md[f"{group}-store-changelog"].partitions) == 4
    res = ConfigResource(ConfigResource.Type.TOPIC, f"{group}-store-changelog")
    assert admin.describe_configs([res])[res].result(30)["cleanup.policy"].value == "compact"
    d = conn.do(SGD(group_ids=[group], include_authorized_operations=False, include_topology_description=False), 1)
    [g] = d.groups
    assert (g.error_code, g.group_state, len(g.members)) == (0, "Stable", 1)
    assert g.group_epoch == g.assignment_epoch == a.epoch
    subs = {s.subtopology_id: s for s in g.topology.subtopologies}
    assert subs["0"].source_topics == [source] and subs["0"].repartition_sink_topics == [f"{group}-rep"]
    assert [(t.name, t.partitions) for t in subs["1"].repartition_source_topics] == [(f"{group}-rep", 4)]
    [m] = g.members
    assert (m.member_id, m.process_id, m.member_epoch) == (a.id, a.id + "-process", a.epoch)
    assert {(t.subtopology_id, p) for t in m.assignment.active_tasks for p in t.partitions} == ALL
    assert heartbeat(conn, group, a.id, -1).member_epoch == -1
    assert conn.do(DEL(groups_names=[group]), 2).results[0].error_code == 0


def test_a_second_process_gets_half_the_tasks_only_once_the_first_released_them(target: str, conn: Connection) -> None:
    group, source = unique("app"), unique("src")
    create_topic(target, source, partitions=4)
    a = Member(conn, group, topology(source, group))
    settle([a], lambda: a.tasks == ALL)
    b = Member(conn, group, topology(source, group))
    seen_overlap = False

    def balanced() -> bool:
        nonlocal seen_overlap
        seen_overlap |= bool(a.tasks & b.tasks)
        return a.tasks | b.tasks == ALL and len(a.tasks) == len(b.tasks) == 4 and a.epoch == b.epoch

    settle([a, b], balanced)
    assert not seen_overlap  # no task was ever given to both
    assert not a.tasks & b.tasks
    # The first leaves: the second gets everything.
    assert heartbeat(conn, group, a.id, -1).member_epoch == -1
    settle([b], lambda: b.tasks == ALL)
    heartbeat(conn, group, b.id, -1)


def test_refusals_with_kafkas_messages(target: str, conn: Connection) -> None:
    group, source = unique("app"), unique("src")
    create_topic(target, source, partitions=2)
    topo = topology(source, group)

    def refused(member: str, epoch: int, **fields: Any) -> tuple[str, str | None]:
        r = heartbeat(conn, group, member, epoch, **fields)
        return E(r.error_code).name, r.error_message

    assert refused("", 0, topology=topo) == ("INVALID_REQUEST", "MemberId can't be empty.")
    assert refused("m", 0, topology=None) == ("INVALID_REQUEST", "Topology must be non-null when (re-)joining.")
    assert refused("m", 0, topology=topo, active_tasks=[HB.TaskIds(subtopology_id="0", partitions=[0])]) == (
        "INVALID_REQUEST", "ActiveTasks must be empty when (re-)joining.")  # fmt: skip
    assert refused("m", 0, topology=topo, rebalance_timeout_ms=-1)[0] == "INVALID_REQUEST"
    regex = HB.Topology(epoch=0, subtopologies=[Sub(subtopology_id="0", source_topics=[], source_topic_regex=["a.*"],
                                                    state_changelog_topics=[], repartition_sink_topics=[],
                                                    repartition_source_topics=[], copartition_groups=[])])  # fmt: skip
    assert refused("m", 0, topology=regex) == (
        "INVALID_REQUEST", "Regular expressions for source topics are not supported yet.")  # fmt: skip
    internal = HB.Topology(epoch=0, subtopologies=[Sub(subtopology_id="0", source_topics=["__consumer_offsets"],
                                                       source_topic_regex=[], state_changelog_topics=[],
                                                       repartition_sink_topics=[], repartition_source_topics=[],
                                                       copartition_groups=[])])  # fmt: skip
    assert refused("m", 0, topology=internal) == (
        "STREAMS_INVALID_TOPOLOGY",
        "Use of Kafka internal topics __consumer_offsets in a Kafka Streams topology is prohibited.")  # fmt: skip
    changelog = topology(source, group)
    changelog.subtopologies[1].state_changelog_topics[0].partitions = 3
    assert refused("m", 0, topology=changelog) == (
        "STREAMS_INVALID_TOPOLOGY",
        f"Changelog topic {group}-store-changelog must have an undefined partition count, but it is set to 3.",
    )
    assert refused("m", 3) == ("GROUP_ID_NOT_FOUND", f"Streams group {group} not found.")
    a = Member(conn, group, topo)
    assert refused("nobody", 1) == ("UNKNOWN_MEMBER_ID", f"Member nobody is not a member of group {group}.")
    assert refused(a.id, a.epoch + 5)[0] == "FENCED_MEMBER_EPOCH"
    other = topology(unique("other"), group)
    assert refused(unique("m"), 0, topology=other) == ("INVALID_REQUEST", "Topology updates are not supported yet.")
    missing = unique("app")
    r = heartbeat(conn, missing, unique("m"), 0, topology=topology(unique("nosuch"), missing))
    assert r.error_code == 0 and [s.status_code for s in r.status] == [MISSING_SOURCE]
    heartbeat(conn, group, a.id, -1)


def test_the_group_as_the_other_group_apis_see_it(target: str, conn: Connection) -> None:
    group, source = unique("app"), unique("src")
    create_topic(target, source, partitions=4)
    a = Member(conn, group, topology(source, group))
    settle([a], lambda: a.tasks == ALL)
    listed = conn.do(LG(states_filter=[], types_filter=["streams"]), 5).groups
    assert [(g.group_type, g.protocol_type, g.group_state) for g in listed if g.group_id == group] == [
        ("streams", "streams", "Stable")]  # fmt: skip
    [dg] = conn.do(DGS(groups=[group], include_authorized_operations=False), 6).groups
    assert (dg.error_code, dg.error_message, dg.group_state) == (
        E.GROUP_ID_NOT_FOUND, f"Group {group} is not a classic group.", "Dead")  # fmt: skip
    cgh = conn.do(CGH(group_id=group, member_id=unique("c"), member_epoch=0, rebalance_timeout_ms=30000,
                      subscribed_topic_names=[source], topic_partitions=[]), 0)  # fmt: skip
    assert (cgh.error_code, cgh.error_message) == (E.GROUP_ID_NOT_FOUND, f"Group {group} is not a consumer group.")
    unknown = unique("nosuch")
    gs = conn.do(SGD(group_ids=[unknown, ""], include_authorized_operations=False), 0).groups
    assert [(g.error_code, g.error_message) for g in gs] == [  # the empty id is answered first
        (E.INVALID_GROUP_ID, None), (E.GROUP_ID_NOT_FOUND, f"Group {unknown} not found.")]  # fmt: skip
    assert conn.do(DEL(groups_names=[group]), 2).results[0].error_code == E.NON_EMPTY_GROUP
    # Offsets: a member commits at its epoch (OffsetCommit v9+); a stale epoch or an old version is refused.
    P = OC.OffsetCommitRequestTopic.OffsetCommitRequestPartition

    def commit(epoch: int, version: int = 9) -> int:
        req = OC(
            group_id=group,
            generation_id_or_member_epoch=epoch,
            member_id=a.id,
            group_instance_id=None,
            retention_time_ms=-1,
            topics=[
                OC.OffsetCommitRequestTopic(
                    name=source,
                    partitions=[
                        P(partition_index=0, committed_offset=5, committed_leader_epoch=-1, committed_metadata="")
                    ],
                )
            ],
        )
        return conn.do(req, version).topics[0].partitions[0].error_code  # fmt: skip

    assert commit(a.epoch) == 0
    assert commit(a.epoch + 1) == E.STALE_MEMBER_EPOCH
    assert commit(a.epoch, 8) == E.UNSUPPORTED_VERSION
    assert heartbeat(conn, group, a.id, -1).member_epoch == -1
    [g] = conn.do(SGD(group_ids=[group], include_authorized_operations=False), 0).groups
    assert (g.group_state, g.members) == ("Empty", [])
    assert conn.do(DEL(groups_names=[group]), 2).results[0].error_code == 0


def test_the_group_survives_kill_9(tmp_path: Path) -> None:
    """Topology, members, their tasks and epochs are durable: after kill -9 the member heartbeats on at its
    epoch with its tasks, and the group describes as before."""
    with BrokerProcess(tmp_path / "data", env=ENV) as proc:
        group, source = unique("app"), unique("src")
        create_topic(proc.bootstrap, source, partitions=4)
        with Connection(*parse_bootstrap(proc.bootstrap), timeout=30) as c:
            a = Member(c, group, topology(source, group))
            settle([a], lambda: a.tasks == ALL)
            before = c.do(SGD(group_ids=[group], include_authorized_operations=False), 0).groups[0]
        proc.kill()
        proc.start()
        with Connection(*parse_bootstrap(proc.bootstrap), timeout=30) as c:
            a.c = c
            r = a.beat()
            assert (r.error_code, r.member_epoch, a.tasks) == (0, before.members[0].member_epoch, ALL)
            after = c.do(SGD(group_ids=[group], include_authorized_operations=False), 0).groups[0]
            assert (after.group_epoch, after.assignment_epoch, after.group_state) == (
                before.group_epoch, before.assignment_epoch, "Stable")  # fmt: skip
            assert after.topology == before.topology


def test_kafka_streams_groups_describes_resets_and_deletes(target: str, conn: Connection) -> None:
    """The operator's tool on a streams group: offsets and lag described while it runs, offsets reset to the
    earliest once it is empty, then the group deleted; alike on both brokers."""
    from confluent_kafka import Producer

    from support import kafka_tool

    group, source = unique("app"), unique("src")
    create_topic(target, source, partitions=4)
    p = Producer({"bootstrap.servers": target})
    for i in range(40):
        p.produce(source, b"v%d" % i, partition=i % 4)
    assert p.flush(30) == 0
    a = Member(conn, group, topology(source, group))
    settle([a], lambda: a.tasks == ALL)
    P = OC.OffsetCommitRequestTopic.OffsetCommitRequestPartition
    commit = OC(group_id=group, generation_id_or_member_epoch=a.epoch, member_id=a.id, group_instance_id=None,
                retention_time_ms=-1, topics=[OC.OffsetCommitRequestTopic(name=source, partitions=[
                    P(partition_index=i, committed_offset=7, committed_leader_epoch=-1, committed_metadata="")
                    for i in range(4)])])  # fmt: skip
    assert [x.error_code for x in conn.do(commit, 9).topics[0].partitions] == [0, 0, 0, 0]

    def tool(*args: str) -> str:
        r = kafka_tool("kafka-streams-groups", target, *args)
        assert r.returncode == 0, r.output
        return r.stdout

    described = tool("--describe", "--group", group)
    rows = [line.split() for line in described.splitlines() if source in line]
    # GROUP TOPIC PARTITION OFFSET-LAG: 10 records each, 7 committed
    assert sorted((r[r.index(source) + 1], r[-1]) for r in rows) == [(str(i), "3") for i in range(4)], described
    heartbeat(conn, group, a.id, -1)
    tool("--reset-offsets", "--group", group, "--input-topic", source, "--to-earliest", "--execute")
    OF = api(ApiKey.OffsetFetch).request
    wanted = [OF.OffsetFetchRequestTopic(name=source, partition_indexes=[0, 1, 2, 3])]
    fetched = conn.do(OF(group_id=group, topics=wanted, require_stable=False), 7)
    assert [x.committed_offset for x in fetched.topics[0].partitions] == [0, 0, 0, 0]
    tool("--delete", "--group", group)
    assert group not in [g.group_id for g in conn.do(LG(states_filter=[], types_filter=[]), 5).groups]


def test_members_learn_which_partitions_each_endpoint_serves(target: str, conn: Connection) -> None:
    """Interactive Queries: a member with a user endpoint is told, when its endpoint epoch is behind, which
    partitions of the input topics each endpoint's active tasks hold."""
    group, source = unique("app"), unique("src")
    create_topic(target, source, partitions=4)
    member = unique("member")
    endpoint = HB.Endpoint(host="app-1.example", port=7070)
    r = heartbeat(conn, group, member, 0, topology=topology(source, group), user_endpoint=endpoint)
    epoch, deadline = r.member_epoch, time.monotonic() + 30
    while tasks(r) != ALL:
        assert time.monotonic() < deadline, r
        time.sleep(0.1)
        r = heartbeat(conn, group, member, epoch, **owned(tasks(r) or set()))
        epoch = r.member_epoch
    r = heartbeat(conn, group, member, epoch, endpoint_information_epoch=-1, **owned(ALL))
    assert r.error_code == 0 and r.endpoint_information_epoch >= 0
    [e] = r.partitions_by_user_endpoint
    assert (e.user_endpoint.host, e.user_endpoint.port) == ("app-1.example", 7070)
    assert sorted((tp.topic, sorted(tp.partitions)) for tp in e.active_partitions) == sorted(
        [(source, [0, 1, 2, 3]), (f"{group}-rep", [0, 1, 2, 3])])  # fmt: skip
    # Up to date: nothing sent.
    r = heartbeat(conn, group, member, epoch, endpoint_information_epoch=r.endpoint_information_epoch)
    assert r.partitions_by_user_endpoint is None
    heartbeat(conn, group, member, -1)
