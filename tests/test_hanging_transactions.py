"""Hanging transactions (issue 32): an open transaction in a partition that no coordinator state explains.
read_committed readers stop at its first offset until it ends. Found and aborted with Kafka's own tool
(`kafka-transactions find-hanging`, `abort`) on both brokers; logbroker also finds them itself, says so at
ERROR on start, and aborts them once idle for transaction.max.timeout.ms (Kafka leaves that to the tool).

A hanging transaction is made as a client bug makes one on Kafka: with transaction.partition.verification
.enable=false, a transactional batch sent with Produce v11 to a partition never added to the transaction.
The issue's own case, logbroker only: the transaction state directory lost while a transaction is open."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from logbroker.protocol import ApiKey, api
from logbroker.protocol.records import TRANSACTIONAL_FLAG, NewRecord, build_batch
from logbroker_devtools.testing.process import BrokerProcess
from support import Wire, both_targets, create_topic, eventually, kafka_peer, kafka_tool, unique

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module", params=both_targets())
def unverified(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A broker with transaction.partition.verification.enable=false."""
    if request.param == "logbroker":
        env = {"LOGBROKER_TRANSACTION_PARTITION_VERIFICATION_ENABLE": "false"}
        with BrokerProcess(tmp_path_factory.mktemp("unverified") / "data", env=env) as proc:
            yield proc.bootstrap
        return
    with kafka_peer(**{"transaction.partition.verification.enable": "false"}) as bootstrap:
        yield bootstrap


def _call(bootstrap: str, key: ApiKey, version: int, **fields: Any) -> Any:
    """One request, asked again while the coordinator is loading or moving (a Kafka just started)."""
    deadline = time.monotonic() + 30
    while True:
        wire = Wire(bootstrap, timeout=15)
        try:
            resp = wire.call(key, version, **fields)
        finally:
            wire.sock.close()
        if getattr(resp, "error_code", 0) not in (14, 15, 16) or time.monotonic() > deadline:
            return resp
        time.sleep(0.3)


def open_unadded_transaction(bootstrap: str, topic: str, tid: str) -> int:
    """InitProducerId, then a transactional batch by Produce v11 to partition 0, never added to the
    transaction (verification off): the coordinator's transaction stays empty. Returns the producer id."""
    deadline = time.monotonic() + 30
    while True:  # Kafka makes its transaction log (and so its coordinator) on the first FindCoordinator
        found = _call(bootstrap, ApiKey.FindCoordinator, 4, key_type=1, coordinator_keys=[tid])
        if found.coordinators[0].error_code == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    init = _call(bootstrap, ApiKey.InitProducerId, 4, transactional_id=tid, transaction_timeout_ms=60_000,
                 producer_id=-1, producer_epoch=-1)  # fmt: skip
    assert init.error_code == 0, init
    req = api(ApiKey.Produce).request
    p = req.TopicProduceData
    batch = build_batch([NewRecord(b"k", b"hanging")], producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                        base_sequence=0, flags=TRANSACTIONAL_FLAG)  # fmt: skip
    data = [p(name=topic, partition_data=[p.PartitionProduceData(index=0, records=batch)])]
    resp = _call(bootstrap, ApiKey.Produce, 11, transactional_id=tid, acks=-1, timeout_ms=10_000, topic_data=data)
    assert resp.responses[0].partition_responses[0].error_code == 0, resp
    return int(init.producer_id)


def read_committed(bootstrap: str, topic: str, expect: int, timeout: float = 30) -> list[bytes]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": unique("rc"), "auto.offset.reset": "earliest",
                     "isolation.level": "read_committed", "enable.auto.commit": False})  # fmt: skip
    try:
        c.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(got) < expect and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        return got
    finally:
        c.close()


def find_hanging(bootstrap: str, topic: str) -> list[list[str]]:
    res = kafka_tool("kafka-transactions", bootstrap, "find-hanging", "--topic", topic,
                     "--max-transaction-timeout", "0")  # fmt: skip
    assert res.returncode == 0, res.output
    rows = [[c.strip() for c in ln.split("\t")] for ln in res.stdout.splitlines() if ln.strip()]
    return [r for r in rows[1:] if r and r[0] == topic]


def test_kafka_transactions_finds_and_aborts_a_hanging_transaction(unverified: str) -> None:
    topic = create_topic(unverified, unique("hanging"))
    pid = open_unadded_transaction(unverified, topic, unique("tid"))
    p = ck.Producer({"bootstrap.servers": unverified})
    p.produce(topic, b"after", partition=0)
    assert p.flush(30) == 0
    assert read_committed(unverified, topic, 1, timeout=3) == []  # stuck behind offset 0

    def listed() -> None:
        rows = find_hanging(unverified, topic)
        assert [(r[1], r[2], r[5]) for r in rows] == [("0", str(pid), "0")], rows

    eventually(listed, timeout=30, interval=1)
    res = kafka_tool("kafka-transactions", unverified, "abort", "--topic", topic, "--partition", "0",
                     "--start-offset", "0")  # fmt: skip
    assert res.returncode == 0, res.output
    assert read_committed(unverified, topic, 1) == [b"after"]
    assert find_hanging(unverified, topic) == []


def test_a_lost_transaction_log_is_found_on_start_and_its_transaction_aborted(tmp_path: Path) -> None:
    """The issue's case: the transaction state directory deleted while a transaction is open. The next start
    says so at ERROR and, once the transaction has been idle for transaction.max.timeout.ms, aborts it with
    a marker: read_committed readers get past it (they never did before)."""
    if "logbroker" not in both_targets():
        pytest.skip("logbroker only")
    env = {"LOGBROKER_TRANSACTION_MAX_TIMEOUT_MS": "6000",
           "LOGBROKER_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "300"}  # fmt: skip
    proc = BrokerProcess(tmp_path / "data", env=env)
    with proc:
        topic = create_topic(proc.bootstrap, unique("lost"))
        txn = ck.Producer({"bootstrap.servers": proc.bootstrap, "transactional.id": unique("tid"),
                           "transaction.timeout.ms": 5000})  # fmt: skip
        txn.init_transactions(30)
        txn.begin_transaction()
        txn.produce(topic, b"open", partition=0)
        assert txn.flush(30) == 0
        plain = ck.Producer({"bootstrap.servers": proc.bootstrap})
        plain.produce(topic, b"after", partition=0)
        assert plain.flush(30) == 0
    shutil.rmtree(tmp_path / "data" / "__transactions")
    with proc:
        # Said at start, before any sweep (the tool's view of it is the test above, on both brokers).
        log = proc.log_path.read_text()
        assert " ERROR " in log and f"{topic}-0: a transaction of producer id" in log and "hanging" in log, log[-3000:]

        def aborted() -> None:
            assert "aborted the hanging transaction" in proc.log_path.read_text()

        eventually(aborted, timeout=30)
        assert read_committed(proc.bootstrap, topic, 1) == [b"after"]
        assert find_hanging(proc.bootstrap, topic) == []
