"""Transactions through the Java client (tests/java/ClientTool.java `txn`), kafka-python and aiokafka, asserted
alike on logbroker and Apache Kafka 4.4 (with transaction.version=1, as in test_transactions)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest

from support import both_targets, create_topic, java_client_tool, unique
from test_transactions import Target, read, transactional_broker, values, watermarks

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    with transactional_broker(request.param, tmp_path_factory.mktemp("txn-clients") / "data") as t:
        yield t


# ---------------------------------------------------------------------------------------------------------------
# Java


def java_txn(target: Target, *steps: dict[str, Any], timeout: float = 120.0) -> list[dict[str, Any]]:
    """Run a ClientTool `txn` script: one result per step, in order."""
    script = "".join(json.dumps(s) + "\n" for s in steps)
    proc = java_client_tool().run("txn", "--bootstrap", target.bootstrap, input=script, timeout=timeout)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert len(results) == len(steps), proc.stdout + proc.stderr[-3000:]
    return results


def ok(result: dict[str, Any]) -> dict[str, Any]:
    assert result["ok"], result
    return result


def failed(result: dict[str, Any]) -> tuple[str, list[str]]:
    assert not result["ok"], result
    return result["error"], result["causes"]


def test_java_send_offsets_to_transaction(target: Target) -> None:
    """A Java consume-transform-produce round: the group's offsets commit with the output, or not at all."""
    src = create_topic(target.bootstrap, unique("j-in"))
    dst = create_topic(target.bootstrap, unique("j-out"))
    group = unique("j-g")
    plain = ck.Producer({"bootstrap.servers": target.bootstrap})
    for i in range(10):
        plain.produce(src, f"in-{i}".encode(), partition=0)
    assert plain.flush(30) == 0
    tid = unique("j-tid")
    res = java_txn(
        target,
        {"op": "consumer", "name": "c", "group": group, "topic": src},
        {"op": "poll", "name": "c", "count": 10, "timeout_ms": 20000},
        {"op": "producer", "name": "p", "transactional_id": tid},
        {"op": "init", "name": "p"},
        {"op": "begin", "name": "p"},
        {"op": "send", "name": "p", "topic": dst, "partition": 0, "values": [f"out-{i}" for i in range(6)]},
        {"op": "send_offsets", "name": "p", "consumer": "c", "offsets": [{"topic": src, "partition": 0, "offset": 6}]},
        {"op": "commit", "name": "p"},
        {"op": "begin", "name": "p"},
        {"op": "send", "name": "p", "topic": dst, "partition": 0, "values": ["out-6", "out-7"]},
        {"op": "send_offsets", "name": "p", "consumer": "c", "offsets": [{"topic": src, "partition": 0, "offset": 8}]},
        {"op": "abort", "name": "p"},
    )
    for r in res:
        ok(r)
    assert res[0]["partitions"] == [0] and res[0]["generation"] >= 1 and res[0]["member_id"]
    assert [r["value"] for r in res[1]["records"]] == [f"in-{i}" for i in range(10)]
    assert res[5]["offsets"] == list(range(6))
    assert res[9]["offsets"] == [7, 8]  # after the COMMIT marker at 6
    assert values(read(target.bootstrap, dst, "read_committed")) == [f"out-{i}".encode() for i in range(6)]
    c = ck.Consumer({"bootstrap.servers": target.bootstrap, "group.id": group})
    try:
        [tp] = c.committed([ck.TopicPartition(src, 0)], timeout=30)
        assert tp.offset == 6  # the aborted transaction's offsets (8) were dropped
    finally:
        c.close()


def test_java_zombie_producer_is_fenced(target: Target) -> None:
    """A second instance with the same transactional.id fences the first: the zombie's next send fails with
    InvalidProducerEpochException (the broker's INVALID_PRODUCER_EPOCH, abortable), its abort with
    ProducerFencedException (EndTxn's PRODUCER_FENCED, fatal); a zombie that only commits is fenced at once."""
    topic = create_topic(target.bootstrap, unique("j-zombie"))
    tid, tid2 = unique("j-tid"), unique("j-tid2")
    res = java_txn(
        target,
        {"op": "producer", "name": "old", "transactional_id": tid},
        {"op": "init", "name": "old"},
        {"op": "begin", "name": "old"},
        {"op": "send", "name": "old", "topic": topic, "partition": 0, "values": ["zombie-0"]},
        {"op": "producer", "name": "new", "transactional_id": tid},
        {"op": "init", "name": "new"},  # aborts the old instance's transaction, bumps the epoch
        {"op": "send", "name": "old", "topic": topic, "partition": 0, "values": ["zombie-1"]},  # 6
        {"op": "commit", "name": "old"},  # 7
        {"op": "abort", "name": "old"},  # 8
        {"op": "begin", "name": "new"},
        {"op": "send", "name": "new", "topic": topic, "partition": 0, "values": ["new-0"]},
        {"op": "commit", "name": "new"},
        {"op": "producer", "name": "old2", "transactional_id": tid2},
        {"op": "init", "name": "old2"},
        {"op": "begin", "name": "old2"},
        {"op": "send", "name": "old2", "topic": topic, "partition": 0, "values": ["zombie-2"]},
        {"op": "producer", "name": "new2", "transactional_id": tid2},
        {"op": "init", "name": "new2"},
        {"op": "commit", "name": "old2"},  # 18
    )
    for i in (0, 1, 2, 3, 4, 5, 9, 10, 11, 12, 13, 14, 15, 16, 17):
        ok(res[i])
    assert failed(res[6]) == ("ExecutionException", ["InvalidProducerEpochException"])
    assert failed(res[7]) == ("InvalidProducerEpochException", [])  # the send's error, rethrown
    assert failed(res[8]) == ("ProducerFencedException", [])
    assert failed(res[18]) == ("ProducerFencedException", [])
    assert values(read(target.bootstrap, topic, "read_committed")) == [b"new-0"]
    assert values(read(target.bootstrap, topic, "read_uncommitted")) == [b"zombie-0", b"new-0", b"zombie-2"]


def test_java_transaction_timeout_aborts(target: Target) -> None:
    """The broker aborts a transaction open longer than transaction.timeout.ms; the late commit fails."""
    topic = create_topic(target.bootstrap, unique("j-tmo"))
    res = java_txn(
        target,
        {
            "op": "producer",
            "name": "p",
            "transactional_id": unique("j-tid"),
            "properties": {
                "transaction.timeout.ms": 2000,
                "delivery.timeout.ms": 2000,
                "request.timeout.ms": 1000,
                "linger.ms": 0,
            },
        },
        {"op": "init", "name": "p"},
        {"op": "begin", "name": "p"},
        {"op": "send", "name": "p", "topic": topic, "partition": 0, "values": ["late"]},
        {"op": "sleep", "ms": 4000},
        {"op": "commit", "name": "p"},
    )
    for r in res[:5]:
        ok(r)
    assert failed(res[5])[0] == "ProducerFencedException"
    assert values(read(target.bootstrap, topic, "read_committed")) == []
    assert values(read(target.bootstrap, topic, "read_uncommitted")) == [b"late"]
    assert watermarks(target.bootstrap, topic, "read_committed") == (0, 2)


# ---------------------------------------------------------------------------------------------------------------
# kafka-python and aiokafka


def test_kafka_python_commit_and_abort(target: Target) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = create_topic(target.bootstrap, unique("kp"))
    p = KafkaProducer(bootstrap_servers=target.bootstrap, transactional_id=unique("kp-tid"))
    try:
        p.init_transactions()
        for name, n, commit in (("a", 3, True), ("b", 2, False), ("c", 1, True)):
            p.begin_transaction()
            for i in range(n):
                p.send(topic, f"{name}{i}".encode(), partition=0)
            p.flush()
            if commit:
                p.commit_transaction()
            else:
                p.abort_transaction()
    finally:
        p.close(5)

    def consume(level: str) -> list[tuple[int, bytes]]:
        """Every record up to the end kafka-python's consumer sees for this level (the LSO for read_committed)."""
        c = KafkaConsumer(
            bootstrap_servers=target.bootstrap,
            isolation_level=level,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek_to_beginning(tp)
            end = c.end_offsets([tp])[tp]
            out: list[tuple[int, bytes]] = []
            deadline = time.monotonic() + 20
            while c.position(tp) < end and time.monotonic() < deadline:
                for batch in c.poll(timeout_ms=200).values():
                    out += [(m.offset, m.value) for m in batch]
            assert c.position(tp) == end
            return out
        finally:
            c.close()

    assert consume("read_committed") == [(0, b"a0"), (1, b"a1"), (2, b"a2"), (7, b"c0")]
    assert consume("read_uncommitted") == [(0, b"a0"), (1, b"a1"), (2, b"a2"), (4, b"b0"), (5, b"b1"), (7, b"c0")]
    assert values(read(target.bootstrap, topic, "read_committed")) == [b"a0", b"a1", b"a2", b"c0"]


def test_aiokafka_commit_and_abort(target: Target) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = create_topic(target.bootstrap, unique("aio"))

    async def run() -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes]]]:
        p = AIOKafkaProducer(bootstrap_servers=target.bootstrap, transactional_id=unique("aio-tid"))
        await p.start()
        try:
            async with p.transaction():
                for i in range(3):
                    await p.send_and_wait(topic, f"a{i}".encode(), partition=0)
            await p.begin_transaction()
            for i in range(2):
                await p.send_and_wait(topic, f"b{i}".encode(), partition=0)
            await p.abort_transaction()
            async with p.transaction():
                await p.send_and_wait(topic, b"c0", partition=0)
        finally:
            await p.stop()

        async def consume(level: str) -> list[tuple[int, bytes]]:
            c = AIOKafkaConsumer(
                bootstrap_servers=target.bootstrap,
                isolation_level=level,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
            )
            await c.start()
            try:
                tp = TopicPartition(topic, 0)
                c.assign([tp])
                await c.seek_to_beginning(tp)
                out: list[tuple[int, bytes]] = []
                end = (await c.end_offsets([tp]))[tp]
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 15
                while (await c.position(tp)) < end and loop.time() < deadline:
                    batch = await c.getmany(tp, timeout_ms=500)
                    out += [(m.offset, m.value) for m in batch.get(tp, [])]
                return out
            finally:
                await c.stop()

        return await consume("read_committed"), await consume("read_uncommitted")

    committed, uncommitted = asyncio.run(run())
    assert committed == [(0, b"a0"), (1, b"a1"), (2, b"a2"), (7, b"c0")]
    assert uncommitted == [(0, b"a0"), (1, b"a1"), (2, b"a2"), (4, b"b0"), (5, b"b1"), (7, b"c0")]


def _fill(target: Target, topic: str, n: int) -> None:
    plain = ck.Producer({"bootstrap.servers": target.bootstrap})
    for i in range(n):
        plain.produce(topic, f"in-{i}".encode(), partition=0)
    assert plain.flush(30) == 0


def _committed(target: Target, group: str, topic: str) -> int:
    c = ck.Consumer({"bootstrap.servers": target.bootstrap, "group.id": group})
    try:
        [tp] = c.committed([ck.TopicPartition(topic, 0)], timeout=30)
        return int(tp.offset)
    finally:
        c.close()


def test_kafka_python_send_offsets_to_transaction(target: Target) -> None:
    """kafka-python's consume-transform-produce with the consumer's group metadata (KIP-447 TxnOffsetCommit)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    src, dst, group = (
        create_topic(target.bootstrap, unique("kp-in")),
        create_topic(target.bootstrap, unique("kp-out")),
        unique("kp-g"),
    )
    _fill(target, src, 8)
    c = KafkaConsumer(
        bootstrap_servers=target.bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    # Subscribed before its metadata names the new topic (Kafka's brokers learn of it a moment after the
    # create returns), kafka-python's range assignor assigns nothing and keeps that for metadata.max.age.ms.
    deadline = time.monotonic() + 30
    while not c.partitions_for_topic(src) and time.monotonic() < deadline:
        time.sleep(0.1)
    c.subscribe([src])
    p = KafkaProducer(bootstrap_servers=target.bootstrap, transactional_id=unique("kp-tid"))
    try:
        got: list[bytes] = []
        for _ in range(100):
            for batch in c.poll(timeout_ms=200).values():
                got += [m.value for m in batch]
            if len(got) >= 8:
                break
        assert got == [f"in-{i}".encode() for i in range(8)]
        p.init_transactions()
        tp = TopicPartition(src, 0)
        for end, commit in ((5, True), (8, False)):
            p.begin_transaction()
            for v in got[:end]:
                p.send(dst, b"out-" + v, partition=0)
            p.send_offsets_to_transaction({tp: OffsetAndMetadata(end, "", -1)}, c.group_metadata())
            if commit:
                p.commit_transaction()
            else:
                p.abort_transaction()
    finally:
        p.close(5)
        c.close()
    assert values(read(target.bootstrap, dst, "read_committed")) == [f"out-in-{i}".encode() for i in range(5)]
    assert _committed(target, group, src) == 5


def test_aiokafka_send_offsets_to_transaction(target: Target) -> None:
    """aiokafka commits transactional offsets by group id only (TxnOffsetCommit without a generation)."""
    from aiokafka import AIOKafkaProducer, TopicPartition

    src, dst, group = (
        create_topic(target.bootstrap, unique("aio-in")),
        create_topic(target.bootstrap, unique("aio-out")),
        unique("aio-g"),
    )
    _fill(target, src, 4)

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=target.bootstrap, transactional_id=unique("aio-tid"))
        await p.start()
        try:
            async with p.transaction():
                await p.send_and_wait(dst, b"kept", partition=0)
                await p.send_offsets_to_transaction({TopicPartition(src, 0): 3}, group)
            await p.begin_transaction()
            await p.send_and_wait(dst, b"dropped", partition=0)
            await p.send_offsets_to_transaction({TopicPartition(src, 0): 4}, group)
            await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(run())
    assert values(read(target.bootstrap, dst, "read_committed")) == [b"kept"]
    assert _committed(target, group, src) == 3


def test_java_consumer_skips_aborted_records_and_markers(target: Target) -> None:
    """The Java consumer filters aborted batches with the fetch's aborted-transaction list."""
    topic = create_topic(target.bootstrap, unique("j-read"))
    a = ck.Producer({"bootstrap.servers": target.bootstrap, "transactional.id": unique("a"), "linger.ms": 5})
    b = ck.Producer({"bootstrap.servers": target.bootstrap, "transactional.id": unique("b"), "linger.ms": 5})
    a.init_transactions(60)
    b.init_transactions(60)
    for rnd in range(3):
        a.begin_transaction()
        b.begin_transaction()
        for i in range(2):
            for name, p in (("a", a), ("b", b)):
                p.produce(topic, f"{name}{rnd}{i}".encode(), partition=0)
                assert p.flush(30) == 0
        a.commit_transaction(60)
        b.abort_transaction(60)
    tool = java_client_tool()
    committed = tool.consume(target.bootstrap, topic, count=6, properties={"isolation.level": "read_committed"})
    everything = tool.consume(target.bootstrap, topic, count=12, properties={"isolation.level": "read_uncommitted"})
    assert [r["value"] for r in committed] == [f"a{r}{i}".encode() for r in range(3) for i in range(2)]
    assert len(everything) == 12 and {r["value"] for r in everything} >= {b"b00", b"b21"}
    # Offsets: per round a0 b0 a1 b1 then the two markers (6 offsets a round).
    assert [r["offset"] for r in committed] == [0, 2, 6, 8, 12, 14]
