"""Fetch answers of 64 KiB or more per partition go from the segment file to the socket (sendfile).

What must hold: the spliced frame is byte-for-byte what the codec encodes (every served version);
real clients read large records intact, plain and over TLS (which cannot splice), read_committed
included; an answer in flight survives its topic being deleted (the range holds its own descriptor);
and no descriptor outlives its answer, whether the client reads it or hangs up.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logbroker.protocol import ApiKey, api
from logbroker.protocol.fetch_response import encode_fetch_frame
from logbroker.protocol.messages import encode_response_frame
from logbroker.protocol.records import decode_records
from logbroker.storage.segment import FileRange
from logbroker_devtools.client.connection import Connection, fetch_request
from logbroker_devtools.testing.process import LOOPBACK, BrokerProcess
from support import both_targets, create_topic, eventually, kafka_peer

R = api(ApiKey.Fetch).response
TR = R.FetchableTopicResponse
PD = TR.PartitionData
AT = PD.AbortedTransaction
BIG = 300_000  # bytes per record: every partition's answer is a file range


# ------------------------------------------------------------------ the encoder, against the codec

_partition = st.fixed_dictionaries(
    {
        "index": st.integers(0, 2**31 - 1),
        "error": st.sampled_from([0, 1, 3, 6]),
        "hwm": st.integers(-1, 2**62),
        "lso": st.integers(-1, 2**62),
        "start": st.integers(-1, 2**62),
        "aborted": st.none() | st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)), max_size=3),
        "records": st.none() | st.binary(max_size=300),
        "external": st.booleans(),
    }
)
_response = st.fixed_dictionaries(
    {
        "version": st.integers(4, 18),
        "throttle": st.integers(0, 10_000),
        "error": st.sampled_from([0, 70, 71]),
        "session": st.integers(0, 2**31 - 1),
        "topics": st.lists(
            st.tuples(st.text(min_size=1, max_size=20), st.uuids(), st.lists(_partition, max_size=4)), max_size=3
        ),
    }
)


def _pd(p: dict[str, Any], records: Any) -> Any:
    aborted = None if p["aborted"] is None else [AT(producer_id=a, first_offset=b) for a, b in p["aborted"]]
    return PD(partition_index=p["index"], error_code=p["error"], high_watermark=p["hwm"], last_stable_offset=p["lso"],
              log_start_offset=p["start"], aborted_transactions=aborted, preferred_read_replica=-1,
              records=records)  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_response)
def test_spliced_frame_equals_the_codecs_frame(case: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / f"records-{uuid.uuid4().hex}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
    try:

        def build(external: bool) -> Any:
            topics = []
            for name, topic_id, parts in case["topics"]:
                pds = []
                for p in parts:
                    records: Any = p["records"]
                    if external and p["external"] and records is not None:
                        pos = os.lseek(fd, 0, os.SEEK_END)
                        os.write(fd, records)
                        records = FileRange(None, fd, pos, len(records), 0)
                    pds.append(_pd(p, records))
                topics.append(TR(topic=name, topic_id=topic_id, partitions=pds))
            return R(throttle_time_ms=case["throttle"], error_code=case["error"], session_id=case["session"],
                     responses=topics)  # fmt: skip

        v = case["version"]
        want = bytes(encode_response_frame(api(ApiKey.Fetch), v, 7, build(False)))
        frame = encode_fetch_frame(v, 7, build(True))
        assert frame is not None
        try:
            assert bytes(frame.materialize()) == want
            assert frame.size == len(want)
            assert sum(len(p) for p in frame.parts) == len(want)
        finally:
            frame.close()
        assert not frame.externals
    finally:
        os.close(fd)


def test_a_tagged_field_falls_back_to_the_codec() -> None:
    """A partition carrying a tagged field (not sent today, but a handler may) is not the fast path's."""
    p = PD(partition_index=0, error_code=6, high_watermark=-1, records=b"",
           current_leader=PD.LeaderIdAndEpoch(leader_id=1, leader_epoch=0))  # fmt: skip
    assert encode_fetch_frame(12, 1, R(throttle_time_ms=0, error_code=0, session_id=0,
                                       responses=[TR(topic="t", partitions=[p])])) is None  # fmt: skip


# ------------------------------------------------------------------ real brokers, real clients


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    if request.param == "kafka":
        with kafka_peer() as bootstrap:
            yield bootstrap
        return
    proc = BrokerProcess(tmp_path_factory.mktemp("zero-copy") / "data")
    proc.start()
    yield proc.bootstrap
    assert proc.stop() == 0


def _values(n: int, seed: str) -> list[bytes]:
    return [(f"{seed}-{i:04d}-".encode() * (BIG // 12))[:BIG] for i in range(n)]


def _produce(bootstrap: str, topic: str, values: list[bytes], partitions: int = 1, **conf: Any) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "message.max.bytes": 2_000_000, **conf})
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % partitions)
    assert p.flush(60) == 0


def _consume(bootstrap: str, topic: str, count: int, **conf: Any) -> list[bytes]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "fetch.max.bytes": 4_000_000, **conf})  # fmt: skip
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            for m in c.consume(100, 1.0):
                assert m.error() is None, m.error()
                got.append(m.value())
    finally:
        c.close()
    return got


def test_large_records_read_intact_by_clients(target: str) -> None:
    topic = f"zc-{uuid.uuid4().hex[:10]}"
    create_topic(target, topic, partitions=3)
    want = _values(30, "a")
    _produce(target, topic, want, partitions=3)
    assert sorted(_consume(target, topic, len(want))) == sorted(want)

    from kafka import KafkaConsumer

    kc = KafkaConsumer(topic, bootstrap_servers=target, auto_offset_reset="earliest", consumer_timeout_ms=10_000,
                       fetch_max_bytes=4_000_000, max_partition_fetch_bytes=1_000_000)  # fmt: skip
    try:
        got = [m.value for m in kc]
    finally:
        kc.close()
    assert sorted(got) == sorted(want)


def test_read_committed_skips_a_large_aborted_transaction(target: str) -> None:
    topic = f"zc-txn-{uuid.uuid4().hex[:10]}"
    create_topic(target, topic)
    p = ck.Producer({"bootstrap.servers": target, "transactional.id": uuid.uuid4().hex, "linger.ms": 5,
                     "message.max.bytes": 2_000_000})  # fmt: skip
    p.init_transactions(30)
    aborted, committed = _values(6, "aborted"), _values(6, "committed")
    for batch, commit in ((aborted, False), (committed, True)):
        p.begin_transaction()
        for v in batch:
            p.produce(topic, v, partition=0)
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)
    got = _consume(target, topic, len(committed), **{"isolation.level": "read_committed"})
    assert got == committed
    everything = _consume(target, topic, len(aborted) + len(committed), **{"isolation.level": "read_uncommitted"})
    assert everything == aborted + committed


def test_an_answer_in_flight_survives_its_topic_being_deleted(target: str) -> None:
    topic = f"zc-del-{uuid.uuid4().hex[:10]}"
    create_topic(target, topic)
    want = _values(20, "d")  # 6 MB: more than the socket buffers hold, so the answer waits on the reader
    _produce(target, topic, want)
    host, port = target.rsplit(":", 1)
    with Connection(host, int(port)) as c:
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        cid, version, spec = c.send(fetch_request(topic, 0, 0, max_wait_ms=0, max_bytes=8 << 20))
        time.sleep(1)  # the broker has sent what the socket takes and waits
        admin = AdminClient({"bootstrap.servers": target})
        admin.delete_topics([topic])[topic].result(30)
        resp = c.receive(spec, version, cid)
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0
    assert [r.value for r in decode_records(part.records)] == want  # every batch's CRC verified


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_fetches_sent_before_the_clients_end_of_stream_are_answered_then_closed(target: str) -> None:
    """A client that sends two fetches (the first long-polling) and then ends its stream (shutdown SHUT_WR) gets
    both answers, and then the broker closes: Kafka reads the end only once the muted channel's answers are out,
    and logbroker, whose transport keeps reading while a fetch waits, holds the close until what it was asked,
    the request still buffered behind the first included, is answered."""
    topic = f"zc-eof-{uuid.uuid4().hex[:6]}"
    create_topic(target, topic)
    _produce(target, topic, _values(3, "e"))
    host, port = target.rsplit(":", 1)
    with Connection(host, int(port)) as c:
        waiting = fetch_request(topic, 0, 0, max_wait_ms=400, max_bytes=8 << 20, min_bytes=50_000_000)
        sent = [c.send(waiting), c.send(fetch_request(topic, 0, 0, max_wait_ms=0, max_bytes=8 << 20))]
        c.sock.shutdown(socket.SHUT_WR)
        for cid, version, spec in sent:
            resp = c.receive(spec, version, cid)
            assert len(decode_records(resp.responses[0].partitions[0].records)) == 3
        c.sock.settimeout(10)
        assert c.sock.recv(1) == b""  # then closed


def test_a_waiting_fetch_leaves_the_transport_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer asks again only once answered: its fetches (exclusive: one at a time per connection) stop the
    parsing of further requests but not the transport, so no epoll_ctl pair per fetch. Fetches pipelined anyway
    do pause it (the second arrives while the first is in progress), and all are answered in order."""
    import asyncio.selector_events as se

    from logbroker.embedded import EmbeddedBroker

    pauses = {"n": 0}
    real = se._SelectorTransport.pause_reading

    def counting(self: Any) -> None:
        pauses["n"] += 1
        real(self)

    monkeypatch.setattr(se._SelectorTransport, "pause_reading", counting)
    with EmbeddedBroker(tmp_path / "data") as broker:
        topic = "zc-lazy"
        create_topic(broker.bootstrap, topic)
        _produce(broker.bootstrap, topic, _values(4, "l"))
        host, port = broker.bootstrap.rsplit(":", 1)
        with Connection(host, int(port)) as c:
            pauses["n"] = 0
            for _ in range(20):
                resp = c.do(fetch_request(topic, 0, 0, max_wait_ms=0, max_bytes=8 << 20))
                assert len(decode_records(resp.responses[0].partitions[0].records)) == 4
            assert pauses["n"] == 0
            # The first waits out its max_wait_ms at offset 4 (empty); the others, sent while it waits, pause the
            # transport; whole stored batches: the four records are one, so each of those reads all four.
            sent = [c.send(fetch_request(topic, 0, i, max_wait_ms=200, max_bytes=8 << 20)) for i in (4, 0, 1, 2, 3)]
            got = [c.receive(spec, version, cid) for cid, version, spec in sent]
            assert [len(decode_records(r.responses[0].partitions[0].records)) for r in got] == [0, 4, 4, 4, 4]
            assert pauses["n"] >= 1


def test_no_descriptor_outlives_its_answer(tmp_path: Path) -> None:
    """Answers read whole, answers whose client hangs up mid-send, long polls that drop a round: the
    broker's descriptors come back to where they were."""
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    try:
        topic = "zc-fds"
        create_topic(proc.bootstrap, topic)
        _produce(proc.bootstrap, topic, _values(12, "f"))
        with Connection(LOOPBACK, proc.port) as c:  # warm: the segment's files are open
            c.do(fetch_request(topic, 0, 0, max_wait_ms=0, max_bytes=8 << 20))
        before = _open_fds(proc.proc.pid)
        for _ in range(20):
            with Connection(LOOPBACK, proc.port) as c:
                resp = c.do(fetch_request(topic, 0, 0, max_wait_ms=0, max_bytes=8 << 20))
                assert len(decode_records(resp.responses[0].partitions[0].records)) == 12
        for _ in range(20):  # hang up with the answer half sent
            c = Connection(LOOPBACK, proc.port)
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            c.send(fetch_request(topic, 0, 0, max_wait_ms=0, max_bytes=8 << 20))
            time.sleep(0.05)
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            c.close()
        with Connection(LOOPBACK, proc.port) as c:  # rounds below min_bytes are read and dropped
            c.do(fetch_request(topic, 0, 0, max_wait_ms=300, max_bytes=8 << 20, min_bytes=50_000_000))
        eventually(lambda: _open_fds(proc.proc.pid) <= before, timeout=20)
        assert "Traceback" not in proc.log_tail()
    finally:
        proc.kill()


def test_a_client_closing_during_a_long_poll_is_no_warning(tmp_path: Path) -> None:
    """Issue 32: "a fetch answer could not be sent: os.sendfile call failed" closed consumers that had gone
    already: reads are paused while a fetch waits, so the client's close went unseen; the frame header then
    drew a reset, and asyncio turns the sendfile's EPIPE into that message, errno dropped. A client that
    leaves mid-fetch is normal: it is no WARNING, and nothing leaks."""
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    try:
        topic = "zc-gone"
        create_topic(proc.bootstrap, topic)
        _produce(proc.bootstrap, topic, _values(4, "h"))
        for _ in range(5):
            c = Connection(LOOPBACK, proc.port)
            # min_bytes out of reach: the answer (a file range) goes out when max_wait_ms is up.
            c.send(fetch_request(topic, 0, 0, max_wait_ms=300, max_bytes=8 << 20, min_bytes=50_000_000))
            c.sock.shutdown(socket.SHUT_WR)
            c.close()
        time.sleep(1.0)
        with Connection(LOOPBACK, proc.port) as c:  # still serving
            resp = c.do(fetch_request(topic, 0, 0, max_wait_ms=0, max_bytes=8 << 20))
            assert len(decode_records(resp.responses[0].partitions[0].records)) == 4
        log = proc.log_path.read_text()
        assert "could not be sent" not in log and "Traceback" not in log, log[-2000:]
    finally:
        proc.kill()


def _read_back_with(sendfile: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, topic: str) -> None:
    """Six large records produced to an in-process broker, then read back while ``os.sendfile`` is ``sendfile``:
    they must arrive whole and in order."""
    from logbroker.embedded import EmbeddedBroker

    with EmbeddedBroker(tmp_path / "data") as broker:
        create_topic(broker.bootstrap, topic)
        want = _values(6, topic[-1])
        _produce(broker.bootstrap, topic, want)
        real = os.sendfile
        monkeypatch.setattr(os, "sendfile", sendfile)
        try:
            got = _consume(broker.bootstrap, topic, len(want))
        finally:
            monkeypatch.setattr(os, "sendfile", real)
        assert got == want


def test_an_answer_the_kernel_will_not_splice_is_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When sendfile fails before a byte goes out and the client is still there, the answer is sent by
    copying its stored bytes instead of closing the connection (os.sendfile failing)."""
    import errno

    failures = {"n": 0}

    def failing(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        failures["n"] += 1
        raise OSError(errno.EINVAL, "no splice today")

    _read_back_with(failing, tmp_path, monkeypatch, "zc-copied")
    assert failures["n"] > 0


@pytest.mark.parametrize("then", ["would-block", "no-splice"])
def test_an_answer_the_socket_takes_in_pieces_arrives_whole(
    then: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker sends what the socket takes at once itself and leaves the rest to the event loop: a range
    cut short after a few bytes (the socket full, or the kernel refusing to go on) still arrives whole and
    in order, from where the first sendfile stopped (os.sendfile made to stop early)."""
    import errno

    real = os.sendfile
    calls = {"cut": 0}

    def piecemeal(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        calls["cut"] += 1
        if then == "would-block":  # every other call: 100 bytes, then the socket is "full"
            if calls["cut"] % 2:
                return real(out_fd, in_fd, offset, min(count, 100))
            raise BlockingIOError(errno.EAGAIN, "try again")
        if calls["cut"] == 1:  # 100 bytes, then the kernel refuses to splice any more
            return real(out_fd, in_fd, offset, min(count, 100))
        raise OSError(errno.EINVAL, "no splice today")

    _read_back_with(piecemeal, tmp_path, monkeypatch, f"zc-pieces-{then}")
    assert calls["cut"] >= 2


def test_answers_in_flight_share_their_segments_descriptor(tmp_path: Path) -> None:
    """Forty clients that never read a large answer: each costs the broker its socket, not a descriptor
    of the stored file more (answers from one segment pin its one descriptor)."""
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    stalled: list[Connection] = []
    try:
        topic = "zc-share"
        create_topic(proc.bootstrap, topic)
        _produce(proc.bootstrap, topic, _values(12, "g"))
        with Connection(LOOPBACK, proc.port) as c:
            c.do(fetch_request(topic, 0, 0, max_wait_ms=0, max_bytes=8 << 20))
        before = _open_fds(proc.proc.pid)
        for _ in range(40):
            c = Connection(LOOPBACK, proc.port)
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
            c.send(fetch_request(topic, 0, 0, max_wait_ms=0, max_bytes=8 << 20))
            stalled.append(c)
        time.sleep(1)
        assert _open_fds(proc.proc.pid) <= before + 40 + 2
        with Connection(LOOPBACK, proc.port) as c:  # others are served meanwhile
            resp = c.do(fetch_request(topic, 0, 0, max_wait_ms=0, max_bytes=8 << 20))
            assert len(decode_records(resp.responses[0].partitions[0].records)) == 12
    finally:
        for c in stalled:
            c.close()
        proc.kill()


def test_tls_answers_are_read_not_spliced(tmp_path: Path) -> None:
    """TLS encrypts in user space, so a TLS listener's large answers are read into memory and sent."""
    from security_support import client_config, logbroker_secure, make_certs

    certs = make_certs(tmp_path)
    with logbroker_secure(tmp_path, certs, listeners={"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}) as broker:
        topic = f"zc-tls-{uuid.uuid4().hex[:10]}"
        create_topic(broker.bootstrap("PLAINTEXT"), topic)
        want = _values(8, "s")
        _produce(broker.bootstrap("PLAINTEXT"), topic, want)
        conf = client_config("confluent", broker, "SSL")
        got = _consume(conf.pop("bootstrap.servers"), topic, len(want), **conf)
        assert got == want
