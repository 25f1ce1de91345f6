"""The cluster admin APIs a one-node cluster answers with "nothing to do": ElectLeaders, AlterPartitionReassignments,
ListPartitionReassignments, DescribeQuorum and ListConfigResources, asserted alike on logbroker and on Apache
Kafka 4.4 (one combined KRaft node), raw and through Kafka's own tools (kafka-leader-election,
kafka-reassign-partitions, kafka-metadata-quorum), so an operator's scripts run against either."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from logbroker.protocol import ApiKey, api
from logbroker.protocol.errors import ErrorCode as E
from logbroker_devtools.client.connection import Connection, parse_bootstrap
from support import both_targets, create_topic, kafka_tool, target_bootstrap, unique

pytestmark = pytest.mark.timeout(300)

EL, APR, LPR, DQ, LCR = (api(k).request for k in (ApiKey.ElectLeaders, ApiKey.AlterPartitionReassignments,
                                                  ApiKey.ListPartitionReassignments, ApiKey.DescribeQuorum,
                                                  ApiKey.ListConfigResources))  # fmt: skip
NOT_NEEDED = "Leader election not needed for topic partition."
ASSIGN = "The manual partition assignment includes"


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from target_bootstrap(request)


@pytest.fixture(scope="module")
def topic(target: str) -> str:
    return create_topic(target, unique("admin"), partitions=2)


def do(bootstrap: str, request: Any, version: int | None = None) -> Any:
    with Connection(*parse_bootstrap(bootstrap)) as c:
        return c.do(request, version)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_elect_leaders_is_never_needed(target: str, topic: str, version: int) -> None:
    T = EL.TopicPartitions
    parts = [T(topic=topic, partitions=[0, 1, 7]), T(topic=unique("nosuch"), partitions=[0])]
    extra = {"election_type": 1} if version >= 1 else {}  # unclean: the partition has a leader anyway
    r = do(target, EL(topic_partitions=parts, timeout_ms=10_000, **extra), version)
    got = [(x.topic, [(p.partition_id, p.error_code, p.error_message) for p in x.partition_result])
           for x in r.replica_election_results]  # fmt: skip
    assert got == [
        (topic, [(0, 84, NOT_NEEDED), (1, 84, NOT_NEEDED), (7, 3, f"No such partition as {topic}-7")]),
        (parts[1].topic, [(0, 3, f"No such topic as {parts[1].topic}")]),
    ]
    if version >= 1:
        assert r.error_code == 0
    every = do(target, EL(topic_partitions=None, timeout_ms=10_000, **extra), version)
    listed = {x.topic: x.partition_result for x in every.replica_election_results}
    assert listed[topic] == [] and all(not p for p in listed.values())
    assert do(target, EL(topic_partitions=[], timeout_ms=10_000, **extra), version).replica_election_results == []
    if version >= 1:
        bad = do(target, EL(topic_partitions=[T(topic=topic, partitions=[0])], election_type=5, timeout_ms=10_000),
                 version)  # fmt: skip
        assert bad.error_code == E.INVALID_REQUEST
        assert [(p.error_code, p.error_message) for p in bad.replica_election_results[0].partition_result] == [
            (E.INVALID_REQUEST, "Unknown election type 5")]  # fmt: skip


@pytest.mark.parametrize("version", [0, 1])
def test_reassignments_on_one_node(target: str, topic: str, version: int) -> None:
    RT = APR.ReassignableTopic
    RP = RT.ReassignablePartition
    gone = unique("gone")
    req = APR(timeout_ms=10_000, allow_replication_factor_change=False, topics=[
        RT(name=topic, partitions=[RP(partition_index=0, replicas=[1]), RP(partition_index=1, replicas=[2]),
                                   RP(partition_index=1, replicas=None), RP(partition_index=0, replicas=[]),
                                   RP(partition_index=0, replicas=[1, 1]), RP(partition_index=0, replicas=[3, -1]),
                                   RP(partition_index=9, replicas=[1])]),
        RT(name=gone, partitions=[RP(partition_index=0, replicas=[1])]),
    ])  # fmt: skip
    if version == 0:
        req.allow_replication_factor_change = True
    r = do(target, req, version)
    assert (r.error_code, r.error_message) == (0, None)
    if version >= 1:
        assert r.allow_replication_factor_change is False
    got = [(t.name, [(p.partition_index, p.error_code, p.error_message) for p in t.partitions]) for t in r.responses]
    assert got == [
        (topic, [(0, 0, None), (1, 39, f"{ASSIGN} broker 2, but no such broker is registered."), (1, 85, None),
                 (0, 39, f"{ASSIGN} an empty replica list."), (0, 39, f"{ASSIGN} the broker 1 more than once."),
                 (0, 39, f"{ASSIGN} broker -1, but no such broker is registered."),
                 (9, 3, f"Unable to find partition {topic}:9.")]),
        (gone, [(0, 3, f"Unable to find a topic named {gone}.")]),
    ]  # fmt: skip
    empty = do(target, APR(timeout_ms=10_000, topics=[]), version)
    assert (empty.error_code, empty.error_message, empty.responses) == (0, "", [])


def test_no_reassignment_is_ever_listed(target: str, topic: str) -> None:
    T = LPR.ListPartitionReassignmentsTopics
    for topics in (None, [T(name=topic, partition_indexes=[0, 1]), T(name=unique("nosuch"), partition_indexes=[0])]):
        r = do(target, LPR(timeout_ms=10_000, topics=topics), 0)
        assert (r.error_code, r.error_message, r.topics) == (0, None, [])


@pytest.mark.parametrize("version", [0, 1, 2])
def test_the_quorum_is_one_voter_leading(target: str, version: int) -> None:
    TD = DQ.TopicData
    r = do(target, DQ(topics=[TD(topic_name="__cluster_metadata", partitions=[TD.PartitionData(partition_index=0)])]),
           version)  # fmt: skip
    assert r.error_code == 0
    [t] = r.topics
    [p] = t.partitions
    assert (t.topic_name, p.partition_index, p.error_code, p.leader_id, p.observers) == (
        "__cluster_metadata",
        0,
        0,
        1,
        [],
    )
    assert p.leader_epoch >= 1 and p.high_watermark >= 1
    [voter] = p.current_voters
    assert voter.replica_id == 1 and voter.log_end_offset >= p.high_watermark
    if version >= 1:
        assert voter.last_fetch_timestamp > 0 and voter.last_caught_up_timestamp > 0
    if version >= 2:
        assert (r.error_message, p.error_message) == ("", "")
        [node] = r.nodes
        assert node.node_id == 1 and len(node.listeners) == 1 and node.listeners[0].port > 0
    wrong = do(target, DQ(topics=[TD(topic_name="other", partitions=[TD.PartitionData(partition_index=0)])]), version)
    assert wrong.error_code == 0
    assert [(p.partition_index, p.error_code) for p in wrong.topics[0].partitions] == [
        (0, E.UNKNOWN_TOPIC_OR_PARTITION)
    ]


def test_config_resources_are_listed_in_kafkas_order(target: str, topic: str) -> None:
    r = do(target, LCR(resource_types=[]), 1)
    assert r.error_code == 0
    kinds = [c.resource_type for c in r.config_resources]
    # Groups with configs, client metrics (none), the broker's logger, the broker, then every topic.
    rest = [k for k in kinds if k not in (32, 16)]
    assert rest[:2] == [8, 4] and set(rest[2:]) == {2}
    names = {(c.resource_name, c.resource_type) for c in r.config_resources}
    assert {("1", 8), ("1", 4), (topic, 2)} <= names
    only_topics = do(target, LCR(resource_types=[2]), 1)
    assert {c.resource_type for c in only_topics.config_resources} == {2}
    assert (topic, 2) in {(c.resource_name, c.resource_type) for c in only_topics.config_resources}
    refused = do(target, LCR(resource_types=[2, 1]), 1)
    assert (refused.error_code, refused.config_resources) == (E.UNSUPPORTED_VERSION, [])
    assert do(target, LCR(), 0).config_resources == []  # v0: client-metrics subscriptions only


def test_kafkas_tools_run_against_it(target: str, topic: str, tmp_path: Any) -> None:
    """kafka-leader-election, kafka-reassign-partitions and kafka-metadata-quorum as an operator runs them (one
    JVM each: the rest of their answers is asserted raw above)."""
    r = kafka_tool("kafka-leader-election", target, "--election-type", "preferred", "--topic", topic,
                   "--partition", "0")  # fmt: skip
    assert r.returncode == 0, r.output
    assert f"Valid replica already elected for partitions {topic}-0" in r.stdout
    r = kafka_tool("kafka-reassign-partitions", target, "--list")
    assert r.returncode == 0 and "No partition reassignments found." in r.stdout, r.output
    r = kafka_tool("kafka-metadata-quorum", target, "describe", "--status")
    assert r.returncode == 0, r.output
    status = dict(line.split(":", 1) for line in r.stdout.splitlines() if ":" in line)
    assert status["LeaderId"].strip() == "1" and status["MaxFollowerLag"].strip() == "0"
    [voter] = json.loads(status["CurrentVoters"].strip())
    assert voter["id"] == 1

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1]}]}))
    r = kafka_tool("kafka-reassign-partitions", target, "--execute", "--reassignment-json-file", str(plan))
    assert r.returncode == 0, r.output
    assert f"Successfully started partition reassignment for {topic}-0" in r.stdout


def test_kafka_4_4s_newest_keys(target: str, request: pytest.FixtureRequest) -> None:
    """UnregisterController (94): the one node is the active controller and no other was registered.
    StreamsGroupTopologyDescriptionUpdate (93): UNSUPPORTED_VERSION on both (Kafka 4.4 names the missing
    topology plugin; logbroker, which serves no streams groups yet, answers as a broker without the protocol)."""
    UC = api(ApiKey.UnregisterController).request
    SU = api(ApiKey.StreamsGroupTopologyDescriptionUpdate).request
    me = do(target, UC(controller_id=1), 0)
    assert (me.error_code, me.error_message) == (
        E.INVALID_REQUEST,
        "Controller cannot unregister itself while it is active.",
    )
    other = do(target, UC(controller_id=2), 0)
    assert (other.error_code, other.error_message) == (136, "Controller ID 2 is not currently registered.")
    T = SU.TopologyDescription
    r = do(target, SU(group_id=unique("sg"), member_id="m", topology_epoch=0,
                      topology_description=T(subtopologies=[], global_stores=[])), 0)  # fmt: skip
    assert r.error_code == E.UNSUPPORTED_VERSION
    if request.node.callspec.params["target"] == "kafka":
        assert r.error_message == "The broker has no streams group topology description plugin configured."
    else:
        assert r.error_message is None
