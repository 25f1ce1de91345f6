"""The versions Kafka 4.4 added to APIs logbroker serves, asserted alike on logbroker and Apache Kafka 4.4:
DeleteGroups v3 (a message per result, KIP-1331), ConsumerGroupDescribe v1 (each member's protocol,
KIP-1099) and WriteTxnMarkers v2 (the marker's transaction version, KIP-1228)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest

from logbroker.protocol import ApiKey, api
from logbroker.protocol.errors import ErrorCode as E
from logbroker_devtools.client.connection import Connection, parse_bootstrap
from support import both_targets, create_topic, eventually, target_bootstrap, unique

pytestmark = pytest.mark.timeout(240)

DG, CGD, WTM, DP = (api(k).request for k in (ApiKey.DeleteGroups, ApiKey.ConsumerGroupDescribe,
                                             ApiKey.WriteTxnMarkers, ApiKey.DescribeProducers))  # fmt: skip


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from target_bootstrap(request)


def do(bootstrap: str, request: Any, version: int) -> Any:
    with Connection(*parse_bootstrap(bootstrap)) as c:
        return c.do(request, version)


def test_delete_groups_v3_has_a_null_message_per_result(target: str) -> None:
    topic = create_topic(target, unique("dg"))
    group = unique("g")
    c = ck.Consumer({"bootstrap.servers": target, "group.id": group, "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    c.commit(offsets=[ck.TopicPartition(topic, 0, 3)], asynchronous=False)
    c.close()
    missing = unique("nosuch")
    r = do(target, DG(groups_names=[group, missing]), 3)
    assert sorted((x.group_id, x.error_code, x.error_message) for x in r.results) == sorted(
        [(group, 0, None), (missing, E.GROUP_ID_NOT_FOUND, None)])  # fmt: skip


def test_consumer_group_describe_v1_names_each_members_protocol(target: str) -> None:
    """A member heartbeating with ConsumerGroupHeartbeat is type 1; a classic (JoinGroup) member that joined the
    same consumer group, as while an application upgrades, is type 0; v0 has no type."""
    topic = create_topic(target, unique("cgd"), partitions=2)
    group = unique("g")
    modern = ck.Consumer({"bootstrap.servers": target, "group.id": group, "group.protocol": "consumer"})
    modern.subscribe([topic])
    classic = None
    try:
        deadline = time.monotonic() + 30
        while not modern.assignment() and time.monotonic() < deadline:
            modern.poll(0.2)
        classic = ck.Consumer({"bootstrap.servers": target, "group.id": group, "group.protocol": "classic",
                               "session.timeout.ms": 10_000})  # fmt: skip
        classic.subscribe([topic])

        def both_members() -> None:
            for c in (modern, classic):
                c.poll(0.1)
            [g] = do(target, CGD(group_ids=[group], include_authorized_operations=False), 1).groups
            assert g.error_code == 0, g
            assert sorted(m.member_type for m in g.members) == [0, 1]

        eventually(both_members, timeout=60)
    finally:
        if classic is not None:
            classic.close()
        modern.close()


def test_write_txn_markers_v2_applies_the_transaction_version(target: str) -> None:
    """Under transaction version 2 a marker must come from a newer epoch than the producer's: one of the same
    epoch while its transaction is open is INVALID_PRODUCER_EPOCH; version 0 (what the admin client's
    abortTransaction sends) takes it and closes the transaction."""
    topic = create_topic(target, unique("wtm"))
    p = ck.Producer({"bootstrap.servers": target, "transactional.id": unique("tid")})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"open")
    assert p.flush(30) == 0
    [part] = do(target, DP(topics=[DP.TopicRequest(name=topic, partition_indexes=[0])]), 0).topics[0].partitions
    [prod] = part.active_producers
    M = WTM.WritableTxnMarker

    def marker(version: int, tv: int) -> int:
        m = M(producer_id=prod.producer_id, producer_epoch=prod.producer_epoch, transaction_result=False,
              coordinator_epoch=0, transaction_version=tv,
              topics=[M.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])])  # fmt: skip
        r = do(target, WTM(markers=[m]), version)
        return int(r.markers[0].topics[0].partitions[0].error_code)

    assert marker(2, 2) == E.INVALID_PRODUCER_EPOCH
    assert marker(2, 0) == 0
    # Closed now: the same epoch again under version 2 is a retry of a marker already written.
    assert marker(2, 2) == 0
    del p  # its transaction was closed under it; nothing more to do with it
