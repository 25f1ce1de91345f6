"""`logbroker serve --config server.properties`: Kafka's own broker property names, read as Java reads the file.

Kafka 4's stock KRaft config/server.properties starts logbroker (its keys are written out below from the 4.x
distribution's file, comments included); the properties logbroker honours take effect in a real broker process
(listeners, log.dirs, num.partitions...); log.retention.* and log.roll.* follow Kafka's precedence, checked
against Apache Kafka 4.4 started with the same properties; keys with no meaning on one node are named in one
warning, unknown keys in one error (exit 2, no traceback)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

from logbroker.config import ConfigError, FsyncPolicy, load_settings
from logbroker.protocol.records import Compression, iter_headers
from logbroker_devtools.client.connection import Connection, fetch_request
from logbroker_devtools.testing.process import BrokerProcess, free_port
from support import create_topic, kafka_peer, unique

pytestmark = pytest.mark.timeout(300)

CLI = [sys.executable, "-m", "logbroker"]

# Kafka 4.x's config/server.properties (combined KRaft node), key for key as the distribution ships it.
STOCK = r"""# Licensed to the Apache Software Foundation (ASF) under one or more
# contributor license agreements.  (licence header abridged)

############################# Server Basics #############################

# The role of this server. Setting this puts us in KRaft mode
process.roles=broker,controller

# The node id associated with this instance's roles
node.id=1

# List of controller endpoints used connect to the controller cluster
controller.quorum.bootstrap.servers=localhost:9093

############################# Socket Server Settings #############################

#   FORMAT:
#     listeners = listener_name://host_name:port
#   EXAMPLE:
#     listeners = PLAINTEXT://your.host.name:9092
listeners=PLAINTEXT://:9092,CONTROLLER://:9093

# Name of listener used for communication between brokers.
inter.broker.listener.name=PLAINTEXT

# Listener name, hostname and port the broker or the controller will advertise to clients.
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093

# A comma-separated list of the names of the listeners used by the controller.
controller.listener.names=CONTROLLER

# Maps listener names to security protocols, the default is for them to be the same.
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL

num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600

############################# Log Basics #############################

log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1

############################# Internal Topic Settings  #############################
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1

############################# Log Flush Policy #############################
#log.flush.interval.messages=10000
#log.flush.interval.ms=1000

############################# Log Retention Policy #############################
log.retention.hours=168
#log.retention.bytes=1073741824
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""

STOCK_IGNORED = [
    "process.roles", "controller.quorum.bootstrap.servers", "inter.broker.listener.name", "num.network.threads",
    "num.io.threads", "socket.send.buffer.bytes", "socket.receive.buffer.bytes", "num.recovery.threads.per.data.dir",
    "offsets.topic.replication.factor", "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr", "transaction.state.log.replication.factor",
    "controller.listener.names", "listeners CONTROLLER://:9093 (controller listener)",
    "advertised.listeners CONTROLLER://localhost:9093 (controller listener)",
]  # fmt: skip


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def props_file(tmp_path: Path, text: str, name: str = "server.properties") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="latin-1")
    return path


def load(tmp_path: Path, text: str) -> tuple[Any, list[str]]:
    notes: list[str] = []
    return load_settings(props_file(tmp_path, text), notes=notes), notes


# ------------------------------------------------------------------------------------------ stock file


def test_stock_file_reads_as_kafka_means_it(tmp_path: Path) -> None:
    s, notes = load(tmp_path, STOCK)
    assert s.data_dir == Path("/tmp/kraft-combined-logs")
    assert (s.listen, s.advertised_listener, s.advertised) == ("0.0.0.0:9092", "localhost:9092", ("localhost", 9092))
    assert (s.node_id, s.num_partitions, s.retention_ms) == (1, 1, 168 * 3_600_000)
    assert (s.segment_bytes, s.retention_check_interval_ms, s.socket_request_max_bytes) == (1 << 30, 300_000, 100 << 20)
    assert s.fsync is FsyncPolicy.ALWAYS  # the commented-out flush settings change nothing
    [note] = notes
    assert s.transaction_state_log_min_isr == 1  # given to __transaction_state when it is made
    prefix = "ignoring 15 Kafka properties that have no meaning on one logbroker node: "
    assert prefix in note and note.split(prefix)[1].split(", ") == STOCK_IGNORED


def test_stock_file_starts_a_broker(tmp_path: Path) -> None:
    """The stock file verbatim; only the port (listened on and advertised) and the data dir are moved off the
    machine-wide defaults (9092, /tmp/kraft-combined-logs) by flags, which rank above the file."""
    config = props_file(tmp_path, STOCK)
    proc = BrokerProcess(tmp_path / "data", extra_args=["--config", str(config)])
    proc.extra_args += ["--advertised-listener", proc.bootstrap]
    with proc:
        topic = unique("stock")
        producer = Producer({"bootstrap.servers": proc.bootstrap})
        producer.produce(topic, b"hello")
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": unique("g"),
                             "auto.offset.reset": "earliest"})  # fmt: skip
        consumer.subscribe([topic])
        deadline, got = time.monotonic() + 30, None
        while got is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            got = msg.value() if msg is not None and msg.error() is None else None
        consumer.close()
        assert got == b"hello"
        log = proc.log_path.read_text()
        assert proc.stop() == 0
    warnings = [line for line in log.splitlines() if "no meaning on one logbroker node" in line]
    assert len(warnings) == 1 and "WARNING" in warnings[0] and "num.io.threads" in warnings[0], log
    assert "Traceback" not in log


def test_properties_take_effect_in_a_running_broker(tmp_path: Path) -> None:
    """listeners, advertised.listeners and log.dirs from the file alone (no flags): the broker listens and
    stores where the file says, and auto-creates topics with its num.partitions."""
    port = free_port()
    data = tmp_path / "kafka logs"  # a blank in the path, escaped as Java reads it
    config = props_file(tmp_path, f"""
listeners = PLAINTEXT://127.0.0.1:{port}
advertised.listeners: PLAINTEXT://127.0.0.1:{port}
log.dirs {str(data).replace(" ", chr(92) + " ")}
num.partitions=3
auto.create.topics.enable=true
compression.type=gzip
compression.gzip.level=1
""")  # fmt: skip
    proc = subprocess.Popen([*CLI, "serve", "--config", str(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        bootstrap = f"127.0.0.1:{port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = unique("auto")
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce(topic, b"x")
        assert producer.flush(30) == 0
        assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3
        assert (data / f"{topic}-0").is_dir() and (data / f"{topic}-2").is_dir()
        # The broker's compression.type is every topic's default: batches are stored in gzip.
        res = ConfigResource(ConfigResource.Type.TOPIC, topic)
        entry = admin.describe_configs([res])[res].result(30)["compression.type"]
        assert (entry.value, entry.source) == ("gzip", ConfigSource.STATIC_BROKER_CONFIG.value)
        with Connection("127.0.0.1", port) as c:
            stored = [c.do(fetch_request(topic, i, 0, 100)).responses[0].partitions[0].records for i in range(3)]
        assert [h.compression for data in stored for h in iter_headers(data or b"")] == [Compression.GZIP]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "no meaning" not in err  # nothing ignored: no warning


# ------------------------------------------------------------------------------------------ refusals


def test_unknown_keys_are_named_in_one_error(tmp_path: Path) -> None:
    config = props_file(tmp_path, STOCK + "log.retention.hourz=1\nnum.partition=3\nlogbroker.no.such.setting=1\n")
    r = run("serve", "--config", str(config), "--data-dir", str(tmp_path / "d"), "--listen", f"127.0.0.1:{free_port()}")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    [line] = [ln for ln in r.stderr.splitlines() if "unknown properties" in ln]
    assert line.endswith("log.retention.hourz, logbroker.no.such.setting, num.partition")
    assert not (tmp_path / "d").exists()  # refused before anything was created


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("log.dirs=/a,/b\n", "log.dirs: logbroker keeps its data in exactly one directory, got 2: /a, /b"),
        ("listeners=SSL://:9093\n", "listener SSL uses SSL but no ssl_keystore_location is set"),
        ("listeners=PLAINTEXT://:9092,INTERNAL://:9092\nlistener.security.protocol.map=PLAINTEXT:PLAINTEXT,"
         "INTERNAL:PLAINTEXT\n", "listeners: two listeners on one port"),
        ("listeners=SASL_PLAINTEXT://:9092\nsasl.enabled.mechanisms=GSSAPI\n",
         "sasl_enabled_mechanisms: GSSAPI is not supported"),
        ("listeners=SSL://:9093\nssl.keystore.location=/k.jks\nssl.keystore.type=JKS\n",
         "ssl_keystore_type: only PEM is supported"),
        ("listeners=CLIENTS://:9092\n", "listener CLIENTS has no security protocol in listener.security.protocol.map"),
        ("listeners=PLAINTEXT://:9092\nadvertised.listeners=OTHER://h:1\nlistener.security.protocol.map="
         "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT\n", "advertised.listeners names listener OTHER"),
        ("node.id=1\nbroker.id=2\n", "broker.id (2) and node.id (1) must be equal"),
        ("authorizer.class.name=kafka.security.authorizer.AclAuthorizer\n",
         "authorizer_class_name: only org.apache.kafka.metadata.authorizer.StandardAuthorizer (ACLs) is available"),
        ("super.users=admin\n", "super_users: expected principalType:principalName, got 'admin'"),
        ("compression.type=brotli\n", "compression.type (compression_type): Input should be 'producer'"),
        ("num.partitions=three\n", "invalid value 'three' for num.partitions: Not a number of type INT"),
        ("num.partitions=3000000000\n", "invalid value '3000000000' for num.partitions: Not a number of type INT"),
        ("auto.create.topics.enable=yes\n", "Expected value to be either true or false"),
        ("log.retention.ms=0\n", "log.retention.ms must be unlimited (-1) or, greater than or equal to 1"),
        ("log.roll.hours=0\n", "invalid value '0' for log.roll.hours: Value must be at least 1"),
        ("num.partitions=0\n", "num.partitions (num_partitions): Input should be greater than or equal to 1"),
        ("listeners=PLAINTEXT://:9092\nadvertised.listeners=PLAINTEXT://0.0.0.0:9092\n",
         "advertised.listeners (advertised_listener)"),
        ("num.partitions=2\nlogbroker.num.partitions=3\n", "both set num_partitions"),
    ],
)  # fmt: skip
def test_values_logbroker_cannot_take_are_refused_naming_the_key(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load(tmp_path, text)
    assert expected in str(exc.value)


def test_ignored_keys_warn_once_and_change_nothing(tmp_path: Path) -> None:
    text = "num.io.threads=64\nssl.cipher.suites=x\nlistener.name.internal.ssl.key.password=p\n" \
           "zookeeper.connect=zk:2181\nlog.message.timestamp.type=CreateTime\nmin.insync.replicas=2\n"  # fmt: skip
    s, notes = load(tmp_path, text)
    assert s == load_settings(None)  # as if the file were empty
    [note] = notes
    assert note.endswith("no meaning on one logbroker node: num.io.threads, ssl.cipher.suites, zookeeper.connect, "
                         "min.insync.replicas, listener.name.internal.ssl.key.password")  # fmt: skip


# ------------------------------------------------------------------------------------------ syntax and names


def test_java_properties_syntax(tmp_path: Path) -> None:
    text = (
        "# comment\n! also a comment\n"
        "num.partitions : 4\n"
        "message.max.bytes   2000000\n"
        "log.cleanup.policy=compact,\\\n    delete\n"  # a continuation line
        "max.connections.per.ip.overrides=h1:5\\u002c h2:7\n"  # a \u escape (a comma)
        "node.id=  7  \n"  # Kafka trims values
        "log.dirs=/data/caf\xe9\n"  # ISO-8859-1, as java.util.Properties reads a stream
    )
    s, notes = load(tmp_path, text)
    assert (s.num_partitions, s.message_max_bytes, s.node_id) == (4, 2_000_000, 7)
    assert s.log_cleanup_policy == "compact,delete"
    assert s.max_connections_per_ip_overrides == "h1:5, h2:7"
    assert s.data_dir == Path("/data/caf\xe9")
    assert notes == []


def test_logbroker_settings_without_kafka_names(tmp_path: Path) -> None:
    s, _ = load(tmp_path, "logbroker.fsync=interval\nlogbroker.fsync.interval.ms=250\nlogbroker.log-level=debug\n"
                          "broker.id=3\nlog.dir=/var/lib/kafka\n")  # fmt: skip
    assert (s.fsync, s.fsync_interval_ms, s.log_level, s.node_id) == (FsyncPolicy.INTERVAL, 250, "DEBUG", 3)
    assert s.data_dir == Path("/var/lib/kafka")
    s, _ = load(tmp_path, "log.dir=/ignored\nlog.dirs=/wins\nbroker.id=-1\n")
    assert (s.data_dir, s.node_id) == (Path("/wins"), 1)  # log.dirs over log.dir; broker.id -1 is "not set"


def test_environment_and_flags_rank_above_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = props_file(tmp_path, "num.partitions=3\nmessage.max.bytes=2000000\n")
    monkeypatch.setenv("LOGBROKER_NUM_PARTITIONS", "5")
    s = load_settings(config, message_max_bytes=3_000_000)
    assert (s.num_partitions, s.message_max_bytes) == (5, 3_000_000)


# ------------------------------------------------------------------------------------------ precedence, vs Kafka


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({"log.retention.hours": "2", "log.roll.hours": "3"}, {"retention.ms": "7200000", "segment.ms": "10800000"}),
        ({"log.retention.minutes": "5", "log.retention.hours": "1", "log.roll.ms": "60000", "log.roll.hours": "5"},
         {"retention.ms": "300000", "segment.ms": "60000"}),
        ({"log.retention.ms": "-5", "log.retention.minutes": "5", "log.retention.hours": "2"},
         {"retention.ms": "-1", "segment.ms": "604800000"}),
    ],
)  # fmt: skip
def test_retention_and_roll_precedence_as_kafka(
    tmp_path: Path, props: dict[str, str], expected: dict[str, str]
) -> None:
    """The same properties on Apache Kafka 4.4 and on logbroker: a new topic's effective retention.ms and
    segment.ms (DescribeConfigs) agree, and are what Kafka's precedence gives."""

    def effective(bootstrap: str) -> dict[str, str]:
        topic = create_topic(bootstrap, unique("prec"))
        admin = AdminClient({"bootstrap.servers": bootstrap})
        [fut] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
        configs = fut.result(30)
        return {k: configs[k].value for k in expected}

    with kafka_peer(**props) as kafka:
        assert effective(kafka) == expected
    config = props_file(tmp_path, "".join(f"{k}={v}\n" for k, v in props.items()))
    with BrokerProcess(tmp_path / "data", extra_args=["--config", str(config)]) as proc:
        assert effective(proc.bootstrap) == expected


def test_help_names_the_format() -> None:
    r = run("serve", "--help")
    assert r.returncode == 0 and "server.properties" in r.stdout
