"""Message sets of magic 0 and 1 in and out of v2 batches (`protocol/legacy.py`), checked against an
independent codec: kafka-python's legacy record builder and reader (what kafka-python 1.x-3.x sends to
and reads from pre-0.11 brokers). In-process; the broker-level exchanges are in test_old_protocol.py."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from logbroker.protocol import ErrorCode as E
from logbroker.protocol.legacy import down_convert, read_message_set, records_magic, to_batch
from logbroker.protocol.records import (
    TIMESTAMP_TYPE_MASK,
    Compression,
    InvalidBatch,
    NewRecord,
    build_batch,
    build_marker,
    decode_batch,
)

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4]
LIMITS = {"log_append_time": False, "max_message_bytes": 1 << 20, "max_inflated_bytes": 1 << 24}
payload = st.one_of(st.none(), st.binary(max_size=64))


def legacy_set(magic: int, codec: int, messages: list[tuple[bytes | None, bytes | None, int]]) -> bytes:
    """kafka-python's encoding of (key, value, timestamp) messages, offsets 0..n-1."""
    b = LegacyRecordBatchBuilder(magic, codec, 1 << 30)
    for i, (key, value, ts) in enumerate(messages):
        assert b.append(i, ts, key, value) is not None
    return bytes(b.build())


def read_legacy(data: bytes) -> list[tuple[int, int, int, bytes | None, bytes | None]]:
    """(magic, offset, timestamp, key, value) of every message, by kafka-python's reader (CRCs checked)."""
    out = []
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        for r in batch:
            assert r.validate_crc()
            out.append((batch.magic, r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value))
    return out


@settings(max_examples=60, deadline=None)
@given(
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from(CODECS),
    messages=st.lists(st.tuples(payload, payload, st.integers(0, 2**41)), min_size=1, max_size=8),
)
def test_a_legacy_set_becomes_one_v2_batch_of_the_same_records(magic: int, codec: int, messages: list) -> None:
    data = legacy_set(magic, codec, messages)
    assert records_magic(data) == magic
    batch = to_batch(data, **LIMITS)
    h, records = decode_batch(bytes(batch))
    assert h.magic == 2 and h.compression == codec and h.producer_id == -1 and not h.is_transactional
    assert h.base_offset == 0 and [r.offset for r in records] == list(range(len(messages)))
    want_ts = [ts if magic == 1 else -1 for _k, _v, ts in messages]
    assert [(r.key, r.value, r.timestamp) for r in records] == [(k, v, t) for (k, v, _), t in
                                                                zip(messages, want_ts, strict=True)]  # fmt: skip
    assert all(r.headers == [] for r in records)


@settings(max_examples=60, deadline=None)
@given(
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from(CODECS),
    log_append_time=st.booleans(),
    messages=st.lists(st.tuples(payload, payload, st.integers(0, 2**41)), min_size=1, max_size=8),
    base=st.integers(0, 2**40),
    skip=st.integers(0, 3),
)
def test_stored_batches_read_back_in_the_old_formats(magic: int, codec: int, log_append_time: bool,
                                                     messages: list, base: int, skip: int) -> None:  # fmt: skip
    """Down-conversion as Kafka 3.9 does it: offsets kept, timestamps kept in magic 1 (the batch's for
    LogAppendTime), headers dropped; a plain batch leaves out offsets before the fetch position, a
    compressed one is one wrapper the reader skips through."""
    records = [NewRecord(k, v, [("h", b"x")], ts) for k, v, ts in messages]
    raw = bytearray(build_batch(records, base_offset=base, compression=codec))
    stamped = 2**40 + 7
    if log_append_time:  # as the append stamps it: the flag and the max timestamp
        attrs = struct.unpack_from(">h", raw, 21)[0] | TIMESTAMP_TYPE_MASK
        struct.pack_into(">h", raw, 21, attrs)
        struct.pack_into(">q", raw, 35, stamped)
    fetch_offset = base + min(skip, len(messages) - 1)
    marker = build_marker(5, 0, commit=True)  # control batches are left out
    stored = bytes(raw) + marker
    got = read_legacy(down_convert(stored, magic, fetch_offset))
    first = fetch_offset if codec == Compression.NONE else base
    want = []
    for i, (k, v, ts) in enumerate(messages):
        if base + i < first:
            continue
        t = -1 if magic == 0 else (stamped if log_append_time else ts)
        want.append((magic, base + i, t, k, v))
    assert got == want


def test_only_whole_batches_fit_after_the_first() -> None:
    one = build_batch([NewRecord(b"k", b"v" * 100)], base_offset=0)
    two = build_batch([NewRecord(b"k", b"v" * 100)], base_offset=1)
    both = down_convert(one + two, 1, 0)
    assert [o for _m, o, *_ in read_legacy(both)] == [0, 1]
    # Tiny records take more bytes as legacy messages than in a v2 batch: the first batch is sent whole
    # anyway, and the next one no longer fits in what was read.
    tiny = build_batch([NewRecord(None, b"x") for _ in range(50)], base_offset=0)
    after = build_batch([NewRecord(None, b"y")], base_offset=50)
    converted = down_convert(tiny + after, 1, 0)
    assert len(converted) > len(tiny + after)
    assert [o for _m, o, *_ in read_legacy(converted)] == list(range(50))


def test_a_zstd_batch_cannot_go_to_an_old_reader() -> None:
    zstd = build_batch([NewRecord(b"k", b"v")], base_offset=3, compression=Compression.ZSTD)
    plain = build_batch([NewRecord(b"k", b"v")], base_offset=2)
    with pytest.raises(InvalidBatch) as info:
        down_convert(zstd, 1, 3)
    assert info.value.error == E.UNSUPPORTED_COMPRESSION_TYPE
    assert [o for _m, o, *_ in read_legacy(down_convert(plain + zstd, 1, 2))] == [2]  # ends before it


def _message(magic: int, attrs: int, key: bytes | None, value: bytes | None, ts: int = 0, offset: int = 0,
             crc: int | None = None) -> bytes:  # fmt: skip
    body = bytes([magic, attrs]) + (struct.pack(">q", ts) if magic else b"")
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body) if crc is None else crc) + body


def _refused(data: bytes, **limits: object) -> InvalidBatch:
    with pytest.raises(InvalidBatch) as info:
        to_batch(data, **{**LIMITS, **limits})  # type: ignore[arg-type]
    return info.value


def test_refusals_carry_kafka_3_9_s_codes() -> None:
    ok = _message(1, 0, b"k", b"v")
    assert _refused(_message(1, 0, b"k", b"v", crc=1)).error == E.CORRUPT_MESSAGE
    assert _refused(struct.pack(">qi", 0, 13) + b"\0" * 13).error == E.CORRUPT_MESSAGE  # under the overhead
    bad_magic = bytearray(ok)
    bad_magic[16] = 3
    assert _refused(bytes(bad_magic)).error == E.CORRUPT_MESSAGE
    assert _refused(ok + _message(0, 0, b"k", b"v")).error == E.INVALID_RECORD  # one magic per partition
    wrapper = legacy_set(1, Compression.GZIP, [(b"k", b"v", 5)])
    assert _refused(wrapper + wrapper).error == E.INVALID_RECORD  # one wrapper at most
    assert _refused(wrapper + ok).error == E.INVALID_RECORD
    assert _refused(_message(1, Compression.ZSTD, None, b"x")).error == E.INVALID_RECORD
    assert _refused(_message(1, 6, None, b"x")).error == E.UNKNOWN_SERVER_ERROR
    assert _refused(_message(1, Compression.GZIP, None, None)).error == E.INVALID_RECORD
    nested = _message(1, Compression.GZIP, None, _gzip(wrapper))
    assert _refused(nested).error == E.INVALID_RECORD  # an inner message may not be compressed
    mixed = _message(1, Compression.GZIP, None, _gzip(_message(0, 0, b"k", b"v")))
    assert _refused(mixed).error == E.INVALID_RECORD
    assert _refused(ok, max_message_bytes=len(ok) - 1).error == E.MESSAGE_TOO_LARGE
    claims = _message(1, TIMESTAMP_TYPE_MASK, b"k", b"v", ts=5)
    refused = _refused(claims, log_append_time=True)
    assert refused.error == E.INVALID_TIMESTAMP and refused.record_errors[0][0] == 0
    assert decode_batch(bytes(to_batch(claims, **LIMITS)))[1][0].timestamp == 5  # CreateTime: not inspected
    assert _refused(_message(1, TIMESTAMP_TYPE_MASK, b"k", b"v", ts=-1)).error == E.INVALID_TIMESTAMP
    assert _refused(_message(1, 0, b"k", b"v", ts=-5)).error == E.UNKNOWN_SERVER_ERROR
    assert _refused(ok[:-1]).error == E.INVALID_RECORD  # nothing complete: a cut-off tail is dropped
    assert len(read_message_set(ok + ok[:20])) == 1


def test_a_magic_1_wrapper_with_log_append_time_gives_its_time_to_the_inner_messages() -> None:
    inner = _message(1, 0, b"a", b"1", ts=10, offset=0) + _message(1, 0, b"b", b"2", ts=20, offset=1)
    wrapper = _message(1, Compression.GZIP | TIMESTAMP_TYPE_MASK, None, _gzip(inner), ts=99, offset=1)
    # Declaring LogAppendTime is refused on a LogAppendTime topic, and taken as CreateTime 99 on another.
    assert _refused(wrapper, log_append_time=True).error == E.INVALID_TIMESTAMP
    assert [r.timestamp for r in decode_batch(bytes(to_batch(wrapper, **LIMITS)))[1]] == [99, 99]
    low = _message(1, Compression.GZIP, None, _gzip(inner), ts=0, offset=0)  # librdkafka's wrapper offset 0
    assert [r.key for r in decode_batch(bytes(to_batch(low, **LIMITS)))[1]] == [b"a", b"b"]
    short = _message(1, Compression.GZIP, None, _gzip(inner + _message(1, 0, b"c", b"3", offset=5)), offset=2)
    assert _refused(short).error == E.INVALID_RECORD  # a wrapper offset below its last inner offset


def _gzip(data: bytes) -> bytes:
    import gzip

    return gzip.compress(data)
