"""kafka-go (segmentio/kafka-go, a Go client many services use) against both brokers: a Reader committing
synchronously after every record (CommitMessages, OffsetCommit v2 one at a time), and, on logbroker, every
acknowledged commit surviving a kill -9 right after the last one: under offsets_commit_sync=shared a commit is
written before it is answered and synced within 100 ms, so the kill lands before that sync."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from logbroker_devtools.testing.old_clients import ToolMissing, kafkago_commits
from logbroker_devtools.testing.process import BrokerProcess
from support import both_targets, create_topic, kafka_peer, missing_tool

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, object]]:
    if request.param == "kafka":
        with kafka_peer() as kafka:
            yield kafka, None
        return
    proc = BrokerProcess(tmp_path_factory.mktemp("kafkago") / "data")
    proc.start()
    yield proc.bootstrap, proc
    proc.stop()


def committed(bootstrap: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return int(c.committed([TopicPartition(topic, 0)], timeout=30)[0].offset)
    finally:
        c.close()


def run(bootstrap: str, topic: str, group: str, n: int) -> dict[str, object]:
    try:
        return kafkago_commits(bootstrap, topic, group, n, timeout=240)
    except ToolMissing as exc:
        missing_tool(str(exc))
        raise


def test_a_reader_commits_after_every_record(target: tuple[str, object]) -> None:
    bootstrap, _ = target
    topic, group = create_topic(bootstrap, f"kg-{uuid.uuid4().hex[:8]}"), f"kg-{uuid.uuid4().hex[:8]}"
    report = run(bootstrap, topic, group, 2000)
    assert report["committed"] == 2000
    assert committed(bootstrap, group, topic) == 2000


def test_acknowledged_commits_survive_a_kill_9(target: tuple[str, object]) -> None:
    bootstrap, proc = target
    if not isinstance(proc, BrokerProcess):
        pytest.skip("a broker this test can kill -9 and restart on its data")
    for _ in range(3):
        topic, group = create_topic(bootstrap, f"kg-{uuid.uuid4().hex[:8]}"), f"kg-{uuid.uuid4().hex[:8]}"
        assert run(bootstrap, topic, group, 500)["committed"] == 500
        proc.kill()  # the client exited after its last acknowledged commit, well inside the 100 ms sync delay
        proc.start()
        assert committed(bootstrap, group, topic) == 500
