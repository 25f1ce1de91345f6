"""Transaction version 2 (KIP-890 part 2), asserted alike on logbroker and Apache Kafka 4.4, both finalizing
transaction.version=2 (Kafka's default): partitions and groups join a transaction by Produce v12 and
TxnOffsetCommit v5 (no AddPartitionsToTxn, no AddOffsetsToTxn), every EndTxn v5 bumps the epoch and answers
it, a retried end is answered again, an empty transaction may be aborted; the Java client, which switches to
this protocol when the broker finalizes it, runs its transactions. The in-process tests at the end cover an
exhausted epoch (a new producer id) and a crash between the decision and the markers."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin.transactions import DescribeTransactionsRequest
from kafka.protocol.consumer.group import OffsetFetchRequest
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)

from logbroker.broker.txn import TxnState
from logbroker.broker.txn.model import MAX_EPOCH
from logbroker.protocol.errors import ErrorCode
from logbroker.protocol.records import TRANSACTIONAL_FLAG, NewRecord, build_batch
from logbroker_devtools.client.connection import Connection
from support import assert_equal, both_targets, create_topic, eventually, java_client_tool, unique
from test_transactions import (
    RETRIABLE_PRODUCE,
    Target,
    find_txn_coordinator,
    init_pid,
    list_latest,
    raw_conn,
    read,
    retried,
    transactional_broker,
    values,
)
from test_txn_coordinator import Node

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    with transactional_broker(request.param, tmp_path_factory.mktemp("txn-v2") / "data", transaction_version=2) as t:
        yield t


def batch(pid: int, epoch: int, seq: int, *vals: bytes) -> bytes:
    return build_batch([NewRecord(None, v) for v in vals], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, flags=TRANSACTIONAL_FLAG)  # fmt: skip


def produce_v12(conn: Connection, tid: str, parts: dict[tuple[str, int], bytes]) -> dict[tuple[str, int], str]:
    """One Produce v12 (transaction version 2: the partitions join the transaction); each partition's error."""
    P = ProduceRequest.TopicProduceData
    topics: dict[str, list[Any]] = {}
    for (topic, index), records in parts.items():
        topics.setdefault(topic, []).append(P.PartitionProduceData(index=index, records=records))
    req = ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=10_000,
                         topic_data=[P(name=t, partition_data=ps) for t, ps in topics.items()])  # fmt: skip

    def codes(resp: Any) -> dict[tuple[str, int], str]:
        return {(t.name, p.index): ErrorCode(p.error_code).name for t in resp.responses for p in t.partition_responses}

    deadline = time.monotonic() + 15
    while True:
        got = codes(conn.do(req, 12))
        retriable = {ErrorCode(c).name for c in RETRIABLE_PRODUCE} | {"CONCURRENT_TRANSACTIONS"}
        if not set(got.values()) & retriable or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def end_v5(conn: Connection, tid: str, pid: int, epoch: int, commit: bool) -> tuple[str, int, int]:
    req = EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)
    r = retried(lambda: conn.do(req, 5), lambda r: r.error_code)
    return ErrorCode(r.error_code).name, r.producer_id, r.producer_epoch


def describe(conn: Connection, tid: str) -> Any:
    [s] = conn.do(DescribeTransactionsRequest(transactional_ids=[tid]), 0).transaction_states
    return s


def test_partitions_join_by_produce_and_every_end_bumps_the_epoch(target: Target) -> None:
    topic = create_topic(target.bootstrap, unique("v2"), partitions=2)
    tid = unique("tid")
    with raw_conn(target) as conn:
        r = init_pid(conn, tid)
        pid, e = r.producer_id, r.producer_epoch
        got = produce_v12(conn, tid, {(topic, 0): batch(pid, e, 0, b"a0"), (topic, 1): batch(pid, e, 0, b"a1")})
        assert got == {(topic, 0): "NONE", (topic, 1): "NONE"}
        s = describe(conn, tid)
        assert (s.transaction_state, s.producer_epoch) == ("Ongoing", e)
        assert sorted((t.topic, sorted(t.partitions)) for t in s.topics) == [(topic, [0, 1])]

        assert end_v5(conn, tid, pid, e, True) == ("NONE", pid, e + 1)
        assert end_v5(conn, tid, pid, e, True) == ("NONE", pid, e + 1)  # a retry, answered again
        assert end_v5(conn, tid, pid, e, False)[0] == "INVALID_TXN_STATE"  # a retry of the other outcome
        assert end_v5(conn, tid, pid, e + 1, True)[0] == "INVALID_TXN_STATE"  # nothing open to commit
        assert end_v5(conn, tid, pid, e - 1, True)[0] == "PRODUCER_FENCED"
        # The old epoch is fenced from the partitions; the new one starts at sequence 0.
        assert produce_v12(conn, tid, {(topic, 0): batch(pid, e, 1, b"zombie")}) == {
            (topic, 0): "INVALID_PRODUCER_EPOCH"
        }
        assert produce_v12(conn, tid, {(topic, 0): batch(pid, e + 1, 0, b"b0")}) == {(topic, 0): "NONE"}
        assert end_v5(conn, tid, pid, e + 1, False) == ("NONE", pid, e + 2)
        assert end_v5(conn, tid, pid, e + 1, False) == ("NONE", pid, e + 2)
        # An empty transaction may be aborted (a producer in error cannot know what it began): bumped too.
        assert end_v5(conn, tid, pid, e + 2, False) == ("NONE", pid, e + 3)
        eventually(lambda: assert_equal(describe(conn, tid).transaction_state, "CompleteAbort"))
        assert end_v5(conn, tid, pid, e + 3, True)[0] == "INVALID_TXN_STATE"
        assert end_v5(conn, tid, pid + 1000, e + 3, False)[0] == "INVALID_PRODUCER_ID_MAPPING"
    assert sorted(values(read(target.bootstrap, topic, "read_committed", partitions=2))) == [b"a0", b"a1"]
    assert sorted(values(read(target.bootstrap, topic, "read_uncommitted", partitions=2))) == [b"a0", b"a1", b"b0"]


def test_offsets_join_by_txn_offset_commit(target: Target) -> None:
    topic = create_topic(target.bootstrap, unique("v2off"))
    tid, group = unique("tid"), unique("g")
    T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic

    def commit(pid: int, epoch: int, offset: int) -> str:
        req = TxnOffsetCommitRequest(
            transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=-1,
            member_id="", group_instance_id=None,
            topics=[T(name=topic, partitions=[T.TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata="m")])],
        )  # fmt: skip
        r = retried(lambda: conn.do(req, 5), lambda r: r.topics[0].partitions[0].error_code)
        return ErrorCode(r.topics[0].partitions[0].error_code).name

    def fetched() -> int:
        F = OffsetFetchRequest.OffsetFetchRequestTopic
        req = OffsetFetchRequest(group_id=group, topics=[F(name=topic, partition_indexes=[0])], require_stable=False)
        r = retried(lambda: conn.do(req, 7), lambda r: r.error_code)
        return int(r.topics[0].partitions[0].committed_offset)

    with raw_conn(target) as conn:
        r = init_pid(conn, tid)
        pid, e = r.producer_id, r.producer_epoch
        retried(lambda: conn.do(_find_group(group), 3), lambda r: r.error_code)
        assert commit(pid, e, 7) == "NONE"  # no AddOffsetsToTxn first
        s = describe(conn, tid)
        assert s.transaction_state == "Ongoing"
        assert fetched() == -1  # pending until the transaction ends
        assert end_v5(conn, tid, pid, e, True) == ("NONE", pid, e + 1)
        eventually(lambda: assert_equal(fetched(), 7))
        assert commit(pid, e, 9) == "INVALID_PRODUCER_EPOCH"  # the old epoch
        assert commit(pid, e + 1, 9) == "NONE"
        assert end_v5(conn, tid, pid, e + 1, False) == ("NONE", pid, e + 2)
        assert fetched() == 7


def _find_group(group: str) -> Any:
    from kafka.protocol.metadata import FindCoordinatorRequest

    return FindCoordinatorRequest(key=group, key_type=0)


def test_batches_of_two_producers_in_one_produce_are_refused(target: Target) -> None:
    topic = create_topic(target.bootstrap, unique("v2two"), partitions=2)
    tid_a, tid_b = unique("tid"), unique("tid")
    with raw_conn(target) as conn:
        a, b = init_pid(conn, tid_a), init_pid(conn, tid_b)
        got = produce_v12(conn, tid_a, {(topic, 0): batch(a.producer_id, a.producer_epoch, 0, b"a"),
                                        (topic, 1): batch(b.producer_id, b.producer_epoch, 0, b"b")})  # fmt: skip
        assert got == {(topic, 0): "INVALID_PRODUCER_ID_MAPPING", (topic, 1): "INVALID_PRODUCER_ID_MAPPING"}
        assert describe(conn, tid_a).transaction_state == "Empty"
    assert values(read(target.bootstrap, topic, "read_uncommitted", partitions=2)) == []


def test_a_timed_out_transaction_is_aborted_under_a_bumped_epoch(target: Target) -> None:
    topic = create_topic(target.bootstrap, unique("v2tmo"))
    tid = unique("tid")
    with raw_conn(target) as conn:
        r = init_pid(conn, tid, timeout_ms=1000)
        pid, e = r.producer_id, r.producer_epoch
        assert produce_v12(conn, tid, {(topic, 0): batch(pid, e, 0, b"slow")}) == {(topic, 0): "NONE"}
        eventually(lambda: assert_equal(list_latest(conn, topic, isolation=1), 2), timeout=20)  # ABORT marker at 1
        s = describe(conn, tid)
        assert (s.transaction_state, s.producer_epoch) == ("CompleteAbort", e + 1)
        assert produce_v12(conn, tid, {(topic, 0): batch(pid, e, 1, b"slower")}) == {
            (topic, 0): "INVALID_PRODUCER_EPOCH"
        }
        assert end_v5(conn, tid, pid, e, True)[0] == "INVALID_TXN_STATE"
        # The producer's own abort of the transaction the broker aborted is a retry: answered with the epoch.
        assert end_v5(conn, tid, pid, e, False) == ("NONE", pid, e + 1)
    assert values(read(target.bootstrap, topic, "read_committed")) == []


def test_the_broker_form_of_add_partitions(target: Target) -> None:
    """AddPartitionsToTxn v4-5, which a partition leader sends its coordinator: served alike (no authorizer)."""
    topic = create_topic(target.bootstrap, unique("v2apt"), partitions=2)
    tid = unique("tid")
    R = AddPartitionsToTxnRequest
    Txn = R.AddPartitionsToTxnTransaction

    def call(pid: int, epoch: int, verify: bool, parts: list[int], version: int = 5) -> dict[int, str]:
        req = R(transactions=[Txn(transactional_id=tid, producer_id=pid, producer_epoch=epoch, verify_only=verify,
                                  topics=[Txn.AddPartitionsToTxnTopic(name=topic, partitions=parts)])])  # fmt: skip
        r = retried(lambda: conn.do(req, version), lambda r: r.error_code)
        assert r.error_code == 0
        [res] = r.results_by_transaction
        return {p.partition_index: ErrorCode(p.partition_error_code).name
                for t in res.topic_results for p in t.results_by_partition}  # fmt: skip

    with raw_conn(target) as conn:
        r = init_pid(conn, tid)
        pid, e = r.producer_id, r.producer_epoch
        assert call(pid, e, True, [0]) == {0: "TRANSACTION_ABORTABLE"}
        assert call(pid, e, True, [0], version=4) == {0: "TRANSACTION_ABORTABLE"}
        assert call(pid, e, False, [0]) == {0: "NONE"}
        assert call(pid, e, True, [0, 1]) == {0: "NONE", 1: "TRANSACTION_ABORTABLE"}
        assert call(pid, e + 1, False, [1]) == {1: "PRODUCER_FENCED"}
        assert end_v5(conn, tid, pid, e, False) == ("NONE", pid, e + 1)


# ---------------------------------------------------------------------------------------------------------------
# The Java client, which uses transaction version 2 when the broker finalizes it


def java_txn(target: Target, *steps: dict[str, Any]) -> list[dict[str, Any]]:
    script = "".join(json.dumps(s) + "\n" for s in steps)
    proc = java_client_tool().run("txn", "--bootstrap", target.bootstrap, input=script, timeout=120)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert len(results) == len(steps), proc.stdout + proc.stderr[-3000:]
    return results


def test_java_transactions_fencing_and_timeout_under_version_2(target: Target) -> None:
    topic = create_topic(target.bootstrap, unique("j2"))
    tid, slow_tid = unique("j2-tid"), unique("j2-slow")
    props = {"linger.ms": 0}
    res = java_txn(
        target,
        {"op": "producer", "name": "a", "transactional_id": tid, "properties": props},
        {"op": "init", "name": "a"},
        {"op": "begin", "name": "a"},
        {"op": "send", "name": "a", "topic": topic, "partition": 0, "values": ["a-0", "a-1"]},
        {"op": "commit", "name": "a"},
        {"op": "begin", "name": "a"},
        {"op": "send", "name": "a", "topic": topic, "partition": 0, "values": ["a-2"]},
        {"op": "abort", "name": "a"},
        {"op": "begin", "name": "a"},
        {"op": "send", "name": "a", "topic": topic, "partition": 0, "values": ["a-3"]},
        {"op": "commit", "name": "a"},
        # A second instance of the same id fences the first.
        {"op": "producer", "name": "b", "transactional_id": tid, "properties": props},
        {"op": "init", "name": "b"},
        {"op": "begin", "name": "a"},
        {"op": "send", "name": "a", "topic": topic, "partition": 0, "values": ["zombie"]},
        {"op": "commit", "name": "a"},
        # A transaction past its timeout is aborted by the broker; the late commit fails.
        {"op": "producer", "name": "s", "transactional_id": slow_tid,
         "properties": {**props, "transaction.timeout.ms": 1000, "delivery.timeout.ms": 1000,
                        "request.timeout.ms": 900}},
        {"op": "init", "name": "s"},
        {"op": "begin", "name": "s"},
        {"op": "send", "name": "s", "topic": topic, "partition": 0, "values": ["late"]},
        {"op": "sleep", "ms": 3000},
        {"op": "commit", "name": "s"},
    )  # fmt: skip
    for i in range(13):
        assert res[i]["ok"], (i, res[i])
    assert not res[15]["ok"] or not res[14]["ok"], res[14:16]
    late = res[21]
    assert not late["ok"], late
    assert late["error"] == "InvalidTxnStateException", late
    assert values(read(target.bootstrap, topic, "read_committed")) == [b"a-0", b"a-1", b"a-3"]


# ---------------------------------------------------------------------------------------------------------------
# In process: an exhausted epoch, and a crash between the decision and the markers


def test_an_exhausted_epoch_hands_over_to_a_new_producer_id(tmp_path: Path) -> None:
    node = Node(tmp_path)

    async def run() -> int:
        c = node.coord
        init = await c.init_producer_id("x", 60_000, -1, -1)
        pid = init.producer_id
        meta = c.txns["x"]
        meta.epoch = MAX_EPOCH - 2  # two ends from exhaustion
        for epoch in (MAX_EPOCH - 2, MAX_EPOCH - 1):
            assert await c.add_partitions("x", pid, epoch, {("t", 0)}, tv=2) == ErrorCode.NONE
            node.produce(pid, epoch, 0)
            done = await c.end_txn_v2("x", pid, epoch, True)
            if epoch == MAX_EPOCH - 2:
                assert (done.error, done.producer_id, done.epoch) == (ErrorCode.NONE, pid, MAX_EPOCH - 1)
        # The last end's markers went out at epoch 32767 of the old id; the producer goes on with a new id.
        assert done.error == ErrorCode.NONE and done.producer_id != pid and done.epoch == 0
        new = done.producer_id
        assert node.plog.producers.producers[pid].epoch == MAX_EPOCH
        assert node.completed == []  # no groups in these transactions
        # A retry of that end (the old id, its last epoch) is answered with the new id.
        again = await c.end_txn_v2("x", pid, MAX_EPOCH - 1, True)
        assert (again.error, again.producer_id, again.epoch) == (ErrorCode.NONE, new, 0)
        assert await c.add_partitions("x", new, 0, {("t", 0)}, tv=2) == ErrorCode.NONE
        assert (await c.end_txn_v2("x", new, 0, False)).epoch == 1
        return new

    new = asyncio.run(run())
    node.reopen()
    meta = node.coord.txns["x"]
    assert (meta.producer_id, meta.epoch, meta.state) == (new, 1, TxnState.COMPLETE_ABORT)


def test_a_decided_end_with_a_handover_is_finished_after_a_crash(tmp_path: Path) -> None:
    """The decision (PrepareCommit at the bumped epoch, the next producer id) is durable before any marker: a
    restart writes the markers and hands over, as the client was (or would have been) told."""
    node = Node(tmp_path)

    async def decide() -> int:
        c = node.coord
        pid = (await c.init_producer_id("y", 60_000, -1, -1)).producer_id
        meta = c.txns["y"]
        meta.epoch = MAX_EPOCH - 1
        assert await c.add_partitions("y", pid, MAX_EPOCH - 1, {("t", 0)}, tv=2) == ErrorCode.NONE
        node.produce(pid, MAX_EPOCH - 1, 0)
        prepared = meta.transit(state=TxnState.PREPARE_COMMIT, epoch=MAX_EPOCH, last_epoch=MAX_EPOCH - 1,
                                next_producer_id=node.next_id(), client_tv=2)  # fmt: skip
        await c._write(prepared)  # the decision, then the "crash" before its markers
        return pid

    pid = asyncio.run(decide())
    assert node.plog.producers.ongoing  # no marker yet
    node.reopen()

    async def restart() -> None:
        node.coord.start()
        for _ in range(100):
            if node.coord.txns["y"].state == TxnState.COMPLETE_COMMIT:
                break
            await asyncio.sleep(0.01)
        await node.coord.stop()

    asyncio.run(restart())
    meta = node.coord.txns["y"]
    assert meta.state == TxnState.COMPLETE_COMMIT and meta.producer_id != pid and meta.epoch == 0
    assert meta.prev_producer_id == pid
    assert not node.plog.producers.ongoing  # the COMMIT marker is in


def test_an_acknowledged_v2_end_survives_kill_9(tmp_path: Path) -> None:
    """EndTxn v5's answer (the bumped epoch) is durable: after kill -9 the retry gets the same answer, the new
    epoch produces, the old one is fenced, and the committed records are there."""
    from logbroker_devtools.testing.process import BrokerProcess

    with BrokerProcess(tmp_path / "data") as proc:
        target = Target("logbroker", proc.bootstrap, proc)
        topic = create_topic(proc.bootstrap, unique("v2k9"))
        tid = unique("tid")
        with raw_conn(target) as conn:
            r = init_pid(conn, tid)
            pid, e = r.producer_id, r.producer_epoch
            assert produce_v12(conn, tid, {(topic, 0): batch(pid, e, 0, b"kept")}) == {(topic, 0): "NONE"}
            assert end_v5(conn, tid, pid, e, True) == ("NONE", pid, e + 1)
        proc.kill()
        proc.start()
        with raw_conn(target) as conn:
            find_txn_coordinator(conn, tid)
            assert end_v5(conn, tid, pid, e, True) == ("NONE", pid, e + 1)
            fenced = {(topic, 0): "INVALID_PRODUCER_EPOCH"}
            assert produce_v12(conn, tid, {(topic, 0): batch(pid, e, 1, b"zombie")}) == fenced
            assert produce_v12(conn, tid, {(topic, 0): batch(pid, e + 1, 0, b"next")}) == {(topic, 0): "NONE"}
            assert end_v5(conn, tid, pid, e + 1, True) == ("NONE", pid, e + 2)
        assert values(read(proc.bootstrap, topic, "read_committed")) == [b"kept", b"next"]
