"""Bad input against a real `logbroker serve` process.

Each case sends something a broker must survive, checks the answer Kafka gives (an error code, or a closed
connection for bytes that cannot be a request), checks the broker log names the problem, and then proves
the broker is still alive and serving: a second client, connected *before* the bad input, creates a topic,
produces and fetches back on its existing socket.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

from logbroker.broker.handlers import served_apis
from logbroker.protocol import ApiKey, api
from logbroker.protocol.errors import ErrorCode
from logbroker.protocol.messages import encode_request
from logbroker.protocol.records import CRC, NewRecord, build_batch, decode_records
from logbroker_devtools.client.connection import Connection, KafkaClient, fetch_request
from logbroker_devtools.testing.process import LOOPBACK, BrokerProcess
from support import log_since, log_size

pytestmark = pytest.mark.timeout(120)

_I32 = struct.Struct(">i")
APIS = served_apis()
_HDR = struct.Struct(">hhi")
MiB = 1 << 20
DEFAULT_SOCKET_REQUEST_MAX_BYTES = 100 * MiB


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


# ---------------------------------------------------------------------------------------------------------------
# The second client, and the broker's own evidence


class Witness:
    """A protocol client connected before the bad input; `assert_served` round-trips on that same socket.

    It also marks where the broker log stood when the test began: `log()` looks only at what came after,
    and `assert_served` refuses any ERROR or traceback the bad input provoked.
    """

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.mark = log_size(broker)
        self.client = KafkaClient(broker.bootstrap, client_id="witness", timeout=15)
        self.sock = self.client.conn.sock

    def assert_served(self) -> str:
        """Create a topic, produce and fetch back on the witness's original socket; returns the topic."""
        assert self.broker.running, f"broker died:\n{self.broker.log_tail()}"
        topic = _name("witness")
        value = uuid.uuid4().bytes
        self.client.create_topic(topic)  # works with auto-create off too
        offset = self.client.produce(topic, 0, [NewRecord(b"k", value, [("h", b"v")])])
        records, hwm = self.client.fetch(topic, 0, offset, max_wait_ms=0)
        assert (offset, hwm) == (0, 1)
        assert [(r.offset, r.key, r.value, r.headers) for r in records] == [(0, b"k", value, [("h", b"v")])]
        assert self.client.conn.sock is self.sock and self.sock.fileno() != -1, "the witness had to reconnect"
        assert self.broker.running, f"broker died:\n{self.broker.log_tail()}"
        assert_no_errors_logged(self.broker, self.mark)
        return topic

    def log(self, needle: str, timeout: float = 5.0) -> str:
        return wait_for_log(self.broker, needle, self.mark, timeout)

    def topics(self) -> set[str]:
        return {t.name for t in self.client.list_topics()}

    def close(self) -> None:
        self.client.close()


@pytest.fixture
def witness(broker: BrokerProcess) -> Iterator[Witness]:
    w = Witness(broker)
    yield w
    w.close()


def _start(proc: BrokerProcess, *args: str, env: dict[str, str] | None = None) -> Witness:
    proc.extra_args = list(args)
    proc.env = env
    proc.start()
    return Witness(proc)


def wait_for_log(broker: BrokerProcess, needle: str, since: int, timeout: float = 5.0) -> str:
    """The first broker log line after byte `since` that contains `needle`."""
    deadline = time.monotonic() + timeout
    while True:
        for line in log_since(broker, since).splitlines():
            if needle in line:
                return line
        if time.monotonic() > deadline:
            raise AssertionError(f"broker log does not mention {needle!r}; its tail:\n{broker.log_tail(30)}")
        time.sleep(0.05)


def assert_no_errors_logged(broker: BrokerProcess, since: int) -> None:
    bad = [ln for ln in log_since(broker, since).splitlines() if " ERROR " in ln or "Traceback" in ln]
    assert not bad, "bad input made the broker log errors:\n" + "\n".join(bad)


# ---------------------------------------------------------------------------------------------------------------
# Raw sockets


def raw(broker: BrokerProcess) -> socket.socket:
    s = socket.create_connection((LOOPBACK, broker.port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def peer(s: socket.socket) -> str:
    """How the broker log names this client."""
    return f"{LOOPBACK}:{s.getsockname()[1]}"


def frame(
    api_key: int, version: int, cid: int, client_id: str = "probe", body: bytes = b"", flex: bool = False
) -> bytes:
    cid_raw = client_id.encode()
    header = _HDR.pack(api_key, version, cid) + struct.pack(">h", len(cid_raw)) + cid_raw + (b"\x00" if flex else b"")
    return _I32.pack(len(header) + len(body)) + header + body


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def read_frame(s: socket.socket) -> bytes:
    return recv_exact(s, _I32.unpack(recv_exact(s, 4))[0])


def wait_closed(s: socket.socket, timeout: float = 5.0) -> float:
    """Seconds until the broker closed `s` without answering anything."""
    start = time.monotonic()
    s.settimeout(timeout)
    try:
        data = s.recv(65536)
    except ConnectionResetError:
        data = b""
    except TimeoutError:
        raise AssertionError(f"connection still open after {timeout}s") from None
    assert data == b"", f"expected the connection closed, got {data[:64]!r}"
    return time.monotonic() - start


def assert_open(s: socket.socket, wait: float = 0.3) -> None:
    s.settimeout(wait)
    with pytest.raises(TimeoutError):
        s.recv(1)


def proc_status(broker: BrokerProcess, field: str) -> int:
    assert broker.proc is not None
    for line in open(f"/proc/{broker.proc.pid}/status"):  # noqa: SIM115 - tiny procfs read
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def open_fds(broker: BrokerProcess) -> dict[str, str]:
    assert broker.proc is not None
    base = f"/proc/{broker.proc.pid}/fd"
    out = {}
    for fd in os.listdir(base):
        with contextlib.suppress(OSError):
            out[fd] = os.readlink(f"{base}/{fd}")
    return out


# ---------------------------------------------------------------------------------------------------------------
# Protocol requests


def produce(conn: Connection, topic: str, records: bytes, acks: int = -1, version: int | None = None) -> Any:
    P = ProduceRequest.TopicProduceData
    req = ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout_ms=10_000,
        topic_data=[P(name=topic, partition_data=[P.PartitionProduceData(index=0, records=records)])],
    )
    resp = conn.do(req, version)
    [t] = resp.responses
    [p] = t.partition_responses
    return p


def fetch(conn: Connection, topic: str, offset: int, max_wait_ms: int = 0) -> Any:
    req = fetch_request(topic, 0, offset, max_wait_ms, MiB)
    [t] = conn.do(req).responses
    [p] = t.partitions
    return p


def end_offset(conn: Connection, topic: str) -> int:
    R = ListOffsetsRequest
    P = R.ListOffsetsTopic.ListOffsetsPartition
    req = R(
        replica_id=-1,
        isolation_level=0,
        topics=[
            R.ListOffsetsTopic(name=topic, partitions=[P(partition_index=0, current_leader_epoch=-1, timestamp=-1)])
        ],
    )
    p = conn.do(req).topics[0].partitions[0]
    assert p.error_code == 0, ErrorCode(p.error_code).name
    return p.offset


def metadata(conn: Connection, topics: list[str] | None, auto_create: bool = True, version: int | None = None) -> Any:
    T = MetadataRequest.MetadataRequestTopic
    req = MetadataRequest(
        topics=None if topics is None else [T(name=t) for t in topics],
        allow_auto_topic_creation=auto_create,
        include_topic_authorized_operations=False,
    )
    return conn.do(req, version)


def records(*values: bytes, **kw: Any) -> bytes:
    return build_batch([NewRecord(b"key", v) for v in values], **kw)


def err(code: int) -> str:
    return ErrorCode(code).name


# ---------------------------------------------------------------------------------------------------------------
# Bytes that are not Kafka requests: the connection is closed, nothing else


GARBAGE = {
    "http": b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",  # "GET " as a size: 1.1 GB
    "tls-hello": bytes.fromhex("16030100c4010000c00303") + bytes(32),  # a TLS ClientHello: 369 MB
    "negative-size": b"\xff\xff\xff\xfe" + b"\x00" * 16,
    "unknown-key-junk": _I32.pack(32) + b"\xde\xad\xbe\xef" * 8,  # a plausible size, then noise
    "known-key-junk": _I32.pack(24) + _HDR.pack(3, 9, 1) + b"\x7f\xff" + b"\xab" * 14,  # Metadata v9, junk body
    "empty-frame": _I32.pack(0),
}
GARBAGE_LOG = {
    "http": "request of 1195725856 bytes exceeds socket.request.max.bytes=104857600",
    "tls-hello": "a TLS handshake on listener PLAINTEXT, which is PLAINTEXT (request of 369295616 bytes exceeds",
    "negative-size": "request of -2 bytes",
    "unknown-key-junk": "unknown API key -8531",
    "known-key-junk": "client id overruns the request",
    "empty-frame": "request of 0 bytes is shorter than its header",
}


@pytest.mark.parametrize("kind", list(GARBAGE))
def test_garbage_bytes_close_the_connection(broker: BrokerProcess, witness: Witness, kind: str) -> None:
    with raw(broker) as s:
        s.sendall(GARBAGE[kind])
        wait_closed(s)
        line = witness.log(f"closing connection from {peer(s)}")
    assert GARBAGE_LOG[kind] in line, line
    witness.assert_served()


def test_frame_over_socket_request_max_bytes_is_refused_unread(broker: BrokerProcess, witness: Witness) -> None:
    """Only the 4-byte size is sent: the broker must refuse from it alone, before any body arrives, and must
    not set aside memory for the claimed size."""
    rss_before = proc_status(broker, "VmRSS")
    hwm_before = proc_status(broker, "VmHWM")
    for claimed in (DEFAULT_SOCKET_REQUEST_MAX_BYTES + 1, 0x7FFFFFFF):
        with raw(broker) as s:
            s.sendall(_I32.pack(claimed))
            assert wait_closed(s, timeout=5) < 2
            line = witness.log(f"closing connection from {peer(s)}")
        assert f"request of {claimed} bytes exceeds socket.request.max.bytes=104857600" in line
    assert proc_status(broker, "VmRSS") - rss_before < 20_000, "the broker grew by more than 20 MB"
    assert proc_status(broker, "VmHWM") - hwm_before < 20_000, "the broker's peak memory grew by more than 20 MB"

    # Exactly at the limit is a legal size: the broker waits for the body rather than refusing.
    with raw(broker) as s:
        s.sendall(_I32.pack(DEFAULT_SOCKET_REQUEST_MAX_BYTES))
        assert_open(s)
    witness.assert_served()


def test_unknown_api_key_closes_the_connection(broker: BrokerProcess, witness: Witness) -> None:
    client_id = _name("unknown-key")
    with raw(broker) as s:
        s.sendall(frame(1000, 0, 7, client_id, b"\x00" * 8))
        wait_closed(s)
    line = witness.log(f"unknown API key 1000 (client {client_id!r})")
    assert "closing connection" in line
    witness.assert_served()


@pytest.mark.parametrize(
    ("key", "version", "name"),
    [
        (3, 14, "MetadataRequest"),
        (1, 19, "FetchRequest"),
        (0, 14, "ProduceRequest"),
        (78, 0, "ShareFetchRequest"),
    ],
    ids=["Metadata-v14", "Fetch-v19", "Produce-v14", "ShareFetch-v0-below-min"],
)
def test_unsupported_version_closes_the_connection(
    broker: BrokerProcess, witness: Witness, key: int, version: int, name: str
) -> None:
    """Kafka cannot parse a request in a version it does not serve, so it closes the connection
    (only ApiVersions is special, below)."""
    with raw(broker) as s:
        s.sendall(frame(key, version, 9, "probe", b"\x00" * 20, flex=True))
        wait_closed(s)
        line = witness.log(f"closing connection from {peer(s)}")
    spec = APIS[key]
    assert f"{name} v{version} is not supported (supported {spec.min_version}-{spec.max_version})" in line
    witness.assert_served()


def test_api_versions_too_new_gets_v0_unsupported_version_with_key_list(
    broker: BrokerProcess, witness: Witness
) -> None:
    """KIP-511: an ApiVersions newer than the broker knows is answered, not dropped: UNSUPPORTED_VERSION in
    a v0 body with a v0 header and the supported key list, so the client retries with a shared version on
    the same connection."""
    max_v = APIS[18].max_version
    with raw(broker) as s:
        body = b"\x06client\x041.0\x00"  # v3+ style compact strings + tags; a too-new body is never parsed
        s.sendall(frame(18, max_v + 1, 4242, "kip511", body, flex=True))
        resp = read_frame(s)
        cid, error, n = struct.unpack_from(">ihi", resp, 0)
        assert (cid, error) == (4242, ErrorCode.UNSUPPORTED_VERSION)
        assert len(resp) == 10 + 6 * n, "a v0 body: no throttle time, no tagged fields"
        keys = [struct.unpack_from(">hhh", resp, 10 + 6 * i) for i in range(n)]
        assert keys == sorted((s_.key, s_.min_version, s_.max_version) for s_ in APIS.values())

        # The client falls back to v0 on the same connection and gets the very same list, error free.
        s.sendall(frame(18, 0, 4243, "kip511"))
        resp0 = read_frame(s)
        assert struct.unpack_from(">ih", resp0, 0) == (4243, 0)
        assert resp0[6:] == resp[6:]
        # And a supported flexible version still works there too.
        s.sendall(encode_request(APIS[18], max_v, 4244, "kip511", api(ApiKey.ApiVersions).request(
            client_software_name="kip511", client_software_version="1.0")))  # fmt: skip
        assert struct.unpack_from(">ih", read_frame(s), 0) == (4244, 0)
    # Clients that negotiate this way (ours does) are served.
    with Connection(LOOPBACK, broker.port) as c:
        assert c.versions[18] == (APIS[18].min_version, max_v)
    witness.assert_served()


def test_produce_with_bad_crc_is_corrupt_message_and_not_stored(
    broker: BrokerProcess, witness: Witness, topic: str
) -> None:
    conn = witness.client.conn
    batch = bytearray(records(b"one", b"two", b"three"))
    batch[len(batch) - 3] ^= 0x5A  # a byte inside the last record's value, under the CRC
    p = produce(conn, topic, bytes(batch))
    assert err(p.error_code) == "CORRUPT_MESSAGE"
    assert p.base_offset == -1
    assert "CRC" in (p.error_message or "")
    assert end_offset(conn, topic) == 0
    f = fetch(conn, topic, 0)
    assert (f.error_code, f.high_watermark, bytes(f.records or b"")) == (0, 0, b"")
    witness.log(f"refused produce to {topic}-0: record batch CRC32C mismatch")

    # The CRC field itself damaged: the same answer.
    batch = bytearray(records(b"x"))
    batch[CRC] ^= 0xFF
    assert err(produce(conn, topic, bytes(batch)).error_code) == "CORRUPT_MESSAGE"
    # The next good batch lands at offset 0: nothing of the bad ones was kept.
    assert produce(conn, topic, records(b"good")).base_offset == 0
    assert [r.value for r in decode_records(fetch(conn, topic, 0).records)] == [b"good"]
    witness.assert_served()


def test_batch_over_message_max_bytes_is_refused_and_not_stored(fresh_broker: BrokerProcess, topic: str) -> None:
    w = _start(fresh_broker, "--message-max-bytes", "2000")
    conn = w.client.conn
    w.client.create_topic(topic)
    big = records(os.urandom(3000))  # incompressible and uncompressed: well over 2000 bytes
    assert len(big) > 2000
    p = produce(conn, topic, big)
    assert err(p.error_code) == "MESSAGE_TOO_LARGE"
    assert end_offset(conn, topic) == 0
    w.log(f"refused produce to {topic}-0: record batch of {len(big)} bytes exceeds message.max.bytes=2000")
    small = records(os.urandom(1000))
    assert len(small) <= 2000
    assert produce(conn, topic, small).base_offset == 0
    assert end_offset(conn, topic) == 1
    w.assert_served()
    w.close()


def test_unknown_topic_with_auto_create_off(fresh_broker: BrokerProcess, topic: str) -> None:
    w = _start(fresh_broker, "--no-auto-create-topics")
    conn = w.client.conn
    for version in (1, 4, APIS[3].max_version):  # before and after the request carried allow_auto_topic_creation
        md = metadata(conn, [topic], auto_create=True, version=version)
        [t] = md.topics
        assert (t.name, err(t.error_code), t.partitions) == (topic, "UNKNOWN_TOPIC_OR_PARTITION", [])
    p = produce(conn, topic, records(b"lost?"))
    assert err(p.error_code) == "UNKNOWN_TOPIC_OR_PARTITION"
    w.log(f"refused produce to {topic}-0: UNKNOWN_TOPIC_OR_PARTITION")
    assert err(fetch(conn, topic, 0).error_code) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert topic not in w.topics()
    assert not any(p.name.startswith(topic) for p in fresh_broker.data_dir.iterdir())
    w.assert_served()
    w.close()


def test_fetch_beyond_the_end_is_offset_out_of_range(broker: BrokerProcess, witness: Witness, topic: str) -> None:
    conn = witness.client.conn
    assert produce(conn, topic, records(b"a", b"b", b"c")).base_offset == 0
    at_end = fetch(conn, topic, 3)  # the log end itself is a valid position: empty, no error
    assert (at_end.error_code, at_end.high_watermark, bytes(at_end.records or b"")) == (0, 3, b"")
    for offset in (4, 1 << 40, -5):
        p = fetch(conn, topic, offset)
        assert err(p.error_code) == "OFFSET_OUT_OF_RANGE", offset
        assert (p.high_watermark, p.log_start_offset) == (3, 0)
        assert not p.records
    witness.log(f"fetch from {topic}-0: OFFSET_OUT_OF_RANGE: offset {1 << 40} is outside [0, 3]")
    witness.assert_served()


@pytest.mark.parametrize("acks", [2, -2, 5, 32767, -32768])
def test_invalid_acks(broker: BrokerProcess, witness: Witness, topic: str, acks: int) -> None:
    conn = witness.client.conn
    p = produce(conn, topic, records(b"x"), acks=acks)
    assert err(p.error_code) == "INVALID_REQUIRED_ACKS"
    witness.log(f"acks={acks} is not -1, 0 or 1")
    assert produce(conn, topic, records(b"y")).base_offset == 0  # nothing of the refused one was written
    witness.assert_served()


def test_idempotent_sequence_gap_and_retried_duplicate(broker: BrokerProcess, witness: Witness, topic: str) -> None:
    conn = witness.client.conn
    ip = conn.do(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000,
                                       producer_id=-1, producer_epoch=-1))  # fmt: skip
    assert ip.error_code == 0 and ip.producer_id >= 0
    pid, epoch = ip.producer_id, ip.producer_epoch

    def batch(seq: int, *values: bytes) -> bytes:
        return records(*values, producer_id=pid, producer_epoch=epoch, base_sequence=seq)

    first = batch(0, b"s0", b"s1", b"s2")
    assert produce(conn, topic, first).base_offset == 0
    gap = produce(conn, topic, batch(5, b"s5", b"s6"))  # 3 and 4 never arrived
    assert err(gap.error_code) == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    witness.log(f"refused produce to {topic}-0: OUT_OF_ORDER_SEQUENCE_NUMBER")

    dup = produce(conn, topic, first)  # a retry of an acknowledged batch: the original answer, no new write
    assert (err(dup.error_code), dup.base_offset) == ("NONE", 0)
    assert end_offset(conn, topic) == 3

    assert produce(conn, topic, batch(3, b"s3", b"s4")).base_offset == 3
    got = decode_records(fetch(conn, topic, 0).records)
    assert [(r.offset, r.value) for r in got] == [(i, f"s{i}".encode()) for i in range(5)]
    witness.assert_served()


# ---------------------------------------------------------------------------------------------------------------
# Truncated and stalled requests


def test_frame_shorter_than_the_request_header(broker: BrokerProcess, witness: Witness) -> None:
    with raw(broker) as s:
        s.sendall(_I32.pack(6) + _HDR.pack(3, 1, 5)[:6])
        wait_closed(s)
        line = witness.log(f"closing connection from {peer(s)}")
    assert "request of 6 bytes is shorter than its header" in line
    with raw(broker) as s:  # a client id longer than the frame
        s.sendall(_I32.pack(13) + _HDR.pack(3, 1, 5) + struct.pack(">h", 50) + b"abc")
        wait_closed(s)
        line = witness.log(f"closing connection from {peer(s)}")
    assert "client id overruns the request" in line
    witness.assert_served()


def test_truncated_metadata_does_not_create_a_shortened_topic(broker: BrokerProcess, witness: Witness) -> None:
    """A topic name whose length runs past the end of the frame. Decoded leniently, this would be a
    Metadata request (with auto-create on) for, and so the creation of, a topic named by the prefix."""
    name = _name("truncated-topic")
    full = encode_request(
        APIS[3], 1, 11, "trunc", MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)])
    )
    body = full[4:-8]  # the frame loses the last 8 bytes of the topic name; its size prefix agrees
    with raw(broker) as s:
        s.sendall(_I32.pack(len(body)) + body)
        wait_closed(s)
        line = witness.log(f"closing connection from {peer(s)}")
    assert "MetadataRequest v1 overruns its frame" in line
    assert not any(t.startswith(name[:-8]) for t in witness.topics())
    witness.assert_served()


@pytest.mark.parametrize("version", [8, 9], ids=["v8-records-last", "v9-flexible"])
def test_truncated_produce_writes_nothing(broker: BrokerProcess, witness: Witness, topic: str, version: int) -> None:
    P = ProduceRequest.TopicProduceData
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
        P(name=topic, partition_data=[P.PartitionProduceData(index=0, records=records(b"r" * 500))])])  # fmt: skip
    full = encode_request(APIS[0], version, 12, "trunc", req)
    body = full[4:-100]  # the records field claims 100 bytes more than the frame holds
    with raw(broker) as s:
        s.sendall(_I32.pack(len(body)) + body)
        wait_closed(s)
        line = witness.log(f"closing connection from {peer(s)}")
    assert f"ProduceRequest v{version} overruns its frame" in line, line
    assert topic not in witness.topics()  # not even auto-created: the request was never handled
    witness.assert_served()


def _null_topic_produce(topic: str) -> Any:
    P = ProduceRequest.TopicProduceData
    return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
        P(name=None, partition_data=[P.PartitionProduceData(index=0, records=records(b"x"))])])  # fmt: skip


NULLS = {
    "produce-v3-topic-name": (0, 3, _null_topic_produce, "topic_data[0].name"),
    "produce-v9-topic-name": (0, 9, _null_topic_produce, "topic_data[0].name"),
    "metadata-v1-topic-name": (3, 1, lambda t: MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=None)]), "topics[0].name"),
    "fetch-v12-topics": (1, 12, lambda t: FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=MiB,
                         isolation_level=0, session_id=0, session_epoch=-1, topics=None, forgotten_topics_data=[],
                         rack_id=""), "topics"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(NULLS))
def test_null_in_a_non_nullable_field_closes_the_connection(
    broker: BrokerProcess, witness: Witness, topic: str, case: str
) -> None:
    """Kafka refuses a null where its schema allows none (a parse error: the connection is closed). It must
    not reach a handler, which would fail on it with a traceback, or treat it as a name."""
    key, version, build, field = NULLS[case]
    spec = APIS[key]
    with raw(broker) as s:
        s.sendall(encode_request(spec, version, 21, "nulls", build(topic)))
        wait_closed(s)
        line = witness.log(f"closing connection from {peer(s)}")
    assert f"{spec.name} v{version}: non-nullable field {field} is null" in line, line
    witness.assert_served()  # which also checks that no ERROR or traceback was logged


def test_half_frame_then_eof(broker: BrokerProcess, witness: Witness) -> None:
    with raw(broker) as s:
        s.sendall(_I32.pack(200) + b"\x00\x03\x00\x01" + b"\x00" * 46)
        s.shutdown(socket.SHUT_WR)
        wait_closed(s)
        witness.log(f"connection from {peer(s)} closed with 54 bytes of an incomplete request")
    witness.assert_served()


def test_stalled_half_frame_is_dropped_after_request_timeout(fresh_broker: BrokerProcess) -> None:
    w = _start(fresh_broker, env={"LOGBROKER_REQUEST_TIMEOUT_MS": "500"})
    with raw(fresh_broker) as staller:
        staller.sendall(_I32.pack(100) + b"\x00\x03\x00\x01\x00\x00\x00\x01" + b"\x00" * 12)
        start = time.monotonic()
        w.assert_served()  # served while the staller holds its half request
        elapsed = (time.monotonic() - start) + wait_closed(staller, timeout=5)
        line = w.log(f"closing connection from {peer(staller)}")
    assert "request incomplete after 500 ms" in line
    assert 0.45 < elapsed < 3.5, elapsed
    w.assert_served()  # an idle (not half-sent) connection is not subject to the request timeout
    w.close()


def test_trickled_frame_is_dropped_after_request_timeout(fresh_broker: BrokerProcess) -> None:
    """The request timeout runs from the request's first byte: trickling bytes does not extend it."""
    w = _start(fresh_broker, env={"LOGBROKER_REQUEST_TIMEOUT_MS": "500"})
    with raw(fresh_broker) as s:
        data = _I32.pack(1000) + b"\x00\x03\x00\x01" + b"\x00" * 996
        start = time.monotonic()
        closed_after = None
        for i in range(len(data)):
            if time.monotonic() - start > 10:
                break
            try:
                s.sendall(data[i : i + 1])
            except (BrokenPipeError, ConnectionResetError):
                closed_after = time.monotonic() - start
                break
            readable, _, _ = select.select([s], [], [], 0.1)
            if readable:
                with contextlib.suppress(ConnectionResetError):
                    assert s.recv(1) == b""
                closed_after = time.monotonic() - start
                break
        assert closed_after is not None, "a trickling client kept its half request open for 10 s"
        line = w.log(f"closing connection from {peer(s)}")
    assert "request incomplete after 500 ms" in line
    assert closed_after < 3.5
    w.assert_served()
    w.close()


# ---------------------------------------------------------------------------------------------------------------
# Connection churn


def _churn(broker: BrokerProcess, topic: str, hwm: int, kind: int) -> socket.socket:
    s = raw(broker)
    if kind == 1:
        s.sendall(b"\x00\x00\x00\x10" + os.urandom(16))
    elif kind == 2:
        s.sendall(_I32.pack(500) + b"\x00\x03")
    elif kind == 3:  # RST instead of FIN
        s.sendall(_I32.pack(500) + b"\x00\x03")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    elif kind == 4:  # a valid request whose answer is never read, pipelined well past the read-pause limit
        s.sendall(frame(18, 0, 1) * 250)
    elif kind == 5:  # a long-poll fetch still pending when the client goes away
        F = FetchRequest.FetchTopic
        req = FetchRequest(replica_id=-1, max_wait_ms=3000, min_bytes=1, max_bytes=MiB, isolation_level=0,
                           session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[
                               F(topic=topic, partitions=[F.FetchPartition(partition=0, current_leader_epoch=-1,
                                 fetch_offset=hwm, log_start_offset=-1, partition_max_bytes=MiB)])])  # fmt: skip
        s.sendall(encode_request(APIS[1], 12, 1, "churn", req))
    return s


def test_many_connections_opened_and_dropped_do_not_leak(fresh_broker: BrokerProcess) -> None:
    w = _start(fresh_broker)
    topic = w.assert_served()  # its segment files are open now, so they count in the baseline
    baseline = open_fds(fresh_broker)
    rss = proc_status(fresh_broker, "VmRSS")

    for _round in range(4):
        socks = [_churn(fresh_broker, topic, 1, i % 7) for i in range(100)]  # kind 0 and 6: connect, close
        time.sleep(0.2)
        for s in socks:
            s.close()

    deadline = time.monotonic() + 15
    while True:
        now = open_fds(fresh_broker)
        if len(now) <= len(baseline) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    leaked = {fd: target for fd, target in now.items() if baseline.get(fd) != target}
    assert len(now) <= len(baseline), f"{len(now) - len(baseline)} descriptors leaked: {sorted(leaked.values())}"
    # 400 connections each held a receive buffer: one 256 KiB zero-filled buffer each was 100 MB here.
    assert proc_status(fresh_broker, "VmRSS") - rss < 10_000, "the broker grew by more than 10 MB"
    w.log("closing connection from")
    w.assert_served()
    w.close()


# ---------------------------------------------------------------------------------------------------------------
# Real clients across a storm of bad input


def test_real_clients_keep_working_through_bad_input(broker: BrokerProcess, topic: str) -> None:
    """A confluent-kafka producer and consumer, connected and working before the bad input, keep working
    after it on their existing connections."""
    mark = log_size(broker)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "enable.partition.eof": False})  # fmt: skip
    try:
        delivered: list[Any] = []

        def send(value: bytes) -> None:
            producer.produce(topic, value=value, partition=0, on_delivery=lambda e, m: delivered.append((e, m)))
            assert producer.flush(30) == 0
            e, _m = delivered[-1]
            assert e is None, e

        def receive(n: int) -> list[bytes]:
            got: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(got) < n and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error() is not None:
                    assert msg.error().code() == KafkaError.UNKNOWN_TOPIC_OR_PART, msg.error()
                    continue
                got.append(msg.value())
            return got

        send(b"before")
        consumer.assign([TopicPartition(topic, 0, 0)])
        assert receive(1) == [b"before"]

        for payload in GARBAGE.values():
            with raw(broker) as s:
                s.sendall(payload)
                wait_closed(s)
        for bad in (frame(1000, 0, 1), frame(3, 99, 1), _I32.pack(DEFAULT_SOCKET_REQUEST_MAX_BYTES + 1)):
            with raw(broker) as s:
                s.sendall(bad)
                wait_closed(s)

        send(b"after")
        assert receive(1) == [b"after"]
        assert broker.running
        assert_no_errors_logged(broker, mark)
    finally:
        consumer.close()
        producer.flush(5)
