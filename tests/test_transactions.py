"""Kafka transactions (issue 15) seen from unmodified clients, asserted alike on logbroker and Apache Kafka 4.4.

Both brokers here finalize `transaction.version=1` (Kafka formatted so, logbroker's setting): the Java client
changes its protocol (an epoch bump per transaction, implicit partition adds) when a broker finalizes 2, and
these modules pin the protocol librdkafka, kafka-python and aiokafka speak; test_txn_v2 runs version 2, both
brokers' default. Both abort timed-out transactions every 200 ms here (Kafka's default check runs every 10 s).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka import IsolationLevel
from confluent_kafka.admin import AdminClient, OffsetSpec
from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.consumer.group import JoinGroupRequest, SyncGroupRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)

from logbroker.protocol.errors import ErrorCode
from logbroker.protocol.records import TRANSACTIONAL_FLAG, NewRecord, build_batch
from logbroker_devtools.client.connection import Connection, fetch_request, parse_bootstrap
from logbroker_devtools.testing.process import BrokerProcess
from support import assert_equal, both_targets, create_topic, eventually, kafka_tool, missing_tool, unique

pytestmark = pytest.mark.timeout(180)

CLEANUP_MS = 200  # how often both brokers look for timed-out transactions in these tests
KAFKA_PROPERTIES = {
    "group.initial.rebalance.delay.ms": 0,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": CLEANUP_MS,
}
LOGBROKER_ENV = {"LOGBROKER_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": str(CLEANUP_MS)}
RETRIABLE_PRODUCE = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NETWORK_EXCEPTION}
WORKER = Path(__file__).with_name("txn_worker.py")
# Answers a transactional client retries while the coordinator loads or finishes the previous transaction.
RETRIABLE = {
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.CONCURRENT_TRANSACTIONS,
}


@dataclass
class Target:
    kind: str  # "logbroker" or "kafka"
    bootstrap: str
    proc: BrokerProcess | None = None


@contextlib.contextmanager
def transactional_broker(kind: str, data_dir: Path, transaction_version: int = 1) -> Iterator[Target]:
    """A broker of the caller's own: logbroker with a 200 ms timed-out-transaction check, or single-node Kafka
    4.4 with the same check; both with the finalized transaction.version asked for (1 by default: the modules
    written before KIP-890 part 2; test_txn_v2 runs version 2)."""
    if kind == "logbroker":
        env = {**LOGBROKER_ENV, "LOGBROKER_TRANSACTION_VERSION": str(transaction_version)}
        with BrokerProcess(data_dir, env=env) as proc:
            yield Target(kind, proc.bootstrap, proc)
        return
    from logbroker_devtools.testing import peers

    if not peers.java_available():
        missing_tool("java not found (Apache Kafka needs a JVM)")
    if not peers.jars_available("kafka"):
        missing_tool(f"no Kafka jars in {peers.default_jar_dir('kafka')} (run .ci/fetch-jars)")
    feature = ["--feature", f"transaction.version={transaction_version}"]
    with peers.KafkaPeer(server_properties=KAFKA_PROPERTIES, format_args=feature) as k:
        yield Target(kind, k.bootstrap)


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    with transactional_broker(request.param, tmp_path_factory.mktemp("txn") / "data") as t:
        yield t


# ---------------------------------------------------------------------------------------------------------------
# Clients


def txn_producer(bootstrap: str, tid: str, **conf: Any) -> ck.Producer:
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5, **conf})
    p.init_transactions(60)
    return p


def committed_txn(bootstrap: str, topic: str, values: list[bytes], partition: int = 0, tid: str | None = None) -> None:
    p = txn_producer(bootstrap, tid or unique("tid"))
    p.begin_transaction()
    for v in values:
        p.produce(topic, v, partition=partition)
    p.commit_transaction(60)


def read(
    bootstrap: str, topic: str, isolation: str, partitions: int = 1, timeout: float = 30.0
) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every message up to each partition's end (the LSO under read_committed)."""
    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("reader"),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    try:
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
        pending, out = set(range(partitions)), []
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
                pending.discard(m.partition())
                continue
            out.append((m.partition(), m.offset(), m.value()))
        assert not pending, f"no EOF from partitions {sorted(pending)} of {topic} ({isolation})"
        return sorted(out)
    finally:
        c.close()


def values(rows: list[tuple[int, int, bytes]]) -> list[bytes]:
    return [v for _, _, v in rows]


def watermarks(bootstrap: str, topic: str, isolation: str, partition: int = 0) -> tuple[int, int]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": unique("wm"), "isolation.level": isolation})
    try:
        return c.get_watermark_offsets(ck.TopicPartition(topic, partition), timeout=30, cached=False)
    finally:
        c.close()


def admin_latest(bootstrap: str, topic: str, level: IsolationLevel) -> int:
    tp = ck.TopicPartition(topic, 0)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level)[tp].result(30).offset


# ---------------------------------------------------------------------------------------------------------------
# confluent-kafka: commit, abort, isolation levels, the LSO


def test_commit_and_abort_as_each_isolation_level_sees_them(target: Target) -> None:
    """Aborted records stay in the log for read_uncommitted; markers take an offset and are never delivered."""
    topic = create_topic(target.bootstrap, unique("txn"), partitions=2)
    p = txn_producer(target.bootstrap, unique("tid"))
    for name, parts, commit in (("a", 3, True), ("b", 2, False), ("c", 1, True)):
        p.begin_transaction()
        for i in range(parts):
            p.produce(topic, f"{name}{i}".encode(), partition=0)
        p.produce(topic, f"{name}-p1".encode(), partition=1)
        assert p.flush(30) == 0  # else abort_transaction purges what was not sent yet
        if commit:
            p.commit_transaction(60)
        else:
            p.abort_transaction(60)
    # Partition 0: a0 a1 a2 COMMIT(3) b0 b1 ABORT(6) c0 COMMIT(8); partition 1: a COMMIT b ABORT c COMMIT.
    assert read(target.bootstrap, topic, "read_committed", 2) == [
        (0, 0, b"a0"),
        (0, 1, b"a1"),
        (0, 2, b"a2"),
        (0, 7, b"c0"),
        (1, 0, b"a-p1"),
        (1, 4, b"c-p1"),
    ]
    assert read(target.bootstrap, topic, "read_uncommitted", 2) == [
        (0, 0, b"a0"),
        (0, 1, b"a1"),
        (0, 2, b"a2"),
        (0, 4, b"b0"),
        (0, 5, b"b1"),
        (0, 7, b"c0"),
        (1, 0, b"a-p1"),
        (1, 2, b"b-p1"),
        (1, 4, b"c-p1"),
    ]
    # No open transaction: the LSO is the high watermark, which counts the markers.
    assert watermarks(target.bootstrap, topic, "read_committed") == (0, 9)
    assert watermarks(target.bootstrap, topic, "read_uncommitted") == (0, 9)
    assert watermarks(target.bootstrap, topic, "read_committed", 1) == (0, 6)


def test_open_transaction_holds_read_committed_at_the_lso(target: Target) -> None:
    topic = create_topic(target.bootstrap, unique("lso"))
    committed_txn(target.bootstrap, topic, [b"x0", b"x1"])  # offsets 0-1, marker 2
    plain = ck.Producer({"bootstrap.servers": target.bootstrap, "enable.idempotence": True})
    open_p = txn_producer(target.bootstrap, unique("tid"))
    open_p.begin_transaction()
    open_p.produce(topic, b"o0", partition=0)
    open_p.produce(topic, b"o1", partition=0)
    assert open_p.flush(30) == 0  # offsets 3-4, in the log but undecided
    plain.produce(topic, b"n5", partition=0)  # offset 5: not transactional, but after the LSO
    assert plain.flush(30) == 0

    assert values(read(target.bootstrap, topic, "read_committed")) == [b"x0", b"x1"]
    assert values(read(target.bootstrap, topic, "read_uncommitted")) == [b"x0", b"x1", b"o0", b"o1", b"n5"]
    assert watermarks(target.bootstrap, topic, "read_committed") == (0, 3)
    assert watermarks(target.bootstrap, topic, "read_uncommitted") == (0, 6)
    assert admin_latest(target.bootstrap, topic, IsolationLevel.READ_COMMITTED) == 3
    assert admin_latest(target.bootstrap, topic, IsolationLevel.READ_UNCOMMITTED) == 6
    with raw_conn(target) as conn:
        assert list_latest(conn, topic, isolation=1) == 3
        assert list_latest(conn, topic, isolation=0) == 6

    open_p.commit_transaction(60)  # marker at 6
    assert eventually(
        lambda: assert_equal(
            values(read(target.bootstrap, topic, "read_committed")), [b"x0", b"x1", b"o0", b"o1", b"n5"]
        )
    )
    assert watermarks(target.bootstrap, topic, "read_committed") == (0, 7)
    assert admin_latest(target.bootstrap, topic, IsolationLevel.READ_COMMITTED) == 7


def test_read_committed_consumer_waiting_at_the_lso_gets_the_records_at_commit(target: Target) -> None:
    """A read_committed consumer polling while the transaction is open receives it once the commit lands."""
    topic = create_topic(target.bootstrap, unique("wait"))
    p = txn_producer(target.bootstrap, unique("tid"))
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, f"w{i}".encode(), partition=0)
    assert p.flush(30) == 0
    c = ck.Consumer(
        {
            "bootstrap.servers": target.bootstrap,
            "group.id": unique("g"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        early = [m for m in (c.poll(0.5) for _ in range(4)) if m is not None and m.error() is None]
        assert early == []
        p.commit_transaction(60)
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append((m.offset(), m.value()))
        assert got == [(i, f"w{i}".encode()) for i in range(5)]
    finally:
        c.close()


def test_interleaved_transactions_across_segments_and_codecs(target: Target) -> None:
    """Two transactional producers interleave in the log, one commits while the other aborts, with plain records
    between them, over several 1 MiB segments and three codecs: read_committed drops exactly the aborted
    producer's records of each round (the aborted-transaction index, per producer id and offset range)."""
    topic = create_topic(target.bootstrap, unique("mix"), config={"segment.bytes": str(1 << 20)})
    a = txn_producer(target.bootstrap, unique("tid-a"), **{"compression.type": "gzip"})
    b = txn_producer(target.bootstrap, unique("tid-b"), **{"compression.type": "lz4"})
    plain = ck.Producer({"bootstrap.servers": target.bootstrap, "compression.type": "zstd"})
    committed: set[bytes] = set()
    produced: set[bytes] = set()
    for rnd in range(40):
        a.begin_transaction()
        b.begin_transaction()
        for i in range(5):
            for name, p in (("a", a), ("b", b), ("n", plain)):
                if name == "n" and i % 2:
                    continue
                value = f"{name}-{rnd}-{i}-".encode() + os.urandom(4000)  # incompressible: fills segments
                p.produce(topic, value, partition=0)
                assert p.flush(30) == 0
                produced.add(value)
                if name == "n" or (name == "a") == (rnd % 2 == 0):
                    committed.add(value)
        (a.commit_transaction if rnd % 2 == 0 else a.abort_transaction)(60)
        (b.abort_transaction if rnd % 2 == 0 else b.commit_transaction)(60)
    everything = read(target.bootstrap, topic, "read_uncommitted", timeout=60)
    assert set(values(everything)) == produced and len(everything) == len(produced)
    want = [v for v in values(everything) if v in committed]
    assert values(read(target.bootstrap, topic, "read_committed", timeout=60)) == want


def test_offsets_for_times_under_read_committed(target: Target) -> None:
    """Timestamp lookups count the markers (stamped when written) and, for read_committed, stop at the LSO."""
    topic = create_topic(target.bootstrap, unique("ts"))
    now = int(time.time() * 1000)
    committed_p = txn_producer(target.bootstrap, unique("tid"))
    committed_p.begin_transaction()
    committed_p.produce(topic, b"c0", partition=0, timestamp=now - 60_000)
    committed_p.commit_transaction(60)  # 0, marker at 1 stamped about `now`
    p = txn_producer(target.bootstrap, unique("tid"))
    p.begin_transaction()
    p.produce(topic, b"o2", partition=0, timestamp=now + 600_000)  # offset 2, open, stamped in the future
    assert p.flush(30) == 0

    def lookup(isolation: str, ts: int) -> int:
        c = ck.Consumer({"bootstrap.servers": target.bootstrap, "group.id": unique("ts"), "isolation.level": isolation})
        try:
            [tp] = c.offsets_for_times([ck.TopicPartition(topic, 0, ts)], timeout=30)
            return int(tp.offset)
        finally:
            c.close()

    for isolation in ("read_committed", "read_uncommitted"):
        assert lookup(isolation, now - 60_000) == 0
        assert lookup(isolation, now - 30_000) == 1  # the COMMIT marker's offset: its timestamp is later
    assert lookup("read_uncommitted", now + 300_000) == 2
    assert lookup("read_committed", now + 300_000) == -1
    p.commit_transaction(60)
    assert lookup("read_committed", now + 300_000) == 2


# ---------------------------------------------------------------------------------------------------------------
# Consume-transform-produce across a kill -9 of the application


def _start_worker(target: Target, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), "--bootstrap", target.bootstrap, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_consume_transform_produce_is_exactly_once_across_kill_9(target: Target) -> None:
    n = 300
    src = create_topic(target.bootstrap, unique("ctp-in"), partitions=2)
    dst = create_topic(target.bootstrap, unique("ctp-out"), partitions=2)
    group, tid = unique("ctp-g"), unique("ctp-tid")
    plain = ck.Producer({"bootstrap.servers": target.bootstrap, "enable.idempotence": True})
    for i in range(n):
        plain.produce(src, f"in-{i}".encode(), partition=i % 2)
    assert plain.flush(30) == 0
    common = ["--input", src, "--output", dst, "--group", group, "--transactional-id", tid, "--batch", "40"]

    first = _start_worker(target, *common, "--hang-in-batch", "3")
    assert first.stdout is not None
    seen = []
    try:
        for line in first.stdout:  # the worker announces each step; kill it inside its third batch
            seen.append(line.strip())
            if line.startswith("hanging"):
                break
        else:
            pytest.fail(f"worker exited early: {seen}\n{first.stderr.read() if first.stderr else ''}")
    finally:
        first.kill()
        first.wait()
    assert sum(s.startswith("committed") for s in seen) == 2, seen

    second = _start_worker(target, *common)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, f"worker failed:\n{out}\n{err}"

    got = values(read(target.bootstrap, dst, "read_committed", 2))
    assert sorted(got) == sorted(f"out-in-{i}".encode() for i in range(n))  # each input once, nothing aborted
    # The killed batch's records reached the log before the kill: read_uncommitted shows them twice.
    assert len(read(target.bootstrap, dst, "read_uncommitted", 2)) > n
    c = ck.Consumer({"bootstrap.servers": target.bootstrap, "group.id": group})
    try:
        committed = c.committed([ck.TopicPartition(src, p) for p in range(2)], timeout=30)
        assert [tp.offset for tp in committed] == [n // 2, n // 2]
    finally:
        c.close()


@pytest.mark.kafka_side_in_full_tier  # the Kafka run: 19-22 s, in --full (CI budget)
def test_a_killed_workers_partitions_are_taken_over_exactly_once(target: Target) -> None:
    """Two workers share the group with their own transactional ids (KIP-447); one is killed -9 mid-batch. The
    survivor gets its partitions once the session expires, and reads their committed offsets only after the dead
    worker's transaction times out and is aborted (its pending offsets are unstable until then)."""
    n, parts = 400, 4
    src = create_topic(target.bootstrap, unique("ctp2-in"), partitions=parts)
    dst = create_topic(target.bootstrap, unique("ctp2-out"), partitions=parts)
    group = unique("ctp2-g")
    plain = ck.Producer({"bootstrap.servers": target.bootstrap, "enable.idempotence": True})
    for i in range(n):
        plain.produce(src, f"in-{i}".encode(), partition=i % parts)
    assert plain.flush(30) == 0
    common = ["--input", src, "--output", dst, "--group", group, "--batch", "10", "--session-timeout-ms", "6000",
              "--transaction-timeout-ms", "5000"]  # fmt: skip
    survivor = _start_worker(target, *common, "--transactional-id", unique("tid-b"), "--batch-delay", "0.3")
    victim = None
    try:
        assert survivor.stdout is not None
        assert survivor.stdout.readline().strip() == "assigned"
        victim = _start_worker(target, *common, "--transactional-id", unique("tid-a"), "--hang-in-batch", "2")
        assert victim.stdout is not None
        seen = []
        for line in victim.stdout:
            seen.append(line.strip())
            if line.startswith("hanging"):
                break
        else:
            pytest.fail(f"worker exited early: {seen}")
        victim.kill()
        victim.wait()
        assert sum(s.startswith("committed") for s in seen) == 1, seen
        out, err = survivor.communicate(timeout=120)
        assert survivor.returncode == 0, f"survivor failed:\n{out}\n{err}"
    finally:
        for w in (survivor, victim):
            if w is not None and w.poll() is None:
                w.kill()
                w.wait()
    got = values(read(target.bootstrap, dst, "read_committed", parts))
    assert sorted(got) == sorted(f"out-in-{i}".encode() for i in range(n))
    assert len(read(target.bootstrap, dst, "read_uncommitted", parts)) > n  # the victim's open batch, aborted
    c = ck.Consumer({"bootstrap.servers": target.bootstrap, "group.id": group})
    try:
        committed = c.committed([ck.TopicPartition(src, p) for p in range(parts)], timeout=30)
        assert [tp.offset for tp in committed] == [n // parts] * parts
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------------------------
# Raw requests: wrong input gets Kafka's error code and the broker keeps serving


@contextlib.contextmanager
def raw_conn(target: Target) -> Iterator[Connection]:
    host, port = parse_bootstrap(target.bootstrap)
    conn = Connection(host, port, client_id="txn-probe", timeout=30)
    try:
        yield conn
    finally:
        conn.close()


def list_latest(conn: Connection, topic: str, isolation: int) -> int:
    R = ListOffsetsRequest
    P = R.ListOffsetsTopic.ListOffsetsPartition
    req = R(
        replica_id=-1,
        isolation_level=isolation,
        topics=[
            R.ListOffsetsTopic(name=topic, partitions=[P(partition_index=0, current_leader_epoch=-1, timestamp=-1)])
        ],
    )
    p = conn.do(req).topics[0].partitions[0]
    assert p.error_code == 0, ErrorCode(p.error_code).name
    return int(p.offset)


def retried(call: Callable[[], Any], code: Callable[[Any], int], timeout: float = 30.0) -> Any:
    """Repeat a coordinator request while it answers what a client retries (coordinator loading, the previous
    transaction still completing)."""
    deadline = time.monotonic() + timeout
    while True:
        resp = call()
        if code(resp) not in RETRIABLE or time.monotonic() > deadline:
            return resp
        time.sleep(0.1)


def find_txn_coordinator(conn: Connection, tid: str) -> None:
    resp = retried(lambda: conn.do(FindCoordinatorRequest(key=tid, key_type=1), 3), lambda r: r.error_code)
    assert resp.error_code == 0, ErrorCode(resp.error_code).name


def init_pid(conn: Connection, tid: str | None, timeout_ms: int = 60_000) -> Any:
    if tid is not None:
        find_txn_coordinator(conn, tid)
    req = InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=timeout_ms)
    return retried(lambda: conn.do(req, 4), lambda r: r.error_code)


def add_partitions(
    conn: Connection, tid: str, pid: int, epoch: int, parts: dict[str, list[int]]
) -> dict[tuple[str, int], str]:
    T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    req = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[T(name=t, partitions=ps) for t, ps in parts.items()],
    )

    def codes(resp: Any) -> dict[tuple[str, int], str]:
        return {
            (t.name, p.partition_index): ErrorCode(p.partition_error_code).name
            for t in resp.results_by_topic_v3_and_below
            for p in t.results_by_partition
        }

    resp = retried(lambda: conn.do(req, 3), lambda r: max(ErrorCode[c] for c in codes(r).values()))
    return codes(resp)


def end_txn(conn: Connection, tid: str, pid: int, epoch: int, commit: bool) -> str:
    req = EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)
    return ErrorCode(retried(lambda: conn.do(req, 3), lambda r: r.error_code).error_code).name


def produce_txn(conn: Connection, tid: str, topic: str, pid: int, epoch: int, seq: int, *vals: bytes) -> str:
    batch = build_batch(
        [NewRecord(None, v) for v in vals],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        flags=TRANSACTIONAL_FLAG,
    )
    P = ProduceRequest.TopicProduceData
    req = ProduceRequest(
        transactional_id=tid,
        acks=-1,
        timeout_ms=10_000,
        topic_data=[P(name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])],
    )

    def code(resp: Any) -> int:
        return int(resp.responses[0].partition_responses[0].error_code)

    # Kafka verifies a transactional produce with its coordinator (KIP-890 part 1); while its broker-to-coordinator
    # channel connects the answer is a retriable NOT_LEADER_OR_FOLLOWER, which clients retry.
    deadline = time.monotonic() + 15
    while code(resp := conn.do(req, 9)) in RETRIABLE_PRODUCE and time.monotonic() < deadline:
        time.sleep(0.1)
    return ErrorCode(code(resp)).name


def assert_still_serving(target: Target) -> None:
    """A fresh transaction commits and reads back: the bad request left the broker working."""
    topic = create_topic(target.bootstrap, unique("alive"))
    committed_txn(target.bootstrap, topic, [b"alive"])
    assert values(read(target.bootstrap, topic, "read_committed")) == [b"alive"]


def test_end_txn_without_init_producer_id(target: Target) -> None:
    tid = unique("never-init")
    with raw_conn(target) as conn:
        find_txn_coordinator(conn, tid)
        assert end_txn(conn, tid, 424242, 0, True) == "INVALID_PRODUCER_ID_MAPPING"
        assert end_txn(conn, tid, 424242, 0, False) == "INVALID_PRODUCER_ID_MAPPING"
    assert_still_serving(target)


def test_add_partitions_for_an_unknown_topic(target: Target) -> None:
    known = create_topic(target.bootstrap, unique("known"))
    tid = unique("tid")
    with raw_conn(target) as conn:
        r = init_pid(conn, tid)
        assert r.error_code == 0, ErrorCode(r.error_code).name
        missing = unique("missing")
        # One unknown partition fails the whole request: the others are not attempted, nothing is added.
        assert add_partitions(conn, tid, r.producer_id, r.producer_epoch, {known: [0], missing: [0]}) == {
            (known, 0): "OPERATION_NOT_ATTEMPTED",
            (missing, 0): "UNKNOWN_TOPIC_OR_PARTITION",
        }
        assert add_partitions(conn, tid, r.producer_id, r.producer_epoch, {known: [0, 7]}) == {
            (known, 0): "OPERATION_NOT_ATTEMPTED",
            (known, 7): "UNKNOWN_TOPIC_OR_PARTITION",
        }
        # The transaction never began: there is nothing to end, and the id still works.
        assert add_partitions(conn, tid, r.producer_id, r.producer_epoch, {known: [0]}) == {(known, 0): "NONE"}
        assert end_txn(conn, tid, r.producer_id, r.producer_epoch, False) == "NONE"
    assert_still_serving(target)


def _join_group(conn: Connection, group: str) -> tuple[str, int]:
    """Join a classic group alone (own protocol type, so no consumer-protocol parsing): (member id, generation)."""
    P = JoinGroupRequest.JoinGroupRequestProtocol
    find = retried(lambda: conn.do(FindCoordinatorRequest(key=group, key_type=0), 3), lambda r: r.error_code)
    assert find.error_code == 0

    def join(member: str) -> Any:
        return conn.do(
            JoinGroupRequest(
                group_id=group,
                session_timeout_ms=30_000,
                rebalance_timeout_ms=30_000,
                member_id=member,
                group_instance_id=None,
                protocol_type="txn-test",
                protocols=[P(name="p", metadata=b"")],
            ),
            5,
        )

    r = retried(lambda: join(""), lambda r: r.error_code)
    if r.error_code == ErrorCode.MEMBER_ID_REQUIRED:
        r = join(r.member_id)
    assert r.error_code == 0, ErrorCode(r.error_code).name
    A = SyncGroupRequest.SyncGroupRequestAssignment
    s = conn.do(
        SyncGroupRequest(
            group_id=group,
            generation_id=r.generation_id,
            member_id=r.member_id,
            group_instance_id=None,
            assignments=[A(member_id=r.member_id, assignment=b"")],
        ),
        3,
    )
    assert s.error_code == 0, ErrorCode(s.error_code).name
    return r.member_id, r.generation_id


def test_txn_offset_commit_with_a_stale_generation(target: Target) -> None:
    topic = create_topic(target.bootstrap, unique("tocg"))
    tid, group = unique("tid"), unique("g")
    with raw_conn(target) as conn:
        member, generation = _join_group(conn, group)
        r = init_pid(conn, tid)
        pid, epoch = r.producer_id, r.producer_epoch
        add = AddOffsetsToTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group)
        assert retried(lambda: conn.do(add, 3), lambda r: r.error_code).error_code == 0

        def commit(gen: int, member_id: str) -> str:
            T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
            req = TxnOffsetCommitRequest(
                transactional_id=tid,
                group_id=group,
                producer_id=pid,
                producer_epoch=epoch,
                generation_id=gen,
                member_id=member_id,
                group_instance_id=None,
                topics=[
                    T(
                        name=topic,
                        partitions=[
                            T.TxnOffsetCommitRequestPartition(
                                partition_index=0, committed_offset=5, committed_leader_epoch=-1, committed_metadata=""
                            )
                        ],
                    )
                ],
            )
            resp = retried(lambda: conn.do(req, 3), lambda r: r.topics[0].partitions[0].error_code)
            return ErrorCode(resp.topics[0].partitions[0].error_code).name

        assert commit(generation - 1, member) == "ILLEGAL_GENERATION"
        assert commit(generation + 1, member) == "ILLEGAL_GENERATION"
        assert commit(generation, "not-a-member") == "UNKNOWN_MEMBER_ID"
        assert commit(generation, member) == "NONE"
        assert end_txn(conn, tid, pid, epoch, True) == "NONE"
    c = ck.Consumer({"bootstrap.servers": target.bootstrap, "group.id": group})
    try:
        assert eventually(lambda: assert_equal(c.committed([ck.TopicPartition(topic, 0)], timeout=30)[0].offset, 5))
    finally:
        c.close()
    assert_still_serving(target)


def test_transactional_produce_from_a_fenced_epoch(target: Target) -> None:
    topic = create_topic(target.bootstrap, unique("fence"))
    tid = unique("tid")
    with raw_conn(target) as conn:
        r = init_pid(conn, tid)
        pid, old = r.producer_id, r.producer_epoch
        assert add_partitions(conn, tid, pid, old, {topic: [0]}) == {(topic, 0): "NONE"}
        assert produce_txn(conn, tid, topic, pid, old, 0, b"zombie-0") == "NONE"
        r2 = init_pid(conn, tid)  # a new instance: aborts the open transaction, bumps the epoch
        # One bump fences the old epoch and aborts with it, a second is the new instance's (Kafka's TV1 answer).
        assert (r2.error_code, r2.producer_id, r2.producer_epoch) == (0, pid, old + 2)
        assert produce_txn(conn, tid, topic, pid, old, 1, b"zombie-1") == "INVALID_PRODUCER_EPOCH"
        assert end_txn(conn, tid, pid, old, True) == "PRODUCER_FENCED"
        assert add_partitions(conn, tid, pid, old, {topic: [0]}) == {(topic, 0): "PRODUCER_FENCED"}
        assert list_latest(conn, topic, isolation=1) == list_latest(conn, topic, isolation=0)  # abort written
    assert values(read(target.bootstrap, topic, "read_uncommitted")) == [b"zombie-0"]
    assert values(read(target.bootstrap, topic, "read_committed")) == []
    assert_still_serving(target)


def test_end_txn_follows_the_transaction_state(target: Target) -> None:
    """EndTxn against each state of a TV1 transaction, and with ids or epochs that do not match."""
    topic = create_topic(target.bootstrap, unique("state"))
    tid = unique("tid")
    with raw_conn(target) as conn:
        r = init_pid(conn, tid)
        pid, epoch = r.producer_id, r.producer_epoch
        got = {}
        got["empty-commit"] = end_txn(conn, tid, pid, epoch, True)
        got["empty-abort"] = end_txn(conn, tid, pid, epoch, False)
        assert add_partitions(conn, tid, pid, epoch, {topic: [0]}) == {(topic, 0): "NONE"}
        got["other-pid"] = end_txn(conn, tid, pid + 1, epoch, True)
        got["newer-epoch"] = end_txn(conn, tid, pid, epoch + 1, True)
        got["older-epoch"] = end_txn(conn, tid, pid, epoch - 1, True)
        got["commit"] = end_txn(conn, tid, pid, epoch, True)
        got["commit-again"] = end_txn(conn, tid, pid, epoch, True)  # a retried EndTxn
        got["abort-after-commit"] = end_txn(conn, tid, pid, epoch, False)
        assert add_partitions(conn, tid, pid, epoch, {topic: [0]}) == {(topic, 0): "NONE"}
        got["abort"] = end_txn(conn, tid, pid, epoch, False)
        got["abort-again"] = end_txn(conn, tid, pid, epoch, False)
        got["commit-after-abort"] = end_txn(conn, tid, pid, epoch, True)
    assert got == {
        "empty-commit": "INVALID_TXN_STATE",  # nothing added: no transaction to end
        "empty-abort": "INVALID_TXN_STATE",
        "other-pid": "INVALID_PRODUCER_ID_MAPPING",
        "newer-epoch": "PRODUCER_FENCED",
        "older-epoch": "PRODUCER_FENCED",
        "commit": "NONE",
        "commit-again": "NONE",  # the same decision again is a retry, answered as the first
        "abort-after-commit": "INVALID_TXN_STATE",
        "abort": "NONE",
        "abort-again": "NONE",
        "commit-after-abort": "INVALID_TXN_STATE",
    }
    assert_still_serving(target)


def test_transactional_produce_to_a_partition_not_in_the_transaction(target: Target) -> None:
    """Kafka verifies a transactional produce with the coordinator (KIP-890 part 1): a partition the
    transaction never added is refused, and nothing is appended."""
    topic = create_topic(target.bootstrap, unique("unadded"))
    tid = unique("tid")
    with raw_conn(target) as conn:
        r = init_pid(conn, tid)
        assert produce_txn(conn, tid, topic, r.producer_id, r.producer_epoch, 0, b"sneaky") == "INVALID_TXN_STATE"
        assert list_latest(conn, topic, isolation=0) == 0
    assert_still_serving(target)


def test_fetch_answers_the_lso_and_the_aborted_transactions(target: Target) -> None:
    """The wire form of read_committed: Fetch v11's last_stable_offset, records only below it, and the
    aborted transactions (producer id, first offset) overlapping the fetched range; none for read_uncommitted."""
    topic = create_topic(target.bootstrap, unique("wire"))
    ta, tb = unique("a"), unique("b")
    with raw_conn(target) as conn:
        a, b = init_pid(conn, ta), init_pid(conn, tb)
        for tid, r in ((ta, a), (tb, b)):
            assert add_partitions(conn, tid, r.producer_id, r.producer_epoch, {topic: [0]}) == {(topic, 0): "NONE"}
        assert produce_txn(conn, ta, topic, a.producer_id, 0, 0, b"a0", b"a1") == "NONE"  # 0-1
        assert produce_txn(conn, tb, topic, b.producer_id, 0, 0, b"b0") == "NONE"  # 2
        assert produce_txn(conn, ta, topic, a.producer_id, 0, 2, b"a2") == "NONE"  # 3
        assert end_txn(conn, tb, b.producer_id, 0, False) == "NONE"  # ABORT marker at 4

        def fetch(isolation: int, offset: int) -> tuple[Any, ...]:
            req = fetch_request(topic, 0, offset, max_wait_ms=0, read_committed=bool(isolation))
            p = conn.do(req, 11).responses[0].partitions[0]
            aborted = (
                None
                if p.aborted_transactions is None
                else [(t.producer_id, t.first_offset) for t in p.aborted_transactions]
            )
            return p.error_code, p.high_watermark, p.last_stable_offset, aborted, bool(p.records)

        # Kafka writes the markers after answering EndTxn: wait for the high watermark to count the marker.
        eventually(lambda: assert_equal(fetch(0, 0), (0, 5, 0, None, True)))
        assert fetch(1, 0) == (0, 5, 0, [], False)  # a's open transaction at 0 holds everything back
        assert end_txn(conn, ta, a.producer_id, 0, True) == "NONE"  # COMMIT marker at 5
        eventually(lambda: assert_equal(fetch(0, 0), (0, 6, 6, None, True)))
        b_pid = b.producer_id
        assert fetch(1, 0) == (0, 6, 6, [(b_pid, 2)], True)
        assert fetch(1, 3) == (0, 6, 6, [(b_pid, 2)], True)  # the aborted range began before the fetch offset
        assert fetch(1, 5) == (0, 6, 6, [], True)
        assert fetch(1, 6) == (0, 6, 6, [], False)
        assert fetch(0, 3) == (0, 6, 6, None, True)


def test_pipelined_requests_of_one_transaction_are_handled_in_order(target: Target) -> None:
    """Kafka handles one connection's requests one at a time, in order. librdkafka pipelines AddOffsetsToTxn and
    AddPartitionsToTxn on the coordinator connection: the second must see the first done, not a concurrent
    operation (CONCURRENT_TRANSACTIONS would cost the client a retry backoff every transaction)."""
    topic = create_topic(target.bootstrap, unique("pipe"), partitions=2)
    group, tid = unique("g"), unique("tid")
    T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    with raw_conn(target) as conn:
        r = init_pid(conn, tid)
        pid, epoch = r.producer_id, r.producer_epoch
        for rnd in range(5):
            first = conn.send(
                AddOffsetsToTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group), 0
            )
            second = conn.send(
                AddPartitionsToTxnRequest(
                    v3_and_below_transactional_id=tid,
                    v3_and_below_producer_id=pid,
                    v3_and_below_producer_epoch=epoch,
                    v3_and_below_topics=[T(name=topic, partitions=[rnd % 2])],
                ),
                0,
            )
            offsets = ErrorCode(conn.receive(first[2], first[1], first[0]).error_code).name
            parts = conn.receive(second[2], second[1], second[0])
            added = [
                ErrorCode(p.partition_error_code).name
                for t in parts.results_by_topic_v3_and_below
                for p in t.results_by_partition
            ]
            assert (offsets, added) == ("NONE", ["NONE"]), rnd
            assert end_txn(conn, tid, pid, epoch, True) == "NONE"
            # Kafka writes the markers after answering: wait until the next transaction may begin.
            eventually(lambda: assert_equal(describe_state(conn, tid), "CompleteCommit"))


def describe_state(conn: Connection, tid: str) -> str:
    [s] = conn.do(DescribeTransactionsRequest(transactional_ids=[tid]), 0).transaction_states
    return str(s.transaction_state)


def test_init_producer_id_refusals(target: Target) -> None:
    with raw_conn(target) as conn:
        find_txn_coordinator(conn, "x")
        for tid, timeout_ms, want in (
            ("", 1000, "INVALID_REQUEST"),
            (unique("tid"), 0, "INVALID_TRANSACTION_TIMEOUT"),
            (unique("tid"), -5, "INVALID_TRANSACTION_TIMEOUT"),
        ):
            r = conn.do(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=timeout_ms), 4)
            assert (ErrorCode(r.error_code).name, r.producer_id, r.producer_epoch) == (want, -1, -1), (tid, timeout_ms)
    assert_still_serving(target)


def test_list_describe_transactions_and_producers_requests(target: Target) -> None:
    topic = create_topic(target.bootstrap, unique("admin-raw"))
    open_tid, done_tid = unique("open"), unique("done")
    p = txn_producer(target.bootstrap, open_tid)
    p.begin_transaction()
    p.produce(topic, b"x", partition=0)
    assert p.flush(30) == 0
    committed_txn(target.bootstrap, topic, [b"y"], tid=done_tid)
    with raw_conn(target) as conn:

        def listed(states: list[str], pids: list[int] | None = None) -> tuple[dict[str, str], list[str]]:
            r = conn.do(ListTransactionsRequest(state_filters=states, producer_id_filters=pids or []), 0)
            assert r.error_code == 0
            mine = {
                s.transactional_id: s.transaction_state
                for s in r.transaction_states
                if s.transactional_id in (open_tid, done_tid)
            }
            return mine, list(r.unknown_state_filters)

        # Kafka answers EndTxn once PrepareCommit is logged and writes the markers after: wait for CompleteCommit.
        eventually(lambda: assert_equal(listed([])[0], {open_tid: "Ongoing", done_tid: "CompleteCommit"}))
        assert listed(["Ongoing"]) == ({open_tid: "Ongoing"}, [])
        assert listed(["CompleteCommit", "Bogus"]) == ({done_tid: "CompleteCommit"}, ["Bogus"])
        r = conn.do(DescribeTransactionsRequest(transactional_ids=[open_tid, done_tid, "no-such-tid"]), 0)
        states = {s.transactional_id: s for s in r.transaction_states}
        s = states[open_tid]
        assert (s.error_code, s.transaction_state, s.transaction_timeout_ms, s.producer_epoch) == (
            0,
            "Ongoing",
            60000,
            0,
        )
        assert [(t.topic, list(t.partitions)) for t in s.topics] == [(topic, [0])]
        open_pid = s.producer_id
        assert listed([], [open_pid]) == ({open_tid: "Ongoing"}, [])
        s = states[done_tid]
        assert (s.error_code, s.transaction_state, list(s.topics)) == (0, "CompleteCommit", [])
        s = states["no-such-tid"]
        assert (ErrorCode(s.error_code).name, s.transaction_state, list(s.topics)) == (
            "TRANSACTIONAL_ID_NOT_FOUND",
            "",
            [],
        )
        # Kafka leaves the other fields of an unknown id at 0.
        assert (s.producer_id, s.producer_epoch, s.transaction_start_time_ms) == (0, 0, 0)

        T = DescribeProducersRequest.TopicRequest
        r = conn.do(
            DescribeProducersRequest(
                topics=[T(name=topic, partition_indexes=[0, 5]), T(name=unique("no-such-topic"), partition_indexes=[0])]
            ),
            0,
        )
        parts = {(t.name, pr.partition_index): pr for t in r.topics for pr in t.partitions}
        assert [ErrorCode(pr.error_code).name for pr in parts.values()] == [
            "NONE",
            "UNKNOWN_TOPIC_OR_PARTITION",
            "UNKNOWN_TOPIC_OR_PARTITION",
        ]
        producers = sorted(
            (
                a.producer_epoch,
                a.last_sequence,
                a.coordinator_epoch,
                a.current_txn_start_offset,
                a.producer_id == open_pid,
            )
            for a in parts[(topic, 0)].active_producers
        )
        # The open transaction starts at 0, no marker yet; the committed one's marker set a coordinator epoch.
        assert producers == [(0, 0, -1, 0, True), (0, 0, 0, -1, False)]


def test_init_producer_id_with_a_timeout_above_the_maximum(target: Target) -> None:
    tid = unique("tid")
    with raw_conn(target) as conn:
        r = init_pid(conn, tid, timeout_ms=900_001)  # transaction.max.timeout.ms is 900000
        assert ErrorCode(r.error_code).name == "INVALID_TRANSACTION_TIMEOUT"
        r = init_pid(conn, tid, timeout_ms=900_000)
        assert ErrorCode(r.error_code).name == "NONE"
        assert r.producer_epoch == 0
    assert_still_serving(target)


def test_confluent_producer_with_a_timeout_above_the_maximum_is_refused(target: Target) -> None:
    p = ck.Producer(
        {"bootstrap.servers": target.bootstrap, "transactional.id": unique("tid"), "transaction.timeout.ms": 900_001}
    )
    with pytest.raises(ck.KafkaException) as info:
        p.init_transactions(30)
    err = info.value.args[0]
    assert err.code() == ck.KafkaError.INVALID_TRANSACTION_TIMEOUT and err.fatal(), err


# ---------------------------------------------------------------------------------------------------------------
# Transaction timeout


def test_a_timed_out_transaction_is_aborted_by_the_broker(target: Target) -> None:
    topic = create_topic(target.bootstrap, unique("tmo"))
    p = txn_producer(target.bootstrap, unique("tid"), **{"transaction.timeout.ms": 2000, "message.timeout.ms": 2000})
    p.begin_transaction()
    p.produce(topic, b"late", partition=0)
    assert p.flush(30) == 0
    assert watermarks(target.bootstrap, topic, "read_committed") == (0, 0)
    # The broker aborts after 2 s: an ABORT marker at 1 and the LSO moves past it.
    assert eventually(lambda: assert_equal(watermarks(target.bootstrap, topic, "read_committed"), (0, 2)), timeout=15)
    with pytest.raises(ck.KafkaException) as info:
        p.commit_transaction(30)
    err = info.value.args[0]
    # The broker's abort bumped the epoch: the producer is fenced (EndTxn answered PRODUCER_FENCED), fatally.
    assert (err.code(), err.fatal()) == (ck.KafkaError._FENCED, True), err
    assert values(read(target.bootstrap, topic, "read_committed")) == []
    assert values(read(target.bootstrap, topic, "read_uncommitted")) == [b"late"]


def test_raw_transaction_timeout_fences_the_epoch(target: Target) -> None:
    topic = create_topic(target.bootstrap, unique("rawtmo"))
    tid = unique("tid")
    with raw_conn(target) as conn:
        r = init_pid(conn, tid, timeout_ms=1000)
        pid, epoch = r.producer_id, r.producer_epoch
        assert add_partitions(conn, tid, pid, epoch, {topic: [0]}) == {(topic, 0): "NONE"}
        assert produce_txn(conn, tid, topic, pid, epoch, 0, b"slow") == "NONE"
        eventually(lambda: assert_equal(list_latest(conn, topic, isolation=1), 2), timeout=15)  # ABORT marker at 1
        assert end_txn(conn, tid, pid, epoch, True) == "PRODUCER_FENCED"
        assert end_txn(conn, tid, pid, epoch, False) == "PRODUCER_FENCED"
        assert produce_txn(conn, tid, topic, pid, epoch, 1, b"slower") == "INVALID_PRODUCER_EPOCH"
        r2 = init_pid(conn, tid, timeout_ms=1000)
        # The timeout's abort bumped the epoch once, the new instance's init bumps it again.
        assert (r2.error_code, r2.producer_id, r2.producer_epoch) == (0, pid, epoch + 2)
    assert values(read(target.bootstrap, topic, "read_uncommitted")) == [b"slow"]
    assert values(read(target.bootstrap, topic, "read_committed")) == []


# ---------------------------------------------------------------------------------------------------------------
# Admin: Kafka's kafka-transactions tool


def _table(text: str) -> tuple[list[str], list[list[str]]]:
    """A kafka-transactions table: (header columns, rows); cells are tab-separated and blank-padded."""
    split = [[c.strip() for c in ln.rstrip("\t").split("\t")] for ln in text.splitlines() if ln.strip()]
    return split[0], split[1:]


TOOL = "kafka-transactions"


def transactions_tool(target: Target, *args: str) -> tuple[list[str], list[list[str]]]:
    res = kafka_tool(TOOL, target.bootstrap, *args)
    assert res.returncode == 0, res.output
    return _table(res.stdout)


def test_kafka_transactions_tool_lists_and_describes(target: Target) -> None:
    topic = create_topic(target.bootstrap, unique("admin"))
    tid = unique("tool-tid")
    p = txn_producer(target.bootstrap, tid)
    p.begin_transaction()
    p.produce(topic, b"open", partition=0)
    assert p.flush(30) == 0

    header, rows = transactions_tool(target, "list")
    assert header == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    [mine] = [r for r in rows if r[0] == tid]
    assert mine[3] == "Ongoing"
    pid = mine[2]
    header, rows = transactions_tool(target, "list", "--duration-filter", "3600000")  # open for an hour or more
    assert tid not in [r[0] for r in rows]

    header, rows = transactions_tool(target, "describe", "--transactional-id", tid)
    assert header == [
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "TransactionTimeoutMs",
        "CurrentTransactionStartTimeMs",
        "TransactionDurationMs",
        "TopicPartitions",
    ]
    [row] = rows
    assert row[1:6] == [tid, pid, "0", "Ongoing", "60000"] and row[8] == f"{topic}-0"
    assert abs(int(row[6]) - time.time() * 1000) < 60_000 and 0 <= int(row[7]) < 60_000

    header, rows = transactions_tool(target, "describe-producers", "--topic", topic, "--partition", "0")
    assert header == [
        "ProducerId",
        "ProducerEpoch",
        "LatestCoordinatorEpoch",
        "LastSequence",
        "LastTimestamp",
        "CurrentTransactionStartOffset",
    ]
    [row] = rows
    # No marker written yet: no coordinator epoch; the transaction starts at the first record, offset 0.
    assert [row[i] for i in (0, 1, 2, 3, 5)] == [pid, "0", "-1", "0", "0"]

    res = kafka_tool(TOOL, target.bootstrap, "describe", "--transactional-id", unique("no-such-tid"))
    assert (
        res.returncode == 1 and "failed because the ID could not be found" in res.output
    )  # TRANSACTIONAL_ID_NOT_FOUND

    p.commit_transaction(60)
    [row] = transactions_tool(target, "describe", "--transactional-id", tid)[1]
    assert row[4] == "CompleteCommit" and row[8] == ""
    [row] = transactions_tool(target, "describe-producers", "--topic", topic, "--partition", "0")[1]
    assert [row[i] for i in (0, 1, 2, 3, 5)] == [pid, "0", "0", "0", "None"]


def test_kafka_transactions_tool_aborts_a_hanging_transaction(target: Target) -> None:
    """`kafka-transactions abort` writes an ABORT marker straight to the partition (WriteTxnMarkers): the LSO
    moves on while the coordinator still thinks the transaction is open."""
    topic = create_topic(target.bootstrap, unique("hang"))
    p = txn_producer(target.bootstrap, unique("tid"))
    p.begin_transaction()
    p.produce(topic, b"hanging", partition=0)
    assert p.flush(30) == 0
    committed_txn(target.bootstrap, topic, [b"after"])  # offsets 1, marker 2: behind the LSO at 0
    assert watermarks(target.bootstrap, topic, "read_committed") == (0, 0)
    res = kafka_tool(TOOL, target.bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    assert res.returncode == 0, res.output
    assert eventually(lambda: assert_equal(watermarks(target.bootstrap, topic, "read_committed"), (0, 4)))
    assert values(read(target.bootstrap, topic, "read_committed")) == [b"after"]
    res = kafka_tool(TOOL, target.bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    assert res.returncode != 0 and "Could not find any open transactions starting at offset 0" in res.output


# ---------------------------------------------------------------------------------------------------------------
# kill -9 of the broker around EndTxn (logbroker only)


def test_broker_kill_9_after_commits_and_during_an_open_transaction(tmp_path: Path) -> None:
    """logbroker only: the Kafka fixture cannot kill -9 a node and restart it on the same data.

    Every transaction whose commit_transaction returned survives a kill -9 that follows at once; aborted ones
    stay invisible; a transaction open at the kill is aborted after restart when its timeout passes, and the
    LSO moves past it."""
    if "logbroker" not in both_targets():
        pytest.skip("logbroker only (LOGBROKER_TEST_TARGET=kafka)")
    proc = BrokerProcess(tmp_path / "data", env=dict(LOGBROKER_ENV))
    proc.start()
    try:
        topic = create_topic(proc.bootstrap, unique("crash"))
        committed: list[bytes] = []
        for round_ in range(3):
            p = txn_producer(proc.bootstrap, unique("tid"))
            for t in range(10):
                p.begin_transaction()
                vals = [f"r{round_}-t{t}-{i}".encode() for i in range(3)]
                for v in vals:
                    p.produce(topic, v, partition=0)
                if t % 3 == 2:
                    p.abort_transaction(60)
                else:
                    p.commit_transaction(60)
                    committed += vals
            hanging = txn_producer(
                proc.bootstrap, unique("open"), **{"transaction.timeout.ms": 3000, "message.timeout.ms": 3000}
            )
            hanging.begin_transaction()
            hanging.produce(topic, f"open-{round_}".encode(), partition=0)
            assert hanging.flush(30) == 0
            p.begin_transaction()
            p.produce(topic, f"last-{round_}".encode(), partition=0)
            p.commit_transaction(60)
            committed.append(f"last-{round_}".encode())
            proc.kill()  # right after commit_transaction returned
            proc.start()
            # The open transaction holds the LSO until its 3 s timeout, then it is aborted.
            want = list(committed)
            eventually(lambda w=want: assert_equal(values(read(proc.bootstrap, topic, "read_committed")), w), 30)
            hw = watermarks(proc.bootstrap, topic, "read_uncommitted")[1]
            assert watermarks(proc.bootstrap, topic, "read_committed")[1] == hw
    finally:
        proc.kill()


def test_open_transaction_survives_a_broker_kill_9_and_commits(tmp_path: Path) -> None:
    """logbroker only (as above). The coordinator's state is durable: a transaction whose records and partitions
    were acknowledged before a kill -9 is still open after restart, and the same producer commits it."""
    if "logbroker" not in both_targets():
        pytest.skip("logbroker only (LOGBROKER_TEST_TARGET=kafka)")
    proc = BrokerProcess(tmp_path / "data", env=dict(LOGBROKER_ENV))
    proc.start()
    try:
        topic = create_topic(proc.bootstrap, unique("survive"), partitions=2)
        group = unique("g")
        p = txn_producer(proc.bootstrap, unique("tid"), **{"transaction.timeout.ms": 60_000})
        p.begin_transaction()
        for i in range(4):
            p.produce(topic, f"s{i}".encode(), partition=i % 2)
        assert p.flush(30) == 0
        c = ck.Consumer({"bootstrap.servers": proc.bootstrap, "group.id": group})
        p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, 3)], c.consumer_group_metadata(), 30)
        c.close()
        proc.kill()
        proc.start()
        p.commit_transaction(60)
        assert values(read(proc.bootstrap, topic, "read_committed", 2)) == [b"s0", b"s2", b"s1", b"s3"]
        c = ck.Consumer({"bootstrap.servers": proc.bootstrap, "group.id": group})
        try:
            assert c.committed([ck.TopicPartition(topic, 0)], timeout=30)[0].offset == 3
        finally:
            c.close()
    finally:
        proc.kill()


def test_transactions_stay_atomic_across_kill_9_at_random_moments(tmp_path: Path) -> None:
    """logbroker only (as above). A producer commits two-partition transactions back to back while the broker is
    killed -9 at random moments (so some land inside EndTxn, between the markers of the two partitions). After
    the last restart each transaction is on both partitions or on neither, every commit that returned is
    there, and nothing is doubled."""
    if "logbroker" not in both_targets():
        pytest.skip("logbroker only (LOGBROKER_TEST_TARGET=kafka)")
    import random
    import threading

    proc = BrokerProcess(tmp_path / "data", env=dict(LOGBROKER_ENV))
    proc.start()
    topic = create_topic(proc.bootstrap, unique("atomic"), partitions=2)
    stop = threading.Event()
    kills = 0

    def killer() -> None:
        nonlocal kills
        rng = random.Random(15)
        while not stop.wait(rng.uniform(0.5, 1.5)) and kills < 5:
            proc.kill()
            kills += 1
            proc.start()

    tid = unique("tid")
    confirmed: list[int] = []
    thread = threading.Thread(target=killer, daemon=True)
    p = txn_producer(proc.bootstrap, tid, **{"transaction.timeout.ms": 10_000})
    thread.start()
    try:
        n = 0
        deadline = time.monotonic() + 60
        while thread.is_alive() and time.monotonic() < deadline:
            n += 1
            try:
                p.begin_transaction()
                p.produce(topic, f"t{n}".encode(), partition=0)
                p.produce(topic, f"t{n}".encode(), partition=1)
                p.commit_transaction(30)
                confirmed.append(n)
            except ck.KafkaException as exc:
                err = exc.args[0]
                if err.fatal():
                    p = txn_producer(proc.bootstrap, tid, **{"transaction.timeout.ms": 10_000})
                elif err.txn_requires_abort():
                    with contextlib.suppress(ck.KafkaException):
                        p.abort_transaction(30)
                else:  # retriable: the outcome is unknown, commit again (or abort if it cannot be)
                    try:
                        p.commit_transaction(30)
                        confirmed.append(n)
                    except ck.KafkaException:
                        p = txn_producer(proc.bootstrap, tid, **{"transaction.timeout.ms": 10_000})
        stop.set()
        thread.join(30)
        assert kills == 5 and len(confirmed) > 10, (kills, len(confirmed))
        rows = eventually(lambda: read(proc.bootstrap, topic, "read_committed", 2), 30)
        by_part: dict[int, list[bytes]] = {0: [], 1: []}
        for part, _, v in rows:
            by_part[part].append(v)
        assert by_part[0] == by_part[1]  # all or nothing, in the same order
        assert len(set(by_part[0])) == len(by_part[0])  # nothing doubled
        assert {f"t{i}".encode() for i in confirmed} <= set(by_part[0])
    finally:
        stop.set()
        thread.join(30)
        proc.kill()
