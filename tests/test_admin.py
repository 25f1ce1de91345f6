"""Admin APIs through confluent-kafka's AdminClient (librdkafka) against the real broker."""

from __future__ import annotations

import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from logbroker_devtools.testing.process import BrokerProcess


@pytest.fixture
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def produce(bootstrap: str, topic: str, n: int, partition: int = 0, ts: int | None = None) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), partition=partition, timestamp=(ts + i) if ts else 0)
    assert p.flush(30) == 0


def test_create_describe_and_grow_topics(admin: AdminClient, broker: BrokerProcess, topic: str) -> None:
    fut = admin.create_topics([NewTopic(topic, 2, 1, config={"retention.ms": "123456", "segment.bytes": "1048576"})])
    fut[topic].result(10)
    with pytest.raises(ck.KafkaException) as exc:
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    assert exc.value.args[0].code() == ck.KafkaError.TOPIC_ALREADY_EXISTS
    with pytest.raises(ck.KafkaException) as exc:
        admin.create_topics([NewTopic(topic + "-rf", 1, 3)])[topic + "-rf"].result(10)
    assert exc.value.args[0].code() == ck.KafkaError.INVALID_REPLICATION_FACTOR
    with pytest.raises(ck.KafkaException) as exc:
        admin.create_topics([NewTopic(topic + "-bad", 1, 1, config={"retention.ms": "x"})])[topic + "-bad"].result(10)
    assert exc.value.args[0].code() == ck.KafkaError.INVALID_CONFIG
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([res])[res].result(10)
    assert configs["retention.ms"].value == "123456"
    assert not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].value == "delete"
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(10)
    md = admin.list_topics(topic, timeout=10)
    assert sorted(md.topics[topic].partitions) == [0, 1, 2, 3]
    with pytest.raises(ck.KafkaException) as exc:
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(10)
    assert exc.value.args[0].code() == ck.KafkaError.INVALID_PARTITIONS
    cluster = admin.describe_cluster().result(10)
    assert cluster.controller.id == 1 and len(cluster.nodes) == 1
    broker_res = ConfigResource(ConfigResource.Type.BROKER, "1")
    bconf = admin.describe_configs([broker_res])[broker_res].result(10)
    assert bconf["logbroker.fsync"].value == "always"


def test_delete_records_and_list_offsets(admin: AdminClient, broker: BrokerProcess, topic: str) -> None:
    base = int(time.time() * 1000) - 100_000
    produce(broker.bootstrap, topic, 50, ts=base)
    tp = ck.TopicPartition(topic, 0, 20)
    admin.delete_records([tp])[tp].result(10)
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x"})
    lo, hi = c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10)
    assert (lo, hi) == (20, 50)
    found = c.offsets_for_times([ck.TopicPartition(topic, 0, base + 30)], timeout=10)
    assert found[0].offset == 30
    found = c.offsets_for_times([ck.TopicPartition(topic, 0, base + 10_000)], timeout=10)
    assert found[0].offset == -1  # nothing that late: end of log
    # Fetching below the log start is out of range; auto.offset.reset=earliest moves to 20.
    c.close()
    c = ck.Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "x",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.assign([ck.TopicPartition(topic, 0, 5)])
    m = None
    deadline = time.monotonic() + 10
    while m is None and time.monotonic() < deadline:
        m = c.poll(0.5)
    assert m is not None and m.offset() == 20
    c.close()


def test_delete_topic(admin: AdminClient, broker: BrokerProcess, topic: str) -> None:
    produce(broker.bootstrap, topic, 3)
    admin.delete_topics([topic])[topic].result(10)
    assert topic not in admin.list_topics(timeout=10).topics
    with pytest.raises(ck.KafkaException) as exc:
        admin.delete_topics([topic])[topic].result(10)
    assert exc.value.args[0].code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART


def test_retention_deletes_old_segments_in_the_running_broker(tmp_path, topic: str) -> None:
    b = BrokerProcess(tmp_path / "d", env={"LOGBROKER_RETENTION_CHECK_INTERVAL_MS": "200"})
    with b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": "10000", "retention.bytes": "30000"})])[
            topic
        ].result(10)
        p = ck.Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
        for i in range(200):
            p.produce(topic, value=b"x" * 1000)
            if i % 20 == 0:
                p.flush(10)
        assert p.flush(30) == 0
        c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "x"})
        deadline = time.monotonic() + 10
        lo = 0
        while lo == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
            lo, hi = c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10)
        assert lo > 0 and hi == 200
        assert len(list((b.data_dir / f"{topic}-0").glob("*.log"))) <= 5
        c.close()


def test_log_append_time_topic_is_stamped_by_the_broker(admin: AdminClient, broker: BrokerProcess, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 1, 1, config={"message.timestamp.type": "LogAppendTime"})])[topic].result(10)
    before = int(time.time() * 1000)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "zstd"})
    for i in range(5):
        p.produce(topic, value=f"v{i}".encode(), timestamp=1_000_000_000_000)
    assert p.flush(30) == 0
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lat", "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 10
    while len(got) < 5 and time.monotonic() < deadline:
        got += [m for m in c.consume(10, 0.5) if m.error() is None]
    c.close()
    assert [m.value() for m in got] == [f"v{i}".encode() for i in range(5)]
    for m in got:
        kind, stamp = m.timestamp()
        assert kind == ck.TIMESTAMP_LOG_APPEND_TIME
        assert before - 1000 <= stamp <= int(time.time() * 1000) + 1000
    with pytest.raises(ck.KafkaException) as exc:
        admin.create_topics([NewTopic(topic + "x", 1, 1, config={"message.timestamp.type": "Sometimes"})])[
            topic + "x"
        ].result(10)
    assert exc.value.args[0].code() == ck.KafkaError.INVALID_CONFIG
