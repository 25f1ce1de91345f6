"""Message sets of magic 0 and 1 (the format before Kafka 0.11): read from Produce v0-v2, written for
Fetch v0-v3.

logbroker stores only v2 batches, as Kafka 3.x does. A partition's legacy messages become one v2 batch
here (`to_batch`), which then goes through the same validation and append as any client's batch: the
rules are Kafka 3.9's LogValidator for a magic 0/1 source (CRC32 per message, one magic per partition,
one compressed wrapper at most, no zstd, inner messages plain and of the wrapper's magic, a producer
may not claim LogAppendTime). Offsets the client wrote are ignored, magic-0 messages carry no timestamp
(-1), and the batch is neither idempotent nor transactional. `down_convert` is the way back for old
fetch versions: headers dropped, offsets and (magic 1) timestamps kept, a compressed batch re-compressed
with its codec into one wrapper, control batches left out.

Layout of one entry: offset int64, size int32, then the message: crc uint32 (CRC32 of what follows),
magic int8, attributes int8 (codec in bits 0-2, LogAppendTime in bit 3 for magic 1), timestamp int64
(magic 1 only), key and value as int32-length bytes (-1: null).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import xxhash

from .errors import ErrorCode as E
from .records import (
    TIMESTAMP_TYPE_MASK,
    Compression,
    InvalidBatch,
    NewRecord,
    build_batch,
    compress,
    decode_batch,
    decompress,
    iter_headers,
)

__all__ = ["LegacyMessage", "down_convert", "read_message_set", "records_magic", "to_batch"]

MAGIC_AT = 16  # the magic byte's position in a legacy entry and in a v2 batch alike
_ENTRY = struct.Struct(">qi")
_MESSAGE_HEAD = struct.Struct(">IBB")
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
MIN_MESSAGE = 14  # crc, magic, attributes, key and value lengths: LegacyRecord.RECORD_OVERHEAD_V0
NO_TIMESTAMP = -1
_LZ4_MAGIC = b"\x04\x22\x4d\x18"


@dataclass(frozen=True, slots=True)
class LegacyMessage:
    offset: int
    magic: int
    attributes: int
    timestamp: int  # NO_TIMESTAMP for magic 0
    key: bytes | None
    value: bytes | None

    @property
    def codec(self) -> int:
        return self.attributes & 0x07

    @property
    def log_append_time(self) -> bool:
        return self.magic > 0 and bool(self.attributes & TIMESTAMP_TYPE_MASK)


def records_magic(records: bytes | memoryview) -> int | None:
    """The magic of the first entry or batch (None for fewer than 17 bytes)."""
    return records[MAGIC_AT] if len(records) > MAGIC_AT else None


def read_message_set(buf: bytes | memoryview, max_entry_bytes: int | None = None) -> list[LegacyMessage]:
    """Every complete entry of a message set, checked as Kafka's log input stream and
    `LogValidator` check them: a size below the message overhead or a bad magic is CORRUPT_MESSAGE, an
    entry over ``max_entry_bytes`` (message.max.bytes, its 12-byte prefix counted) MESSAGE_TOO_LARGE, a
    CRC32 mismatch CORRUPT_MESSAGE. A cut-off entry at the end is dropped, as Kafka drops it."""
    mv = memoryview(buf)
    out: list[LegacyMessage] = []
    pos = 0
    while len(mv) - pos >= _ENTRY.size:
        offset, size = _ENTRY.unpack_from(mv, pos)
        if size < MIN_MESSAGE:
            raise InvalidBatch(
                f"Record size {size} is less than the minimum record overhead ({MIN_MESSAGE})", E.CORRUPT_MESSAGE
            )
        if len(mv) - pos - _ENTRY.size < size:
            break
        if max_entry_bytes is not None and size + _ENTRY.size > max_entry_bytes:
            raise InvalidBatch(
                f"The record batch size in the append to the partition is {size + _ENTRY.size} bytes which "
                f"exceeds the maximum configured value of {max_entry_bytes}.",
                E.MESSAGE_TOO_LARGE,
            )
        msg = mv[pos + _ENTRY.size : pos + _ENTRY.size + size]
        out.append(_message(offset, msg))
        pos += _ENTRY.size + size
    return out


def _message(offset: int, msg: memoryview) -> LegacyMessage:
    crc, magic, attributes = _MESSAGE_HEAD.unpack_from(msg, 0)
    if magic > 2:
        raise InvalidBatch(f"Invalid magic found in record: {magic}", E.CORRUPT_MESSAGE)
    if magic == 2:
        raise InvalidBatch("a magic 2 batch among legacy messages (one magic per partition)", E.INVALID_RECORD)
    computed = zlib.crc32(msg[4:])
    if computed != crc:
        raise InvalidBatch(f"Record is corrupt (stored crc = {crc}, computed crc = {computed})", E.CORRUPT_MESSAGE)
    pos = 6
    timestamp = NO_TIMESTAMP
    try:
        if magic == 1:
            timestamp = _Q.unpack_from(msg, pos)[0]
            pos += 8
        key, pos = _bytes(msg, pos)
        value, pos = _bytes(msg, pos)
    except (struct.error, ValueError):
        raise InvalidBatch("message fields run past its size", E.CORRUPT_MESSAGE) from None
    if pos != len(msg):
        raise InvalidBatch("message size does not match its fields", E.CORRUPT_MESSAGE)
    return LegacyMessage(offset, magic, attributes, timestamp, key, value)


def _bytes(msg: memoryview, pos: int) -> tuple[bytes | None, int]:
    n = _I.unpack_from(msg, pos)[0]
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > len(msg):
        raise ValueError("short")
    return bytes(msg[pos : pos + n]), pos + n


def to_batch(records: bytes | memoryview, *, log_append_time: bool, max_message_bytes: int,
             max_inflated_bytes: int) -> bytearray:  # fmt: skip
    """A partition's legacy message set as one v2 batch with base offset 0 (CreateTime, or the topic's
    LogAppendTime stamped later by the append), for the v2 validation and the append to take from here.
    Raises InvalidBatch with Kafka 3.9's error code; record indexes in its errors are message positions."""
    outer = read_message_set(records, max_message_bytes)
    if not outer:
        raise InvalidBatch("a produce of no complete message", E.INVALID_RECORD)
    magic = outer[0].magic
    for m in outer:
        if m.magic != magic:
            raise InvalidBatch(f"Record batch magic {m.magic} does not match the first one's ({magic})",
                               E.INVALID_RECORD)  # fmt: skip
    codec = outer[0].codec
    if any(m.codec for m in outer):
        if len(outer) > 1:
            raise InvalidBatch("Compressed outer record has more than one batch", E.INVALID_RECORD)
        messages = _inner(outer[0], max_inflated_bytes)
    else:
        messages = outer
    claims = [i for i, m in enumerate(messages) if m.log_append_time and (log_append_time or m.timestamp < 0)]
    if claims:
        raise InvalidBatch(
            "One or more records have been rejected due to invalid timestamp",
            E.INVALID_TIMESTAMP,
            record_errors=[(i, "Producer should not set timestamp type to LogAppendTime.") for i in claims],
            log_start=True,
        )
    for m in messages:
        if m.timestamp < NO_TIMESTAMP:
            raise InvalidBatch(f"Invalid negative timestamp {m.timestamp}", E.UNKNOWN_SERVER_ERROR)
    batch = build_batch([NewRecord(m.key, m.value, (), m.timestamp) for m in messages], compression=codec)
    return bytearray(batch)


def _inner(wrapper: LegacyMessage, max_inflated_bytes: int) -> list[LegacyMessage]:
    """The messages inside a compressed wrapper; a magic-1 wrapper with LogAppendTime gives them its time."""
    codec = wrapper.codec
    if codec == Compression.ZSTD:
        raise InvalidBatch("ZSTD is not supported for messages of magic 0 or 1", E.INVALID_RECORD)
    if codec > Compression.ZSTD:
        raise InvalidBatch(f"Unknown compression type id: {codec}", E.UNKNOWN_SERVER_ERROR)
    if wrapper.value is None:
        raise InvalidBatch("Found invalid compressed record set with null value", E.INVALID_RECORD)
    data = _decompress(codec, wrapper.value, wrapper.magic, max_inflated_bytes)
    inner = read_message_set(data)
    if not inner:
        raise InvalidBatch("Found invalid compressed record set with no inner records", E.INVALID_RECORD)
    for m in inner:
        if m.codec:
            raise InvalidBatch(
                "Compressed outer record should not have an inner record with a compression attribute set",
                E.INVALID_RECORD,
            )
        if m.magic != wrapper.magic:
            raise InvalidBatch(f"Compressed message magic {wrapper.magic} does not match inner magic {m.magic}",
                               E.INVALID_RECORD)  # fmt: skip
    if wrapper.magic == 1 and wrapper.offset != 0 and wrapper.offset < inner[-1].offset:
        raise InvalidBatch(f"Found invalid wrapper offset in compressed v1 message set, wrapper offset "
                           f"'{wrapper.offset}' is less than the last inner message offset '{inner[-1].offset}'",
                           E.INVALID_RECORD)  # fmt: skip
    if wrapper.log_append_time:
        inner = [LegacyMessage(m.offset, m.magic, m.attributes | TIMESTAMP_TYPE_MASK, wrapper.timestamp, m.key,
                               m.value) for m in inner]  # fmt: skip
    return inner


def _decompress(codec: int, data: bytes, magic: int, limit: int) -> bytes:
    if codec == Compression.LZ4 and magic == 0:
        data = _lz4_checksum(data, of_magic=False)
    try:
        out = decompress(codec, data)
    except Exception as exc:  # any codec failure, as Kafka's decompressing stream fails unexpectedly
        raise InvalidBatch(f"Failed to decompress record stream: {exc}", E.UNKNOWN_SERVER_ERROR) from None
    if len(out) > limit:
        raise InvalidBatch(f"compressed message set inflates to {len(out)} bytes, over this broker's limit "
                           f"of {limit}", E.MESSAGE_TOO_LARGE)  # fmt: skip
    return out


def _lz4_checksum(frame: bytes, *, of_magic: bool) -> bytes:
    """The LZ4 frame with its header checksum recomputed: over the descriptor (the standard), or, for what
    Kafka writes in magic 0, over the frame's magic bytes and the descriptor (its old mistake)."""
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        return frame
    end = 6 + (8 if frame[4] & 0x08 else 0)  # FLG, BD, and the content size when flagged
    if len(frame) <= end:
        return frame
    start = 0 if of_magic else 4
    hc = (xxhash.xxh32_intdigest(frame[start:end]) >> 8) & 0xFF
    return frame[:end] + bytes([hc]) + frame[end + 1 :]


# ---------------------------------------------------------------------------------------------------------------
# Down-conversion (Fetch v0-v3)


def _write(out: bytearray, offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None,
           value: bytes | None) -> None:  # fmt: skip
    body = bytearray((magic, attributes))
    if magic == 1:
        body += _Q.pack(timestamp)
    for part in (key, value):
        if part is None:
            body += _I.pack(-1)
        else:
            body += _I.pack(len(part))
            body += part
    out += _ENTRY.pack(offset, len(body) + 4)
    out += struct.pack(">I", zlib.crc32(body))
    out += body


def _convert_batch(batch: memoryview, magic: int, fetch_offset: int) -> bytes:
    h, records = decode_batch(batch, verify_crc=False)
    if not records:  # a batch compaction emptied (kept for its producer state): nothing to write
        return b""
    lat = bool(h.attributes & TIMESTAMP_TYPE_MASK)
    flag = TIMESTAMP_TYPE_MASK if lat and magic == 1 else 0
    out = bytearray()
    if h.compression == Compression.NONE:
        for r in records:
            if r.offset >= fetch_offset:  # librdkafka relies on earlier offsets of a batch being left out
                _write(out, r.offset, magic, flag, h.max_timestamp if lat else r.timestamp, r.key, r.value)
        return bytes(out)
    inner = bytearray()
    first = records[0].offset
    for r in records:  # a wrapper is converted whole: the client skips offsets before its position
        _write(inner, r.offset if magic == 0 else r.offset - first, magic, 0,
               h.max_timestamp if lat else r.timestamp, r.key, r.value)  # fmt: skip
    payload = compress(h.compression, bytes(inner))
    if h.compression == Compression.LZ4 and magic == 0:
        payload = _lz4_checksum(payload, of_magic=True)
    newest = h.max_timestamp if lat else max(r.timestamp for r in records)
    _write(out, records[-1].offset, magic, h.compression | flag, newest, None, payload)
    return bytes(out)


def down_convert(data: bytes | memoryview, magic: int, fetch_offset: int) -> bytes:
    """Stored v2 batches as a message set of ``magic`` (0 for Fetch v0-v1, 1 for v2-v3), about as large as
    what was read: the first batch always (so a reader makes progress), then whole batches while the
    total stays within ``len(data)``. Control batches are left out. A zstd batch cannot be written in an
    old format: first, it raises InvalidBatch(UNSUPPORTED_COMPRESSION_TYPE); later, the answer ends before
    it, and the next fetch, starting there, gets the error."""
    mv = memoryview(data)
    out = bytearray()
    for h in iter_headers(mv):
        if h.is_control:
            continue
        if h.compression == Compression.ZSTD:
            if out:
                break
            raise InvalidBatch(f"zstd batch at offset {h.base_offset} cannot be read in message format {magic}",
                               E.UNSUPPORTED_COMPRESSION_TYPE)  # fmt: skip
        converted = _convert_batch(mv[h.position : h.position + h.size], magic, fetch_offset)
        if out and len(out) + len(converted) > len(mv):
            break
        out += converted
    return bytes(out)
