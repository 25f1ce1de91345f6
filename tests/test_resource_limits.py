"""One client must not be able to exhaust the broker: memory, file descriptors, connections, log space.

Each case is the attack as the hardening issue reproduced it, asserted on logbroker and, where Kafka has
the same behaviour, on Apache Kafka 4.4 with the same assertions.
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.admin import CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

from logbroker.protocol.apis import ApiSpec, api
from logbroker.protocol.errors import ErrorCode
from logbroker.protocol.messages import decode_response, encode_request
from logbroker.protocol.records import NewRecord, build_batch
from logbroker_devtools.client.connection import Connection, fetch_request, parse_bootstrap
from logbroker_devtools.testing.process import LOOPBACK, BrokerProcess
from support import both_targets, kafka_peer, unique

pytestmark = pytest.mark.timeout(300)

MiB = 1 << 20
_I32 = struct.Struct(">i")


# ---------------------------------------------------------------------------------------------------------------
# Helpers


class Target:
    """A broker under test: its bootstrap and, for logbroker, its process (to read its memory)."""

    def __init__(self, name: str, bootstrap: str, proc: BrokerProcess | None) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self.host, self.port = parse_bootstrap(bootstrap)
        self.proc = proc

    def connect(self, client_id: str = "probe") -> Connection:
        return Connection(self.host, self.port, client_id)

    def rss(self) -> int:
        assert self.proc is not None and self.proc.proc is not None
        for line in open(f"/proc/{self.proc.proc.pid}/status"):  # noqa: SIM115 - tiny procfs read
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise KeyError("VmRSS")


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    if request.param == "logbroker":
        proc = request.getfixturevalue("broker")
        yield Target("logbroker", proc.bootstrap, proc)
        return
    # Kafka's listen backlog is 50 by default: 10,000 connects then crawl through SYN retransmits (175 s).
    with kafka_peer(**{"socket.listen.backlog.size": 4096}) as bootstrap:
        yield Target("kafka", bootstrap, None)


def create(conn: Connection, name: str, partitions: int = 1) -> None:
    T = CreateTopicsRequest.CreatableTopic
    req = CreateTopicsRequest(
        topics=[T(name=name, num_partitions=partitions, replication_factor=-1, assignments=[], configs=[])],
        timeout_ms=30_000,
        validate_only=False,
    )
    [t] = conn.do(req).topics
    assert t.error_code == 0, (t.error_code, t.error_message)


def produce(conn: Connection, topic: str, values: list[bytes]) -> int:
    P = ProduceRequest.TopicProduceData
    batch = build_batch([NewRecord(None, v) for v in values])
    req = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=10_000,
        topic_data=[P(name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])],
    )
    deadline = time.monotonic() + 60
    while True:  # Kafka elects a new topic's leader a moment after CreateTopics answers
        [t] = conn.do(req).responses
        [p] = t.partition_responses
        if p.error_code not in NOT_READY or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert p.error_code == 0, ErrorCode(p.error_code).name
    return p.base_offset


NOT_READY = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def fill(conn: Connection, topic: str, nbytes: int) -> None:
    """About `nbytes` of records in batches of 128 KiB (under every broker's message.max.bytes)."""
    chunk = [bytes(1024)] * 128
    for _ in range(max(nbytes // (128 * 1024), 1)):
        produce(conn, topic, chunk)


def assert_served(target: Target, topic: str) -> None:
    """A new client gets its answers: the broker is not locked up by whatever else is going on."""
    with target.connect("witness") as w:
        w.sock.settimeout(20)
        base = produce(w, topic, [b"witness"])
        [t] = w.do(fetch_request(topic, 0, base, 0, 64 * 1024)).responses
        [p] = t.partitions
        assert p.error_code == 0 and len(bytes(p.records)) > 0


class Hoarder:
    """A client that pipelines `count` Fetch requests of about 1 MiB each and does not read the answers
    (a small receive buffer, so the kernel holds little of them for it)."""

    def __init__(self, target: Target, topic: str, count: int, source: str = LOOPBACK) -> None:
        self.version = 12
        self.wire_spec = ApiSpec(api(1), 12, 12)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        s.bind((source, 0))
        s.connect((target.host, target.port))
        self.sock = s
        self.count = count
        frames = b"".join(
            encode_request(self.wire_spec, 12, cid, "hoarder", fetch_request(topic, 0, 0, 0, MiB))
            for cid in range(1, count + 1)
        )
        self.sender = threading.Thread(target=self._send, args=(frames,), daemon=True)
        self.sender.start()

    def _send(self, frames: bytes) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(frames)  # blocks once the broker stops reading: that is the point

    def read_all(self) -> list[int]:
        """Read every answer; returns the record bytes of each, checking they come in request order."""
        self.sock.settimeout(60)
        sizes = []
        f = self.sock.makefile("rb")
        for cid in range(1, self.count + 1):
            size = _I32.unpack(f.read(4))[0]
            got, resp = decode_response(self.wire_spec, self.version, f.read(size))
            assert got == cid, f"answer {got} where {cid} was due"
            [t] = resp.responses
            [p] = t.partitions
            assert p.error_code == 0, ErrorCode(p.error_code).name
            sizes.append(len(bytes(p.records)))
        f.close()
        return sizes

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


# ---------------------------------------------------------------------------------------------------------------
# Memory: answers a client does not read


def test_a_client_that_never_reads_its_answers_is_muted_not_buffered(target: Target) -> None:
    """Pipelined 1 MiB fetches never read: the broker stops reading that connection (Kafka mutes the
    channel) instead of queueing every answer in memory; other clients are served meanwhile; once the
    client reads, every answer arrives, in order."""
    topic = unique("hoard")
    with target.connect() as c:
        create(c, topic)
        fill(c, topic, MiB)
    count = 300
    before = target.rss() if target.proc else 0
    h = Hoarder(target, topic, count)
    try:
        time.sleep(3)
        if target.proc is not None:
            grown = target.rss() - before
            # Queued, the answers would take count x 1 MiB (300 MiB); muted, about one of them.
            assert grown < 64 * MiB, f"broker memory grew by {grown / MiB:.0f} MiB for unread answers"
        assert_served(target, topic)
        sizes = h.read_all()
        assert len(sizes) == count and min(sizes) >= MiB // 2
    finally:
        h.close()


def test_all_connections_holding_answers_pause_at_the_broker_wide_bound(tmp_path: Any) -> None:
    """Several non-reading clients, each under its own bound: together they hit max_inflight_bytes and
    stop being read; a client that reads its answers goes on being served. (Kafka has no broker-wide
    bound on answers: its channels take one request at a time. This is logbroker's own setting.) Answers
    are copied here, as on a TLS listener: sent from the file (sendfile), a connection holds one at a time."""
    env = {
        "LOGBROKER_MAX_INFLIGHT_BYTES": str(8 * MiB),
        "LOGBROKER_CONNECTION_MAX_UNSENT_BYTES": str(256 * MiB),
        "LOGBROKER_FETCH_ZERO_COPY_BYTES": "0",
    }
    proc = BrokerProcess(tmp_path / "data", env=env)
    proc.start()
    try:
        target = Target("logbroker", proc.bootstrap, proc)
        topic = unique("hoard")
        with target.connect() as c:
            create(c, topic)
            fill(c, topic, MiB)
        before = target.rss()
        hoarders = [Hoarder(target, topic, 60) for _ in range(4)]
        try:
            time.sleep(3)
            grown = target.rss() - before
            # Each alone may queue 60 MiB (under its 256 MiB bound): 240 MiB together without the bound.
            assert grown < 80 * MiB, f"broker memory grew by {grown / MiB:.0f} MiB"
            assert_served(target, topic)
            for h in hoarders:
                assert len(h.read_all()) == 60
        finally:
            for h in hoarders:
                h.close()
        assert "pausing connections that hold answers" in proc.log_tail(400)
    finally:
        assert proc.stop() == 0


# ---------------------------------------------------------------------------------------------------------------
# CreateTopics / CreatePartitions that ask for too much


def create_topics(conn: Connection, topics: list[tuple[str, int, dict[str, str]]], validate_only: bool) -> Any:
    T = CreateTopicsRequest.CreatableTopic
    C = T.CreatableTopicConfig
    req = CreateTopicsRequest(
        topics=[
            T(
                name=name,
                num_partitions=n,
                replication_factor=-1,
                assignments=[],
                configs=[C(name=k, value=v) for k, v in cfg.items()],
            )
            for name, n, cfg in topics
        ],
        timeout_ms=30_000,
        validate_only=validate_only,
    )
    return [(t.name, t.error_code, t.error_message) for t in conn.do(req).topics]


def create_partitions(conn: Connection, counts: dict[str, int]) -> Any:
    T = CreatePartitionsRequest.CreatePartitionsTopic
    req = CreatePartitionsRequest(
        topics=[T(name=n, count=c, assignments=None) for n, c in counts.items()], timeout_ms=30_000, validate_only=False
    )
    return [(t.name, t.error_code, t.error_message) for t in conn.do(req).results]


def existing(conn: Connection, names: list[str]) -> set[str]:
    T = MetadataRequest.MetadataRequestTopic
    req = MetadataRequest(
        topics=[T(name=n) for n in names], allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    return {t.name for t in conn.do(req).topics if t.error_code == 0}


POLICY = ErrorCode.POLICY_VIOLATION
TOO_MANY = "Excessively large number of partitions per request."
TOO_BIG = "Unable to perform excessively large batch operation."


def test_create_topics_asking_for_too_many_partitions_is_refused_whole(target: Target) -> None:
    a, b, c = unique("big"), unique("big"), unique("big")
    with target.connect() as conn:
        # More than 10,000 partitions in all: every topic refused, even an invalid name, nothing created.
        assert create_topics(conn, [(a, 100_000, {})], False) == [(a, POLICY, TOO_MANY)]
        got = create_topics(conn, [(a, 5001, {}), (b, 5000, {}), ("bad name!", 1, {})], False)
        assert got == [(a, POLICY, TOO_MANY), (b, POLICY, TOO_MANY), ("bad name!", POLICY, TOO_MANY)]
        # Within 10,000 partitions, but over 10,000 records (a topic, its partitions, its configs).
        assert create_topics(conn, [(a, 10_000, {})], True) == [(a, POLICY, TOO_BIG)]
        assert create_topics(conn, [(a, 5000, {}), (b, 4999, {})], True) == [(a, POLICY, TOO_BIG), (b, POLICY, TOO_BIG)]
        got = create_topics(conn, [(a, 9998, {"retention.ms": "1000", "segment.ms": "100000"})], True)
        assert got == [(a, POLICY, TOO_BIG)]
        # Exactly at the bound: fine.
        assert create_topics(conn, [(a, 9999, {})], True) == [(a, 0, None)]
        assert existing(conn, [a, b, c]) == set()
        # Growing a topic: at most 10,000 new partitions per request.
        create(conn, c)
        more = "Excessively large number of additional partitions per request."
        assert create_partitions(conn, {c: 100_000}) == [(c, POLICY, more)]
        assert create_partitions(conn, {c: 10_002}) == [(c, POLICY, more)]
        assert create_partitions(conn, {c: 3})[0][1] == 0
    if target.proc is not None:
        left = [p.name for p in target.proc.data_dir.iterdir() if p.name.startswith((a, b))]
        assert left == [], f"refused topics left directories: {left[:5]}"


# ---------------------------------------------------------------------------------------------------------------
# Connections


def _raise_own_fd_limit(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < need:
        pytest.skip(f"this machine allows {hard} open files; the test needs {need}")


def _connect_many(host: str, port: int, n: int, source: str = LOOPBACK) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((source, 0))
        s.settimeout(10)
        s.connect((host, port))
        socks.append(s)
    return socks


def _reset_all(socks: list[socket.socket]) -> None:
    """Close with a reset: a normal close leaves each of our ports in TIME_WAIT for a minute, and 10,000 of
    them twice over (both brokers, now minutes apart no more) run the machine out of ephemeral ports."""
    linger = struct.pack("ii", 1, 0)
    for s in socks:
        with contextlib.suppress(OSError):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        s.close()


def _closed_by_peer(socks: list[socket.socket], wait: float) -> int:
    """How many of `socks` the broker has closed (readable with nothing to read), after `wait` seconds."""
    p = select.poll()
    by_fd = {s.fileno(): s for s in socks}
    for fd in by_fd:
        p.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    closed = set()
    deadline = time.monotonic() + wait
    while True:
        for fd, _ev in p.poll(max(int((deadline - time.monotonic()) * 1000), 0)):
            if fd in closed:
                continue
            try:
                data = by_fd[fd].recv(1, socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data == b"":
                closed.add(fd)
                p.unregister(fd)
        if time.monotonic() >= deadline:
            return len(closed)


def test_ten_thousand_idle_connections_do_not_lock_other_clients_out(target: Target) -> None:
    n = 10_000
    _raise_own_fd_limit(n + 1000)
    socks = _connect_many(target.host, target.port, n)
    try:
        topic = unique("crowd")
        with target.connect() as c:
            create(c, topic)
        assert_served(target, topic)
        assert _closed_by_peer(socks, 1.0) == 0, "idle connections were closed"
    finally:
        _reset_all(socks)


@pytest.fixture(params=both_targets())
def limited(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Target]:
    """A broker allowing 20 connections from 127.0.0.2 and 5 from 127.0.0.3 (others: 1000)."""
    if request.param == "kafka":
        props = {"max.connections.per.ip": 1000, "max.connections.per.ip.overrides": "127.0.0.2:20,127.0.0.3:5"}
        with kafka_peer(**props) as bootstrap:
            yield Target("kafka", bootstrap, None)
        return
    env = {
        "LOGBROKER_MAX_CONNECTIONS_PER_IP": "1000",
        "LOGBROKER_MAX_CONNECTIONS_PER_IP_OVERRIDES": "127.0.0.2:20,127.0.0.3:5",
    }
    proc = BrokerProcess(tmp_path / "data", env=env)
    proc.start()
    yield Target("logbroker", proc.bootstrap, proc)
    proc.kill()


def test_max_connections_per_ip_and_overrides(limited: Target) -> None:
    t = limited
    first = _connect_many(t.host, t.port, 20, "127.0.0.2")
    few = _connect_many(t.host, t.port, 5, "127.0.0.3")
    try:
        over = _connect_many(t.host, t.port, 3, "127.0.0.2") + _connect_many(t.host, t.port, 3, "127.0.0.3")
        assert _closed_by_peer(over, 3.0) == 6, "connections over the per-address limit stayed open"
        assert _closed_by_peer(first + few, 0.5) == 0, "connections within the limit were closed"
        topic = unique("perip")
        with t.connect() as c:  # 127.0.0.1: its own limit
            create(c, topic)
        assert_served(t, topic)
        # A slot freed is a slot again.
        first.pop().close()
        deadline = time.monotonic() + 10
        while True:
            [again] = _connect_many(t.host, t.port, 1, "127.0.0.2")
            if _closed_by_peer([again], 0.5) == 0:
                first.append(again)
                break
            again.close()
            assert time.monotonic() < deadline, "a freed slot was never given again"
    finally:
        for s in first + few:
            s.close()


# ---------------------------------------------------------------------------------------------------------------
# Process limits and the log


def test_open_file_limit_is_raised_to_the_hard_limit(tmp_path: Any) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # The limit is lowered in this process for the child to inherit: keep room for what this test process
    # already holds open (a long session's clients), or opening the broker's log file here would fail.
    low = max(min(soft, 512), len(os.listdir("/proc/self/fd")) + 64)
    if hard <= low:
        pytest.skip("the hard open-file limit is already tiny")
    proc = BrokerProcess(tmp_path / "data")
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))  # inherited by the broker at start
    try:
        proc.start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        assert proc.proc is not None
        limits = open(f"/proc/{proc.proc.pid}/limits").read()  # noqa: SIM115 - tiny procfs read
        line = next(ln for ln in limits.splitlines() if ln.startswith("Max open files"))
        got_soft = int(line.split()[3])
        assert got_soft == (hard if hard != resource.RLIM_INFINITY else got_soft), line
        assert got_soft > low
    finally:
        assert proc.stop() == 0


def test_refused_connections_do_not_flood_the_log(tmp_path: Any) -> None:
    """A client reconnecting as fast as it can while over its limit: the broker logs a bounded number of
    lines about it, not one per attempt."""
    proc = BrokerProcess(tmp_path / "data", env={"LOGBROKER_MAX_CONNECTIONS_PER_IP": "1"})
    proc.start()
    try:
        host, port = parse_bootstrap(proc.bootstrap)
        deadline = time.monotonic() + 10
        while True:  # the start-up probe's connection may not be counted out yet
            try:
                keep = Connection(host, port)
                break
            except OSError:
                assert time.monotonic() < deadline, "the one allowed connection was refused"
                time.sleep(0.1)
        refused = 0
        for _ in range(1000):
            [s] = _connect_many(host, port, 1)
            s.settimeout(5)
            with contextlib.suppress(ConnectionResetError):
                assert s.recv(1) == b""
            refused += 1
            s.close()
        keep.close()
        lines = [ln for ln in proc.log_tail(5000).splitlines() if "refusing connection" in ln]
        assert refused == 1000
        assert 0 < len(lines) <= 100, f"{len(lines)} log lines for 1000 refused connections"
    finally:
        assert proc.stop() == 0


# ---------------------------------------------------------------------------------------------------------------
# File descriptors: partitions beyond what the process could hold open


@pytest.mark.kafka_side_in_full_tier
def test_ten_thousand_partitions_fit_in_the_descriptor_budget(target: Target) -> None:
    """9,999 partitions (30,000 segment files) on a process allowed 20,000 descriptors: created, written,
    read, deleted, while clients still connect. logbroker opens segment files through a bounded cache."""
    topic = unique("wide")
    partitions = 9999
    with target.connect() as c:
        got = create_topics(c, [(topic, partitions, {})], False)
        assert got == [(topic, 0, None)]
        P = ProduceRequest.TopicProduceData
        picked = [0, 1, 4999, 9998]
        req = ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout_ms=30_000,
            topic_data=[
                P(
                    name=topic,
                    partition_data=[
                        P.PartitionProduceData(index=i, records=build_batch([NewRecord(None, b"p%d" % i)]))
                        for i in picked
                    ],
                )
            ],
        )
        deadline = time.monotonic() + 120
        while True:  # Kafka elects 9,999 leaders a while after CreateTopics answers
            [t] = c.do(req).responses
            codes = sorted((p.index, p.error_code) for p in t.partition_responses)
            if all(code not in NOT_READY for _, code in codes) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert codes == [(i, 0) for i in picked]
        for i in picked:
            [ft] = c.do(fetch_request(topic, i, 0, 0, 64 * 1024)).responses
            [p] = ft.partitions
            assert p.error_code == 0 and b"p%d" % i in bytes(p.records)
        if target.proc is not None:
            assert target.proc.proc is not None
            fds = len(os.listdir(f"/proc/{target.proc.proc.pid}/fd"))
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            assert fds < soft // 4 + 500, f"{fds} descriptors open for {partitions} partitions"
        witness = unique("witness")
        create(c, witness)
        assert_served(target, witness)
        resp = c.do(DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name=topic, topic_id=None)],
                                        topic_names=[topic], timeout_ms=60_000))  # fmt: skip
        assert [r.error_code for r in resp.responses] == [0]


@pytest.fixture(params=both_targets())
def capped(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Target]:
    """A broker whose fetch.max.bytes is 128 KiB."""
    if request.param == "kafka":
        with kafka_peer(**{"fetch.max.bytes": 128 * 1024}) as bootstrap:
            yield Target("kafka", bootstrap, None)
        return
    proc = BrokerProcess(tmp_path / "data", env={"LOGBROKER_FETCH_MAX_BYTES": str(128 * 1024)})
    proc.start()
    yield Target("logbroker", proc.bootstrap, proc)
    proc.kill()


def test_fetch_answers_are_capped_by_the_broker_not_the_client(capped: Target) -> None:
    """A client asking for 16 MiB gets at most the broker's fetch.max.bytes, except that a first batch
    larger than that still comes whole (KIP-74), so a consumer always makes progress."""
    topic = unique("capped")
    with capped.connect() as c:
        create(c, topic)
        for _ in range(8):
            produce(c, topic, [bytes(1024)] * 64)  # 64 KiB batches, 512 KiB in all
        big = produce(c, topic, [bytes(1024)] * 200)  # one 200 KiB batch
        [t] = c.do(fetch_request(topic, 0, 0, 0, 16 * MiB)).responses
        got = len(bytes(t.partitions[0].records))
        assert 64 * 1024 <= got <= 128 * 1024, got
        [t] = c.do(fetch_request(topic, 0, big, 0, 16 * MiB)).responses
        assert len(bytes(t.partitions[0].records)) >= 200 * 1024


def test_per_ip_overrides_change_live(limited: Target) -> None:
    """max.connections.per.ip.overrides is a dynamic broker config (read_only false, as in Kafka): a new value
    limits the next connections, and deleting it restores the static one."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": limited.bootstrap})

    def alter(value: str | None) -> None:
        op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
        res = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
            ConfigEntry("max.connections.per.ip.overrides", value, incremental_operation=op)])  # fmt: skip
        admin.incremental_alter_configs([res])[res].result(30)

    def refused_of(n: int, want: int) -> int:
        """How many of `n` connections from 127.0.0.3 the broker closes, retried until `want` (Kafka applies a
        dynamic broker config through its metadata log, a moment after the answer) or 30 s."""
        deadline = time.monotonic() + 30
        while True:
            socks = _connect_many(limited.host, limited.port, n, "127.0.0.3")
            closed = _closed_by_peer(socks, 1.0)
            for s in socks:
                s.close()
            if closed == want or time.monotonic() > deadline:
                return closed
            time.sleep(0.5)

    alter("127.0.0.2:20,127.0.0.3:2")
    try:
        assert refused_of(3, 1) == 1, "the third connection from 127.0.0.3 stayed open under a limit of 2"
    finally:
        alter(None)
    assert refused_of(4, 0) == 0, "the static limit of 5 was not restored"
