"""Record batch v2 (magic 2): header access for the hot path, full codec for tools and tests.

Fetch never decodes records. Produce walks a client's records once to validate them as Kafka does
(`protocol/validate.py`), then patches the base offset in place and stores the bytes as they came.
`decode_records`/`build_batch` exist for the CLI, the benchmarks and the tests.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import cramjam
from crc32c import crc32c

from .errors import ErrorCode

# Field offsets inside a batch (see Kafka's DefaultRecordBatch layout).
BASE_OFFSET = 0
BATCH_LENGTH = 8
LEADER_EPOCH = 12
MAGIC = 16
CRC = 17
ATTRIBUTES = 21
LAST_OFFSET_DELTA = 23
BASE_TIMESTAMP = 27
MAX_TIMESTAMP = 35
PRODUCER_ID = 43
PRODUCER_EPOCH = 51
BASE_SEQUENCE = 53
RECORDS_COUNT = 57
HEADER_SIZE = 61
# Bytes before `batchLength` counts: baseOffset + batchLength itself.
LOG_OVERHEAD = 12

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_Q = struct.Struct(">q")
_I = struct.Struct(">i")


class Compression:
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4
    NAMES = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


class InvalidBatch(ValueError):
    """A batch that must be refused with Kafka's error code `error`.

    `record_errors` are (index in batch, reason) of the records Kafka names in its answer (bad
    timestamps); `log_start` says whether Kafka reports the partition's log start offset with this error
    (it does for what its log and LogValidator refuse, not for checks made before or for CRC and size)."""

    def __init__(
        self,
        message: str,
        error: ErrorCode = ErrorCode.CORRUPT_MESSAGE,
        record_errors: Sequence[tuple[int, str]] = (),
        log_start: bool = False,
    ) -> None:
        super().__init__(message)
        self.error = error
        self.record_errors = record_errors
        self.log_start = log_start


@dataclass(slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int = 0

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the fixed 61-byte header at `pos` (no CRC check)."""
    if len(buf) - pos < HEADER_SIZE:
        raise InvalidBatch("truncated record batch header")
    return BatchHeader(*_HEADER.unpack_from(buf, pos), position=pos)


def iter_headers(buf: bytes | bytearray | memoryview, verify_crc: bool = False) -> Iterator[BatchHeader]:
    """Walk consecutive batches; stops at a partial trailing batch only when it is genuinely short."""
    pos = 0
    end = len(buf)
    while end - pos >= LOG_OVERHEAD:
        length = _I.unpack_from(buf, pos + BATCH_LENGTH)[0]
        if end - pos < length + LOG_OVERHEAD or end - pos < HEADER_SIZE:
            return
        h = parse_header(buf, pos)
        covered = memoryview(buf)[pos + ATTRIBUTES : pos + LOG_OVERHEAD + length]
        if verify_crc and h.magic == 2 and crc32c(covered) != h.crc:
            raise InvalidBatch(f"CRC mismatch in batch at position {pos}")
        yield h
        pos += LOG_OVERHEAD + length


def validate_produce(records: bytes | bytearray | memoryview, max_batch_bytes: int) -> list[BatchHeader]:
    """Check every batch of a produce payload without decoding records.

    Raises InvalidBatch naming the Kafka error to answer: CORRUPT_MESSAGE (framing, CRC, magic),
    MESSAGE_TOO_LARGE (a batch over `message.max.bytes`), INVALID_RECORD (inconsistent counts).
    """
    mv = memoryview(records)
    end = len(mv)
    if end == 0:
        raise InvalidBatch("empty record set", ErrorCode.INVALID_RECORD)
    headers: list[BatchHeader] = []
    pos = 0
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise InvalidBatch("truncated record batch")
        h = parse_header(mv, pos)
        if h.magic != 2:
            raise InvalidBatch(
                f"record batch magic {h.magic} is not supported (v2 only)", ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
            )
        size = h.batch_length + LOG_OVERHEAD
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + size > end:
            raise InvalidBatch(f"record batch length {h.batch_length} does not fit the request")
        if size > max_batch_bytes:
            raise InvalidBatch(
                f"record batch of {size} bytes exceeds message.max.bytes={max_batch_bytes}", ErrorCode.MESSAGE_TOO_LARGE
            )
        if crc32c(mv[pos + ATTRIBUTES : pos + size]) != h.crc:
            raise InvalidBatch("record batch CRC32C mismatch")
        if (
            h.records_count < 0
            or h.last_offset_delta < 0
            or (h.records_count and h.last_offset_delta != h.records_count - 1)
        ):
            raise InvalidBatch(
                f"inconsistent record count {h.records_count} / last offset delta {h.last_offset_delta}",
                ErrorCode.INVALID_RECORD,
            )
        if h.compression > Compression.ZSTD:
            raise InvalidBatch(f"unknown compression codec {h.compression}", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
        headers.append(h)
        pos += size
    return headers


def assign_offsets(buf: bytearray | memoryview, headers: Sequence[BatchHeader], base_offset: int) -> int:
    """Patch base offsets (outside the CRC) in place; returns the next offset after the last batch."""
    nxt = base_offset
    for h in headers:
        _Q.pack_into(buf, h.position + BASE_OFFSET, nxt)
        _I.pack_into(buf, h.position + LEADER_EPOCH, 0)
        h.base_offset = nxt
        nxt += h.last_offset_delta + 1
    return nxt


def stamp_log_append_time(buf: bytearray | memoryview, headers: Sequence[BatchHeader], now_ms: int) -> None:
    """LogAppendTime topics: the broker's clock becomes each batch's max timestamp, flagged in the
    attributes. Both fields are CRC-covered, so the CRC is recomputed (only on such topics)."""
    mv = memoryview(buf)
    for h in headers:
        pos = h.position
        h.attributes |= TIMESTAMP_TYPE_MASK
        h.max_timestamp = now_ms
        struct.pack_into(">h", buf, pos + ATTRIBUTES, h.attributes)
        _Q.pack_into(buf, pos + MAX_TIMESTAMP, now_ms)
        h.crc = crc32c(mv[pos + ATTRIBUTES : pos + LOG_OVERHEAD + h.batch_length])
        struct.pack_into(">I", buf, pos + CRC, h.crc)


# ---------------------------------------------------------------- full record codec (tools, tests)


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def write_varint(out: bytearray, n: int) -> None:
    v = _zigzag(n) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    shift = 0
    v = 0
    while True:
        if pos >= len(buf):
            raise InvalidBatch("truncated varint")
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise InvalidBatch("varint too long")
    return (v >> 1) ^ -(v & 1), pos


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp_type: int = 0


@dataclass(slots=True)
class NewRecord:
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp: int | None = None


_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def compress(codec: int, data: bytes | memoryview, level: int | None = None) -> bytes:
    """`data` in `codec`; `level` as Kafka's compression.<codec>.level (None: cramjam's default; gzip -1:
    zlib's default, 6). Snappy has no level."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data, level=None if level == -1 else level))
    if codec == Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == Compression.LZ4:
        # Kafka reads only frames of independent blocks (cramjam's default links them).
        lz4 = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        lz4.compress(data)
        return bytes(lz4.finish())
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=level))
    raise InvalidBatch(f"unknown compression codec {codec}", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)


def recompress(
    batch: bytes | bytearray | memoryview, h: BatchHeader, codec: int, level: int | None = None
) -> bytearray:
    """The batch with its records in `codec` (Kafka's compression.type other than producer): the records
    themselves, the producer fields, the transactional flag and the timestamps are kept, the CRC is new.
    Kafka rebuilds the batch record by record; the records' bytes inside are the same, so here the payload
    is decompressed and compressed whole."""
    mv = memoryview(batch)
    end = LOG_OVERHEAD + h.batch_length
    payload = compress(codec, decompress(h.compression, mv[HEADER_SIZE:end]), level)
    out = bytearray(HEADER_SIZE + len(payload))
    out[:HEADER_SIZE] = mv[:HEADER_SIZE]
    out[HEADER_SIZE:] = payload
    _I.pack_into(out, BATCH_LENGTH, len(out) - LOG_OVERHEAD)
    struct.pack_into(">h", out, ATTRIBUTES, (h.attributes & ~COMPRESSION_MASK) | codec)
    struct.pack_into(">I", out, CRC, crc32c(memoryview(out)[ATTRIBUTES:]))
    return out


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    data = bytes(data)
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.decompress(data))
    if codec == Compression.SNAPPY:
        if data.startswith(_XERIAL_MAGIC):
            # Java's xerial framing: 16-byte header, then (4-byte length, raw block) pairs.
            out = bytearray()
            pos = 16
            while pos < len(data):
                n = _I.unpack_from(data, pos)[0]
                pos += 4
                out += cramjam.snappy.decompress_raw(data[pos : pos + n])
                pos += n
            return bytes(out)
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec == Compression.LZ4:
        return bytes(cramjam.lz4.decompress(data))
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.decompress(data))
    raise InvalidBatch(f"unknown compression codec {codec}", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)


def build_batch(
    records: Sequence[NewRecord],
    *,
    base_offset: int = 0,
    compression: int = Compression.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    now_ms: int | None = None,
    flags: int = 0,
) -> bytes:
    """Encode one v2 batch; timestamps default to `now_ms` (CreateTime). `flags`: TRANSACTIONAL_FLAG and
    CONTROL_FLAG, or'ed into the attributes."""
    if not records:
        raise ValueError("a batch needs at least one record")
    if now_ms is None:
        import time

        now_ms = int(time.time() * 1000)
    stamps = [r.timestamp if r.timestamp is not None else now_ms for r in records]
    base_ts = min(stamps)
    body = bytearray()
    for i, r in enumerate(records):
        rec = bytearray(b"\x00")  # attributes
        write_varint(rec, stamps[i] - base_ts)
        write_varint(rec, i)
        for part in (r.key, r.value):
            if part is None:
                write_varint(rec, -1)
            else:
                write_varint(rec, len(part))
                rec += part
        write_varint(rec, len(r.headers))
        for hk, hv in r.headers:
            kb = hk.encode()
            write_varint(rec, len(kb))
            rec += kb
            if hv is None:
                write_varint(rec, -1)
            else:
                write_varint(rec, len(hv))
                rec += hv
        write_varint(body, len(rec))
        body += rec
    payload = compress(compression, bytes(body))
    tail = (
        struct.pack(
            ">hiqqqhii",
            compression | flags,
            len(records) - 1,
            base_ts,
            max(stamps),
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
        + payload
    )
    crc = crc32c(tail)
    return struct.pack(">qiibI", base_offset, len(tail) + 9, 0, 2, crc) + tail


def decode_batch(buf: bytes | memoryview, verify_crc: bool = True) -> tuple[BatchHeader, list[Record]]:
    mv = memoryview(buf)
    h = parse_header(mv)
    if h.magic != 2:
        raise InvalidBatch(f"magic {h.magic} batches are not supported")
    end = LOG_OVERHEAD + h.batch_length
    if len(mv) < end:
        raise InvalidBatch("truncated record batch")
    if verify_crc and crc32c(mv[ATTRIBUTES:end]) != h.crc:
        raise InvalidBatch("record batch CRC32C mismatch")
    if h.is_control:
        return h, []
    data = decompress(h.compression, mv[HEADER_SIZE:end])
    out: list[Record] = []
    pos = 0
    ts_type = 1 if h.attributes & TIMESTAMP_TYPE_MASK else 0
    for _ in range(h.records_count):
        length, pos = read_varint(data, pos)
        stop = pos + length
        pos += 1  # record attributes
        ts_delta, pos = read_varint(data, pos)
        off_delta, pos = read_varint(data, pos)
        parts: list[bytes | None] = []
        for _p in range(2):
            n, pos = read_varint(data, pos)
            if n < 0:
                parts.append(None)
            else:
                parts.append(data[pos : pos + n])
                pos += n
        nh, pos = read_varint(data, pos)
        headers: list[tuple[str, bytes | None]] = []
        for _h in range(nh):
            n, pos = read_varint(data, pos)
            hk = data[pos : pos + n].decode("utf-8", "replace")
            pos += n
            n, pos = read_varint(data, pos)
            hv = None if n < 0 else data[pos : pos + n]
            if n > 0:
                pos += n
            headers.append((hk, hv))
        if pos != stop:
            raise InvalidBatch("record length does not match its fields")
        ts = h.max_timestamp if ts_type == 1 else h.base_timestamp + ts_delta
        out.append(Record(h.base_offset + off_delta, ts, parts[0], parts[1], headers, ts_type))
    return h, out


def decode_records(buf: bytes | memoryview) -> list[Record]:
    """Decode every complete batch in a fetch payload (a partial trailing batch is ignored)."""
    mv = memoryview(buf)
    out: list[Record] = []
    for h in iter_headers(mv):
        _, recs = decode_batch(mv[h.position : h.position + h.size])
        out.extend(recs)
    return out


# Control records (KIP-98): the key is (version, type), the value of an end-transaction marker is
# (version, coordinator epoch). Type 0 aborts, type 1 commits.
ABORT, COMMIT = 0, 1
_CONTROL_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")


def build_marker(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int = 0, now_ms: int | None = None
) -> bytes:
    """One control batch ending a transaction: what the coordinator writes into every partition it touched."""
    rec = NewRecord(_CONTROL_KEY.pack(0, COMMIT if commit else ABORT), _MARKER_VALUE.pack(0, coordinator_epoch))
    return build_batch(
        [rec],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        now_ms=now_ms,
        flags=TRANSACTIONAL_FLAG | CONTROL_FLAG,
    )


def control_type(batch: bytes | memoryview) -> int:
    """The control record type (ABORT, COMMIT, or another) of an uncompressed control batch; -1 if unreadable."""
    mv = memoryview(batch)
    try:
        pos = HEADER_SIZE
        _length, pos = read_varint(mv, pos)
        pos += 1  # attributes
        _ts, pos = read_varint(mv, pos)
        _off, pos = read_varint(mv, pos)
        n, pos = read_varint(mv, pos)
        if n < _CONTROL_KEY.size:
            return -1
        return _CONTROL_KEY.unpack_from(mv, pos)[1]
    except (IndexError, ValueError, struct.error):
        return -1


def last_offset_of(data: bytes | memoryview) -> int:
    """The last offset of the last whole batch in `data` (consecutive stored batches); -1 when there is none."""
    mv = memoryview(data)
    pos, last = 0, -1
    while pos + HEADER_SIZE <= len(mv):
        size = _I.unpack_from(mv, pos + BATCH_LENGTH)[0] + LOG_OVERHEAD
        if pos + size > len(mv):
            break
        last = _Q.unpack_from(mv, pos)[0] + _I.unpack_from(mv, pos + LAST_OFFSET_DELTA)[0]
        pos += size
    return last


def consumable_records(
    buf: bytes | memoryview, aborted: Sequence[tuple[int, int]] | None = None
) -> tuple[list[Record], int]:
    """What a consumer gets from fetched batches, and the offset to fetch next (past control batches too).

    `aborted`: the fetch's (producer id, first offset) aborted transactions for read_committed, or None
    for read_uncommitted (everything but markers). Kafka's consumer rule: a producer's batches are skipped
    from an aborted transaction's first offset until that producer's ABORT marker."""
    mv = memoryview(buf)
    pending = sorted(((first, pid) for pid, first in aborted or ()), reverse=True)
    skipping: set[int] = set()
    out: list[Record] = []
    next_offset = -1
    for h in iter_headers(mv):
        next_offset = h.next_offset
        raw = mv[h.position : h.position + h.size]
        while pending and pending[-1][0] <= h.last_offset:
            skipping.add(pending.pop()[1])
        if h.is_control:
            if control_type(raw) == ABORT:
                skipping.discard(h.producer_id)
            continue
        if aborted is not None and h.is_transactional and h.producer_id in skipping:
            continue
        out.extend(decode_batch(raw)[1])
    return out, next_offset
