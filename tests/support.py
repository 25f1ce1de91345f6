"""Helpers shared by test modules (fixtures themselves live in conftest.py)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import itertools
import os
import socket
import ssl
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest

from logbroker.protocol import ApiKey, ApiSpec, api
from logbroker.protocol.messages import decode_response, encode_request

if TYPE_CHECKING:
    from pathlib import Path

    from logbroker_devtools.testing.peers import JavaClientTool
    from logbroker_devtools.testing.process import BrokerProcess

# Which broker the target-switchable suites run against: logbroker (default) or Apache Kafka.
TEST_TARGET = os.environ.get("LOGBROKER_TEST_TARGET", "logbroker").strip().lower() or "logbroker"
TEST_TARGETS = ("logbroker", "kafka")


def missing_tool(reason: str) -> None:
    """Skip for a genuinely missing tool; fail under CI, whose runner installs every tool."""
    if os.environ.get("CI", "").lower() == "true" or os.environ.get("LOGBROKER_REQUIRE_PEERS"):
        pytest.fail(f"{reason} (CI must provide it)")
    pytest.skip(reason)


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def both_targets() -> tuple[str, ...]:
    """Suites that run on both brokers: both, unless LOGBROKER_TEST_TARGET names one."""
    chosen = os.environ.get("LOGBROKER_TEST_TARGET", "").strip().lower()
    if not chosen:
        return TEST_TARGETS
    if chosen not in TEST_TARGETS:
        raise pytest.UsageError(f"LOGBROKER_TEST_TARGET must be one of {TEST_TARGETS}, not {chosen!r}")
    return (chosen,)


# The settings of the one Apache Kafka a test process shares (`shared_kafka`): no initial-rebalance delay, and
# the retention checker and log cleaner on short intervals, so the modules that wait on them need no Kafka of
# their own. A module asking for other settings starts its own (seconds of JVM start on two cores).
SHARED_KAFKA_PROPERTIES: dict[str, Any] = {
    "group.initial.rebalance.delay.ms": 0,
    "group.streams.initial.rebalance.delay.ms": 0,
    "log.retention.check.interval.ms": 200,
    "log.cleaner.backoff.ms": 200,
}
_shared_kafka: Any = None


def _require_kafka() -> None:
    from logbroker_devtools.testing import peers

    if not peers.java_available():
        missing_tool("java not found (Apache Kafka needs a JVM)")
    if not peers.jars_available("kafka"):
        missing_tool(f"no Kafka jars in {peers.default_jar_dir('kafka')} (run .ci/fetch-jars)")


def shared_kafka() -> Any:
    """The Apache Kafka of this test process, started on first use and stopped when the session ends
    (conftest): Kafka's answers do not depend on which module asks, and tests isolate themselves with unique
    topic and group names. A KafkaPeer; a dead one is replaced."""
    global _shared_kafka
    from logbroker_devtools.testing import peers

    _require_kafka()
    if _shared_kafka is not None and not _shared_kafka.running:
        _shared_kafka.stop()
        _shared_kafka = None
    if _shared_kafka is None:
        _shared_kafka = peers.KafkaPeer(server_properties=SHARED_KAFKA_PROPERTIES).start()
    return _shared_kafka


def stop_shared_kafka() -> None:
    global _shared_kafka
    if _shared_kafka is not None:
        _shared_kafka.stop()
        _shared_kafka = None


@contextlib.contextmanager
def kafka_peer(*, own: bool = False, **server_properties: Any) -> Iterator[str]:
    """Apache Kafka 4 (KRaft) on loopback, first assignment without the 3 s initial-rebalance delay: the
    shared one when the settings asked for are among its own, else (or when `own`: a caller that may leave
    it unusable, as fuzzing may) one of the caller's for the block."""
    from logbroker_devtools.testing import peers

    if not own and all(str(SHARED_KAFKA_PROPERTIES.get(k)) == str(v) for k, v in server_properties.items()):
        yield shared_kafka().bootstrap
        return
    _require_kafka()
    with peers.KafkaPeer(server_properties={"group.initial.rebalance.delay.ms": 0, **server_properties}) as peer:
        yield peer.bootstrap


def java_client_tool() -> JavaClientTool:
    """The official Java client (tests/java/ClientTool.java, compiled once), or skip/fail per missing_tool."""
    from logbroker import jars

    if not jars.java_available():
        missing_tool("java not found")
    if not jars.javac_available():
        missing_tool("javac not found (a JDK is needed to build tests/java/ClientTool.java)")
    if not jars.jars_available("clients"):
        missing_tool(f"no Kafka client jars in {jars.default_jar_dir('clients')} (run .ci/fetch-jars)")
    return _compiled_java_client_tool()


def kafka_tool(tool: str, bootstrap: str | None, *args: str, timeout: float = 120.0) -> Any:
    """Run one of Kafka's CLI tools (`kafka-topics`, `kafka-log-dirs`, `kafka-configs`, ...; see
    logbroker_devtools.testing.kafka_tools.TOOLS) with --bootstrap-server: a ToolResult (returncode, stdout,
    stderr, output), or skip/fail per missing_tool when java or the tools jars are absent."""
    from logbroker_devtools.testing import kafka_tools

    if (why := kafka_tools.tools_available()) is not None:
        missing_tool(why)
    return kafka_tools.run_tool(tool, bootstrap, *args, timeout=timeout)


@functools.cache
def _compiled_java_client_tool() -> JavaClientTool:
    from logbroker_devtools.testing.peers import JavaClientTool

    tool = JavaClientTool()
    tool.compile()
    return tool


def target_bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    """Body of a module fixture parametrized with `both_targets()`: the shared logbroker process, or an
    Apache Kafka started once for the module (`yield from target_bootstrap(request)`)."""
    if request.param == "logbroker":
        yield request.getfixturevalue("broker").bootstrap
        return
    with kafka_peer() as kafka:
        yield kafka


def require_spark(*modules: str) -> None:
    """pyspark (and any other named module), a JVM and the connector jars, or skip/fail per missing_tool."""
    from logbroker import jars

    for name in ("pyspark", *modules):
        try:
            importlib.import_module(name)
        except ImportError:
            missing_tool(f"{name} is not installed (pip install -e '.[demo]')")
    if not jars.java_available():
        missing_tool("java not found (Spark needs a JVM)")
    if not jars.jars_available("spark"):
        missing_tool(f"no Spark connector jars in {jars.default_jar_dir('spark')} (run .ci/fetch-jars spark)")


@contextlib.contextmanager
def spark_session(app_name: str) -> Iterator[Any]:
    """One local[2] session with the connector (a JVM start costs seconds of the two shared cores)."""
    require_spark()
    from logbroker.spark import session

    s = session(master="local[2]", app_name=app_name)
    s.sparkContext.setLogLevel("ERROR")
    try:
        yield s
    finally:
        s.stop()


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None,
                 timeout: float = 30.0) -> str:  # fmt: skip
    """Create a topic and wait until every partition serves (creation is asynchronous, and Kafka's metadata
    names a leader a moment before the partition answers: NOT_LEADER_OR_FOLLOWER in between)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=10).topics.get(name)
        if md is not None and md.error is None and len(md.partitions) == partitions:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"topic {name} did not appear with {partitions} partitions")
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("probe")})
    try:
        for p in range(partitions):
            while True:
                try:
                    probe.get_watermark_offsets(TopicPartition(name, p), timeout=10)
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
    finally:
        probe.close()
    return name


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> int:
    """The sum of the topic's high watermarks: how far producing has got, transactions' open records included."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("hw")})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions))
    finally:
        c.close()


def read_topic(bootstrap: str, topic: str, partitions: int | None = None, timeout: float = 60.0) -> list[Any]:
    """Every message of the topic (confluent-kafka Messages), earliest offset to the high watermark of
    each partition, read with assign() and no commits; ordered by (partition, offset)."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    if partitions is None:
        partitions = len(AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
                         .topics[topic].partitions)  # fmt: skip
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("read-topic"),
                         "enable.auto.commit": False, "enable.partition.eof": True})  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
        pending, out = set(range(partitions)), []
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == -191, msg.error()  # _PARTITION_EOF
                pending.discard(msg.partition())
                continue
            out.append(msg)
        assert not pending, f"no EOF from partitions {sorted(pending)} of {topic}"
        return sorted(out, key=lambda m: (m.partition(), m.offset()))
    finally:
        consumer.close()


def data_end(segment_file: Path) -> int:
    """Where a segment file's stored batches end, from their length fields: an active segment's file may
    run on past them with zeros (space reserved ahead of small appends, setting log_preallocate_bytes)."""
    raw = segment_file.read_bytes()
    pos = 0
    while pos + 12 <= len(raw):
        (length,) = struct.unpack_from(">i", raw, pos + 8)
        if length <= 0:
            break
        pos += 12 + length
    return pos


def log_size(broker: BrokerProcess) -> int:
    """Where a broker's log ends now: what a test's own lines start after."""
    try:
        return broker.log_path.stat().st_size
    except FileNotFoundError:
        return 0


def log_since(broker: BrokerProcess, mark: int) -> str:
    with open(broker.log_path, "rb") as f:
        f.seek(mark)
        return f.read().decode(errors="replace")


def eventually(check: Callable[[], Any], timeout: float = 30.0, interval: float = 0.2) -> Any:
    """Poll until `check` stops raising AssertionError (Kafka applies some acknowledged changes, such as
    configs and a transaction's markers, after it answers); its result, or its last failure."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(interval)


def assert_equal(got: Any, want: Any) -> bool:
    """An assertion usable inside a lambda (for `eventually`)."""
    assert got == want, got
    return True


# Principals for authorization tests: PLAINTEXT clients are User:ANONYMOUS; SASL PLAIN users log in on the
# peer's SASL_PLAINTEXT listener (Kafka) as these.
AUTHZ_USERS = {"alice": "alice-secret", "bob": "bob-secret"}


@contextlib.contextmanager
def authz_kafka_peer(
    super_users: tuple[str, ...] = (), users: dict[str, str] | None = None, **server_properties: Any
) -> Iterator[Any]:
    """Apache Kafka 4 with its StandardAuthorizer: PLAINTEXT clients are User:ANONYMOUS and not super;
    `super_users` ("User:x") are; a SASL_PLAINTEXT listener (`peer.listener_bootstrap("SASL_PLAINTEXT")`)
    logs in the PLAIN `users` (default AUTHZ_USERS). Yields the KafkaPeer."""
    from logbroker_devtools.testing import peers

    _require_kafka()
    logins = " ".join(f'user_{u}="{p}"' for u, p in (AUTHZ_USERS if users is None else users).items())
    props = {
        "group.initial.rebalance.delay.ms": 0,
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {logins};",
        **server_properties,
    }  # fmt: skip
    peer = peers.KafkaPeer(
        authorizer=True,
        super_users=super_users,
        listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"},
        server_properties=props,
    )
    with peer:
        yield peer


STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


@contextlib.contextmanager
def authz_logbroker(
    data_dir: Any = None, super_users: tuple[str, ...] = (), users: dict[str, str] | None = None
) -> Iterator[Any]:
    """A `logbroker serve` process with the StandardAuthorizer, as authz_kafka_peer's Kafka: PLAINTEXT
    (User:ANONYMOUS) on `.bootstrap`, PLAIN `users` (default AUTHZ_USERS) on `.sasl_bootstrap`. Yields the
    BrokerProcess (its data dir kept across stop/start, for restarts)."""
    from logbroker_devtools.testing.net import free_ports
    from logbroker_devtools.testing.process import BrokerProcess

    plain, sasl = free_ports(2)
    logins = " ".join(f'user_{u}="{p}"' for u, p in (AUTHZ_USERS if users is None else users).items())
    env = {
        "LOGBROKER_LISTENERS": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "LOGBROKER_SASL_ENABLED_MECHANISMS": "PLAIN",
        "LOGBROKER_SASL_PLAIN_JAAS_CONFIG": f"{PLAIN_LOGIN_MODULE} required {logins};",
        "LOGBROKER_AUTHORIZER_CLASS_NAME": STANDARD_AUTHORIZER,
        "LOGBROKER_SUPER_USERS": ";".join(super_users),
    }
    proc = BrokerProcess(data_dir, port=plain, env=env)
    proc.sasl_bootstrap = f"127.0.0.1:{sasl}"  # type: ignore[attr-defined]
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@contextlib.contextmanager
def authz_target(kind: str) -> Iterator[SimpleNamespace]:
    """A broker with the standard authorizer and User:alice as super user, "kafka" or "logbroker": plain is
    its PLAINTEXT listener (User:ANONYMOUS), sasl its SASL_PLAINTEXT one (alice and bob log in)."""
    if kind == "kafka":
        with authz_kafka_peer(super_users=("User:alice",)) as peer:
            yield SimpleNamespace(kind="kafka", plain=peer.bootstrap, sasl=peer.listener_bootstrap("SASL_PLAINTEXT"))
    else:
        with authz_logbroker(super_users=("User:alice",)) as proc:
            yield SimpleNamespace(kind="logbroker", plain=proc.bootstrap, sasl=proc.sasl_bootstrap, proc=proc)


def raw_connection(bootstrap: str, user: str | None = None, password: str | None = None) -> Any:
    """A blocking logbroker_devtools.client Connection for raw requests (codes the admin clients hide); with `user`,
    logged in with SASL PLAIN (SaslHandshake v1 + SaslAuthenticate, as a SASL_PLAINTEXT client does)."""
    from logbroker.protocol import ApiKey, api
    from logbroker_devtools.client.connection import Connection, parse_bootstrap

    host, port = parse_bootstrap(bootstrap)
    conn = Connection(host, port, client_id="authz-test", timeout=30)
    if user is not None:
        hs = conn.do(api(ApiKey.SaslHandshake).request(mechanism="PLAIN"), 1)
        assert hs.error_code == 0, hs
        token = f"\0{user}\0{password}".encode()
        auth = conn.do(api(ApiKey.SaslAuthenticate).request(auth_bytes=token), 2)
        assert auth.error_code == 0, auth
    return conn


# ------------------------------------------------------------------------------------------------ raw wire


def spec(key: int) -> ApiSpec:
    """Every version the codec knows (a raw test may send one the broker refuses)."""
    a = api(key)
    return ApiSpec(a, 0, a.codec_max_version)


class Wire:
    """One raw connection (optionally TLS): requests framed and parsed by logbroker.protocol, raw frames, and
    whether the broker closed it; for the codes clients hide, SASL by hand, and garbage."""

    def __init__(self, bootstrap: str, tls: ssl.SSLContext | None = None, timeout: float = 5.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock = tls.wrap_socket(sock, server_hostname=host) if tls is not None else sock
        self._ids = itertools.count(1)

    def send(self, key: int, version: int, request: Any = None, /, **fields: Any) -> int:
        """Send `request` (or one built from `fields`); its correlation id."""
        cid = next(self._ids)
        body = api(key).request(**fields) if request is None else request
        self.sock.sendall(encode_request(spec(key), version, cid, "wire-test", body))
        return cid

    def recv(self, key: int, version: int) -> Any:
        _cid, resp = decode_response(spec(key), version, self.recv_raw())
        return resp

    def call(self, key: int, version: int, request: Any = None, /, **fields: Any) -> Any:
        cid = self.send(key, version, request, **fields)
        got, resp = decode_response(spec(key), version, self.recv_raw())
        assert got == cid, f"answer {got} to request {cid}"
        return resp

    def send_raw(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def recv_raw(self) -> bytes:
        (size,) = struct.unpack(">i", self._exact(4))
        return self._exact(size)

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by the broker")
            buf += chunk
        return buf

    def closed(self, within: float = 3.0) -> bool:
        """True when the broker closes the connection within `within` seconds (having sent nothing more)."""
        self.sock.settimeout(within)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, ssl.SSLError):
            return True
        except TimeoutError:
            return False

    def handshake(self, mechanism: str, version: int = 1) -> Any:
        return self.call(ApiKey.SaslHandshake, version, mechanism=mechanism)

    def plain(self, user: str, password: str) -> Any:
        self.handshake("PLAIN")
        return self.call(ApiKey.SaslAuthenticate, 2, auth_bytes=f"\0{user}\0{password}".encode())

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def flip(path: Path, at: int, mask: int = 0x5A) -> None:
    """XOR one stored byte with `mask`: damage as a bad disk makes it, in place."""
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ mask]))
