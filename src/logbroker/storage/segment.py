"""One segment: an append-only log file plus sparse offset and time indexes that can always be rebuilt."""

from __future__ import annotations

import bisect
import json
import logging
import os
import struct
from dataclasses import dataclass
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

from .files import FileCache, FileHandle, Unsynced
from .txnindex import TxnIndex

_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, file position
_TIME_ENTRY = struct.Struct(">qi")  # max timestamp so far, relative base offset of the batch holding it
_I32 = struct.Struct(">i")
_OFFSET_AND_LENGTH = struct.Struct(">qi")  # a batch's base offset and length, its first 12 bytes
_MAGIC_AT = 16  # a batch's magic byte
_RESYNC_CHUNK = 4 << 20

log = logging.getLogger(__name__)
# Batches walked (one 12-byte pread each) past the last indexed position a zero-copy read may end at.
_RANGE_WALK = 64
# A segment reserves space ahead (Segment._reserve) only once it holds this much: a partition that gets a few
# records pays no fallocate and no unused space (10,000 partitions of 20 KB each, synced in shared rounds,
# measured 10-25% slower when every one reserved).
RESERVE_AFTER = 64 << 10


class FileRange:
    """Whole stored batches a connection sends straight from the file (`sendfile`), never read by us.

    It pins the segment's descriptor (`FileHandle.pin`): the file cache may not close it and retention
    or compaction, deleting the file meanwhile, leave it open until the range is closed, so the bytes
    stay readable until sent. `end_offset` is the first offset after the range (read_committed answers
    list the aborted transactions below it)."""

    __slots__ = ("_handle", "end_offset", "fd", "length", "position")

    def __init__(self, handle: FileHandle | None, fd: int, position: int, length: int, end_offset: int) -> None:
        self._handle = handle
        self.fd = fd
        self.position = position
        self.length = length
        self.end_offset = end_offset

    @classmethod
    def pinned(cls, handle: FileHandle, position: int, length: int, end_offset: int) -> FileRange:
        return cls(handle, handle.pin(), position, length, end_offset)

    def __len__(self) -> int:
        return self.length

    def read_into(self, view: memoryview) -> None:
        """The bytes into `view` (a transport that cannot send from a file); short only if the file shrank."""
        done = 0
        while done < len(view):
            n = os.preadv(self.fd, [view[done:]], self.position + done)
            if n <= 0:
                raise OSError(f"stored batches shrank under a fetch ({done} of {self.length} bytes readable)")
            done += n

    def close(self) -> None:
        handle, self._handle = self._handle, None
        self.fd = -1
        if handle is not None:
            handle.unpin()

    def __del__(self) -> None:  # a range dropped unsent (a failed encode) must not keep its file open
        self.close()


UNBOUNDED = FileCache()  # for logs opened outside a broker (tools, tests): descriptors stay open


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


@dataclass(frozen=True, slots=True)
class Truncation:
    """What recovery cut off a segment, so that the loss can be reported with offsets, not just bytes.

    `first_offset` is the offset the first dropped batch should have started at; `last_offset` is the
    largest last offset the dropped batches' headers claim (None when not even the first header parses).
    """

    position: int
    bytes: int
    first_offset: int
    last_offset: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class Damaged:
    """Stored bytes of a closed segment that are not an intact batch (a CRC that fails, framing that does not
    parse): quarantined, so readers step over them as over a compacted range. The offsets are the gap's, from
    the intact batches around it (a damaged header's own are not trusted)."""

    position: int
    size: int
    first_offset: int
    last_offset: int
    reason: str

    def describe(self) -> str:
        span = f"offset {self.first_offset}" if self.first_offset == self.last_offset else (
            f"offsets {self.first_offset}-{self.last_offset}")  # fmt: skip
        return f"{span} ({self.size} bytes at byte {self.position}): {self.reason}"


def batch_ok(fd: int, pos: int, file_size: int, expected: int) -> tuple[BatchHeader | None, str | None]:
    """The header of the intact batch at `pos` (framing, offsets at or past `expected`, CRC32C), or None and
    why not."""
    head = os.pread(fd, HEADER_SIZE, pos)
    if len(head) < HEADER_SIZE:
        return None, f"a batch header cut short ({len(head)} of {HEADER_SIZE} bytes)"
    h = parse_header(head)
    size = h.batch_length + LOG_OVERHEAD
    if h.magic != 2:
        return None, f"a batch with magic {h.magic}"
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        return None, f"a batch length of {h.batch_length}"
    if pos + size > file_size:
        return None, f"a torn batch ({file_size - pos} of {size} bytes)"
    if h.base_offset < expected or h.last_offset_delta < 0:
        return None, f"a batch at offset {h.base_offset} where {expected} or later was due"
    crc = crc32c(head[ATTRIBUTES:])
    done = HEADER_SIZE
    while done < size:
        part = os.pread(fd, min(8 << 20, size - done), pos + done)
        if not part:
            return None, "a torn batch"
        crc = crc32c(part, crc)
        done += len(part)
    if crc != h.crc:
        return None, "a CRC32C mismatch"
    h.position = pos
    return h, None


def resync(fd: int, pos: int, file_size: int, expected: int) -> BatchHeader | None:
    """The first intact batch after damaged bytes at `pos` (its magic byte where a batch's is, its offsets at
    or past `expected`, its CRC32C right: a false match is a 1 in 2^32 chance on top of the framing), or
    None when nothing after `pos` is one."""
    start = pos + 1
    while start + HEADER_SIZE <= file_size:
        chunk = os.pread(fd, min(_RESYNC_CHUNK, file_size - start) + _MAGIC_AT, start)
        i = chunk.find(b"\x02", _MAGIC_AT)
        while i >= 0:
            candidate = start + i - _MAGIC_AT
            if candidate + HEADER_SIZE <= file_size:
                h, _why = batch_ok(fd, candidate, file_size, expected)
                if h is not None:
                    return h
            i = chunk.find(b"\x02", i + 1)
        start += max(len(chunk) - _MAGIC_AT, 1)
    return None


def _at(d: Damaged) -> int:
    return d.position


def zeros_from(fd: int, pos: int, file_size: int) -> bool:
    """Whether the file holds only zero bytes from `pos` to `file_size` (space reserved ahead, never written)."""
    chunk = 1 << 20
    while pos < file_size:
        part = os.pread(fd, min(chunk, file_size - pos), pos)
        if not part or part.count(0) != len(part):
            return False
        pos += len(part)
    return True


def after_damage(fd: int, pos: int, file_size: int, expected: int) -> BatchHeader | None:
    """The first intact batch after the bad one at `pos`: where the bad one's length says it ends, if its
    framing still parses and an intact batch is there (a batch inside a damaged one's payload is never taken
    for the next), else the first one found byte by byte; None when nothing intact follows."""
    head = os.pread(fd, HEADER_SIZE, pos)
    if len(head) == HEADER_SIZE:
        h = parse_header(head)
        end = pos + h.batch_length + LOG_OVERHEAD
        if h.magic == 2 and h.batch_length >= HEADER_SIZE - LOG_OVERHEAD and end <= file_size:
            if end == file_size:
                return None
            good, _why = batch_ok(fd, end, file_size, expected)
            if good is not None:
                return good
    return resync(fd, pos, file_size, expected)


@dataclass
class Scrub:
    """Where a scrub of one segment stands (`scrub_part` advances it)."""

    position: int
    expected: int  # the offset the next batch starts at or after
    found: list[Damaged]
    verified: int = 0  # bytes whose CRC was checked


def scrub_part(fd: int, state: Scrub, file_size: int, end_offset: int, skip: dict[int, Damaged],
               budget: int) -> Scrub:  # fmt: skip
    """Verify batches (framing, offsets, CRC32C) from `state.position` until about `budget` bytes are checked
    or the file ends: damaged stretches found are added to `state.found`, those in `skip` (quarantined
    already) stepped over. Pure reads of `fd`: run in a thread, the descriptor pinned."""
    checked = 0
    pos, expected = state.position, state.expected
    while pos < file_size and checked < budget:
        known = skip.get(pos)
        if known is not None:
            pos += known.size
            expected = known.last_offset + 1
            continue
        h, why = batch_ok(fd, pos, file_size, expected)
        if h is not None:
            size = h.batch_length + LOG_OVERHEAD
            checked += size
            pos += size
            expected = h.next_offset
            continue
        if zeros_from(fd, pos, file_size):  # reserved space a crash left untrimmed: not damage
            checked += file_size - pos
            pos = file_size
            break
        good = after_damage(fd, pos, file_size, expected)
        if good is None:
            state.found.append(Damaged(pos, file_size - pos, expected, max(expected, end_offset - 1), why or ""))
            checked += file_size - pos
            pos = file_size
            break
        state.found.append(Damaged(pos, good.position - pos, expected, good.base_offset - 1, why or ""))
        checked += good.position - pos
        pos, expected = good.position, good.base_offset
    state.position, state.expected = pos, expected
    state.verified += checked
    return state


class Segment:
    """A log file whose batches start at `base_offset`; indexes hold an entry every `index_interval` bytes."""

    def __init__(
        self, directory: Path, base_offset: int, index_interval: int, created_ms: int, files: FileCache | None = None
    ) -> None:
        self.dir = directory
        self.base_offset = base_offset
        self.index_interval = index_interval
        name = segment_name(base_offset)
        self.log_path = directory / f"{name}.log"
        self.index_path = directory / f"{name}.index"
        self.time_path = directory / f"{name}.timeindex"
        self.txn = TxnIndex(directory / f"{name}.txnindex")  # aborted transactions whose marker is here
        self.txn.load()
        # Damaged stretches readers step over (recovery of a closed segment, the scrubber), by position.
        self.quarantine_path = directory / f"{name}.quarantine"
        self.quarantined: list[Damaged] = self._load_quarantine()
        self.newly_quarantined: list[Damaged] = []  # by the last `recover`
        # Descriptors come from the broker's budget (`files`), opened when used, possibly closed between uses.
        self.files = files if files is not None else UNBOUNDED
        self._log = self.files.handle(self.log_path, append=False)
        self.size = os.fstat(self._log.fd).st_size  # where the data ends (the next batch goes here)
        # The file's length: past `size` while space reserved ahead of small appends is unused (zeros).
        self.allocated = self.size
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
        self._index: FileHandle | None = None
        self._indexes_dirty = False  # index entries written since the last sync_indexes
        self._time: FileHandle | None = None

    # ------------------------------------------------------------------ index files

    def _open_index_files(self, truncate: bool) -> None:
        """Open both index files; when the second cannot be opened (no descriptors, no space), the first is
        closed again, so a failed open leaks nothing."""
        self._close_index_files()
        self._index = self.files.handle(self.index_path)
        self._time = self.files.handle(self.time_path)
        try:
            for h in (self._index, self._time):
                if truncate:
                    os.ftruncate(h.fd, 0)
                elif not h.path.exists():
                    h.fd  # noqa: B018 - create it now, as the log expects both files beside each segment
        except OSError:
            self._close_index_files()
            raise

    def _close_index_files(self) -> None:
        for h in (self._index, self._time):
            if h is not None:
                h.close()
        self._index = self._time = None

    @property
    def fd(self) -> int:
        """The log file's descriptor, opened again if the budget closed it."""
        return self._log.fd

    @property
    def handle(self) -> FileHandle:
        return self._log

    # ------------------------------------------------------------------ quarantine

    def _load_quarantine(self) -> list[Damaged]:
        try:
            raw = json.loads(self.quarantine_path.read_text())
            return sorted((Damaged(*entry) for entry in raw), key=_at)
        except FileNotFoundError:
            return []
        except (ValueError, TypeError) as exc:  # a damaged list: the scrubber finds the damage again
            log.warning("%s: unreadable quarantine list (%s); ignored", self.quarantine_path, exc)
            return []

    def quarantine(self, found: list[Damaged]) -> list[Damaged]:
        """Add damaged stretches (written atomically beside the segment); returns those that were new."""
        known = {d.position for d in self.quarantined}
        new = [d for d in found if d.position not in known]
        if not new:
            return []
        self.quarantined = sorted([*self.quarantined, *new], key=_at)
        tmp = self.quarantine_path.with_name(self.quarantine_path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump([[d.position, d.size, d.first_offset, d.last_offset, d.reason] for d in self.quarantined], f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.quarantine_path)
        return new

    def _skip(self, pos: int) -> int:
        """`pos`, or, when quarantined stretches cover it (an index entry may point inside one; stretches may
        follow one another), where the last of them ends."""
        moved = True
        while moved:
            moved = False
            for d in self.quarantined:
                if d.position <= pos < d.position + d.size:
                    pos = d.position + d.size
                    moved = True
        return pos

    def _quarantine_after(self, pos: int) -> int | None:
        """Where the first quarantined stretch at or after `pos` starts (None: none does)."""
        for d in self.quarantined:
            if d.position >= pos:
                return d.position
        return None

    def unsynced(self) -> Unsynced | None:
        """The log file's descriptor for the fsync thread, if it is open and holds writes no sync covered
        (a closed one was synced when it was closed)."""
        h = self._log
        fd = h.open_fd
        return None if fd is None or not h.written else Unsynced(fd, h, h.writes)

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

    def check_tail(self, verify_crc: bool = True) -> bool:
        """Check every batch after the last index entry (the indexed batch included); False when one is
        torn or corrupt. Run on the active segment whatever the clean-shutdown marker says: a file cut or
        damaged after a clean stop must not be appended to. Costs one index interval, not the segment."""
        start = self.idx_positions[-1] if self.idx_positions else 0
        expected = self.base_offset + (self.idx_offsets[-1] if self.idx_offsets else 0)
        end, _why, _next = self._scan(start, expected, index=False, verify_crc=verify_crc)
        return end == self.size

    def recover(self, verify_crc: bool = True, closed: bool = False) -> Truncation | None:
        """Validate every batch (framing, offsets and, with `verify_crc`, CRC32C), truncate at the first torn
        or corrupt one, rebuild both indexes. Returns what was cut (None when the segment was intact).

        Without `verify_crc` a well-framed batch whose CRC fails is kept: for logs whose reader checks every
        CRC itself and can skip one damaged batch (internal logs) instead of losing all that follows it.

        A `closed` segment (not the log's last: its bytes were synced long ago, so damage is rot, not a torn
        write) keeps every intact batch after a damaged stretch: the stretch is quarantined (`quarantined`,
        `newly_quarantined`) and readers step over its offsets. Only damage with nothing intact after it is
        cut. The active segment is cut at the first bad batch, as Kafka's recovery does: batches after it were
        never acknowledged as durable, and keeping them would put a producer's sequence out of order. Internal
        logs (no `verify_crc`) fence off broken framing in any segment: their replay reports the stretch.
        """
        self.idx_offsets, self.idx_positions, self.time_stamps, self.time_offsets = [], [], [], []
        self.max_timestamp = self.max_timestamp_rel = -1
        self.next_offset = self.base_offset
        self._bytes_since_index = 0
        self._open_index_files(truncate=True)
        self.newly_quarantined: list[Damaged] = []
        pos, expected = 0, self.base_offset
        while True:
            end, why, next_offset = self._scan(pos, expected, index=True, verify_crc=verify_crc)
            # Data logs fence damage off in closed segments only (see above); internal logs, whose replay
            # checks every CRC itself, in any segment: a torn tail has nothing intact after it and is cut.
            if why is None or (verify_crc and not closed) or self._zeros_from(end):
                break
            good = after_damage(self.fd, end, self.size, next_offset)
            if good is None:
                break
            self.newly_quarantined.append(Damaged(end, good.position - end, next_offset, good.base_offset - 1, why))
            pos, expected = good.position, good.base_offset
        if self.newly_quarantined:
            self.quarantine(self.newly_quarantined)
        cut = None
        if end < self.size:
            if not self._zeros_from(end):  # zeros are space reserved ahead and never written: nothing lost
                cut = Truncation(end, self.size - end, next_offset, self._claimed_last_offset(end), why or "")
            os.ftruncate(self.fd, end)
            os.fsync(self.fd)
            self.size = end
        self.allocated = self.size
        self.sync_indexes()
        return cut

    def _zeros_from(self, pos: int) -> bool:
        """Whether the file holds only zero bytes from `pos` to its end."""
        return zeros_from(self.fd, pos, self.size)

    def _scan(self, pos: int, expected: int, index: bool, verify_crc: bool = True) -> tuple[int, str | None, int]:
        """Walk batches from `pos` checking magic, length, offsets and CRC32C; with `index`, add each good
        batch to the indexes. Returns (end of the last good batch, why the walk stopped short or None, the
        offset the next batch should start at)."""
        chunk = 8 << 20
        while pos < self.size:
            head = os.pread(self.fd, HEADER_SIZE, pos)
            if len(head) < HEADER_SIZE:
                return pos, f"a batch header cut short ({len(head)} of {HEADER_SIZE} bytes)", expected
            h = parse_header(head)
            size = h.batch_length + LOG_OVERHEAD
            if h.magic != 2:
                return pos, f"a batch with magic {h.magic}", expected
            if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
                return pos, f"a batch length of {h.batch_length}", expected
            if pos + size > self.size:
                return pos, f"a torn batch ({self.size - pos} of {size} bytes)", expected
            if h.base_offset < expected or h.last_offset_delta < 0:
                return pos, f"a batch at offset {h.base_offset} where {expected} or later was due", expected
            if verify_crc:
                crc = crc32c(head[ATTRIBUTES:])
                done = HEADER_SIZE
                while done < size:
                    part = os.pread(self.fd, min(chunk, size - done), pos + done)
                    if not part:
                        break
                    crc = crc32c(part, crc)
                    done += len(part)
                if done != size or crc != h.crc:
                    return pos, "a CRC32C mismatch", expected
            if index:
                h.position = pos
                self._index_batch(h, size)
            expected = h.next_offset
            pos += size
        return pos, None, expected

    def _claimed_last_offset(self, pos: int) -> int | None:
        """The largest last offset that the batch headers from `pos` on claim, as far as their framing
        parses (their contents are not trusted: this only sizes the loss for the log)."""
        last = None
        while pos + HEADER_SIZE <= self.size:
            h = parse_header(os.pread(self.fd, HEADER_SIZE, pos))
            if h.magic != 2 or h.batch_length < HEADER_SIZE - LOG_OVERHEAD or h.last_offset_delta < 0:
                break
            last = h.last_offset if last is None else max(last, h.last_offset)
            pos += h.batch_length + LOG_OVERHEAD
        return last

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
            assert self._index is not None
            os.write(self._index.fd, _OFFSET_ENTRY.pack(rel, h.position))
            self._indexes_dirty = True
            if self.max_timestamp > (self.time_stamps[-1] if self.time_stamps else -1):
                self.time_stamps.append(self.max_timestamp)
                self.time_offsets.append(self.max_timestamp_rel)
                assert self._time is not None
                os.write(self._time.fd, _TIME_ENTRY.pack(self.max_timestamp, self.max_timestamp_rel))
            self._bytes_since_index = 0
        self._bytes_since_index += size
        self.next_offset = h.next_offset

    def sync_indexes(self) -> None:
        """Make the index files durable (a roll, a stop, a recovery). Their descriptors are never synced
        when the budget closes them: indexes can be rebuilt from the log, and a crash recovers the active
        segment's from the log anyway; an fdatasync on a reopened descriptor syncs what the old one wrote."""
        if self._indexes_dirty:
            for h in (self._index, self._time):
                if h is not None:
                    os.fdatasync(h.fd)
            self._indexes_dirty = False
        self.txn.sync()

    # ------------------------------------------------------------------ append / read

    def append(self, data: bytes | bytearray | memoryview, headers: list[BatchHeader], reserve: int = 0) -> None:
        """Write whole batches at the data's end; an append smaller than `reserve` that needs space first
        reserves that much ahead (see `_reserve`)."""
        start = self.size
        end = start + len(data)
        fd = self._log.fd
        self._log.wrote()
        if end > self.allocated and 0 < len(data) < reserve and start >= RESERVE_AFTER:
            self._reserve(fd, end + reserve)
        n = os.pwrite(fd, data, start)
        if n != len(data):  # a short write on a regular file means the disk is full
            os.ftruncate(fd, start)
            self.allocated = start
            raise OSError(f"short write to {self.log_path}: {n} of {len(data)} bytes")
        self.size = end
        self.allocated = max(self.allocated, end)
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
            if self.quarantined:
                pos = self._skip(pos)
                if pos + HEADER_SIZE > self.size:
                    return
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

    def read(
        self, position: int, max_bytes: int, first_whole: bool, pool: BufferPool | None = None, limit: int | None = None
    ) -> memoryview:
        """Whole batches from `position`, up to `max_bytes`; the first batch is returned whole when
        `first_whole` (KIP-74: a consumer always makes progress).

        The bytes land in a buffer from `pool` when one is given (the caller gives `view.obj` back when
        done): a fresh megabyte per fetch is zeroed and page-faulted by the kernel again and again, which
        measured slower than the read itself. Nothing at or after byte `limit` (a batch boundary) is returned."""
        end_of_data = self.size if limit is None else min(limit, self.size)
        if self.quarantined:
            position = self._skip(position)
            if (stop := self._quarantine_after(position)) is not None:
                end_of_data = min(end_of_data, stop)
        if position >= end_of_data:
            return memoryview(b"")
        want = max(min(max_bytes, end_of_data - position), HEADER_SIZE)
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

    def file_range(
        self, first: BatchHeader, max_bytes: int, first_whole: bool, limit: int | None = None, limit_offset: int = -1
    ) -> FileRange | None:
        """What `read` would return from the batch `first`, as a file range (None: nothing to return).

        Where the data exceeds `max_bytes` the range ends at the last batch boundary that fits: the
        sparse index's positions are batch starts, and at most `_RANGE_WALK` headers past the last of
        them are read, so a range costs a few syscalls whatever its size. It may therefore stop up to
        that walk short of what `read` returns (never past max_bytes, and always whole batches, which is
        tighter than Kafka's, which sends a partial last batch). `limit` (a batch start) and its offset
        `limit_offset` bound a read_committed read at the last stable offset."""
        position = first.position
        end_of_data = self.size if limit is None else min(limit, self.size)
        if self.quarantined and (stop := self._quarantine_after(position)) is not None and stop < end_of_data:
            end_of_data = stop
            limit = stop if limit is None else min(limit, stop)
            limit_offset = next(d.first_offset for d in self.quarantined if d.position == stop)
        if position >= end_of_data:
            return None
        first_end = position + first.batch_length + LOG_OVERHEAD
        if end_of_data - position <= max_bytes:
            end = end_of_data
        elif first_end - position > max_bytes:
            if not first_whole:
                return None
            end = first_end  # KIP-74: the first batch whole, however large
        else:
            cap = position + max_bytes
            i = bisect.bisect_right(self.idx_positions, cap) - 1
            end = self.idx_positions[i] if i >= 0 and self.idx_positions[i] > first_end else first_end
            fd = self.fd
            for _ in range(_RANGE_WALK):
                if end + LOG_OVERHEAD > end_of_data:
                    break
                base, length = _OFFSET_AND_LENGTH.unpack(os.pread(fd, LOG_OVERHEAD, end))
                if end + length + LOG_OVERHEAD > cap:
                    return FileRange.pinned(self._log, position, end - position, base)
                end += length + LOG_OVERHEAD
        if end >= end_of_data:
            end_offset = limit_offset if limit is not None and limit <= self.size else self.next_offset
        elif end == first_end:
            end_offset = first.next_offset
        else:
            end_offset = _OFFSET_AND_LENGTH.unpack(os.pread(self.fd, LOG_OVERHEAD, end))[0]
        return FileRange.pinned(self._log, position, end - position, end_offset)

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

    def _reserve(self, fd: int, upto: int) -> None:
        """Extend the file to `upto` (rounded to a page) with allocated zeros, so that the fdatasync of the
        small appends that fill it has no file length to commit: ~129 us instead of ~190 us here
        (docs/design.md, "fsync policy"). Without space, or support, appends extend the file themselves."""
        upto = -(-upto // 4096) * 4096
        try:
            os.posix_fallocate(fd, self.allocated, upto - self.allocated)
        except OSError:
            self.allocated = os.fstat(fd).st_size  # a failed reservation may have extended the file partly
            return
        self.allocated = upto

    def trim(self) -> bool:
        """Give back space reserved past the data, so that a rolled or closed segment file ends at its last
        batch; True when it did (the next fdatasync of this file makes the new length durable)."""
        if self.allocated <= self.size:
            return False
        os.ftruncate(self.fd, self.size)
        self.allocated = self.size
        self._log.wrote()
        return True

    def sync(self) -> None:
        self._log.sync()

    def close(self) -> None:
        self._log.close()
        self._close_index_files()

    def modified_ms(self) -> int:
        """When the segment's file was last written (Kafka's segment lastModified), in ms."""
        try:
            return int(os.stat(self.log_path).st_mtime * 1000)
        except FileNotFoundError:
            return 0

    def delete(self) -> None:
        self.close()
        for p in (self.log_path, self.index_path, self.time_path, self.txn.path, self.quarantine_path):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
