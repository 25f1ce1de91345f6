"""Produce validation answered exactly as Apache Kafka 4.4 answers it, and nothing stored when refused.

Every case is a raw Produce request (logbroker_devtools.client.connection.Connection) carrying a hand-made batch:
`protocol/records.build_batch`'s header, the records section replaced or fields patched, the CRC32C
recomputed. Each runs against the shared logbroker and against a real Kafka 4.4 with the same assertion:
Kafka's error code, its log start offset (-1 where Kafka fails the request before the log), the records
Kafka names in record_errors, and the partition's log unchanged (the next good batch lands at the same
offset). The messages may differ. Which stage of Kafka refuses what is in `logbroker.protocol.validate`.
"""

from __future__ import annotations

import os
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logbroker.protocol.errors import ErrorCode
from logbroker.protocol.records import (
    ATTRIBUTES,
    BASE_OFFSET,
    BASE_TIMESTAMP,
    BATCH_LENGTH,
    CRC,
    HEADER_SIZE,
    LAST_OFFSET_DELTA,
    LOG_OVERHEAD,
    MAGIC,
    RECORDS_COUNT,
    Compression,
    InvalidBatch,
    NewRecord,
    build_batch,
    compress,
    decode_records,
    iter_headers,
    write_varint,
)
from logbroker.protocol.validate import validate_batch
from logbroker_devtools.client.connection import Connection, ListOffsetsRequest, ProduceRequest, fetch_request
from logbroker_devtools.testing.process import BrokerProcess
from support import both_targets, create_topic, kafka_peer, read_topic, unique

pytestmark = pytest.mark.timeout(300)

E = ErrorCode
C = Compression
HOUR = 3_600_000
EARLY, LOG = -1, 0  # the log start offset Kafka reports: -1 before the log is reached, else the log's (0 here)
# Kafka's producer-id expiry with a check every 200 ms; an entry expires when its last batch's own timestamp
# is a minute old, so only batches stamped in the past expire during these tests.
EXPIRY_MS = 60_000
EXPIRY_SETTINGS = {"producer.id.expiration.ms": EXPIRY_MS, "producer.id.expiration.check.interval.ms": 200}


def now_ms() -> int:
    return int(time.time() * 1000)


# ---------------------------------------------------------------------------------------------------------------
# Hand-made records and batches


def record(
    *,
    offset: int = 0,
    ts: int = 0,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: tuple[tuple[bytes, bytes], ...] = (),
    key_len: int | None = None,
    value_len: int | None = None,
    header_count: int | None = None,
    size_delta: int = 0,
    raw_headers: bytes = b"",
) -> bytes:
    """One v2 record; the *_len/_count/size_delta arguments make it lie about itself."""
    body = bytearray(b"\x00")  # attributes
    write_varint(body, ts)
    write_varint(body, offset)
    for part, claimed in ((key, key_len), (value, value_len)):
        write_varint(body, claimed if claimed is not None else (-1 if part is None else len(part)))
        body += part or b""
    write_varint(body, len(headers) if header_count is None else header_count)
    for hk, hv in headers:
        write_varint(body, len(hk))
        body += hk
        write_varint(body, len(hv))
        body += hv
    body += raw_headers
    out = bytearray()
    write_varint(out, len(body) + size_delta)
    return bytes(out + body)


def records(n: int) -> bytes:
    return b"".join(record(offset=i, value=f"v{i}".encode()) for i in range(n))


def recrc(raw: bytearray) -> bytes:
    struct.pack_into(">I", raw, CRC, crc32c(raw[ATTRIBUTES:]))
    return bytes(raw)


def batch(
    body: bytes,
    count: int,
    *,
    codec: int = C.NONE,
    attributes: int = 0,
    last_delta: int | None = None,
    base_ts: int | None = None,
    max_ts: int | None = None,
    producer_id: int = -1,
    epoch: int = -1,
    sequence: int = -1,
    base_offset: int = 0,
    magic: int = 2,
) -> bytes:
    """build_batch's header over `body` (compressed with `codec`), fields patched, CRC recomputed."""
    stamp = now_ms() if base_ts is None else base_ts
    template = build_batch(
        [NewRecord(b"k", b"v")], producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence, now_ms=0
    )
    raw = bytearray(template[:HEADER_SIZE]) + (compress(codec, body) if codec else body)
    struct.pack_into(">q", raw, BASE_OFFSET, base_offset)
    struct.pack_into(">i", raw, BATCH_LENGTH, len(raw) - LOG_OVERHEAD)
    struct.pack_into(">b", raw, MAGIC, magic)
    struct.pack_into(">h", raw, ATTRIBUTES, attributes | codec)
    struct.pack_into(">i", raw, LAST_OFFSET_DELTA, count - 1 if last_delta is None else last_delta)
    struct.pack_into(">qq", raw, BASE_TIMESTAMP, stamp, stamp if max_ts is None else max_ts)
    struct.pack_into(">i", raw, RECORDS_COUNT, count)
    return recrc(raw)


def good(n: int = 1, **kw: Any) -> bytes:
    return batch(records(n), n, **kw)


def cut_length(length: int) -> bytes:
    """A good batch whose length field says `length`, cut to match (so it is whole, but too short)."""
    raw = bytearray(good())
    struct.pack_into(">i", raw, BATCH_LENGTH, length)
    return bytes(raw[: LOG_OVERHEAD + length])


def flip_last_byte(raw: bytes) -> bytes:
    return raw[:-1] + bytes([raw[-1] ^ 0x01])


def lz4_linked_blocks(body: bytes) -> bytes:
    """An LZ4 frame of linked blocks (cramjam's default), which Kafka's reader does not support."""
    import cramjam

    raw = bytearray(good())
    payload = bytes(cramjam.lz4.compress(body))
    raw[HEADER_SIZE:] = payload
    struct.pack_into(">i", raw, BATCH_LENGTH, len(raw) - LOG_OVERHEAD)
    struct.pack_into(">h", raw, ATTRIBUTES, C.LZ4)
    return recrc(raw)


def truncated_stream(codec: int, body: bytes, cut: int) -> bytes:
    raw = bytearray(good())
    raw[HEADER_SIZE:] = compress(codec, body)[:-cut]
    struct.pack_into(">i", raw, BATCH_LENGTH, len(raw) - LOG_OVERHEAD)
    struct.pack_into(">h", raw, ATTRIBUTES, codec)
    struct.pack_into(">i", raw, LAST_OFFSET_DELTA, 1)
    struct.pack_into(">i", raw, RECORDS_COUNT, 2)
    return recrc(raw)


# ---------------------------------------------------------------------------------------------------------------
# The cases. Each: a builder (called at send time, timestamps are fresh), Kafka's error code, the log start
# offset Kafka reports with it, and the record indexes Kafka names in record_errors.


@dataclass(frozen=True)
class Case:
    build: Callable[[], bytes]
    error: ErrorCode
    log_start: int
    record_errors: tuple[int, ...] = ()


REFUSED: dict[str, Case] = {
    # Records that overrun or underrun their batch, or disagree with its count (DefaultRecord.readFrom).
    "value-length-60-with-5-present": Case(
        lambda: batch(record(value=b"12345", value_len=60), 1), E.INVALID_RECORD, LOG
    ),
    "value-length-3-with-5-present": Case(lambda: batch(record(value=b"12345", value_len=3), 1), E.INVALID_RECORD, LOG),
    "record-length-over-its-fields": Case(lambda: batch(record(size_delta=3) + b"\0\0\0", 1), E.INVALID_RECORD, LOG),
    "record-length-under-its-fields": Case(lambda: batch(record(size_delta=-1), 1), E.INVALID_RECORD, LOG),
    "count-5-with-1-record": Case(lambda: batch(records(1), 5), E.INVALID_RECORD, LOG),
    "count-1-with-2-records": Case(lambda: batch(records(2), 1), E.INVALID_RECORD, LOG),
    "count-5-last-offset-delta-0": Case(lambda: batch(records(1), 5, last_delta=0), E.INVALID_RECORD, LOG),
    "count-0": Case(lambda: batch(b"", 0), E.INVALID_RECORD, LOG),
    "count-0-last-offset-delta-0": Case(lambda: batch(records(1), 0, last_delta=0), E.INVALID_RECORD, LOG),
    "count-huge": Case(lambda: batch(records(1), 0x7FFFFFFF), E.INVALID_RECORD, LOG),
    "bytes-after-the-last-record": Case(lambda: batch(records(1) + b"\0\0", 1), E.INVALID_RECORD, LOG),
    "header-count-negative": Case(lambda: batch(record(header_count=-1), 1), E.INVALID_RECORD, LOG),
    "header-count-1000": Case(lambda: batch(record(header_count=1000), 1), E.INVALID_RECORD, LOG),
    "header-key-length-negative": Case(
        lambda: batch(record(header_count=1, raw_headers=b"\x05\x02hv"), 1), E.INVALID_RECORD, LOG
    ),
    "field-varint-overlong": Case(lambda: batch(b"\x0e\x00" + b"\xff" * 10 + b"\x00" * 3, 1), E.INVALID_RECORD, LOG),
    "length-varint-overlong": Case(lambda: batch(b"\xff" * 6 + b"\x00", 1), E.UNKNOWN_SERVER_ERROR, LOG),
    # Batch header rules (LogValidator.validateBatch, UnifiedLog).
    "control-batch-from-a-client": Case(lambda: good(attributes=0x20), E.INVALID_RECORD, LOG),
    "producer-id-without-sequence": Case(lambda: good(producer_id=424242, epoch=0), E.INVALID_RECORD, LOG),
    "base-offset-7": Case(lambda: good(base_offset=7), E.INVALID_RECORD, LOG),
    "crc-mismatch": Case(lambda: flip_last_byte(good()), E.CORRUPT_MESSAGE, EARLY),
    "length-39-shorter-than-a-header": Case(lambda: cut_length(39), E.CORRUPT_MESSAGE, EARLY),
    "length-48-shorter-than-a-header": Case(lambda: cut_length(48), E.CORRUPT_MESSAGE, EARLY),
    "codec-5": Case(lambda: good(attributes=5), E.UNKNOWN_SERVER_ERROR, LOG),
    "codec-7": Case(lambda: good(attributes=7), E.UNKNOWN_SERVER_ERROR, LOG),
    # Compressed batches: the codec fails (UNKNOWN_SERVER_ERROR) or the inner records are malformed.
    "zstd-over-garbage": Case(lambda: batch(os.urandom(64), 1, attributes=C.ZSTD), E.UNKNOWN_SERVER_ERROR, LOG),
    "gzip-over-garbage": Case(lambda: batch(os.urandom(64), 1, attributes=C.GZIP), E.UNKNOWN_SERVER_ERROR, LOG),
    # Raw snappy opens with the inflated length: random bytes said "gigabytes" now and then, which logbroker
    # refuses as MESSAGE_TOO_LARGE before inflating (docs/design.md); a small stated length, then garbage.
    "snappy-over-garbage": Case(
        lambda: batch(b"\x05" + os.urandom(63), 1, attributes=C.SNAPPY), E.UNKNOWN_SERVER_ERROR, LOG
    ),
    "lz4-over-garbage": Case(lambda: batch(os.urandom(64), 1, attributes=C.LZ4), E.UNKNOWN_SERVER_ERROR, LOG),
    "lz4-linked-blocks": Case(lambda: lz4_linked_blocks(records(1)), E.UNKNOWN_SERVER_ERROR, LOG),
    "gzip-truncated": Case(lambda: truncated_stream(C.GZIP, records(2), 6), E.UNKNOWN_SERVER_ERROR, LOG),
    "zstd-truncated": Case(lambda: truncated_stream(C.ZSTD, records(2), 3), E.UNKNOWN_SERVER_ERROR, LOG),
    "zstd-value-length-60-with-5-present": Case(
        lambda: batch(record(value=b"12345", value_len=60), 1, codec=C.ZSTD), E.INVALID_RECORD, LOG
    ),
    "gzip-count-5-with-1-record": Case(lambda: batch(records(1), 5, codec=C.GZIP), E.INVALID_RECORD, LOG),
    "snappy-bytes-after-the-last-record": Case(
        lambda: batch(records(1) + b"\1\2", 1, codec=C.SNAPPY), E.INVALID_RECORD, LOG
    ),
    "lz4-header-count-negative": Case(lambda: batch(record(header_count=-1), 1, codec=C.LZ4), E.INVALID_RECORD, LOG),
    "zstd-inner-offsets-3-and-7": Case(
        lambda: batch(record(offset=3) + record(offset=7), 2, codec=C.ZSTD), E.UNKNOWN_SERVER_ERROR, LOG
    ),
    # Timestamps (KIP-937; Kafka 4 defaults: at most 1 h in the future, any age in the past).
    "timestamp-2h-in-the-future": Case(
        lambda: batch(records(1), 1, base_ts=now_ms() + 2 * HOUR), E.INVALID_TIMESTAMP, LOG, (0,)
    ),
    "second-record-2h-in-the-future": Case(
        lambda: batch(record(offset=0) + record(offset=1, ts=2 * HOUR), 2, max_ts=now_ms() + 2 * HOUR),
        E.INVALID_TIMESTAMP,
        LOG,
        (1,),
    ),
    "two-of-three-in-the-future": Case(
        lambda: batch(record(offset=0) + record(offset=1, ts=2 * HOUR) + record(offset=2, ts=3 * HOUR), 3),
        E.INVALID_TIMESTAMP,
        LOG,
        (1, 2),
    ),
    "gzip-timestamp-2h-in-the-future": Case(
        lambda: batch(records(1), 1, codec=C.GZIP, base_ts=now_ms() + 2 * HOUR), E.INVALID_TIMESTAMP, LOG, (0,)
    ),
    "log-append-time-flag-without-max-timestamp": Case(
        lambda: good(attributes=0x08, max_ts=-1), E.INVALID_TIMESTAMP, LOG, (0,)
    ),
    "future-timestamp-and-a-broken-record": Case(
        lambda: batch(record(offset=0, ts=2 * HOUR) + record(offset=1, value=b"1", value_len=60), 2),
        E.INVALID_RECORD,
        LOG,
    ),
    # ProduceRequest.validateRecords: one magic-2 batch per partition.
    "two-batches": Case(lambda: good() + good(), E.INVALID_RECORD, EARLY),
    "magic-0": Case(lambda: good(magic=0), E.INVALID_RECORD, EARLY),
    "magic-1": Case(lambda: good(magic=1), E.INVALID_RECORD, EARLY),
    "no-records": Case(lambda: b"", E.INVALID_RECORD, EARLY),
    "only-part-of-a-batch": Case(lambda: good()[:40], E.INVALID_RECORD, EARLY),
    "good-batch-then-magic-3": Case(lambda: good() + good(magic=3), E.CORRUPT_MESSAGE, EARLY),
    # Refused for the whole request before anything else (KafkaApis, ReplicaManager).
    "magic-3": Case(lambda: good(magic=3), E.CORRUPT_MESSAGE, EARLY),
    "magic-minus-1": Case(lambda: good(magic=-1), E.CORRUPT_MESSAGE, EARLY),
    "length-10": Case(lambda: struct.pack(">qi", 0, 10) + bytes(30), E.CORRUPT_MESSAGE, EARLY),
    "length-20-too-short-for-a-producer-id": Case(lambda: cut_length(20), E.UNKNOWN_SERVER_ERROR, EARLY),
    "length-38-too-short-for-a-producer-id": Case(lambda: cut_length(38), E.UNKNOWN_SERVER_ERROR, EARLY),
    "transactional-without-transactional-id": Case(
        lambda: good(attributes=0x10, producer_id=5150, epoch=0, sequence=0),
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        EARLY,
    ),
}

# Odd, but Kafka accepts them as they are (and so must we).
ACCEPTED: dict[str, Callable[[], bytes]] = {
    "timestamp-30min-in-the-future": lambda: batch(records(1), 1, base_ts=now_ms() + HOUR // 2),
    "timestamp-1970": lambda: batch(records(1), 1, base_ts=1000),
    "timestamp-minus-1": lambda: batch(records(1), 1, base_ts=-1),
    "timestamp-minus-5": lambda: batch(records(1), 1, base_ts=-5),
    "log-append-time-flag-with-a-max-timestamp": lambda: good(attributes=0x08),
    "unknown-producer-id-at-sequence-5": lambda: good(producer_id=int(time.time() * 1000) % 10**9, epoch=0, sequence=5),
    "negative-producer-id-other-than-minus-1": lambda: good(producer_id=-5, epoch=0),
    "key-length-minus-5": lambda: batch(record(key=None, key_len=-5), 1),
    "non-utf8-header-key": lambda: batch(record(headers=((b"\xff\xfe", b"v"),)), 1),
    "uncompressed-inner-offsets-5-and-9": lambda: batch(record(offset=5) + record(offset=9), 2),
    "record-attributes-0x7f": lambda: batch(record()[:1] + b"\x7f" + record()[2:], 1),
    "zstd-record-length-over-its-fields": lambda: batch(record(size_delta=3), 1, codec=C.ZSTD),
    "gzip-record-length-under-its-fields": lambda: batch(record(size_delta=-1), 1, codec=C.GZIP),
    "five-stray-bytes-after-the-batch": lambda: good() + bytes(5),
    "part-of-a-second-batch-after-the-batch": lambda: good() + good()[:40],
    **{f"valid-{name}": (lambda c=c: batch(records(3), 3, codec=c)) for name, c in C.NAMES.items()},
}


# ---------------------------------------------------------------------------------------------------------------
# Talking to the brokers


@dataclass
class Target:
    name: str
    bootstrap: str

    def connect(self) -> Connection:
        host, port = self.bootstrap.rsplit(":", 1)
        return Connection(host, int(port), client_id="validation", timeout=30)


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    """The shared logbroker, or one Kafka 4.4 for the module (expiring producer ids every 200 ms)."""
    if request.param == "logbroker":
        yield Target("logbroker", request.getfixturevalue("broker").bootstrap)
        return
    with kafka_peer(**EXPIRY_SETTINGS) as bootstrap:
        yield Target("kafka", bootstrap)


@pytest.fixture
def conn(target: Target) -> Iterator[Connection]:
    c = target.connect()
    yield c
    c.close()


def topic_on(target: Target, conn: Connection, partitions: int = 1, config: dict[str, str] | None = None) -> str:
    """A new topic whose partitions answer ListOffsets (Kafka names a leader a moment before it serves)."""
    name = create_topic(target.bootstrap, unique("pv"), partitions, config)
    deadline = time.monotonic() + 30
    while any(_end_offset(conn, name, p)[0] for p in range(partitions)):
        assert time.monotonic() < deadline, f"{name} never became ready on {target.name}"
        time.sleep(0.1)
    return name


@pytest.fixture(scope="module")
def shared_topic(target: Target) -> str:
    with target.connect() as c:
        return topic_on(target, c)


def produce(
    conn: Connection,
    topic: str,
    parts: dict[int, bytes | None],
    *,
    version: int | None = None,
    acks: int = -1,
    transactional_id: str | None = None,
) -> dict[int, Any]:
    P = ProduceRequest.TopicProduceData
    req = ProduceRequest(
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=10_000,
        topic_data=[
            P(name=topic, partition_data=[P.PartitionProduceData(index=i, records=r) for i, r in parts.items()])
        ],
    )
    [t] = conn.do(req, version).responses
    return {p.index: p for p in t.partition_responses}


def produce_one(conn: Connection, topic: str, raw: bytes | None, **kw: Any) -> Any:
    return produce(conn, topic, {0: raw}, **kw)[0]


def _end_offset(conn: Connection, topic: str, partition: int = 0) -> tuple[int, int]:
    R = ListOffsetsRequest
    P = R.ListOffsetsTopic.ListOffsetsPartition
    req = R(
        replica_id=-1,
        isolation_level=0,
        topics=[R.ListOffsetsTopic(name=topic, partitions=[P(partition_index=partition, current_leader_epoch=-1,
                                                             timestamp=-1)])],
    )  # fmt: skip
    p = conn.do(req).topics[0].partitions[0]
    return p.error_code, p.offset


def end_offset(conn: Connection, topic: str, partition: int = 0) -> int:
    error, offset = _end_offset(conn, topic, partition)
    assert error == 0, E(error).name
    return offset


def fetch_raw(conn: Connection, topic: str, offset: int, partition: int = 0) -> bytes:
    [t] = conn.do(fetch_request(topic, partition, offset, max_wait_ms=0)).responses
    [p] = t.partitions
    assert p.error_code == 0, E(p.error_code).name
    return bytes(p.records or b"")


def names(p: Any) -> str:
    return E(p.error_code).name


def assert_refused(p: Any, case: Case) -> None:
    assert names(p) == case.error.name
    assert (p.base_offset, p.log_start_offset) == (-1, case.log_start)
    assert tuple(r.batch_index for r in p.record_errors or ()) == case.record_errors
    if case.error == E.INVALID_TIMESTAMP:
        assert p.error_message, "Kafka says why (One or more records have been rejected ...)"


def assert_nothing_stored(conn: Connection, topic: str, before: int, partition: int = 0) -> None:
    """The log is where it was: same end offset, and the next good batch lands there."""
    assert end_offset(conn, topic, partition) == before
    p = produce(conn, topic, {partition: good()})[partition]
    assert (names(p), p.base_offset) == ("NONE", before)


# ---------------------------------------------------------------------------------------------------------------
# The cases against both brokers


@pytest.mark.parametrize("case", list(REFUSED))
def test_malformed_batch_is_refused_as_kafka_does(conn: Connection, shared_topic: str, case: str) -> None:
    before = end_offset(conn, shared_topic)
    assert_refused(produce_one(conn, shared_topic, REFUSED[case].build()), REFUSED[case])
    assert_nothing_stored(conn, shared_topic, before)


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_what_kafka_accepts_is_accepted(conn: Connection, shared_topic: str, case: str) -> None:
    before = end_offset(conn, shared_topic)
    raw = ACCEPTED[case]()
    p = produce_one(conn, shared_topic, raw)
    assert (names(p), p.base_offset, p.log_start_offset) == ("NONE", before, 0)
    count = struct.unpack_from(">i", raw, RECORDS_COUNT)[0]
    assert end_offset(conn, shared_topic) == before + count


@pytest.mark.parametrize(
    ("version", "error"), [(3, "UNSUPPORTED_COMPRESSION_TYPE"), (6, "UNSUPPORTED_COMPRESSION_TYPE"), (7, "NONE")]
)
def test_zstd_needs_produce_v7(conn: Connection, shared_topic: str, version: int, error: str) -> None:
    before = end_offset(conn, shared_topic)
    p = produce_one(conn, shared_topic, batch(records(1), 1, codec=C.ZSTD), version=version)
    assert names(p) == error
    assert end_offset(conn, shared_topic) == before + (error == "NONE")


@pytest.mark.parametrize("name", ["bad topic!", "a" * 250, "..", "t/../../etc"])
def test_invalid_topic_name_is_unknown_topic(conn: Connection, name: str) -> None:
    """Kafka looks the name up and does not find it: UNKNOWN_TOPIC_OR_PARTITION (not INVALID_TOPIC_EXCEPTION)."""
    assert names(produce_one(conn, name, good())) == "UNKNOWN_TOPIC_OR_PARTITION"


def test_partition_out_of_range_is_unknown(conn: Connection, shared_topic: str) -> None:
    assert names(produce(conn, shared_topic, {7: good()})[7]) == "UNKNOWN_TOPIC_OR_PARTITION"


WHOLE_REQUEST = {
    "length-20-batch": (lambda: cut_length(20), "UNKNOWN_SERVER_ERROR"),
    "magic-3-batch": (lambda: good(magic=3), "CORRUPT_MESSAGE"),
    "length-10-batch": (lambda: struct.pack(">qi", 0, 10) + bytes(30), "CORRUPT_MESSAGE"),
    "transactional-batch": (lambda: good(attributes=0x10, producer_id=5151, epoch=0, sequence=0),
                            "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(WHOLE_REQUEST))
@pytest.mark.parametrize("bad_partition", [0, 1])
def test_a_bad_first_batch_fails_the_whole_request(
    target: Target, conn: Connection, case: str, bad_partition: int
) -> None:
    """These Kafka refuses for every partition of the request, the good one included: nothing is stored."""
    topic = topic_on(target, conn, partitions=2)
    build, error = WHOLE_REQUEST[case]
    parts = {0: good(), 1: good()}
    parts[bad_partition] = build()
    got = produce(conn, topic, parts)
    assert {i: (names(p), p.base_offset, p.log_start_offset) for i, p in got.items()} == {
        0: (error, -1, -1),
        1: (error, -1, -1),
    }
    assert [end_offset(conn, topic, i) for i in (0, 1)] == [0, 0]


def test_a_bad_batch_refuses_only_its_partition(target: Target, conn: Connection) -> None:
    topic = topic_on(target, conn, partitions=2)
    got = produce(conn, topic, {0: batch(record(value=b"1", value_len=60), 1), 1: good(2)})
    assert (names(got[0]), names(got[1]), got[1].base_offset) == ("INVALID_RECORD", "NONE", 0)
    assert [end_offset(conn, topic, i) for i in (0, 1)] == [0, 2]


@pytest.mark.parametrize("case", ["value-length-60-with-5-present", "magic-3", "length-20-too-short-for-a-producer-id"])
def test_refused_acks_0_produce_closes_the_connection(target: Target, shared_topic: str, case: str) -> None:
    """No answer to give an acks=0 client: Kafka closes its connection, and stores nothing."""
    with target.connect() as c:
        before = end_offset(c, shared_topic)
        P = ProduceRequest.TopicProduceData
        data = [P(name=shared_topic, partition_data=[P.PartitionProduceData(index=0, records=REFUSED[case].build())])]
        c.send(ProduceRequest(transactional_id=None, acks=0, timeout_ms=1000, topic_data=data))
        c.sock.settimeout(10)
        try:
            assert c.sock.recv(1) == b""
        except ConnectionResetError:
            pass
        except TimeoutError:
            pytest.fail("the connection stayed open")
    with target.connect() as c:
        assert end_offset(c, shared_topic) == before


# ---------------------------------------------------------------------------------------------------------------
# Timestamps: topic configs, LogAppendTime, and the max timestamp Kafka rewrites


@pytest.mark.parametrize(
    ("config", "base_ts", "expected"),
    [
        ({"message.timestamp.before.max.ms": str(HOUR)}, lambda: now_ms() - 2 * HOUR, "INVALID_TIMESTAMP"),
        ({"message.timestamp.before.max.ms": str(HOUR)}, lambda: now_ms() - HOUR // 2, "NONE"),
        ({"message.timestamp.before.max.ms": str(HOUR)}, lambda: -5, "INVALID_TIMESTAMP"),
        ({"message.timestamp.before.max.ms": str(HOUR)}, lambda: -1, "NONE"),  # -1: no timestamp, never checked
        ({"message.timestamp.after.max.ms": "0"}, lambda: now_ms() + 5000, "INVALID_TIMESTAMP"),
        ({"message.timestamp.after.max.ms": str(3 * HOUR)}, lambda: now_ms() + 2 * HOUR, "NONE"),
        ({"message.timestamp.type": "LogAppendTime"}, lambda: now_ms() + 5 * HOUR, "NONE"),
    ],
    ids=["before-1h-2h-old", "before-1h-30min-old", "before-1h-minus-5", "before-1h-minus-1", "after-0-5s-ahead",
         "after-3h-2h-ahead", "log-append-time-5h-ahead"],
)  # fmt: skip
def test_timestamp_bounds_from_topic_configs(
    target: Target, conn: Connection, config: dict[str, str], base_ts: Callable[[], int], expected: str
) -> None:
    topic = topic_on(target, conn, config=config)
    p = produce_one(conn, topic, batch(records(2), 2, base_ts=base_ts()))
    assert names(p) == expected
    if expected == "INVALID_TIMESTAMP":
        assert [r.batch_index for r in p.record_errors] == [0, 1]
    assert end_offset(conn, topic) == (2 if expected == "NONE" else 0)


def test_log_append_time_topic_refuses_a_client_stamped_batch(target: Target, conn: Connection) -> None:
    topic = topic_on(target, conn, config={"message.timestamp.type": "LogAppendTime"})
    p = produce_one(conn, topic, good(2, attributes=0x08))
    assert (names(p), [r.batch_index for r in p.record_errors]) == ("INVALID_TIMESTAMP", [0, 1])
    assert end_offset(conn, topic) == 0


@pytest.mark.parametrize("codec", [C.NONE, C.GZIP], ids=["plain", "gzip"])
def test_max_timestamp_is_rewritten_from_the_records(target: Target, conn: Connection, codec: int) -> None:
    """A client's max timestamp that disagrees with its records, or its LogAppendTime flag on a CreateTime
    topic, is replaced as Kafka replaces it (CRC recomputed): consumers and time lookups see the truth."""
    topic = topic_on(target, conn)
    base = now_ms() - 10_000
    lying = batch(record(offset=0) + record(offset=1, ts=7000), 2, codec=codec, base_ts=base, max_ts=base)
    flagged = batch(records(1), 1, codec=codec, attributes=0x08, base_ts=base, max_ts=base + 123)
    for raw in (lying, flagged):
        assert names(produce_one(conn, topic, raw)) == "NONE"
    stored = list(iter_headers(fetch_raw(conn, topic, 0), verify_crc=True))
    assert [(h.max_timestamp, h.attributes & 0x08) for h in stored] == [(base + 7000, 0), (base + 123, 0)]
    got = decode_records(fetch_raw(conn, topic, 0))
    assert [(r.offset, r.timestamp) for r in got] == [(0, base), (1, base + 7000), (2, base)]


# ---------------------------------------------------------------------------------------------------------------
# Idempotent producers


def test_idempotent_sequence_rules(target: Target, conn: Connection) -> None:
    """Kafka's ProducerAppendInfo: an unknown producer may start anywhere; a known one must continue."""
    topic = topic_on(target, conn)
    pid = 7_000_000 + uuid.uuid4().int % 1_000_000

    def send(epoch: int, seq: int) -> tuple[str, int, int]:
        p = produce_one(conn, topic, good(producer_id=pid, epoch=epoch, sequence=seq))
        return names(p), p.base_offset, p.log_start_offset

    assert send(3, 5) == ("NONE", 0, 0)  # unknown here: any sequence
    assert send(3, 5) == ("NONE", 0, 0)  # a retry: the original offset, nothing written
    assert send(3, 9) == ("OUT_OF_ORDER_SEQUENCE_NUMBER", -1, 0)
    assert send(2, 6) == ("INVALID_PRODUCER_EPOCH", -1, 0)
    assert send(4, 3) == ("OUT_OF_ORDER_SEQUENCE_NUMBER", -1, 0)  # a new epoch starts at 0
    assert send(3, 6) == ("NONE", 1, 0)
    assert send(4, 0) == ("NONE", 2, 0)
    assert send(3, 7) == ("INVALID_PRODUCER_EPOCH", -1, 0)
    assert end_offset(conn, topic) == 3


@pytest.fixture
def expiring(target: Target, tmp_path: Path) -> Iterator[Target]:
    """A broker expiring producer ids as EXPIRY_SETTINGS say: the module's Kafka, or a logbroker of its own."""
    if target.name == "kafka":
        yield target
        return
    proc = BrokerProcess(tmp_path / "data")
    proc.env = {f"LOGBROKER_{k.replace('.', '_').upper()}": str(v) for k, v in EXPIRY_SETTINGS.items()}
    proc.start()
    try:
        yield Target("logbroker-expiring", proc.bootstrap)
    finally:
        assert proc.stop() == 0, proc.log_tail()
        snapshot = json_producers(proc.data_dir)
        assert len(snapshot) <= 3, f"{len(snapshot)} producers left in the snapshot: {sorted(snapshot)[:10]}"


def json_producers(data_dir: Path) -> dict[str, Any]:
    import json

    out: dict[str, Any] = {}
    for f in data_dir.glob("*/producer-state.json"):
        out.update(json.loads(f.read_text())["producers"])
    return out


def test_producer_ids_expire_by_their_last_batch_timestamp(expiring: Target) -> None:
    """Kafka forgets a producer once its last batch's timestamp is producer.id.expiration.ms old (checked
    every producer.id.expiration.check.interval.ms): its retries are then written again, and it may carry
    on at its next sequence. A producer with recent batches is kept. 300 producers that each wrote once,
    a minute ago, leave nothing behind (logbroker: at most the 3 producers the test brings back are in the
    producer-state snapshot written at the stop)."""
    with expiring.connect() as c:
        topic = topic_on(expiring, c)
        base_pid = 8_000_000 + uuid.uuid4().int % 1_000_000
        retried, returning, fresh_pid = base_pid, base_pid + 1, base_pid + 2
        old_stamp = now_ms() - 2 * EXPIRY_MS

        def old(pid: int, seq: int, n: int = 1) -> bytes:
            return batch(records(n), n, base_ts=old_stamp, producer_id=pid, epoch=0, sequence=seq)

        fresh = good(2, producer_id=fresh_pid, epoch=0, sequence=0)
        assert produce_one(c, topic, old(retried, 0, 2)).base_offset == 0
        assert produce_one(c, topic, fresh).base_offset == 2
        assert produce_one(c, topic, old(returning, 0)).base_offset == 4
        for i in range(300):
            assert names(produce_one(c, topic, old(base_pid + 10 + i, 0))) == "NONE"
        time.sleep(1.5)  # several expiry checks
        assert produce_one(c, topic, old(retried, 0, 2)).base_offset == 305  # forgotten: its retry is new data
        assert produce_one(c, topic, fresh).base_offset == 2  # known: still a duplicate
        gap = produce_one(c, topic, good(producer_id=fresh_pid, epoch=0, sequence=5))
        assert names(gap) == "OUT_OF_ORDER_SEQUENCE_NUMBER"
        p = produce_one(c, topic, old(returning, 9))
        assert (names(p), p.base_offset) == ("NONE", 307)  # an expired producer comes back at any sequence


def test_pipelined_produces_append_in_order(target: Target, conn: Connection) -> None:
    """Two produce requests pipelined on one connection append in the order sent, even when the first one
    carries batches large enough for the broker to serve other clients between its partitions."""
    topic = topic_on(target, conn, partitions=3)
    pid = 6_000_000 + uuid.uuid4().int % 1_000_000

    def big(producer_id: int) -> bytes:
        body = b"".join(record(offset=i, value=bytes(200)) for i in range(2000))
        return batch(body, 2000, producer_id=producer_id, epoch=0, sequence=0)

    P = ProduceRequest.TopicProduceData

    def request(parts: dict[int, bytes]) -> Any:
        data = [P(name=topic, partition_data=[P.PartitionProduceData(index=i, records=r) for i, r in parts.items()])]
        return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=data)

    first = conn.send(request({0: big(pid), 1: big(pid + 1), 2: good(producer_id=pid + 2, epoch=0, sequence=0)}))
    second = conn.send(request({2: good(producer_id=pid + 2, epoch=0, sequence=1)}))
    answers = [conn.receive(spec, version, cid) for cid, version, spec in (first, second)]
    got = [{p.index: (names(p), p.base_offset) for p in a.responses[0].partition_responses} for a in answers]
    assert got == [{0: ("NONE", 0), 1: ("NONE", 0), 2: ("NONE", 0)}, {2: ("NONE", 1)}]


# ---------------------------------------------------------------------------------------------------------------
# A real client reads every valid record after all the bad attempts


def test_confluent_kafka_reads_every_valid_record_after_the_bad_attempts(target: Target, conn: Connection) -> None:
    topic = topic_on(target, conn)
    expected: list[bytes] = []
    for i, case in enumerate(REFUSED.values()):
        assert names(produce_one(conn, topic, case.build())) == case.error.name
        value = f"good-{i}".encode()
        codec = list(C.NAMES.values())[i % 5]
        assert names(produce_one(conn, topic, batch(record(value=value), 1, codec=codec))) == "NONE"
        expected.append(value)
    got = read_topic(target.bootstrap, topic, partitions=1)
    assert [m.value() for m in got] == expected
    assert [m.offset() for m in got] == list(range(len(expected)))


# ---------------------------------------------------------------------------------------------------------------
# logbroker only


def test_a_batch_inflating_past_the_request_limit_is_too_large(tmp_path: Path) -> None:
    """Kafka streams a compressed batch and never holds it whole; logbroker inflates it into memory, so it
    refuses a batch that inflates past socket.request.max.bytes (MESSAGE_TOO_LARGE: a Java producer then
    splits it) instead of letting 1 MB of zstd become gigabytes of RSS."""
    proc = BrokerProcess(tmp_path / "data")
    proc.env = {"LOGBROKER_SOCKET_REQUEST_MAX_BYTES": str(2 << 20)}
    proc.start()
    try:
        t = Target("logbroker", proc.bootstrap)
        with t.connect() as c:
            topic = topic_on(t, c)
            bomb = batch(record(value=bytes(3 << 20)), 1, codec=C.ZSTD)
            assert len(bomb) < 1 << 20
            p = produce_one(c, topic, bomb)
            assert (names(p), p.log_start_offset) == ("MESSAGE_TOO_LARGE", -1)
            ok = batch(record(value=bytes(1 << 20)), 1, codec=C.ZSTD)
            assert names(produce_one(c, topic, ok)) == "NONE"
            assert end_offset(c, topic) == 1
        assert "inflates to" in proc.log_tail(50)
    finally:
        assert proc.stop() == 0


NOW = 1_700_000_000_000
VALIDATION = {
    "now_ms": NOW,
    "max_message_bytes": 1 << 24,
    "log_append_time": False,
    "before_max_ms": (1 << 63) - 1,
    "after_max_ms": HOUR,
    "max_inflated_bytes": 1 << 24,
}
record_st = st.builds(
    NewRecord,
    key=st.none() | st.binary(max_size=20),
    value=st.none() | st.binary(max_size=300),
    headers=st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=3),
    timestamp=st.none() | st.integers(NOW - 10**9, NOW + HOUR),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recs=st.lists(record_st, min_size=1, max_size=20), codec=st.sampled_from(list(C.NAMES.values())), data=st.data())
def test_every_built_batch_passes_and_any_mutation_is_answered(recs: list[NewRecord], codec: int, data: Any) -> None:
    """In-process: what build_batch makes (any codec) passes validation unchanged; the same batch with any
    byte of its records section changed (CRC recomputed) is either accepted or refused with InvalidBatch,
    never another exception (which would be a traceback in the broker)."""
    raw = bytearray(build_batch(recs, compression=codec, now_ms=NOW))
    original = bytes(raw)
    h = validate_batch(memoryview(raw), **VALIDATION)
    assert bytes(raw) == original and h.records_count == len(recs)
    pos = data.draw(st.integers(HEADER_SIZE, len(raw) - 1), label="position")
    raw[pos] = data.draw(st.integers(0, 255).filter(lambda b: b != raw[pos]), label="byte")
    cut = data.draw(st.integers(0, 3), label="cut")
    if cut:
        del raw[-cut:]
        struct.pack_into(">i", raw, BATCH_LENGTH, len(raw) - LOG_OVERHEAD)
    recrc(raw)
    try:
        validate_batch(memoryview(raw), **VALIDATION)
    except InvalidBatch as exc:
        assert exc.error in (E.INVALID_RECORD, E.UNKNOWN_SERVER_ERROR, E.INVALID_TIMESTAMP, E.MESSAGE_TOO_LARGE)
