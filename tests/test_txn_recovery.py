"""The transaction coordinator across kill -9 of the broker (logbroker only: these restart the broker on
its own data directory).

The window that matters is between the durable decision (PrepareCommit/PrepareAbort) and the markers.
It is far too short to hit by timing a kill, so the tests make it exact: a transaction is left open, the
broker is killed, and the coordinator's log gets the prepared state appended (what a crash right after
the decision leaves on disk). On restart the decision must be carried out: a prepared commit becomes
visible to read_committed, a prepared abort never does, and the LSO moves on either way.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from logbroker.broker.txn import TxnMeta, TxnState, TxnStore
from logbroker_devtools.testing.process import BrokerProcess

pytestmark = pytest.mark.timeout(180)


def _topic(bootstrap: str, partitions: int = 2) -> str:
    name = f"txr-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions)])[name].result(30)
    return name


def _open_transaction(bootstrap: str, topic: str, tid: str, n: int, timeout_ms: int = 60_000) -> ck.Producer:
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 0,
                     "transaction.timeout.ms": timeout_ms})  # fmt: skip
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0
    return p


def _read(bootstrap: str, topic: str, isolation: str, partitions: int = 2, timeout: float = 30) -> list[bytes]:
    """Every record up to the end (the LSO for read_committed), within `timeout`."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:8]}",
                     "auto.offset.reset": "earliest", "isolation.level": isolation,
                     "enable.partition.eof": True, "enable.auto.commit": False})  # fmt: skip
    c.assign([ck.TopicPartition(topic, i, ck.OFFSET_BEGINNING) for i in range(partitions)])
    got: list[bytes] = []
    eof: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(eof) < partitions and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == ck.KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                continue
            eof.discard(m.partition())
            got.append(m.value())
    finally:
        c.close()
    assert len(eof) == partitions, f"{isolation} reader did not reach the end of {topic}: {got}"
    return sorted(got)


def _prepare(data_dir: Path, tid: str, state: TxnState) -> None:
    """Append the prepared state for `tid` to the coordinator's log, as a crash after the decision leaves it."""
    store = TxnStore(data_dir, clean_shutdown=False)
    meta = TxnMeta.from_json(tid, store.load()[("x", tid)])
    assert meta.state == TxnState.ONGOING and meta.partitions
    meta.state = state
    store.append([(("x", tid), meta.to_json())])
    store.log.sync()
    store.close()


@pytest.mark.parametrize("state", [TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT])
def test_a_prepared_transaction_is_completed_on_restart(fresh_broker: BrokerProcess, state: TxnState) -> None:
    fresh_broker.start()
    topic = _topic(fresh_broker.bootstrap)
    tid = f"tx-{uuid.uuid4().hex[:8]}"
    _open_transaction(fresh_broker.bootstrap, topic, tid, 6)
    assert _read(fresh_broker.bootstrap, topic, "read_committed") == []  # open: held at the LSO
    fresh_broker.kill()
    _prepare(fresh_broker.data_dir, tid, state)
    fresh_broker.start()
    expected = sorted(f"v{i}".encode() for i in range(6))
    committed = _read(fresh_broker.bootstrap, topic, "read_committed")
    assert committed == (expected if state == TxnState.PREPARE_COMMIT else [])
    assert _read(fresh_broker.bootstrap, topic, "read_uncommitted") == expected
    # The id is usable again: a new producer of it commits normally.
    p = ck.Producer({"bootstrap.servers": fresh_broker.bootstrap, "transactional.id": tid})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value=b"after", partition=0)
    p.commit_transaction(30)
    assert _read(fresh_broker.bootstrap, topic, "read_committed") == sorted([*committed, b"after"])


def test_an_open_transaction_at_the_crash_is_aborted_by_its_timeout(tmp_path: Path) -> None:
    sweep_every = {"LOGBROKER_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "200"}
    broker = BrokerProcess(tmp_path / "data", env=sweep_every)
    with broker:
        topic = _topic(broker.bootstrap)
        tid = f"tx-{uuid.uuid4().hex[:8]}"
        _open_transaction(broker.bootstrap, topic, tid, 4, timeout_ms=3000)
        broker.kill()
        broker.start()
        time.sleep(4)  # past the transaction's timeout, plus a few sweeps
        assert _read(broker.bootstrap, topic, "read_committed") == []
        assert len(_read(broker.bootstrap, topic, "read_uncommitted")) == 4
        # The LSO moved past the aborted records: read_committed's end is the log end.
        c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "w", "isolation.level": "read_committed"})
        try:
            for i in range(2):
                _low, high = c.get_watermark_offsets(ck.TopicPartition(topic, i), timeout=10, cached=False)
                assert high == 3  # two records and the abort marker
        finally:
            c.close()
