"""Transactional ids expire after transactional.id.expiration.ms without a transaction (Kafka's
TransactionStateManager.removeExpiredTransactionalIds), on both brokers; an id with an open transaction does
not; on logbroker the expiry is durable (the id stays gone after a restart)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest

from logbroker.protocol import ApiKey, api
from logbroker.protocol.errors import ErrorCode
from logbroker_devtools.client.connection import Connection, parse_bootstrap
from logbroker_devtools.testing.process import BrokerProcess
from support import both_targets, create_topic, missing_tool

pytestmark = pytest.mark.timeout(180)

EXPIRE_MS, SWEEP_MS = 2000, 200
Describe = api(ApiKey.DescribeTransactions).request


@pytest.fixture(params=both_targets())
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, BrokerProcess | None]]:
    if request.param == "logbroker":
        env = {"LOGBROKER_TRANSACTIONAL_ID_EXPIRATION_MS": str(EXPIRE_MS),
               "LOGBROKER_TRANSACTION_REMOVE_EXPIRED_TRANSACTION_CLEANUP_INTERVAL_MS": str(SWEEP_MS)}  # fmt: skip
        with BrokerProcess(tmp_path / "data", env=env) as proc:
            yield proc.bootstrap, proc
        return
    from logbroker_devtools.testing import peers

    if not (peers.java_available() and peers.jars_available("kafka")):
        missing_tool("Apache Kafka (java and .ci/fetch-jars) is needed for the kafka target")
    props = {"transactional.id.expiration.ms": EXPIRE_MS,
             "transaction.remove.expired.transaction.cleanup.interval.ms": SWEEP_MS}  # fmt: skip
    with peers.KafkaPeer(server_properties=props, format_args=["--feature", "transaction.version=1"]) as k:
        yield k.bootstrap, None


def states(bootstrap: str, *tids: str) -> list[str]:
    """Each id's state, or its error's name."""
    host, port = parse_bootstrap(bootstrap)
    with Connection(host, port, client_id="expiry-probe", timeout=30) as conn:
        got = conn.do(Describe(transactional_ids=list(tids)), 0).transaction_states
    return [s.transaction_state if s.error_code == 0 else ErrorCode(s.error_code).name for s in got]


def test_idle_transactional_ids_expire_and_open_ones_do_not(broker: tuple[str, BrokerProcess | None]) -> None:
    bootstrap, proc = broker
    topic = create_topic(bootstrap, f"txexp-{uuid.uuid4().hex[:8]}")
    idle, busy = f"idle-{uuid.uuid4().hex[:8]}", f"busy-{uuid.uuid4().hex[:8]}"
    p1 = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": idle})
    p1.init_transactions(30)
    p1.begin_transaction()
    p1.produce(topic, value=b"done")
    p1.commit_transaction(30)
    p2 = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": busy, "transaction.timeout.ms": 60_000})
    p2.init_transactions(30)
    p2.begin_transaction()
    p2.produce(topic, value=b"open")
    assert p2.flush(30) == 0
    assert states(bootstrap, idle, busy) == ["CompleteCommit", "Ongoing"]
    deadline = time.monotonic() + 30
    while states(bootstrap, idle)[0] != "TRANSACTIONAL_ID_NOT_FOUND" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert states(bootstrap, idle, busy) == ["TRANSACTIONAL_ID_NOT_FOUND", "Ongoing"]
    if proc is not None:
        proc.kill()
        proc.start()
        assert states(bootstrap, idle, busy) == ["TRANSACTIONAL_ID_NOT_FOUND", "Ongoing"]
    p2.commit_transaction(30)
