"""Transactional offsets at the protocol level, asserted alike on logbroker and Apache Kafka 4.4 (TV1).

TxnOffsetCommit leaves offsets pending in the group until the transaction ends: invisible to OffsetFetch,
answered UNSTABLE_OFFSET_COMMIT to a `require_stable` fetch (v7 per partition, v8+ per partition inside the
group), committed at EndTxn(commit), dropped at EndTxn(abort). Also the group rules that differ from
OffsetCommit's: v0-2 commit without a member even while the group has members, an unknown group with a
generation is ILLEGAL_GENERATION, and a deleted group's pending offsets are gone. Whole-client flows
(send_offsets_to_transaction) are tested with the clients elsewhere; this file drives the requests.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.admin.groups import DeleteGroupsRequest
from kafka.protocol.consumer.group import OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import AddOffsetsToTxnRequest, TxnOffsetCommitRequest

from logbroker.protocol.errors import ErrorCode
from logbroker_devtools.client.connection import Connection
from support import assert_equal, both_targets, create_topic, eventually, unique
from test_transactions import Target, _join_group, end_txn, init_pid, raw_conn, retried, transactional_broker

pytestmark = pytest.mark.timeout(180)

UNSTABLE = int(ErrorCode.UNSTABLE_OFFSET_COMMIT)
Rows = dict[int, tuple[int, str | None, int]]  # partition -> (offset, metadata, error code)


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    with transactional_broker(request.param, tmp_path_factory.mktemp("txnoff") / "data") as t:
        yield t


class Txn:
    """One transactional id's producer, driven request by request on a raw connection."""

    def __init__(self, conn: Connection, group: str) -> None:
        self.conn, self.group, self.tid = conn, group, unique("tid")
        r = init_pid(conn, self.tid)
        assert r.error_code == 0, ErrorCode(r.error_code).name
        self.pid, self.epoch = r.producer_id, r.producer_epoch

    def add_offsets(self) -> None:
        req = AddOffsetsToTxnRequest(transactional_id=self.tid, producer_id=self.pid, producer_epoch=self.epoch,
                                     group_id=self.group)  # fmt: skip
        assert retried(lambda: self.conn.do(req, 3), lambda r: r.error_code).error_code == 0
        # As producers do before TxnOffsetCommit (on Kafka this also creates __consumer_offsets).
        find = FindCoordinatorRequest(key=self.group, key_type=0)
        assert retried(lambda: self.conn.do(find, 3), lambda r: r.error_code).error_code == 0

    def commit_offsets(self, offsets: dict[tuple[str, int], tuple[int, str | None]], version: int = 3,
                       member: str = "", generation: int = -1) -> dict[tuple[str, int], str]:  # fmt: skip
        T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        P = T.TxnOffsetCommitRequestPartition
        topics: dict[str, list[Any]] = {}
        for (t, p), (o, meta) in offsets.items():
            topics.setdefault(t, []).append(P(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                              committed_metadata=meta))  # fmt: skip
        req = TxnOffsetCommitRequest(transactional_id=self.tid, group_id=self.group, producer_id=self.pid,
                                     producer_epoch=self.epoch, generation_id=generation, member_id=member,
                                     group_instance_id=None,
                                     topics=[T(name=t, partitions=ps) for t, ps in topics.items()])  # fmt: skip

        def codes(resp: Any) -> dict[tuple[str, int], str]:
            return {
                (t.name, p.partition_index): ErrorCode(p.error_code).name for t in resp.topics for p in t.partitions
            }

        return codes(
            retried(lambda: self.conn.do(req, version), lambda r: max(ErrorCode[c] for c in codes(r).values()))
        )

    def end(self, commit: bool) -> None:
        assert end_txn(self.conn, self.tid, self.pid, self.epoch, commit) == "NONE"


def fetch_v7(conn: Connection, group: str, topic: str, partitions: list[int], stable: bool) -> Rows:
    """OffsetFetch v7: {partition: (offset, metadata, error)}; the top-level error must be NONE."""
    T = OffsetFetchRequest.OffsetFetchRequestTopic
    resp = conn.do(OffsetFetchRequest(group_id=group, topics=[T(name=topic, partition_indexes=partitions)],
                                      require_stable=stable), 7)  # fmt: skip
    assert resp.error_code == 0, ErrorCode(resp.error_code).name
    return {
        p.partition_index: (p.committed_offset, p.metadata, p.error_code) for t in resp.topics for p in t.partitions
    }


def fetch_v8(conn: Connection, group: str, topic: str | None, partitions: list[int], stable: bool) -> Rows:
    """OffsetFetch v8 (batched form, one group); `topic` None asks for every committed partition."""
    G = OffsetFetchRequest.OffsetFetchRequestGroup
    topics = None if topic is None else [G.OffsetFetchRequestTopics(name=topic, partition_indexes=partitions)]
    resp = conn.do(OffsetFetchRequest(groups=[G(group_id=group, topics=topics)], require_stable=stable), 8)
    [g] = resp.groups
    assert g.error_code == 0, ErrorCode(g.error_code).name
    return {p.partition_index: (p.committed_offset, p.metadata, p.error_code) for t in g.topics for p in t.partitions}


def test_pending_offsets_are_unstable_until_the_transaction_ends(target: Target) -> None:
    topic = create_topic(target.bootstrap, unique("txoff"), partitions=2)
    group = unique("g")
    with raw_conn(target) as conn:
        txn = Txn(conn, group)
        txn.add_offsets()
        # An unknown partition is refused alone; a null metadata is stored as "".
        assert txn.commit_offsets({(topic, 0): (5, None), (topic, 1): (6, "m"), (topic, 9): (1, None)}) == {
            (topic, 0): "NONE", (topic, 1): "NONE", (topic, 9): "UNKNOWN_TOPIC_OR_PARTITION"}  # fmt: skip
        nothing = {0: (-1, "", 0), 1: (-1, "", 0)}
        unstable = {0: (-1, "", UNSTABLE), 1: (-1, "", UNSTABLE)}
        assert fetch_v7(conn, group, topic, [0, 1], stable=False) == nothing
        assert fetch_v7(conn, group, topic, [0, 1], stable=True) == unstable
        assert fetch_v8(conn, group, topic, [0, 1], stable=True) == unstable
        assert fetch_v8(conn, group, None, [], stable=True) == {}  # only committed partitions are listed
        txn.end(commit=True)
        committed = {0: (5, "", 0), 1: (6, "m", 0)}
        eventually(lambda: assert_equal(fetch_v7(conn, group, topic, [0, 1], stable=True), committed))

        # A second transaction: pending over a committed offset, then aborted.
        txn.add_offsets()
        assert txn.commit_offsets({(topic, 0): (50, None)}) == {(topic, 0): "NONE"}
        assert fetch_v8(conn, group, None, [], stable=True) == {0: (-1, "", UNSTABLE), 1: (6, "m", 0)}
        assert fetch_v8(conn, group, None, [], stable=False) == committed
        txn.end(commit=False)
        eventually(lambda: assert_equal(fetch_v8(conn, group, None, [], stable=True), committed))


def test_txn_offset_commit_group_rules(target: Target) -> None:
    topic = create_topic(target.bootstrap, unique("txrules"))
    tp = (topic, 0)
    with raw_conn(target) as conn:
        # An unknown group with a generation: ILLEGAL_GENERATION (not GROUP_ID_NOT_FOUND), and no group made.
        lost = Txn(conn, unique("lost"))
        lost.add_offsets()
        assert lost.commit_offsets({tp: (1, None)}, member="m", generation=1) == {tp: "ILLEGAL_GENERATION"}
        lost.end(commit=False)

        # A group with a member: v0-2 (no member id, no generation) still commit; v3 with a member checks it.
        group = unique("g")
        member, generation = _join_group(conn, group)
        txn = Txn(conn, group)
        txn.add_offsets()
        assert txn.commit_offsets({tp: (7, None)}, version=2) == {tp: "NONE"}
        assert txn.commit_offsets({tp: (8, None)}, member=member, generation=generation) == {tp: "NONE"}
        assert txn.commit_offsets({tp: (9, None)}, member="ghost", generation=generation) == {tp: "UNKNOWN_MEMBER_ID"}
        txn.end(commit=True)
        eventually(lambda: assert_equal(fetch_v7(conn, group, topic, [0], stable=True), {0: (8, "", 0)}))

        # A memberless group deleted while its offsets are pending: they go with it.
        simple = unique("simple")
        txn = Txn(conn, simple)
        txn.add_offsets()
        assert txn.commit_offsets({tp: (3, None)}) == {tp: "NONE"}
        [res] = conn.do(DeleteGroupsRequest(groups_names=[simple]), 2).results
        assert (res.group_id, ErrorCode(res.error_code).name) == (simple, "NONE")
        assert fetch_v7(conn, simple, topic, [0], stable=True) == {0: (-1, "", 0)}
        txn.end(commit=True)
        time.sleep(0.5)  # the markers are written by now on Kafka: nothing comes back
        assert fetch_v7(conn, simple, topic, [0], stable=True) == {0: (-1, "", 0)}
