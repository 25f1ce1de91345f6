"""The reference-peer launchers work: each peer starts, round-trips real records and
stops without leaving processes or temp dirs behind. Other suites build on these
peers, so a failure here points at the harness rather than at logbroker."""

from __future__ import annotations

import collections
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from logbroker_devtools.testing import peers
from logbroker_devtools.testing.peers import JavaClientTool, KafkaCluster, KafkaPeer, PeerError, TansuPeer
from support import missing_tool

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def require_tansu() -> None:
    try:
        peers.tansu_binary()
    except PeerError as exc:
        missing_tool(str(exc))


def require_kafka() -> None:
    if not peers.java_available():
        missing_tool("java not found")
    if not peers.jars_available("kafka"):
        missing_tool(f"no Kafka jars in {peers.default_jar_dir('kafka')} (run .ci/fetch-jars)")


def require_java_tool() -> None:
    if not peers.javac_available():
        missing_tool("javac not found")
    if not peers.jars_available("clients"):
        missing_tool(f"no Kafka client jars in {peers.default_jar_dir('clients')} (run .ci/fetch-jars)")


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create_topic(bootstrap: str, topic: str, partitions: int = 1, replication: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, partitions, replication)]).values():
        fut.result(30)


def _records(n: int) -> list[dict[str, Any]]:
    return [
        {
            "key": f"key-{i}".encode(),
            "value": f"value-{i}".encode() * (i + 1),
            "headers": [("idx", str(i).encode()), ("empty", None)],
        }
        for i in range(n)
    ]


def _produce(bootstrap: str, topic: str, records: list[dict[str, Any]], **conf: Any) -> None:
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for r in records:
        producer.produce(
            topic,
            key=r["key"],
            value=r["value"],
            headers=r["headers"],
            partition=0,
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
    assert producer.flush(30) == 0, "records still queued after 30s"
    assert not errors


class _Tail(logging.Handler):
    """Keeps librdkafka's last debug lines so a shortfall says what the client saw."""

    def __init__(self, lines: int = 200) -> None:
        super().__init__(logging.DEBUG)
        self.lines: collections.deque[str] = collections.deque(maxlen=lines)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.created:.3f} {record.getMessage()}")


def _consume(bootstrap: str, topic: str, count: int, timeout: float = 30.0) -> list[Any]:
    tail = _Tail()
    log = logging.getLogger(f"rdkafka.{topic}")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    log.addHandler(tail)
    # librdkafka insists on group.id even for assign(); nothing is committed or joined.
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "debug": "broker,topic,metadata,fetch",
        },
        logger=log,
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue
                raise AssertionError(f"consume error: {err}")
            got.append(msg)
        if len(got) < count:
            # What the client saw (a reset after OFFSET_OUT_OF_RANGE, a backoff...) says why records are missing.
            print(f"librdkafka read {len(got)}/{count} of {topic}:", *tail.lines, sep="\n", file=sys.stderr)
        return got
    finally:
        consumer.close()
        log.removeHandler(tail)


def _assert_round_trip(bootstrap: str, topic: str, n: int = 10) -> None:
    records = _records(n)
    _produce(bootstrap, topic, records)
    got = _consume(bootstrap, topic, n)
    assert [m.offset() for m in got] == list(range(n))
    assert [m.key() for m in got] == [r["key"] for r in records]
    assert [m.value() for m in got] == [r["value"] for r in records]
    assert [m.headers() for m in got] == [r["headers"] for r in records]


# ------------------------------------------------------------------------ helpers


def test_default_jar_dir_honours_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(peers.JARS_ENV, str(tmp_path))
    assert peers.default_jar_dir("kafka") == tmp_path / "kafka"
    assert not peers.jars_available("kafka")
    (tmp_path / "kafka").mkdir()
    (tmp_path / "kafka" / "x.jar").write_bytes(b"")
    assert peers.jars_available("kafka")


def test_default_jar_dir_in_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(peers.JARS_ENV, raising=False)
    root = peers.repo_root()
    assert root is not None
    assert peers.default_jar_dir("clients") == root / ".ci" / "cache" / "jars" / "clients"


# ------------------------------------------------------------------------ Tansu


def test_tansu_round_trip() -> None:
    require_tansu()
    with TansuPeer() as tansu:
        assert tansu.bootstrap == f"127.0.0.1:{tansu.port}"
        assert peers.api_versions_probe("127.0.0.1", tansu.port) == 0
        topic = _topic("tansu")
        _create_topic(tansu.bootstrap, topic)
        _assert_round_trip(tansu.bootstrap, topic)


def test_tansu_stop_leaves_nothing_behind() -> None:
    require_tansu()
    tansu = TansuPeer().start()
    [pid] = tansu.pids
    workdir = tansu.workdir
    assert workdir is not None and (workdir / "tansu.log").is_file()
    tansu.stop()
    assert not _pid_alive(pid)
    assert not workdir.exists()
    assert tansu.workdir is None and not tansu.running
    tansu.stop()  # idempotent


def test_peer_dies_with_its_owner() -> None:
    """A SIGKILLed test process must not strand its peers (the watchdog reaps them)."""
    require_tansu()
    script = (
        "import sys, time\n"
        "from logbroker_devtools.testing.peers import TansuPeer\n"
        "p = TansuPeer().start()\n"
        "print(p.pids[0], p.workdir, flush=True)\n"
        "time.sleep(60)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        pid_text, tmpdir = owner.stdout.readline().split()
    finally:
        owner.kill()
        owner.wait()
    pid = int(pid_text)
    deadline = time.monotonic() + 10
    while _pid_alive(pid) or Path(tmpdir).exists():
        assert time.monotonic() < deadline, "peer or its temp dir outlived the owner"
        time.sleep(0.1)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_tansu_start_failure_reports_log() -> None:
    require_tansu()
    with pytest.raises(PeerError, match="UnsupportedStorageUrl"):
        TansuPeer(storage_engine="bogus://nowhere/").start()


# ------------------------------------------------------------------------ Kafka


@pytest.fixture(scope="module")
def kafka() -> Iterator[KafkaPeer]:
    require_kafka()
    # The extra listener costs nothing and proves the hook later SASL/SSL tests use.
    with KafkaPeer(listeners={"EXTERNAL": "PLAINTEXT"}) as peer:
        yield peer


@pytest.fixture(scope="module")
def java_tool() -> JavaClientTool:
    require_java_tool()
    tool = JavaClientTool()
    tool.compile()
    return tool


@pytest.mark.kafka
def test_kafka_single_node_round_trip(kafka: KafkaPeer) -> None:
    assert kafka.bootstrap == f"127.0.0.1:{kafka.port}"
    topic = _topic("kafka")
    _create_topic(kafka.bootstrap, topic)
    _assert_round_trip(kafka.bootstrap, topic)


@pytest.mark.kafka
def test_kafka_extra_listener(kafka: KafkaPeer) -> None:
    external = kafka.listener_bootstrap("EXTERNAL")
    assert external != kafka.bootstrap
    brokers = AdminClient({"bootstrap.servers": external}).list_topics(timeout=10).brokers
    # Metadata fetched through a listener advertises that same listener.
    assert [f"{b.host}:{b.port}" for b in brokers.values()] == [external]
    topic = _topic("external")
    _create_topic(external, topic)
    _assert_round_trip(external, topic, n=3)


@pytest.mark.kafka
def test_kafka_auto_creates_topics(kafka: KafkaPeer) -> None:
    topic = _topic("auto")
    _produce(kafka.bootstrap, topic, _records(3))
    assert len(_consume(kafka.bootstrap, topic, 3)) == 3


@pytest.mark.kafka
def test_kafka_bad_config_reports_log() -> None:
    require_kafka()
    with pytest.raises(PeerError, match=r"(?s)format failed.*num\.partitions"):
        KafkaPeer(server_properties={"num.partitions": "many"}).start()


@pytest.mark.kafka
@pytest.mark.java
@pytest.mark.parametrize("codec", CODECS)
def test_java_client_codecs(kafka: KafkaPeer, java_tool: JavaClientTool, codec: str) -> None:
    topic = _topic(f"java-{codec}")
    records = _records(20)
    # An explicit timestamp an hour back. Not years back: Kafka rolls a segment once its first batch's
    # timestamp is segment.ms old, so an old record alone in the first batch gets a segment of its own, which
    # the next retention check deletes (the fetch at offset 0 then fails OFFSET_OUT_OF_RANGE).
    stamp = int(time.time() * 1000) - 3_600_000
    records[0]["timestamp"] = stamp
    records[1]["key"] = None
    records[2]["value"] = None
    # Highly compressible values so the codec really shrinks the batch.
    records[3]["value"] = b"x" * 10_000
    acked = java_tool.produce(kafka.bootstrap, topic, records, compression=codec, idempotence=codec != "none")
    assert [a["offset"] for a in acked] == list(range(20))
    assert acked[0]["timestamp"] == stamp

    got = java_tool.consume(kafka.bootstrap, topic, from_offset=0, count=20)
    assert [g["offset"] for g in got] == list(range(20))
    assert [g["key"] for g in got] == [r["key"] for r in records]
    assert [g["value"] for g in got] == [r["value"] for r in records]
    assert [g["headers"] for g in got] == [r["headers"] for r in records]
    assert got[0]["timestamp"] == stamp
    assert {g["timestamp_type"] for g in got} == {"CreateTime"}

    # Explicit offsets, and interop with librdkafka decoding the Java client's batches.
    tail = java_tool.consume(kafka.bootstrap, topic, from_offset=15, count=5)
    assert [g["offset"] for g in tail] == [15, 16, 17, 18, 19]
    assert [m.value() for m in _consume(kafka.bootstrap, topic, 20)] == [r["value"] for r in records]


@pytest.mark.kafka
@pytest.mark.java
def test_java_consume_reports_shortfall(kafka: KafkaPeer, java_tool: JavaClientTool) -> None:
    topic = _topic("short")
    java_tool.produce(kafka.bootstrap, topic, _records(2))
    proc = java_tool.run(
        "consume", "--bootstrap", kafka.bootstrap, "--topic", topic,
        "--count", "5", "--timeout-ms", "2000", check=False,
    )  # fmt: skip
    assert proc.returncode == 3
    assert len(proc.stdout.splitlines()) == 2


@pytest.mark.kafka
def test_kafka_three_node_cluster() -> None:
    require_kafka()
    with KafkaCluster(nodes=3) as cluster:
        bootstraps = cluster.bootstrap.split(",")
        assert len(bootstraps) == 3 and len(set(bootstraps)) == 3
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        md = admin.list_topics(timeout=10)
        assert sorted(md.brokers) == [1, 2, 3]
        assert {f"{b.host}:{b.port}" for b in md.brokers.values()} == set(bootstraps)

        topic = _topic("replicated")
        _create_topic(cluster.bootstrap, topic, replication=3)
        # Partition leadership settles asynchronously after creation.
        deadline = time.monotonic() + 30
        while True:
            part = admin.list_topics(topic, timeout=10).topics[topic].partitions.get(0)
            if part is not None and part.leader >= 0 and len(part.isrs) == 3:
                break
            assert time.monotonic() < deadline, f"replicas never in sync: {part}"
            time.sleep(0.2)
        assert sorted(part.replicas) == [1, 2, 3]
        _assert_round_trip(cluster.bootstrap, topic, n=10)
        del admin  # librdkafka would keep reconnecting (and logging) after shutdown
        procs = [n.proc for n in cluster.nodes]
    assert all(p is not None and p.poll() is not None for p in procs)


def test_ports_come_from_the_workers_block_and_skip_a_listening_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under LOGBROKER_PORT_BLOCK (each xdist worker has its own) ports are distinct, inside the block, and never
    one something already listens on; a malformed block is refused by name."""
    import socket

    from logbroker_devtools.testing import net

    # Five free ports between the workers' blocks (20000-31999) and the kernel's ephemeral range (32768+).
    lo = next(p for p in range(32000 + os.getpid() % 700, 32760) if all(net._bindable(net.LOOPBACK, p + i)
                                                                         for i in range(5)))  # fmt: skip
    taken = socket.socket()
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    taken.bind((net.LOOPBACK, lo))
    taken.listen()
    try:
        monkeypatch.setattr(net, "_cursor", None)
        monkeypatch.setenv(net.PORT_BLOCK_ENV, f"{lo}-{lo + 4}")
        ports = net.free_ports(4)
        assert sorted(ports) == list(range(lo + 1, lo + 5))  # all but the listening one
        with pytest.raises(OSError, match="no 5 free ports"):
            net.free_ports(5)
        monkeypatch.setenv(net.PORT_BLOCK_ENV, "20000")
        with pytest.raises(ValueError, match=net.PORT_BLOCK_ENV):
            net.free_port()
    finally:
        taken.close()
