"""Produce validation with the answers Apache Kafka 4.4 gives, stage by stage.

Kafka checks a produced partition in four places, and where a check sits decides what the client hears:

1. `first_batch_is_transactional` (KafkaApis, before anything else, over the first batch of every
   partition): a length under 14 or a magic outside 0-2 fails the whole request with CORRUPT_MESSAGE; a
   transactional batch without a transactional id fails it with TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
2. `single_batch` (ProduceRequest.validateRecords, per partition, v3+): exactly one magic-2 batch
   (INVALID_RECORD), zstd only from Produce v7 (UNSUPPORTED_COMPRESSION_TYPE). Bytes after the batch
   that do not make a whole second batch are dropped, as Kafka trims them.
3. `short_first_batch` (ReplicaManager, over every partition that got this far): a magic-2 batch too
   short to hold a producer id fails the whole request with UNKNOWN_SERVER_ERROR.
4. `validate_batch` (UnifiedLog.analyzeAndValidateRecords, then LogValidator): base offset 0, size,
   CRC, codec, count against offsets, no control batch, a sequence with a producer id; then every record
   is walked (DefaultRecord.readFrom for plain batches, readPartiallyFrom over the decompressed stream for
   compressed ones) and its timestamp checked against message.timestamp.before/after.max.ms (KIP-937).

Errors raised in stages 1 and 3 are `RequestRefused` (every partition of the request gets the code);
the others are `InvalidBatch`, whose `log_start` says whether Kafka reports the partition's log start
offset with the error. Arithmetic follows Java's (int32 varints, int64 timestamps, both wrapping), so
extreme values get Kafka's answer too.

The record walk is the produce path's only per-record cost: it is written flat, with one- and two-byte
varints inline, and decodes nothing it does not check (see docs/design.md, "Produce validation").
"""

from __future__ import annotations

import struct
import threading

import cramjam
from crc32c import crc32c

from .errors import ErrorCode
from .records import (
    ATTRIBUTES,
    CONTROL_FLAG,
    CRC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MAX_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    Compression,
    InvalidBatch,
    parse_header,
)

E = ErrorCode
_I32 = struct.Struct(">i")
_Q = struct.Struct(">q")
_H = struct.Struct(">h")
_U32 = struct.Struct(">I")

# Smallest `batchLength` Kafka's batch iterator accepts (LegacyRecord.RECORD_OVERHEAD_V0).
MIN_BATCH_LENGTH = 14
# A magic-2 batch shorter than this cannot hold a producer id (offset 43, 8 bytes): Kafka fails the request.
MIN_SIZE_FOR_PRODUCER_ID = 51
FIRST_ZSTD_VERSION = 7
NO_TIMESTAMP = -1
LONG_MAX = (1 << 63) - 1
_U64 = (1 << 64) - 1
_SAFE = 1 << 62  # timestamps inside +-2^62 cannot wrap in the bounds check: the fast path applies
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_OVERFLOW = "failed to write whole buffer"  # cramjam's words when an output buffer is too small
_KEEP_SCRATCH = 16 << 20
_scratch = threading.local()


class RequestRefused(Exception):
    """A produce Kafka fails as a whole: every partition of the request gets `error`."""

    def __init__(self, error: ErrorCode, message: str | None) -> None:
        super().__init__(message or error.name)
        self.error = error
        self.message = message


class _Overlong(Exception):
    """A varint longer than Java's ByteUtils reads (5 bytes for int32, 10 for int64)."""


def _wrap64(n: int) -> int:
    return ((n + (1 << 63)) & _U64) - (1 << 63)


# ---------------------------------------------------------------------------------------------------------------
# Stages 1-3: what KafkaApis and ReplicaManager see of a partition's records


def _next_batch_size(records: memoryview, pos: int) -> int | None:
    """Kafka's ByteBufferLogInputStream.nextBatchSize + nextBatch: the size of the whole batch at `pos`,
    None when the bytes there are not a whole batch; CORRUPT_MESSAGE for a bad length or magic."""
    remaining = len(records) - pos
    if remaining < LOG_OVERHEAD:
        return None
    length = _I32.unpack_from(records, pos + 8)[0]
    if length < MIN_BATCH_LENGTH:
        raise InvalidBatch(f"Record size {length} is less than the minimum record overhead ({MIN_BATCH_LENGTH})")
    if remaining < MAGIC + 1:
        return None
    magic = struct.unpack_from(">b", records, pos + MAGIC)[0]
    if magic < 0 or magic > 2:
        raise InvalidBatch(f"Invalid magic found in record: {magic}")
    size = length + LOG_OVERHEAD
    return size if remaining >= size else None


def first_batch_is_transactional(records: memoryview) -> bool:
    """Stage 1 for one partition: is its first batch transactional? RequestRefused(CORRUPT_MESSAGE) for a
    first batch whose length or magic Kafka cannot iterate."""
    try:
        size = _next_batch_size(records, 0)
    except InvalidBatch as exc:
        raise RequestRefused(exc.error, str(exc)) from None
    if size is None or records[MAGIC] < 2:
        return False  # magic 0/1 batches have no transactional flag
    return bool(records[ATTRIBUTES + 1] & TRANSACTIONAL_FLAG)


def single_batch(records: memoryview, version: int) -> int:
    """Stage 2: the size of the partition's one batch (bytes after it that make no whole batch are
    ignored, as Kafka trims them). InvalidBatch for what Kafka answers per partition; RequestRefused for
    an unknown codec before Produce v7, which Kafka's check trips over as an unexpected exception."""
    size = _next_batch_size(records, 0)
    if size is None:
        raise InvalidBatch(
            f"Produce requests with version {version} must have at least one record batch per partition",
            E.INVALID_RECORD,
        )
    if records[MAGIC] != 2:
        raise InvalidBatch(
            f"Produce requests with version {version} are only allowed to contain record batches with magic version 2",
            E.INVALID_RECORD,
        )
    if version < FIRST_ZSTD_VERSION:
        codec = records[ATTRIBUTES + 1] & 0x07
        if codec > Compression.ZSTD:
            raise RequestRefused(E.UNKNOWN_SERVER_ERROR, None)
        if codec == Compression.ZSTD:
            raise InvalidBatch(
                f"Produce requests with version {version} are not allowed to use ZStandard compression",
                E.UNSUPPORTED_COMPRESSION_TYPE,
            )
    if _next_batch_size(records, size) is not None:
        raise InvalidBatch(
            f"Produce requests with version {version} are only allowed to contain exactly one record batch per "
            "partition",
            E.INVALID_RECORD,
        )
    return size


def short_first_batch(size: int) -> bool:
    """Stage 3: a batch that passed stage 2 but is too short for Kafka to read its producer id."""
    return size < MIN_SIZE_FOR_PRODUCER_ID


# ---------------------------------------------------------------------------------------------------------------
# Stage 4: the batch header (UnifiedLog) and LogValidator


def validate_batch(
    batch: memoryview,
    *,
    now_ms: int,
    max_message_bytes: int,
    log_append_time: bool,
    before_max_ms: int,
    after_max_ms: int,
    max_inflated_bytes: int,
) -> BatchHeader:
    """Check the one batch of a partition (`batch` is exactly its bytes, writable) and every record in it.

    On success the header is returned; for a CreateTime topic the batch's max timestamp is set to its
    records' largest (and a client's LogAppendTime flag cleared), with the CRC recomputed, when the client's
    header said otherwise, as Kafka rewrites it. Raises InvalidBatch with Kafka's error code otherwise.
    """
    size = len(batch)
    base_offset = _Q.unpack_from(batch, 0)[0]
    if base_offset != 0:
        raise InvalidBatch(
            f"The baseOffset of the record batch should be 0, but it is {base_offset}", E.INVALID_RECORD, log_start=True
        )
    if size > max_message_bytes:
        raise InvalidBatch(
            f"record batch of {size} bytes exceeds message.max.bytes={max_message_bytes}", E.MESSAGE_TOO_LARGE
        )
    if size < HEADER_SIZE:
        raise InvalidBatch(f"record batch of {size} bytes is shorter than its {HEADER_SIZE}-byte header")
    h = parse_header(batch)
    if crc32c(batch[ATTRIBUTES:]) != h.crc:
        raise InvalidBatch("record batch CRC32C mismatch")
    codec = h.attributes & 0x07
    if codec > Compression.ZSTD:
        raise InvalidBatch(f"Unknown compression type id: {codec}", E.UNKNOWN_SERVER_ERROR, log_start=True)
    _check_header(h)
    if codec == Compression.NONE:
        lo, hi = _walk_plain(batch, HEADER_SIZE, h.records_count)
    else:
        data = _inflate(codec, batch[HEADER_SIZE:], max_inflated_bytes)
        try:
            lo, hi, offsets_in_order = _walk_compressed(data, h.records_count)
        finally:
            data.release()
    lat_flag = bool(h.attributes & TIMESTAMP_TYPE_MASK)
    _check_timestamps(batch, h, lo, hi, lat_flag, codec, now_ms, log_append_time, before_max_ms, after_max_ms)
    if codec != Compression.NONE and not offsets_in_order:
        # Kafka rebuilds such a batch from records it read without keys and values, and fails doing so.
        raise InvalidBatch(
            "compressed batch whose inner offsets are not 0..count-1", E.UNKNOWN_SERVER_ERROR, log_start=True
        )
    if not log_append_time:
        if lat_flag:
            max_ts = h.max_timestamp
        elif h.base_timestamp + lo > -_SAFE and h.base_timestamp + hi < _SAFE:
            max_ts = h.base_timestamp + hi
        else:  # wrapped sums are not ordered like the deltas: take them one by one, as Kafka does
            max_ts = max(_wrap64(h.base_timestamp + d) for _o, d in _record_deltas(batch, h, codec))
        _set_max_timestamp(batch, h, max_ts)
    return h


def _check_header(h: BatchHeader) -> None:
    """LogValidator.validateBatch, for a client's magic-2 batch."""
    count_from_offsets = h.last_offset_delta + 1
    if count_from_offsets <= 0:
        raise InvalidBatch(
            f"Batch has an invalid offset range: [0, {h.last_offset_delta}]", E.INVALID_RECORD, log_start=True
        )
    if h.records_count <= 0:
        raise InvalidBatch(
            f"Invalid reported count for record batch: {h.records_count}", E.INVALID_RECORD, log_start=True
        )
    if count_from_offsets != h.records_count:
        raise InvalidBatch(
            f"Inconsistent batch offset range [0, {h.last_offset_delta}] and count of records {h.records_count}",
            E.INVALID_RECORD,
            log_start=True,
        )
    if h.attributes & CONTROL_FLAG:
        raise InvalidBatch("Clients are not allowed to write control records", E.INVALID_RECORD, log_start=True)
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise InvalidBatch(
            f"Invalid sequence number {h.base_sequence} in record batch with producerId {h.producer_id}",
            E.INVALID_RECORD,
            log_start=True,
        )


def _set_max_timestamp(batch: memoryview, h: BatchHeader, max_ts: int) -> None:
    """Kafka's setMaxTimestamp(CreateTime, ...): rewrite only when the type or the value differs."""
    max_ts = max(max_ts, NO_TIMESTAMP)
    if max_ts == h.max_timestamp and not h.attributes & TIMESTAMP_TYPE_MASK:
        return
    h.attributes &= ~TIMESTAMP_TYPE_MASK
    h.max_timestamp = max_ts
    _H.pack_into(batch, ATTRIBUTES, h.attributes)
    _Q.pack_into(batch, MAX_TIMESTAMP, max_ts)
    h.crc = crc32c(batch[ATTRIBUTES:])
    _U32.pack_into(batch, CRC, h.crc)


# ---------------------------------------------------------------------------------------------------------------
# Timestamps (LogValidator.validateTimestamp)


def _check_timestamps(
    batch: memoryview,
    h: BatchHeader,
    lo: int,
    hi: int,
    lat_flag: bool,
    codec: int,
    now: int,
    log_append_time: bool,
    before: int,
    after: int,
) -> None:
    if log_append_time:
        if lat_flag:  # a LogAppendTime topic refuses a client that claims to have stamped the batch itself
            _timestamp_errors(
                [(i, "Producer should not set timestamp type to LogAppendTime.") for i in range(h.records_count)]
            )
        return
    if lat_flag:  # every record carries the batch's max timestamp
        ts = h.max_timestamp
        if ts == NO_TIMESTAMP:
            _timestamp_errors(
                [
                    (i, "Invalid timestamp type in message: producer should not set timestamp type to LogAppendTime.")
                    for i in range(h.records_count)
                ]
            )
        if _out_of_range(ts, now, before, after):
            _timestamp_errors([(i, _range_message(ts, i, now, before, after)) for i in range(h.records_count)])
        return
    first, last = h.base_timestamp + lo, h.base_timestamp + hi
    if first > -_SAFE and last < _SAFE and now - first <= before and last - now <= after:
        return  # the common case: every record inside the bounds, no wrapping anywhere
    errors = []
    for i, (offset_delta, delta) in enumerate(_record_deltas(batch, h, codec)):
        ts = _wrap64(h.base_timestamp + delta)
        if ts != NO_TIMESTAMP and _out_of_range(ts, now, before, after):
            errors.append((i, _range_message(ts, offset_delta, now, before, after)))
    if errors:
        _timestamp_errors(errors)


def _out_of_range(ts: int, now: int, before: int, after: int) -> bool:
    diff = _wrap64(now - ts)
    return diff > before or _wrap64(-diff) > after


def _range_message(ts: int, offset: int, now: int, before: int, after: int) -> str:
    return (
        f"Timestamp {ts} of message with offset {offset} is out of range. The timestamp should be within "
        f"[{_wrap64(now - before)}, {_wrap64(now + after)}]"
    )


def _timestamp_errors(errors: list[tuple[int, str]]) -> None:
    raise InvalidBatch(
        "One or more records have been rejected due to invalid timestamp",
        E.INVALID_TIMESTAMP,
        record_errors=errors,
        log_start=True,
    )


def keyless_records(batch: memoryview, h: BatchHeader) -> list[int]:
    """Indexes of a validated batch's records that have no key (a compacted topic refuses them)."""
    return [i for i, (_off, _ts, key_len) in enumerate(_record_fields(batch, h, h.attributes & 0x07)) if key_len < 0]


def _record_deltas(batch: memoryview, h: BatchHeader, codec: int) -> list[tuple[int, int]]:
    """(offset delta, timestamp delta) of each record of a batch already walked: the slow path, for the
    records out of range and for timestamps near the ends of the int64 range."""
    return [(off, ts) for off, ts, _key_len in _record_fields(batch, h, codec)]


def _record_fields(batch: memoryview, h: BatchHeader, codec: int) -> list[tuple[int, int, int]]:
    """(offset delta, timestamp delta, key length) of each record of a batch already walked."""
    data = batch[HEADER_SIZE:] if codec == Compression.NONE else _inflate(codec, batch[HEADER_SIZE:], LONG_MAX)
    out = []
    pos = 0
    try:
        for _ in range(h.records_count):
            _size, pos = _varint32(data, pos)
            pos += 1
            ts_delta, pos = _varlong(data, pos)
            offset_delta, pos = _varint32(data, pos)
            key_len, pos = _varint32(data, pos)
            pos += max(key_len, 0)
            n, pos = _varint32(data, pos)
            pos += max(n, 0)
            headers, pos = _varint32(data, pos)
            for _h in range(headers):
                for _part in range(2):
                    n, pos = _varint32(data, pos)
                    pos += max(n, 0)
            out.append((offset_delta, ts_delta, key_len))
    finally:
        data.release()
    return out


# ---------------------------------------------------------------------------------------------------------------
# Varints as Java's ByteUtils reads them


def _zigzag(buf: memoryview, pos: int, max_shift: int, mask: int) -> tuple[int, int]:
    """A zigzag varint of at most max_shift / 7 + 1 bytes (a longer one raises _Overlong), wrapped by `mask`."""
    v = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        if b < 0x80:
            break
        v |= (b & 0x7F) << shift
        shift += 7
        if shift > max_shift:
            raise _Overlong
    v = (v | (b << shift)) & mask
    return (v >> 1) ^ -(v & 1), pos


def _varint32(buf: memoryview, pos: int) -> tuple[int, int]:
    """readVarint: at most 5 bytes, int32 wrap-around."""
    return _zigzag(buf, pos, 28, 0xFFFFFFFF)


def _varlong(buf: memoryview, pos: int) -> tuple[int, int]:
    """readVarlong: at most 10 bytes, int64 wrap-around."""
    return _zigzag(buf, pos, 63, _U64)


# ---------------------------------------------------------------------------------------------------------------
# The record walks


def _invalid(message: str) -> InvalidBatch:
    return InvalidBatch(message, E.INVALID_RECORD, log_start=True)


try:  # the same walk compiled (setup.py builds it where a C compiler is): ~20x faster on small records
    from ._walk import walk_plain as compiled_walk_plain
except ImportError:  # pragma: no cover - a machine without a compiler
    compiled_walk_plain = None


def _walk_plain(batch: memoryview, start: int, count: int) -> tuple[int, int]:
    """The compiled walk when built; the Python walk names the error of anything it does not accept."""
    if compiled_walk_plain is not None:
        found = compiled_walk_plain(batch, start, count)
        if found is not None:
            return found
    return _walk_plain_py(batch, start, count)


def _skip_field(buf: memoryview, pos: int) -> int:
    """Past a key or value: its zigzag length (one- and two-byte ones inline), then its bytes unless null.
    An overrun shows later, as a read past the end or a record that does not end where its length said."""
    b = buf[pos]
    if b < 0x80:
        return pos + 1 + (0 if b & 1 else b >> 1)
    c = buf[pos + 1]
    if c < 0x80:
        n = (b & 0x7F) | (c << 7)
        return pos + 2 + (0 if n & 1 else n >> 1)
    n, pos = _varint32(buf, pos)
    return pos + n if n > 0 else pos


def _walk_plain_py(batch: memoryview, start: int, count: int) -> tuple[int, int]:
    """DefaultRecordBatch's iterator over an uncompressed batch, DefaultRecord.readFrom per record: each
    record's fields must fill exactly its declared size, and the records exactly the batch. Returns the
    smallest and largest timestamp delta. A size varint Java cannot read is UNKNOWN_SERVER_ERROR (it
    escapes Kafka's iterator); every other defect is INVALID_RECORD.

    Flat on purpose, as this is the produce path's only per-record cost: one- and two-byte varints (every
    length under 8 KiB) are read inline, zigzag lengths are skipped without decoding (an odd one is
    negative: null, nothing to skip), and an overrun is left to show as a read past the end or a record
    that does not end where its length said."""
    buf = batch
    end = len(buf)
    pos = start
    lo = prev = LONG_MAX + 1  # no int64 delta equals `prev` at first
    hi = -LONG_MAX - 1
    i = 0
    try:
        for i in range(count):
            # Record length: where the record must end.
            b = buf[pos]
            if b < 0x80:
                pos += 1
                stop = pos + (b >> 1) if not b & 1 else -1
            elif buf[pos + 1] < 0x80:
                n = (b & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
                stop = pos + (n >> 1) if not n & 1 else -1
            else:
                try:
                    n, pos = _varint32(buf, pos)
                except _Overlong:
                    raise InvalidBatch(
                        f"record {i}: length varint longer than 5 bytes", E.UNKNOWN_SERVER_ERROR, log_start=True
                    ) from None
                stop = pos + n if n >= 0 else -1
            if stop > end:
                raise _invalid(
                    f"Invalid record size: record {i} needs {stop - pos} bytes but the batch has only {end - pos} left"
                )
            # Attributes (not checked), then the timestamp delta.
            b = buf[pos + 1]
            if b < 0x80:
                d = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                d, pos = _varlong(buf, pos + 1)
            if d != prev:  # deltas repeat within a batch: one comparison in the common case
                if d < lo:
                    lo = d
                if d > hi:
                    hi = d
                prev = d
            # Offset delta (not checked for uncompressed batches).
            if buf[pos] < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                pos += 2
            else:
                _n, pos = _varint32(buf, pos)
            # Key, then value: skipped unless null (an odd zigzag is negative).
            pos = _skip_field(buf, _skip_field(buf, pos))
            # Headers.
            if buf[pos] == 0:
                pos += 1
            else:
                pos = _plain_headers(buf, pos, end, i)
            if pos != stop:
                raise _invalid(f"Invalid record size: record {i}'s fields do not end where its length says")
    except (IndexError, _Overlong):
        raise _invalid(f"Found invalid record structure in record {i}: it runs past the end of the batch") from None
    if pos != end:
        raise _invalid("Incorrect declared batch size, records still remaining in file")
    return lo, hi


def _plain_headers(buf: memoryview, pos: int, end: int, i: int) -> int:
    count, pos = _varint32(buf, pos)
    if count < 0:
        raise _invalid(f"Found invalid number of record headers {count}")
    if count > end - pos:
        raise _invalid(
            f"Found invalid number of record headers. {count} is larger than the remaining size of the buffer"
        )
    for _ in range(count):
        n, pos = _varint32(buf, pos)
        if n < 0:
            raise _invalid(f"Invalid negative header key size {n}")
        if end - pos < n:
            raise _invalid(f"record {i}: header key of {n} bytes overruns the batch")
        pos += n
        n, pos = _varint32(buf, pos)
        if n > 0:
            if end - pos < n:
                raise _invalid(f"record {i}: header value of {n} bytes overruns the batch")
            pos += n
    return pos


def _walk_compressed(data: memoryview, count: int) -> tuple[int, int, bool]:
    """DefaultRecord.readPartiallyFrom over the decompressed records, as Kafka reads a compressed batch it
    keeps as it came: the length varint is read but not compared (Kafka accepts such records), keys,
    values and headers are skipped, and nothing may remain after the last record. Returns the smallest and
    largest timestamp delta and whether the offset deltas run 0..count-1. Every defect is INVALID_RECORD.
    Written like `_walk_plain`."""
    buf = data
    end = len(buf)
    pos = 0
    lo = prev = LONG_MAX + 1
    hi = -LONG_MAX - 1
    in_order = True
    i = 0
    try:
        for i in range(count):
            # Length (read, not compared), attributes.
            if buf[pos] < 0x80:
                pos += 2
            elif buf[pos + 1] < 0x80:
                pos += 3
            else:
                _n, pos = _varint32(buf, pos)
                pos += 1
            # Timestamp delta.
            b = buf[pos]
            if b < 0x80:
                d = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                d, pos = _varlong(buf, pos)
            if d != prev:
                if d < lo:
                    lo = d
                if d > hi:
                    hi = d
                prev = d
            # Offset delta: must be the record's index, or Kafka fails rebuilding the batch.
            b = buf[pos]
            if b < 0x80:
                n = b
                pos += 1
            elif buf[pos + 1] < 0x80:
                n = (b & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                n, pos = _varint32(buf, pos)
                n = n << 1 if n >= 0 else -1
            if n != i << 1:
                in_order = False
            # Key, then value.
            pos = _skip_field(buf, pos)
            if pos > end:
                raise _invalid(f"Reached end of input stream before skipping all bytes of record {i}")
            pos = _skip_field(buf, pos)
            if pos > end:
                raise _invalid(f"Reached end of input stream before skipping all bytes of record {i}")
            # Headers.
            if buf[pos] == 0:
                pos += 1
            else:
                pos = _compressed_headers(buf, pos, end, i)
    except (IndexError, _Overlong):
        raise _invalid(f"Incorrect declared batch size, premature EOF reached in record {i}") from None
    if pos != end:
        raise _invalid("Incorrect declared batch size, records still remaining in file")
    return lo, hi, in_order


def _compressed_headers(buf: memoryview, pos: int, end: int, i: int) -> int:
    count, pos = _varint32(buf, pos)
    if count < 0:
        raise _invalid(f"Found invalid number of record headers {count}")
    for _ in range(count):
        n, pos = _varint32(buf, pos)
        if n < 0:
            raise _invalid(f"Invalid negative header key size {n}")
        pos += n
        if pos > end:
            raise _invalid(f"Reached end of input stream before skipping all bytes of record {i}")
        n, pos = _varint32(buf, pos)
        if n > 0:
            pos += n
            if pos > end:
                raise _invalid(f"Reached end of input stream before skipping all bytes of record {i}")
    return pos


# ---------------------------------------------------------------------------------------------------------------
# Decompression


def _inflate(codec: int, payload: memoryview, limit: int) -> memoryview:
    """The decompressed records, in a per-thread buffer reused across batches (a view: release it).

    Any codec failure is UNKNOWN_SERVER_ERROR, as Kafka's decompressing stream fails with an unexpected
    exception. Output beyond `limit` is refused with MESSAGE_TOO_LARGE rather than allocated: Kafka
    streams a batch and never holds it whole, so a small batch that inflates to gigabytes costs it time
    but no memory; here it would cost memory.
    """
    if codec == Compression.LZ4:
        _check_lz4_frame(payload)
    if codec == Compression.SNAPPY and bytes(payload[:8]) == _XERIAL_MAGIC:
        return _inflate_xerial(payload, limit)
    buf: bytearray = getattr(_scratch, "buf", None) or bytearray(1 << 20)
    while True:
        try:
            if codec == Compression.SNAPPY:
                need = cramjam.snappy.decompress_raw_len(payload)
                if need > limit:
                    raise _too_large(need, limit)
                if need > len(buf):
                    buf = bytearray(need)
                n = cramjam.snappy.decompress_raw_into(payload, buf)
            else:
                n = _DECOMPRESS_INTO[codec](payload, buf)
            break
        except cramjam.DecompressionError as exc:
            if _OVERFLOW not in str(exc):
                raise InvalidBatch(
                    f"Failed to decompress record stream: {exc}", E.UNKNOWN_SERVER_ERROR, log_start=True
                ) from None
            if len(buf) >= limit:
                raise _too_large(len(buf) + 1, limit) from None
            buf = bytearray(min(len(buf) * 4, limit))
    if len(buf) <= _KEEP_SCRATCH:
        _scratch.buf = buf
    if n > limit:
        raise _too_large(n, limit)
    return memoryview(buf)[:n]


_DECOMPRESS_INTO = {
    Compression.GZIP: cramjam.gzip.decompress_into,
    Compression.LZ4: cramjam.lz4.decompress_into,
    Compression.ZSTD: cramjam.zstd.decompress_into,
}


def _too_large(n: int, limit: int) -> InvalidBatch:
    return InvalidBatch(
        f"compressed record batch inflates to {n} bytes or more, over this broker's limit of {limit}",
        E.MESSAGE_TOO_LARGE,
    )


def _inflate_xerial(payload: memoryview, limit: int) -> memoryview:
    """Java's xerial snappy framing: a 16-byte header, then (int32 length, raw snappy block) chunks."""
    out = bytearray()
    pos = 16
    try:
        while pos < len(payload):
            n = _I32.unpack_from(payload, pos)[0]
            chunk = payload[pos + 4 : pos + 4 + n]
            if n < 0 or len(chunk) != n:
                raise ValueError("truncated xerial snappy chunk")
            out += cramjam.snappy.decompress_raw(chunk)
            if len(out) > limit:
                raise _too_large(len(out), limit)
            pos += 4 + n
    except (cramjam.DecompressionError, ValueError, struct.error) as exc:
        raise InvalidBatch(
            f"Failed to decompress record stream: {exc}", E.UNKNOWN_SERVER_ERROR, log_start=True
        ) from None
    return memoryview(out)


def _check_lz4_frame(payload: memoryview) -> None:
    """Kafka's Lz4BlockInputStream takes only version-1 frames of independent blocks with its block sizes
    (the header checksum and blocks are left to the decoder)."""
    if len(payload) < 6 or bytes(payload[:4]) != _LZ4_MAGIC:
        bad = "Stream unsupported (invalid magic bytes)"
    else:
        flg, bd = payload[4], payload[5]
        if flg & 0x03:
            bad = "Reserved bits must be 0"
        elif not flg & 0x20:
            bad = "Dependent block stream is unsupported"
        elif flg >> 6 != 1:
            bad = f"Version {flg >> 6} is unsupported"
        elif bd & 0x8F:
            bad = "Reserved bits of the block descriptor must be 0"
        elif not 4 <= (bd >> 4) & 0x07 <= 7:
            bad = "Block size value must be between 4 and 7"
        else:
            return
    raise InvalidBatch(f"Failed to decompress record stream: lz4 {bad}", E.UNKNOWN_SERVER_ERROR, log_start=True)
