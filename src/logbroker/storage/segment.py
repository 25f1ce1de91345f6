"""One segment: an append-only log file plus sparse offset and time indexes that can always be rebuilt."""

from __future__ import annotations

import bisect
import os
import struct
from pathlib import Path

from crc32c import crc32c

from logbroker.protocol.buffers import BufferPool
from logbroker.protocol.records import (
    ATTRIBUTES,
    BATCH_LENGTH,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    parse_header,
)

_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, file position
_TIME_ENTRY = struct.Struct(">qi")  # max timestamp so far, relative base offset of the batch holding it
_I32 = struct.Struct(">i")


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


class Segment:
    """A log file whose batches start at `base_offset`; indexes hold an entry every `index_interval` bytes."""

    def __init__(self, directory: Path, base_offset: int, index_interval: int, created_ms: int) -> None:
        self.dir = directory
        self.base_offset = base_offset
        self.index_interval = index_interval
        name = segment_name(base_offset)
        self.log_path = directory / f"{name}.log"
        self.index_path = directory / f"{name}.index"
        self.time_path = directory / f"{name}.timeindex"
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.created_ms = created_ms
        # In-memory copies of the indexes: relative offsets / positions / timestamps.
        self.idx_offsets: list[int] = []
        self.idx_positions: list[int] = []
        self.time_stamps: list[int] = []
        self.time_offsets: list[int] = []
        self.max_timestamp = -1
        self.max_timestamp_rel = -1  # relative base offset of the first batch carrying max_timestamp
        self.next_offset = base_offset
        self._bytes_since_index = 0
        self._index_fd: int | None = None
        self._time_fd: int | None = None

    # ------------------------------------------------------------------ index files

    def _open_index_files(self, truncate: bool) -> None:
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if truncate else 0)
        self._index_fd = os.open(self.index_path, flags, 0o644)
        self._time_fd = os.open(self.time_path, flags, 0o644)

    def load_indexes(self) -> bool:
        """Load index files; returns False when they are missing or inconsistent with the log."""
        try:
            raw = self.index_path.read_bytes()
            traw = self.time_path.read_bytes()
        except FileNotFoundError:
            return False
        if len(raw) % _OFFSET_ENTRY.size or len(traw) % _TIME_ENTRY.size:
            return False
        offs, poss = [], []
        for rel, pos in _OFFSET_ENTRY.iter_unpack(raw):
            if rel < 0 or pos < 0 or pos >= self.size or (offs and (rel <= offs[-1] or pos <= poss[-1])):
                return False
            offs.append(rel)
            poss.append(pos)
        ts, tos = [], []
        for stamp, rel in _TIME_ENTRY.iter_unpack(traw):
            if rel < 0 or (tos and (rel < tos[-1] or stamp < ts[-1])):
                return False
            ts.append(stamp)
            tos.append(rel)
        # The last indexed batch must really be a batch at that position.
        if poss:
            h = self._header_at(poss[-1])
            if h is None or h.base_offset != self.base_offset + offs[-1]:
                return False
        self.idx_offsets, self.idx_positions = offs, poss
        self.time_stamps, self.time_offsets = ts, tos
        # Recover next offset and max timestamp by walking headers after the last index entry.
        start = poss[-1] if poss else 0
        self.next_offset = self.base_offset
        self.max_timestamp, self.max_timestamp_rel = (ts[-1], tos[-1]) if ts else (-1, -1)
        for h in self.iter_headers(start):
            self.next_offset = h.next_offset
            self._track_max(h)
        self._bytes_since_index = self.size - start if poss else self.size
        self._open_index_files(truncate=False)
        return True

    def recover(self) -> int:
        """Validate every batch by CRC, truncate a torn or corrupt tail, rebuild both indexes.

        Returns the number of bytes truncated.
        """
        self.idx_offsets, self.idx_positions, self.time_stamps, self.time_offsets = [], [], [], []
        self.max_timestamp = self.max_timestamp_rel = -1
        self.next_offset = self.base_offset
        self._bytes_since_index = 0
        self._open_index_files(truncate=True)
        pos = 0
        expected = self.base_offset
        chunk = 8 << 20
        while pos < self.size:
            head = os.pread(self.fd, HEADER_SIZE, pos)
            if len(head) < HEADER_SIZE:
                break
            h = parse_header(head)
            size = h.batch_length + LOG_OVERHEAD
            if h.magic != 2 or h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + size > self.size:
                break
            if h.base_offset < expected or h.last_offset_delta < 0:
                break
            crc = crc32c(head[ATTRIBUTES:])
            done = HEADER_SIZE
            while done < size:
                part = os.pread(self.fd, min(chunk, size - done), pos + done)
                if not part:
                    break
                crc = crc32c(part, crc)
                done += len(part)
            if done != size or crc != h.crc:
                break
            h.position = pos
            self._index_batch(h, size)
            expected = h.next_offset
            pos += size
        truncated = self.size - pos
        if truncated:
            os.ftruncate(self.fd, pos)
            os.fsync(self.fd)
            self.size = pos
        self.sync_indexes()
        return truncated

    def _track_max(self, h: BatchHeader) -> None:
        if h.max_timestamp > self.max_timestamp:
            self.max_timestamp = h.max_timestamp
            self.max_timestamp_rel = h.base_offset - self.base_offset

    def _index_batch(self, h: BatchHeader, size: int) -> None:
        """Add index entries for a batch just appended (or replayed) at `h.position`.

        As in Kafka, each time-index entry is (max timestamp so far, the batch that carries it), written
        at offset-index points: so the newest entry plus the batches after the last index point give
        the segment's max timestamp and where it is, without reading the segment.
        """
        rel = h.base_offset - self.base_offset
        self._track_max(h)
        if not self.idx_positions or self._bytes_since_index >= self.index_interval:
            self.idx_offsets.append(rel)
            self.idx_positions.append(h.position)
            assert self._index_fd is not None
            os.write(self._index_fd, _OFFSET_ENTRY.pack(rel, h.position))
            if self.max_timestamp > (self.time_stamps[-1] if self.time_stamps else -1):
                self.time_stamps.append(self.max_timestamp)
                self.time_offsets.append(self.max_timestamp_rel)
                assert self._time_fd is not None
                os.write(self._time_fd, _TIME_ENTRY.pack(self.max_timestamp, self.max_timestamp_rel))
            self._bytes_since_index = 0
        self._bytes_since_index += size
        self.next_offset = h.next_offset

    def sync_indexes(self) -> None:
        for fd in (self._index_fd, self._time_fd):
            if fd is not None:
                os.fsync(fd)

    # ------------------------------------------------------------------ append / read

    def append(self, data: bytes | bytearray | memoryview, headers: list[BatchHeader]) -> None:
        start = self.size
        n = os.write(self.fd, data)
        if n != len(data):  # a short write on a regular file means the disk is full
            os.ftruncate(self.fd, start)
            raise OSError(f"short write to {self.log_path}: {n} of {len(data)} bytes")
        self.size += n
        for h in headers:
            size = h.batch_length + LOG_OVERHEAD
            h.position += start
            self._index_batch(h, size)
            h.position -= start

    def _header_at(self, pos: int) -> BatchHeader | None:
        head = os.pread(self.fd, HEADER_SIZE, pos)
        if len(head) < HEADER_SIZE:
            return None
        h = parse_header(head)
        h.position = pos
        return h

    def iter_headers(self, start: int = 0):
        pos = start
        while pos + HEADER_SIZE <= self.size:
            h = self._header_at(pos)
            if h is None or h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
                return
            if pos + h.batch_length + LOG_OVERHEAD > self.size:
                return
            yield h
            pos += h.batch_length + LOG_OVERHEAD

    def position_of(self, offset: int) -> tuple[int, BatchHeader | None]:
        """Position of the batch that holds `offset` (or the first one after it)."""
        i = bisect.bisect_right(self.idx_offsets, offset - self.base_offset) - 1
        start = self.idx_positions[i] if i >= 0 else 0
        for h in self.iter_headers(start):
            if h.last_offset >= offset:
                return h.position, h
        return self.size, None

    def read(self, position: int, max_bytes: int, first_whole: bool, pool: BufferPool | None = None) -> memoryview:
        """Whole batches from `position`, up to `max_bytes`; the first batch is returned whole when
        `first_whole` (KIP-74: a consumer always makes progress).

        The bytes land in a buffer from `pool` when one is given (the caller gives `view.obj` back when
        done): a fresh megabyte per fetch is zeroed and page-faulted by the kernel again and again, which
        measured slower than the read itself."""
        if position >= self.size:
            return memoryview(b"")
        want = max(min(max_bytes, self.size - position), HEADER_SIZE)
        buf = pool.take(want) if pool is not None else bytearray(want)
        data = memoryview(buf)[: os.preadv(self.fd, [memoryview(buf)[:want]], position)]
        end = 0
        n = len(data)
        while end + LOG_OVERHEAD <= n:
            size = _I32.unpack_from(data, end + BATCH_LENGTH)[0] + LOG_OVERHEAD
            if end + size > n:
                if end == 0 and first_whole:  # the first batch is larger than max_bytes: all of it
                    if size > len(buf):
                        data.release()
                        if pool is not None:
                            pool.give(buf)
                        buf = pool.take(size) if pool is not None else bytearray(size)
                    return memoryview(buf)[: os.preadv(self.fd, [memoryview(buf)[:size]], position)]
                break
            if end + size > max_bytes and not (end == 0 and first_whole):
                break
            end += size
        return data[:end]

    def batch_at(self, offset: int) -> bytes:
        """The whole stored batch that holds `offset` (empty when there is none)."""
        pos, h = self.position_of(offset)
        return b"" if h is None else os.pread(self.fd, h.batch_length + LOG_OVERHEAD, pos)

    def offset_for_time(self, timestamp: int) -> int:
        """Position to start scanning for the first batch whose max timestamp is >= `timestamp`."""
        i = bisect.bisect_left(self.time_stamps, timestamp) - 1
        if i < 0:
            return 0
        rel = self.time_offsets[i]
        j = bisect.bisect_right(self.idx_offsets, rel) - 1
        return self.idx_positions[j] if j >= 0 else 0

    # ------------------------------------------------------------------ lifecycle

    def sync(self) -> None:
        os.fdatasync(self.fd)

    def close(self) -> None:
        for fd in (self.fd, self._index_fd, self._time_fd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._index_fd = self._time_fd = None

    def delete(self) -> None:
        self.close()
        for p in (self.log_path, self.index_path, self.time_path):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
