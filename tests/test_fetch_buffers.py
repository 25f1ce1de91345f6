"""Fetch reads land in pooled buffers that are reused across requests: a long poll that drops its first
rounds (too few bytes for min_bytes) gives their buffers back while other fetches take them. Nothing
served may be overwritten by that reuse."""

from __future__ import annotations

import asyncio
import inspect
import threading
from pathlib import Path
from typing import Any

import confluent_kafka as ck

from logbroker.protocol.records import decode_records
from logbroker_devtools.client.connection import Connection, fetch_request
from logbroker_devtools.testing.process import LOOPBACK, BrokerProcess


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(30) == 0


def test_long_poll_rounds_and_concurrent_fetches_share_buffers_safely(broker: BrokerProcess, topic: str) -> None:
    first = [bytes([65 + i % 26]) * 70_000 for i in range(3)]  # ~210 KB: a pooled read each round
    _produce(broker.bootstrap, topic, first)
    later = [bytes([97 + i % 26]) * 70_000 for i in range(6)]
    want = first + later
    result: dict[str, list[bytes]] = {}

    def long_poll() -> None:
        # min_bytes above everything produced until the last batches: rounds are read, dropped, retried.
        with Connection(LOOPBACK, broker.port) as c:
            resp = c.do(fetch_request(topic, 0, 0, max_wait_ms=20_000, max_bytes=8 << 20, min_bytes=600_000))
        records = resp.responses[0].partitions[0].records
        result["long"] = [r.value for r in decode_records(records)]  # decode verifies each batch's CRC

    poller = threading.Thread(target=long_poll)
    poller.start()
    with Connection(LOOPBACK, broker.port) as other:
        for v in later:
            _produce(broker.bootstrap, topic, [v])  # wakes the long poll: one more round read and dropped
            resp = other.do(fetch_request(topic, 0, 0, max_wait_ms=0, max_bytes=8 << 20))
            got = [r.value for r in decode_records(resp.responses[0].partitions[0].records)]
            assert got == want[: len(got)] and len(got) >= len(first)
    poller.join(30)
    assert not poller.is_alive()
    assert result["long"] == want


def test_a_fetch_keeps_its_read_buffers_until_its_response_is_encoded(tmp_path: Path) -> None:
    """In-process, deterministic: after the handler returns and before the server encodes its answer,
    another fetch reads into the pool. The first answer's records must be intact when encoded. (Records
    under the zero-copy threshold: larger reads are file ranges, not pooled buffers.)"""
    from logbroker.broker.context import BrokerContext
    from logbroker.broker.handlers import fetch, served_apis
    from logbroker.config import load_settings
    from logbroker.protocol.connection import ServerConnection
    from logbroker.protocol.messages import decode_response, encode_request
    from logbroker.protocol.records import NewRecord, build_batch, validate_produce

    apis = served_apis()

    def request(topic: str) -> Any:
        wire = encode_request(apis[1], 12, 1, "t", fetch_request(topic, 0, 0, max_wait_ms=0, max_bytes=8 << 20))
        conn = ServerConnection(apis)
        conn.receive_data(wire)
        return conn.next_event()

    async def main() -> None:
        ctx = BrokerContext(load_settings(None, data_dir=tmp_path, listen="127.0.0.1:0"), apis)
        ctx.open()
        try:
            for name, fill in (("a", b"A"), ("b", b"B")):
                ctx.topics.ensure(name)
                plog = ctx.topics.log(name, 0)
                buf = bytearray(build_batch([NewRecord(None, fill * 50_000)]))
                plog.append(buf, validate_produce(buf, 1 << 20))
            req_a = request("a")
            resp_a = fetch.handle(ctx, req_a)  # data at hand: answered at once, no coroutine
            assert not inspect.isawaitable(resp_a)
            fetch.handle(ctx, request("b"))  # reads into the pool while a's answer waits unencoded
            frame = ServerConnection(apis).encode_response(req_a, resp_a)
            _, got = decode_response(apis[1], 12, memoryview(frame)[4:])
            assert [r.value for r in decode_records(got.responses[0].partitions[0].records)] == [b"A" * 50_000]
        finally:
            await ctx.close()

    asyncio.run(main())


def test_concurrent_large_produces_never_share_a_request_buffer(broker: BrokerProcess, topic: str) -> None:
    """Large request frames are received into pooled memory, given back when their handler is done. Two
    producers send megabyte requests spanning four partitions at once; a handler yields between
    partitions and waits on fsync (acks=all) holding its frame, while the other connection's frames
    arrive. Every partition must hold exactly what was sent to it, each producer's records in order."""
    from support import create_topic

    create_topic(broker.bootstrap, topic, partitions=4)
    want = {(name, p): [f"{name}{p}:{i:03d}:".encode() * 12_000 for i in range(30)] for name in "AB" for p in range(4)}

    def produce(name: str) -> None:
        p = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 50,
                         "batch.size": 1_000_000, "message.max.bytes": 4_000_000})  # fmt: skip
        for i in range(30):
            for part in range(4):
                p.produce(topic, want[(name, part)][i], partition=part)
        assert p.flush(60) == 0

    threads = [threading.Thread(target=produce, args=(name,)) for name in "AB"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    with Connection(LOOPBACK, broker.port) as c:
        for part in range(4):
            got: list[bytes] = []
            while len(got) < 60:
                resp = c.do(fetch_request(topic, part, len(got), max_wait_ms=0, max_bytes=64 << 20))
                batch = [r.value for r in decode_records(resp.responses[0].partitions[0].records)]
                assert batch, f"partition {part} stopped at {len(got)}"
                got += batch
            for name in "AB":
                assert [v for v in got if v[:1] == name.encode()] == want[(name, part)], f"partition {part}"
