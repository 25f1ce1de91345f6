"""DescribeLogDirs and AlterReplicaLogDirs, asserted on logbroker and Apache Kafka 4.4 alike, through the raw
protocol, the Java admin client and Kafka's own tools (kafka-log-dirs, kafka-topics): sizes are the bytes of a
partition's segment files (one batch produced adds exactly its length), the volume's total and usable bytes are
what the file system says, and a move to another log dir is refused with Kafka's codes."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from logbroker.protocol import ApiKey, api
from logbroker.protocol.errors import ErrorCode
from logbroker.protocol.records import NewRecord, build_batch
from logbroker_devtools.client.connection import BrokerError, Connection, KafkaClient, parse_bootstrap
from support import both_targets, java_client_tool, kafka_tool, target_bootstrap, unique

pytestmark = pytest.mark.timeout(300)

DescribeLogDirs = api(ApiKey.DescribeLogDirs).request
AlterReplicaLogDirs = api(ApiKey.AlterReplicaLogDirs).request
Dir = AlterReplicaLogDirs.AlterReplicaLogDir
DirTopic = Dir.AlterReplicaLogDirTopic
RETRIABLE = {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE}


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from target_bootstrap(request)


def _conn(bootstrap: str) -> Connection:
    return Connection(*parse_bootstrap(bootstrap))


def _records(n: int, size: int = 100) -> list[NewRecord]:
    return [NewRecord(key=f"k{i}".encode(), value=bytes([65 + i % 26]) * size) for i in range(n)]


def _topic_with_data(bootstrap: str, partitions: int = 2) -> tuple[str, int]:
    """A new topic with one batch of 10 records in partition 0; returns it and the batch's length."""
    topic = unique("logdirs")
    records = _records(10)
    with KafkaClient(bootstrap) as c:
        c.create_topic(topic, partitions)
    _produce(bootstrap, topic, records)
    # Kafka creates a new topic's logs as its broker catches up with the metadata: wait for every partition.
    deadline = time.monotonic() + 30
    while len(_sizes(_describe(bootstrap, {topic: list(range(partitions))}).results[0])) < partitions:
        assert time.monotonic() < deadline, f"{topic}: not every partition has a log after 30 s"
        time.sleep(0.1)
    return topic, len(build_batch(records))


def _produce(bootstrap: str, topic: str, records: list[NewRecord]) -> None:
    """One batch to partition 0, retried while Kafka is still electing the new topic's leader."""
    deadline = time.monotonic() + 30
    while True:
        try:
            with KafkaClient(bootstrap) as c:
                c.produce(topic, 0, records)
            return
        except BrokerError as exc:
            if time.monotonic() > deadline or exc.code not in RETRIABLE:
                raise
            time.sleep(0.2)


def _describe(bootstrap: str, topics: dict[str, list[int]] | None, version: int = 4) -> Any:
    req = DescribeLogDirs(topics=None if topics is None else [
        DescribeLogDirs.DescribableLogDirTopic(topic=t, partitions=ps) for t, ps in topics.items()
    ])  # fmt: skip
    with _conn(bootstrap) as conn:
        return conn.do(req, version)


def _sizes(result: Any) -> dict[tuple[str, int], tuple[int, int, bool]]:
    return {(t.name, p.partition_index): (p.partition_size, p.offset_lag, p.is_future_key)
            for t in result.topics for p in t.partitions}  # fmt: skip


def test_versions_served_are_kafkas(target: str, request: pytest.FixtureRequest) -> None:
    """Kafka 4.4's maxima on both; v0, which Kafka 4 removed, only on logbroker (it serves Kafka 3.9's
    history by default: test_old_protocol asserts v0 against Kafka 3.9)."""
    low = 1 if request.node.callspec.params["target"] == "kafka" else 0
    with _conn(target) as conn:
        assert conn.versions[ApiKey.DescribeLogDirs] == (low, 5)
        assert conn.versions[ApiKey.AlterReplicaLogDirs] == (low, 2)


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_one_log_dir_with_each_partitions_size(target: str, version: int) -> None:
    topic, batch = _topic_with_data(target)
    resp = _describe(target, None, version)
    assert getattr(resp, "error_code", 0) == 0
    [result] = resp.results
    assert result.error_code == 0 and os.path.isabs(result.log_dir)
    sizes = _sizes(result)
    # The segment file holds the batch as produced, nothing else; an empty partition is 0 bytes.
    assert sizes[(topic, 0)] == (batch, 0, False)
    assert sizes[(topic, 1)] == (0, 0, False)
    if version >= 4:
        st = os.statvfs(result.log_dir)  # both brokers run on this machine: their volume is ours to measure
        assert result.total_bytes == st.f_blocks * st.f_frsize
        assert result.total_bytes >= result.usable_bytes > 0
        assert abs(result.usable_bytes - st.f_bavail * st.f_frsize) < 256 << 20
    if version >= 5:
        assert result.is_cordoned is False


def test_size_grows_by_what_is_produced(target: str) -> None:
    topic, first = _topic_with_data(target, partitions=1)
    assert _sizes(_describe(target, {topic: [0]}).results[0]) == {(topic, 0): (first, 0, False)}
    more = _records(50, size=1000)
    _produce(target, topic, more)
    assert _sizes(_describe(target, {topic: [0]}).results[0]) == {(topic, 0): (first + len(build_batch(more)), 0,
                                                                               False)}  # fmt: skip


def test_topics_filter_leaves_out_what_does_not_exist(target: str) -> None:
    topic, batch = _topic_with_data(target)
    [result] = _describe(target, {topic: [0, 0, 7], unique("missing"): [0]}).results
    assert result.error_code == 0
    assert _sizes(result) == {(topic, 0): (batch, 0, False)}
    assert _describe(target, {}).results[0].topics == []
    assert _describe(target, {topic: []}).results[0].topics == []


def test_alter_replica_log_dirs_is_refused_as_kafka_refuses_it(target: str) -> None:
    topic, _ = _topic_with_data(target)
    log_dir = _describe(target, None).results[0].log_dir
    missing = unique("missing")

    def alter(*dirs: tuple[str, dict[str, list[int]]]) -> dict[tuple[str, int], int]:
        req = AlterReplicaLogDirs(dirs=[
            Dir(path=path, topics=[DirTopic(name=t, partitions=ps) for t, ps in ts.items()]) for path, ts in dirs
        ])  # fmt: skip
        with _conn(target) as conn:
            resp = conn.do(req)
        return {(t.topic_name, p.partition_index): p.error_code for t in resp.results for p in t.partitions}

    E = ErrorCode
    # Another directory, even the same one spelled with a trailing slash: not a log dir of this broker.
    for path in ("/nonexistent/kafka-logs", log_dir + "/", "relative/dir"):
        assert alter((path, {topic: [0], missing: [0]})) == {(topic, 0): E.LOG_DIR_NOT_FOUND,
                                                            (missing, 0): E.LOG_DIR_NOT_FOUND}  # fmt: skip
    # Its own log dir: nothing to move for a partition it holds; unknown partitions are unknown.
    assert alter((log_dir, {topic: [0, 9], missing: [0]})) == {
        (topic, 0): E.NONE, (topic, 9): E.UNKNOWN_TOPIC_OR_PARTITION, (missing, 0): E.UNKNOWN_TOPIC_OR_PARTITION
    }  # fmt: skip
    # A partition named under two paths takes the last.
    assert alter((log_dir, {topic: [0, 1]}), ("/elsewhere", {topic: [1]})) == {
        (topic, 0): E.NONE, (topic, 1): E.LOG_DIR_NOT_FOUND
    }  # fmt: skip
    # A name too long for the partition's future directory (255 characters) is refused before anything else.
    assert alter(("/elsewhere", {"a" * 214: [0]}), (log_dir, {"b" * 213: [0]})) == {
        ("a" * 214, 0): E.INVALID_TOPIC_EXCEPTION, ("b" * 213, 0): E.UNKNOWN_TOPIC_OR_PARTITION
    }  # fmt: skip
    assert alter() == {}
    # Nothing moved: the partition is where it was, with its data.
    assert _sizes(_describe(target, {topic: [0]}).results[0])[(topic, 0)][0] > 0


@pytest.mark.java
def test_java_admin_client(target: str) -> None:
    tool = java_client_tool()
    topic, batch = _topic_with_data(target)
    out = json.loads(tool.run("log-dirs", "--bootstrap", target).stdout)
    [(broker, dirs)] = out["brokers"].items()
    [(path, desc)] = dirs.items()
    assert desc["error"] is None and os.path.isabs(path)
    assert desc["total_bytes"] >= desc["usable_bytes"] > 0
    replicas = {(r["topic"], r["partition"]): (r["size"], r["offset_lag"], r["is_future"]) for r in desc["replicas"]}
    assert replicas[(topic, 0)] == (batch, 0, False) and replicas[(topic, 1)] == (0, 0, False)

    out = json.loads(tool.run("log-dirs", "--bootstrap", target, "--broker", broker, "--topic", topic,
                              "--partition", "0").stdout)  # fmt: skip
    assert out["replicas"] == [{"topic": topic, "partition": 0, "dir": path, "offset_lag": 0, "future_dir": None}]

    refused = json.loads(tool.run("alter-log-dir", "--bootstrap", target, "--broker", broker, "--topic", topic,
                                  "--partition", "0", "--path", "/nonexistent/kafka-logs").stdout)  # fmt: skip
    assert refused["error"].startswith("LogDirNotFoundException")
    same = json.loads(tool.run("alter-log-dir", "--bootstrap", target, "--broker", broker, "--topic", topic,
                               "--partition", "0", "--path", path).stdout)  # fmt: skip
    assert same["error"] is None


@pytest.mark.kafka
def test_kafka_log_dirs_and_topics_tools(target: str) -> None:
    topic, batch = _topic_with_data(target)
    r = kafka_tool("kafka-log-dirs", target, "--describe", "--topic-list", topic)
    assert r.returncode == 0, r.output
    [line] = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    [broker] = json.loads(line)["brokers"]
    [log_dir] = broker["logDirs"]
    assert log_dir["error"] is None and os.path.isabs(log_dir["logDir"])
    got = {p["partition"]: (p["size"], p["offsetLag"], p["isFuture"]) for p in log_dir["partitions"]}
    assert got == {f"{topic}-0": (batch, 0, False), f"{topic}-1": (0, 0, False)}

    r = kafka_tool("kafka-topics", target, "--describe", "--topic", topic)
    assert r.returncode == 0, r.output
    assert f"Topic: {topic}\t" in r.stdout and "PartitionCount: 2\tReplicationFactor: 1" in r.stdout
    rows = [ln.split("\t") for ln in r.stdout.splitlines() if ln.startswith("\tTopic:")]
    assert [row[2:4] for row in rows] == [["Partition: 0", f"Leader: {broker['broker']}"],
                                          ["Partition: 1", f"Leader: {broker['broker']}"]]  # fmt: skip
