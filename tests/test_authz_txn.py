"""Authorization of producer ids and transactions, on logbroker and on Apache Kafka with ACLs (the harness is
test_authz_data's): transactional producers need WRITE on their transactional id, idempotent ones
IDEMPOTENT_WRITE on the cluster or WRITE on some topic, and every transaction API checks as Kafka does."""

from __future__ import annotations

from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType
from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
)

from logbroker.protocol import ApiKey, api
from logbroker.protocol.errors import ErrorCode as E
from logbroker.protocol.records import TRANSACTIONAL_FLAG
from logbroker_devtools.client.connection import Connection
from support import assert_equal, both_targets, eventually, unique
from test_authz_data import AuthzTarget, NewRecord, ProduceRequest, acl, build_batch, end_offset, start_authz_target

pytestmark = pytest.mark.timeout(300)
WriteTxnMarkersRequest = api(ApiKey.WriteTxnMarkers).request
TXN, TOPIC, GROUP = ResourceType.TRANSACTIONAL_ID, ResourceType.TOPIC, ResourceType.GROUP
CLUSTER = ResourceType.BROKER  # confluent-kafka's name for Kafka's CLUSTER resource
WRITE, READ, DESCRIBE = AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthzTarget]:
    with start_authz_target(request.param, tmp_path_factory.mktemp("authz-txn")) as t:
        # Kafka's broker verifies transactional produces with its coordinator (AddPartitionsToTxn v4, which needs
        # CLUSTER_ACTION) over its inter-broker listener, the PLAINTEXT one, where it is ANONYMOUS too. Granted
        # on both brokers alike; the checks of CLUSTER_ACTION below use bob.
        t.grant(acl(CLUSTER, "kafka-cluster", AclOperation.CLUSTER_ACTION))
        yield t


def init_pid(c: Connection, tid: str | None) -> tuple[int, int, int]:
    r = c.do(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_000), 4)
    return r.error_code, r.producer_id, r.producer_epoch


def test_transactional_producer_needs_write_on_its_id(target: AuthzTarget) -> None:
    topic, tid = unique("authz-tt"), unique("authz-tid")
    target.create_topic(topic)
    # DESCRIBE finds the coordinator; InitProducerId then needs WRITE.
    target.grant(acl(TXN, tid, DESCRIBE), acl(TOPIC, topic, WRITE))
    with target.connection() as c:
        assert init_pid(c, tid) == (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1)
    p = ck.Producer(target.conf(**{"transactional.id": tid}))
    with pytest.raises(ck.KafkaException) as info:
        p.init_transactions(30)
    assert info.value.args[0].code() == ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, info.value
    # A transactional batch with that id is refused as a whole, before the topic is looked at.
    with target.connection() as c:
        batch = build_batch([NewRecord(None, b"x")], producer_id=1000, producer_epoch=0, base_sequence=0,
                            flags=TRANSACTIONAL_FLAG)  # fmt: skip
        P = ProduceRequest.TopicProduceData
        r = c.do(ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=10_000, topic_data=[
            P(name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])]), 9)  # fmt: skip
        [[part]] = [t.partition_responses for t in r.responses]
        assert (part.error_code, part.error_message) == (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None)
    assert end_offset(target, topic) == 0
    target.grant(acl(TXN, tid, WRITE))
    p = ck.Producer(target.conf(**{"transactional.id": tid}))
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"committed")
    p.commit_transaction(30)
    # The record and its commit marker (which Kafka writes after answering EndTxn).
    eventually(lambda: assert_equal(end_offset(target, topic), 2))


def test_idempotent_producer_needs_idempotent_write_or_a_writable_topic(target: AuthzTarget) -> None:
    """bob has no ACL: CLUSTER_AUTHORIZATION_FAILED. WRITE on any topic (here by prefix) is enough, as is
    IDEMPOTENT_WRITE on the cluster."""
    with target.connection("bob") as c:
        assert init_pid(c, None) == (E.CLUSTER_AUTHORIZATION_FAILED, -1, -1)
    # The producer may see its topic (DESCRIBE does not count as WRITE): its InitProducerId is refused.
    topic = unique("authz-it")
    target.create_topic(topic)
    target.grant(acl(TOPIC, topic, DESCRIBE, principal="User:bob"))
    p = ck.Producer(target.conf("bob", **{"enable.idempotence": True, "message.timeout.ms": 15_000}))
    p.produce(topic, b"x")
    with pytest.raises(ck.KafkaException) as info:  # the producer's fatal error
        p.flush(30)
    err = info.value.args[0]
    assert (err.code(), err.fatal()) == (ck.KafkaError.CLUSTER_AUTHORIZATION_FAILED, True), err
    assert end_offset(target, topic) == 0
    idempotent_write = acl(CLUSTER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE, principal="User:bob")
    with target.granted(idempotent_write), target.connection("bob") as c:
        err, pid, epoch = init_pid(c, None)
        assert (err, epoch) == (0, 0) and pid >= 0
    with target.connection("alice") as c:
        assert init_pid(c, None)[0] == E.CLUSTER_AUTHORIZATION_FAILED
    any_topic = acl(TOPIC, unique("authz-any"), WRITE, principal="User:alice", pattern=ResourcePatternType.PREFIXED)
    with target.granted(any_topic), target.connection("alice") as c:
        assert init_pid(c, None)[0] == 0


def test_transaction_requests_check_the_id_then_the_group_or_topics(target: AuthzTarget) -> None:
    """AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit refuse an id without WRITE before
    anything else; then AddOffsetsToTxn/TxnOffsetCommit need READ on the group and AddPartitionsToTxn WRITE
    on each topic (one refused topic fails the others OPERATION_NOT_ATTEMPTED)."""
    topic, hidden, tid, gid = unique("authz-xt"), unique("authz-xh"), unique("authz-xid"), unique("authz-xg")
    for t in (topic, hidden):
        target.create_topic(t)
    T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    C = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic

    def add_partitions(c: Connection) -> dict[tuple[str, int], int]:
        r = c.do(AddPartitionsToTxnRequest(v3_and_below_transactional_id=tid, v3_and_below_producer_id=0,
                                           v3_and_below_producer_epoch=0, v3_and_below_topics=[
                                               T(name=t, partitions=[0]) for t in (topic, hidden)]), 3)  # fmt: skip
        return {(t.name, p.partition_index): p.partition_error_code for t in r.results_by_topic_v3_and_below
                for p in t.results_by_partition}  # fmt: skip

    def txn_commit(c: Connection) -> dict[str, int]:
        part = C.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                                                 committed_metadata="")  # fmt: skip
        r = c.do(TxnOffsetCommitRequest(transactional_id=tid, group_id=gid, producer_id=0, producer_epoch=0,
                                        generation_id=-1, member_id="", group_instance_id=None,
                                        topics=[C(name=t, partitions=[part]) for t in (topic, hidden)]), 3)  # fmt: skip
        return {t.name: t.partitions[0].error_code for t in r.topics}

    def add_offsets(c: Connection) -> int:
        return c.do(
            AddOffsetsToTxnRequest(transactional_id=tid, producer_id=0, producer_epoch=0, group_id=gid), 3
        ).error_code

    def end_txn(c: Connection) -> int:
        return c.do(EndTxnRequest(transactional_id=tid, producer_id=0, producer_epoch=0, committed=True), 3).error_code

    denied = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    with target.connection() as c:
        assert add_partitions(c) == {(topic, 0): denied, (hidden, 0): denied}
        assert txn_commit(c) == {topic: denied, hidden: denied}
        assert add_offsets(c) == denied
        assert end_txn(c) == denied
    target.grant(acl(TXN, tid, WRITE), acl(TOPIC, topic, WRITE), acl(TOPIC, topic, READ))
    with target.connection() as c:
        assert add_partitions(c) == {(topic, 0): E.OPERATION_NOT_ATTEMPTED, (hidden, 0): E.TOPIC_AUTHORIZATION_FAILED}
        assert txn_commit(c) == {topic: E.GROUP_AUTHORIZATION_FAILED, hidden: E.GROUP_AUTHORIZATION_FAILED}
        assert add_offsets(c) == E.GROUP_AUTHORIZATION_FAILED
        assert end_txn(c) != denied  # the coordinator's answer now (no such producer)
    target.grant(acl(GROUP, gid, READ))
    with target.connection() as c:
        errors = txn_commit(c)
        assert errors[hidden] == E.TOPIC_AUTHORIZATION_FAILED and errors[topic] not in (0, denied)


def test_describing_transactions_and_producers(target: AuthzTarget) -> None:
    """DescribeTransactions/ListTransactions need DESCRIBE on the id and show only describable topics;
    DescribeProducers needs READ on the topic; WriteTxnMarkers is for brokers (CLUSTER_ACTION or ALTER)."""
    topic, tid = unique("authz-dt"), unique("authz-did")
    target.create_topic(topic)
    p = ck.Producer(target.conf("admin", **{"transactional.id": tid}))
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"open", partition=0)
    assert p.flush(30) == 0

    def described(c: Connection) -> tuple[int, str, list[str]]:
        [s] = c.do(DescribeTransactionsRequest(transactional_ids=[tid]), 0).transaction_states
        return s.error_code, s.transaction_state, [t.topic for t in s.topics]

    def listed(c: Connection) -> bool:
        r = c.do(ListTransactionsRequest(state_filters=[], producer_id_filters=[]), 0)
        return tid in {s.transactional_id for s in r.transaction_states}

    def producers(c: Connection) -> tuple[int, str | None, int]:
        R = DescribeProducersRequest
        r = c.do(R(topics=[R.TopicRequest(name=topic, partition_indexes=[0])]), 0)
        [part] = r.topics[0].partitions
        return part.error_code, part.error_message, len(part.active_producers)

    with target.connection("admin") as c:
        assert described(c) == (0, "Ongoing", [topic]) and listed(c)
    with target.connection() as c:
        assert described(c) == (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "", [])
        assert not listed(c)
        assert producers(c) == (E.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.", 0)
    with target.connection("bob") as c:
        M = WriteTxnMarkersRequest.WritableTxnMarker
        r = c.do(WriteTxnMarkersRequest(markers=[M(producer_id=1, producer_epoch=0, transaction_result=False,
                                                   coordinator_epoch=0, topics=[M.WritableTxnMarkerTopic(
                                                       name=topic, partition_indexes=[0])])]), 1)  # fmt: skip
        answer = [
            (m.producer_id, [(t.name, [x.error_code for x in t.partitions]) for t in m.topics]) for m in r.markers
        ]
        assert answer == [(1, [(topic, [E.CLUSTER_AUTHORIZATION_FAILED])])]
    target.grant(acl(TXN, tid, DESCRIBE), acl(TOPIC, topic, READ, principal="User:alice"))
    with target.connection() as c:
        assert described(c) == (0, "Ongoing", [])  # the id, but not its topic
        assert listed(c)
    with target.connection("alice") as c:
        assert producers(c)[::2] == (0, 1)
    p.abort_transaction(30)
