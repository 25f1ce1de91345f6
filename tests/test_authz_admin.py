"""Authorization of the admin APIs on logbroker and on Apache Kafka 4.4 with its StandardAuthorizer.

Each API is sent as User:ANONYMOUS (PLAINTEXT) with no ACL: Kafka's code comes back, at the level Kafka puts
it (per topic, per resource, per partition or for the whole request), and nothing changes (checked as the
super user alice). Then the right ACL is granted and the same request succeeds. Cluster-level grants go to
bob (SASL PLAIN) and are removed again, so that ANONYMOUS stays without cluster rights for every test.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from logbroker.protocol import ApiKey, api
from logbroker.protocol.errors import ErrorCode as E
from support import (
    AUTHZ_USERS,
    assert_equal,
    authz_target,
    both_targets,
    eventually,
    raw_connection,
)

pytestmark = pytest.mark.timeout(180)

CT, DT, CP, DR = (api(k).request for k in (ApiKey.CreateTopics, ApiKey.DeleteTopics, ApiKey.CreatePartitions,
                                           ApiKey.DeleteRecords))  # fmt: skip
DC, AC, IAC = (api(k).request for k in (ApiKey.DescribeConfigs, ApiKey.AlterConfigs,
                                        ApiKey.IncrementalAlterConfigs))  # fmt: skip
DLD, ARL, DCL = (api(k).request for k in (ApiKey.DescribeLogDirs, ApiKey.AlterReplicaLogDirs,
                                          ApiKey.DescribeCluster))  # fmt: skip
DUS, AUS = api(ApiKey.DescribeUserScramCredentials).request, api(ApiKey.AlterUserScramCredentials).request
CA, DL = api(ApiKey.CreateAcls).request, api(ApiKey.DeleteAcls).request
ZERO = uuid.UUID(int=0)
LITERAL, PREFIXED = 3, 4
TOPIC, CLUSTER = 2, 4
CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS = 5, 6, 7, 8, 10, 11
CLUSTER_OPS = {5, 9, 10, 11, 12, 7, 8}  # what Kafka's cluster resource supports (AclEntry.supportedOperations)
TOPIC_DENIED = "Topic authorization failed."


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest) -> Iterator[SimpleNamespace]:
    """plain: PLAINTEXT (User:ANONYMOUS); sasl: SASL_PLAINTEXT where alice (super) and bob log in."""
    with authz_target(request.param) as t:
        yield t


def anonymous(target: SimpleNamespace) -> Any:
    return raw_connection(target.plain)


def as_user(target: SimpleNamespace, user: str) -> Any:
    return raw_connection(target.sasl, user, AUTHZ_USERS[user])


def acl(rt: int, name: str, op: int, principal: str = "User:ANONYMOUS", pt: int = LITERAL) -> Any:
    return CA.AclCreation(resource_type=rt, resource_name=name, resource_pattern_type=pt, principal=principal,
                          host="*", operation=op, permission_type=3)  # fmt: skip


def grant(target: SimpleNamespace, *acls: Any) -> None:
    with as_user(target, "alice") as conn:
        assert [r.error_code for r in conn.do(CA(creations=list(acls)), 3).results] == [0] * len(acls)


def revoke(target: SimpleNamespace, *acls: Any) -> None:
    filters = [DL.DeleteAclsFilter(resource_type_filter=a.resource_type, resource_name_filter=a.resource_name,
                                   pattern_type_filter=a.resource_pattern_type, principal_filter=a.principal,
                                   host_filter=a.host, operation=a.operation, permission_type=a.permission_type)
               for a in acls]  # fmt: skip
    with as_user(target, "alice") as conn:
        assert all(r.error_code == 0 for r in conn.do(DL(filters=filters), 3).filter_results)


def create_topic(target: SimpleNamespace, name: str, partitions: int = 1) -> uuid.UUID:
    with as_user(target, "alice") as conn:
        topic = CT.CreatableTopic(name=name, num_partitions=partitions, replication_factor=-1, assignments=[],
                                  configs=[])  # fmt: skip
        result = conn.do(CT(topics=[topic], timeout_ms=10000, validate_only=False), 7).topics[0]
        assert result.error_code == 0, result
    # Kafka's broker hosts the partitions a moment after its controller answers.
    eventually(lambda: assert_equal(topic_state(target, name)[0], partitions))
    return result.topic_id


def topic_state(target: SimpleNamespace, name: str) -> tuple[int, str | None]:
    """(partitions, retention.ms override or None) as alice sees them; (0, None) when the topic is absent."""
    with as_user(target, "alice") as conn:
        res = DC.DescribeConfigsResource(resource_type=TOPIC, resource_name=name, configuration_keys=["retention.ms"])
        got = conn.do(DC(resources=[res], include_synonyms=False, include_documentation=False), 4).results[0]
        if got.error_code == E.UNKNOWN_TOPIC_OR_PARTITION:
            return 0, None
        assert got.error_code == 0, got
        retention = next((c.value for c in got.configs if c.config_source == 1), None)  # a topic override
        lds = conn.do(DLD(topics=[DLD.DescribableLogDirTopic(topic=name, partitions=list(range(16)))]), 4)
        parts = sum(len(t.partitions) for r in lds.results for t in r.topics)
        return parts, retention


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------------------------------------ topics


def test_create_topics(target: SimpleNamespace) -> None:
    prefix = unique("ct")

    def request(name: str, version: int = 7) -> Any:
        t = CT.CreatableTopic(name=name, num_partitions=2, replication_factor=-1, assignments=[], configs=[])
        with anonymous(target) as conn:
            return conn.do(CT(topics=[t], timeout_ms=10000, validate_only=False), version).topics[0]

    denied = request(f"{prefix}-a")
    assert (denied.error_code, denied.error_message, denied.topic_config_error_code, denied.num_partitions,
            denied.configs) == (E.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.", 0, -1, [])  # fmt: skip
    assert request(f"{prefix}-a", 4).error_code == E.TOPIC_AUTHORIZATION_FAILED
    assert topic_state(target, f"{prefix}-a") == (0, None)
    # CREATE on the topic (prefixed): created, but without DESCRIBE_CONFIGS its configs are withheld.
    grant(target, acl(TOPIC, prefix, CREATE, pt=PREFIXED))
    eventually(lambda: assert_equal(request(f"{prefix}-b").error_code, 0))
    hidden = request(f"{prefix}-c")
    assert (hidden.error_code, hidden.topic_config_error_code, hidden.num_partitions, hidden.replication_factor,
            hidden.configs) == (0, E.TOPIC_AUTHORIZATION_FAILED, -1, -1, [])  # fmt: skip
    assert hidden.topic_id not in (None, ZERO)
    eventually(lambda: assert_equal(topic_state(target, f"{prefix}-c")[0], 2))
    grant(target, acl(TOPIC, prefix, DESCRIBE_CONFIGS, pt=PREFIXED))

    def shown() -> Any:
        got = request(unique(prefix))
        assert got.topic_config_error_code == 0, got
        return got

    full = eventually(shown)
    assert (full.error_code, full.num_partitions, full.replication_factor) == (0, 2, 1)
    assert "retention.ms" in {c.name for c in full.configs}


def test_create_topics_with_create_on_the_cluster(target: SimpleNamespace) -> None:
    name = unique("ctc")
    t = CT.CreatableTopic(name=name, num_partitions=1, replication_factor=-1, assignments=[], configs=[])
    grant(target, acl(CLUSTER, "kafka-cluster", CREATE, principal="User:bob"))
    try:
        with as_user(target, "bob") as bob:

            def created() -> Any:
                got = bob.do(CT(topics=[t], timeout_ms=10000, validate_only=True), 7).topics[0]
                assert got.error_code == 0, got
                return got

            # CREATE on the cluster stands for CREATE on every topic; the configs still need DESCRIBE_CONFIGS
            assert eventually(created).topic_config_error_code == E.TOPIC_AUTHORIZATION_FAILED
    finally:
        revoke(target, acl(CLUSTER, "kafka-cluster", CREATE, principal="User:bob"))


def test_delete_topics(target: SimpleNamespace) -> None:
    name, missing = unique("dt"), unique("dt-missing")
    topic_id = create_topic(target, name)
    unknown_id = uuid.uuid4()

    def delete_v6() -> set[tuple[Any, ...]]:
        topics = [DT.DeleteTopicState(name=name, topic_id=ZERO), DT.DeleteTopicState(name=None, topic_id=topic_id),
                  DT.DeleteTopicState(name=None, topic_id=unknown_id),
                  DT.DeleteTopicState(name=missing, topic_id=ZERO)]  # fmt: skip
        with anonymous(target) as conn:
            got = conn.do(DT(topics=topics, timeout_ms=10000), 6).responses
        return {(r.name, r.topic_id or ZERO, r.error_code, r.error_message) for r in got}

    unknown = (None, unknown_id, E.UNKNOWN_TOPIC_ID, "This server does not host this topic ID.")
    # No right at all: names and the id of an existing topic all look the same, an unknown id is unknown.
    assert delete_v6() == {(name, ZERO, 29, TOPIC_DENIED), (None, topic_id, 29, TOPIC_DENIED),
                           (missing, ZERO, 29, TOPIC_DENIED), unknown}  # fmt: skip
    with anonymous(target) as conn:
        v5 = conn.do(DT(topic_names=[name, missing], timeout_ms=10000), 5).responses
        assert {(r.name, r.error_code) for r in v5} == {(name, 29), (missing, 29)}
    assert topic_state(target, name)[0] == 1
    # DESCRIBE only: the missing name is unknown, the id gets its name back, nothing is deleted.
    grant(target, acl(TOPIC, name, DESCRIBE), acl(TOPIC, missing, DESCRIBE))
    absent = (missing, ZERO, E.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
    eventually(lambda: assert_equal(delete_v6(), {(name, ZERO, 29, TOPIC_DENIED), (name, topic_id, 29, TOPIC_DENIED),
                                                  unknown, absent}))  # fmt: skip
    assert topic_state(target, name)[0] == 1
    grant(target, acl(TOPIC, name, DELETE))

    def deleted() -> None:
        with anonymous(target) as conn:
            got = conn.do(DT(topics=[DT.DeleteTopicState(name=None, topic_id=topic_id)], timeout_ms=10000), 6)
        assert [(r.name, r.error_code) for r in got.responses] == [(name, 0)], got

    eventually(deleted)
    eventually(lambda: assert_equal(topic_state(target, name), (0, None)))


def test_create_partitions(target: SimpleNamespace) -> None:
    name = unique("cp")
    create_topic(target, name)

    def grow(topic: str) -> Any:
        t = CP.CreatePartitionsTopic(name=topic, count=3, assignments=None)
        with anonymous(target) as conn:
            return conn.do(CP(topics=[t], timeout_ms=10000, validate_only=False), 3).results[0]

    for topic in (name, unique("cp-missing")):
        got = grow(topic)
        assert (got.error_code, got.error_message) == (E.TOPIC_AUTHORIZATION_FAILED, None)
    assert topic_state(target, name)[0] == 1
    grant(target, acl(TOPIC, name, ALTER))
    eventually(lambda: assert_equal(grow(name).error_code, 0))
    eventually(lambda: assert_equal(topic_state(target, name)[0], 3))


def test_delete_records(target: SimpleNamespace) -> None:
    name = unique("dr")
    create_topic(target, name)

    def delete(topic: str) -> Any:
        p = DR.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=0, offset=0)
        with anonymous(target) as conn:
            got = conn.do(DR(topics=[DR.DeleteRecordsTopic(name=topic, partitions=[p])], timeout_ms=10000), 2)
        return [(t.name, p.partition_index, p.low_watermark, p.error_code) for t in got.topics for p in t.partitions]

    for topic in (name, unique("dr-missing")):  # checked before existence
        assert delete(topic) == [(topic, 0, -1, E.TOPIC_AUTHORIZATION_FAILED)]
    grant(target, acl(TOPIC, name, DELETE))
    eventually(lambda: assert_equal(delete(name), [(name, 0, 0, 0)]))


# ------------------------------------------------------------------------------------ configs


def test_describe_configs(target: SimpleNamespace) -> None:
    name = unique("dc")
    create_topic(target, name)

    def describe() -> list[tuple[Any, ...]]:
        resources = [DC.DescribeConfigsResource(resource_type=CLUSTER, resource_name="1",
                                                configuration_keys=["log.retention.ms"]),
                     DC.DescribeConfigsResource(resource_type=TOPIC, resource_name=name,
                                                configuration_keys=["cleanup.policy"])]  # fmt: skip
        with anonymous(target) as conn:
            got = conn.do(DC(resources=resources, include_synonyms=False, include_documentation=False), 4).results
        return [(r.resource_type, r.resource_name, r.error_code, r.error_message, [c.name for c in r.configs])
                for r in got]  # fmt: skip

    broker_denied = (CLUSTER, "1", E.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.", [])
    assert sorted(describe()) == sorted([broker_denied, (TOPIC, name, 29, TOPIC_DENIED, [])])
    grant(target, acl(TOPIC, name, DESCRIBE_CONFIGS))
    # the allowed resource first, the refused ones after it
    eventually(lambda: assert_equal(describe(), [(TOPIC, name, 0, "", ["cleanup.policy"]), broker_denied]))


def test_alter_configs(target: SimpleNamespace) -> None:
    name = unique("ac")
    create_topic(target, name)

    def legacy(value: str) -> set[tuple[Any, ...]]:
        resources = [
            AC.AlterConfigsResource(resource_type=TOPIC, resource_name=name, configs=[
                AC.AlterConfigsResource.AlterableConfig(name="retention.ms", value=value)]),
            AC.AlterConfigsResource(resource_type=CLUSTER, resource_name="1", configs=[
                AC.AlterConfigsResource.AlterableConfig(name="log.cleaner.threads", value="2")]),
        ]  # fmt: skip
        with anonymous(target) as conn:
            got = conn.do(AC(resources=resources, validate_only=False), 2).responses
        return {(r.resource_type, r.resource_name, r.error_code, r.error_message) for r in got}

    def incremental(value: str) -> set[tuple[Any, ...]]:
        cfg = IAC.AlterConfigsResource.AlterableConfig
        resources = [
            IAC.AlterConfigsResource(resource_type=TOPIC, resource_name=name,
                                     configs=[cfg(name="retention.ms", config_operation=0, value=value)]),
            IAC.AlterConfigsResource(resource_type=CLUSTER, resource_name="",
                                     configs=[cfg(name="log.cleaner.threads", config_operation=0, value="2")]),
        ]  # fmt: skip
        with anonymous(target) as conn:
            got = conn.do(IAC(resources=resources, validate_only=False), 1).responses
        return {(r.resource_type, r.resource_name, r.error_code, r.error_message) for r in got}

    assert legacy("1000") == {(TOPIC, name, 29, TOPIC_DENIED), (CLUSTER, "1", 31, None)}
    assert incremental("2000") == {(TOPIC, name, 29, TOPIC_DENIED), (CLUSTER, "", 31, None)}
    assert topic_state(target, name) == (1, None)
    grant(target, acl(TOPIC, name, ALTER_CONFIGS))
    eventually(lambda: assert_equal(incremental("3000"), {(TOPIC, name, 0, None), (CLUSTER, "", 31, None)}))
    eventually(lambda: assert_equal(topic_state(target, name), (1, "3000")))
    assert legacy("4000") == {(TOPIC, name, 0, None), (CLUSTER, "1", 31, None)}
    eventually(lambda: assert_equal(topic_state(target, name), (1, "4000")))


# ------------------------------------------------------------------------------------ cluster


def test_log_dirs(target: SimpleNamespace) -> None:
    name = unique("ld")
    create_topic(target, name, partitions=2)
    with anonymous(target) as conn:
        for version in (1, 2):  # no error field before v3: just no dirs
            assert conn.do(DLD(topics=None), version).results == []
        for version in (3, 4):
            got = conn.do(DLD(topics=None), version)
            assert (got.error_code, got.results) == (E.CLUSTER_AUTHORIZATION_FAILED, [])
        t = ARL.AlterReplicaLogDir.AlterReplicaLogDirTopic(name=name, partitions=[0, 1])
        moved = conn.do(ARL(dirs=[ARL.AlterReplicaLogDir(path="/nowhere", topics=[t])]), 2).results
        assert [(r.topic_name, [(p.partition_index, p.error_code) for p in r.partitions]) for r in moved] == [
            (name, [(0, 31), (1, 31)])]  # fmt: skip
    cluster = [acl(CLUSTER, "kafka-cluster", DESCRIBE, "User:bob"), acl(CLUSTER, "kafka-cluster", ALTER, "User:bob")]
    grant(target, *cluster)
    try:
        with as_user(target, "bob") as bob:
            eventually(lambda: assert_equal(bob.do(DLD(topics=None), 4).error_code, 0))
            dirs = bob.do(DLD(topics=[DLD.DescribableLogDirTopic(topic=name, partitions=[0, 1])]), 4).results
            assert [sorted(p.partition_index for t in d.topics for p in t.partitions) for d in dirs] == [[0, 1]]
            moved = bob.do(ARL(dirs=[ARL.AlterReplicaLogDir(path="/nowhere", topics=[t])]), 2).results
            assert {p.error_code for r in moved for p in r.partitions} == {E.LOG_DIR_NOT_FOUND}
    finally:
        revoke(target, *cluster)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_cluster_authorized_operations(target: SimpleNamespace, version: int) -> None:
    def request(include: bool) -> Any:
        kw: dict[str, Any] = {"include_cluster_authorized_operations": include}
        if version >= 1:
            kw["endpoint_type"] = 1
        if version >= 2:
            kw["include_fenced_brokers"] = False
        return DCL(**kw)

    with anonymous(target) as conn:  # never refused; without DESCRIBE no operation is listed
        got = conn.do(request(True), version)
        assert (got.error_code, got.authorized_operations, len(got.brokers)) == (0, set(), 1)
        assert conn.do(request(False), version).authorized_operations is None
    with as_user(target, "alice") as conn:
        assert conn.do(request(True), version).authorized_operations == CLUSTER_OPS
    only_create = acl(CLUSTER, "kafka-cluster", CREATE, "User:bob")
    alter = acl(CLUSTER, "kafka-cluster", ALTER, "User:bob")
    grant(target, only_create)
    try:
        with as_user(target, "bob") as bob:
            # CREATE alone: bob may not DESCRIBE the cluster, so nothing is listed
            t = CT.CreatableTopic(name=unique("dcl"), num_partitions=1, replication_factor=-1, assignments=[],
                                  configs=[])  # fmt: skip
            create = CT(topics=[t], timeout_ms=10000, validate_only=True)
            eventually(lambda: assert_equal(bob.do(create, 7).topics[0].error_code, 0))
            assert bob.do(request(True), version).authorized_operations == set()
            grant(target, alter)  # ALTER implies DESCRIBE
            eventually(
                lambda: assert_equal(bob.do(request(True), version).authorized_operations, {CREATE, ALTER, DESCRIBE})
            )
    finally:
        revoke(target, only_create, alter)


def test_scram_credentials(target: SimpleNamespace) -> None:
    user = unique("scram")
    with anonymous(target) as conn:
        got = conn.do(DUS(users=[DUS.UserName(name=user), DUS.UserName(name="alice")]), 0)
        assert (got.error_code, got.error_message) == (E.CLUSTER_AUTHORIZATION_FAILED, None)
        # one result per user asked for, each without its name (Kafka's error response)
        assert [(r.user, r.error_code, r.error_message, r.credential_infos) for r in got.results] == [
            ("", 31, None, [])] * 2  # fmt: skip
    upsert = AUS.ScramCredentialUpsertion(name=user, mechanism=1, iterations=8192, salt=b"salt",
                                          salted_password=b"p" * 32)  # fmt: skip
    with anonymous(target) as conn:
        got = conn.do(AUS(deletions=[AUS.ScramCredentialDeletion(name="zed", mechanism=1)], upsertions=[upsert]), 0)
        assert [(r.user, r.error_code) for r in got.results] == [(user, 31), ("zed", 31)]
        assert all(r.error_message.endswith("needs ALTER permission.") for r in got.results)
    with as_user(target, "alice") as conn:
        seen = conn.do(DUS(users=[DUS.UserName(name=user)]), 0).results[0]
        assert seen.error_code == E.RESOURCE_NOT_FOUND  # nothing was stored
    cluster = [acl(CLUSTER, "kafka-cluster", ALTER, "User:bob")]  # ALTER implies DESCRIBE
    grant(target, *cluster)
    try:
        with as_user(target, "bob") as bob:
            alter = AUS(deletions=[], upsertions=[upsert])
            eventually(lambda: assert_equal([r.error_code for r in bob.do(alter, 0).results], [0]))

            def described() -> None:
                got = bob.do(DUS(users=[DUS.UserName(name=user)]), 0).results[0]
                assert (got.error_code, [(i.mechanism, i.iterations) for i in got.credential_infos]) == (0, [(1, 8192)])

            eventually(described)
    finally:
        revoke(target, *cluster)


def test_cluster_admin_apis(target: SimpleNamespace) -> None:
    """Elections and reassignments need ALTER on the cluster, listing reassignments and the quorum DESCRIBE,
    listing config resources DESCRIBE_CONFIGS; each refusal is shaped as Kafka's controller (or broker) shapes
    it, and a grant turns it into the one-node answer."""
    EL, APR, LPR, DQ, LCR = (api(k).request for k in (ApiKey.ElectLeaders, ApiKey.AlterPartitionReassignments,
                                                      ApiKey.ListPartitionReassignments, ApiKey.DescribeQuorum,
                                                      ApiKey.ListConfigResources))  # fmt: skip
    name = unique("elect")
    create_topic(target, name)
    elect = EL(election_type=0, timeout_ms=10_000, topic_partitions=[EL.TopicPartitions(topic=name, partitions=[0])])
    move = APR(timeout_ms=10_000, topics=[APR.ReassignableTopic(name=name, partitions=[
        APR.ReassignableTopic.ReassignablePartition(partition_index=0, replicas=[1])])])  # fmt: skip
    listing = LPR(timeout_ms=10_000, topics=[LPR.ListPartitionReassignmentsTopics(name=name, partition_indexes=[0])])
    quorum = DQ(topics=[DQ.TopicData(topic_name="__cluster_metadata",
                                     partitions=[DQ.TopicData.PartitionData(partition_index=0)])])  # fmt: skip

    def needs(message: str | None, operation: str) -> bool:
        return bool(message) and message.startswith("Request ") and message.endswith(f"needs {operation} permission.")

    with anonymous(target) as conn:
        r = conn.do(elect, 2)
        [p] = r.replica_election_results[0].partition_result
        assert (r.error_code, p.error_code) == (31, 31) and needs(p.error_message, "ALTER")
        r = conn.do(move, 1)
        [p] = r.responses[0].partitions
        assert (r.error_code, p.error_code) == (31, 31) and needs(r.error_message, "ALTER")
        r = conn.do(listing, 0)
        assert r.error_code == 31 and needs(r.error_message, "DESCRIBE")
        assert [(t.name, [(q.partition_index, q.replicas) for q in t.partitions]) for t in r.topics] == [
            (name, [(0, [])])
        ]
        r = conn.do(quorum, 2)
        assert (r.error_code, r.error_message, r.topics) == (31, "Cluster authorization failed.", [])
        r = conn.do(LCR(resource_types=[]), 1)
        assert (r.error_code, r.config_resources) == (31, [])
    rights = [acl(CLUSTER, "kafka-cluster", op, "User:bob") for op in (ALTER, DESCRIBE, DESCRIBE_CONFIGS)]
    grant(target, *rights)
    try:
        with as_user(target, "bob") as bob:
            eventually(lambda: assert_equal(bob.do(elect, 2).replica_election_results[0].partition_result[0].error_code,
                                            84))  # fmt: skip
            assert bob.do(move, 1).responses[0].partitions[0].error_code == 0
            assert (bob.do(listing, 0).error_code, bob.do(quorum, 2).error_code) == (0, 0)
            assert (name, 2) in {
                (c.resource_name, c.resource_type) for c in bob.do(LCR(resource_types=[2]), 1).config_resources
            }
    finally:
        revoke(target, *rights)
