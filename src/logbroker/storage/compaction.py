"""Log compaction (cleanup.policy=compact): keep the last record of every key in a partition's closed segments.

The work is split so the broker's event loop never does the heavy part:

- `clean_segments` (a worker process: it decodes and re-encodes every record, which would hold the GIL
  against produce and fetch in a thread) reads the closed segments by path and writes each group of them,
  cleaned, with fresh indexes into its own staging directory `.cleaning-<base>/`.
- `PartitionLog.swap_cleaned` (the event loop: renames only) puts a group in place: a `swap.json` marker
  written atomically into the staging directory is the commit point; then the old files go and the new
  ones are renamed in. `complete_swaps` runs on every open: a staging directory with its marker is
  finished, one without is discarded. A kill -9 at any point leaves either the old segments or the new.

What is kept follows Kafka's Cleaner: the record with the highest offset of each key in the range cleaned
(the key map covers the dirty part: records past the last cleaning), offsets unchanged (gaps are normal;
a batch keeps its base and last offset so readers step over removed records), records without a key
dropped, tombstones (null value) dropped only once the segment holding them is older than
delete.retention.ms and they are in the part cleaned before, the last batch of each idempotent producer
kept (empty if all its records went) so its sequence state survives, compressed batches decompressed,
filtered and compressed again with their own codec.

Transactions, as Kafka's Cleaner (CleanedTransactionMetadata): nothing at or past the last stable offset is
cleaned (the segment holding it and later ones are left alone), so an open transaction's records stay. The
records of aborted transactions (known from the aborted index, as read_committed readers know them) are
removed and never enter the key map, so an aborted update can neither survive as a key's value nor hide
the committed value before it. A cleaned segment's `.txnindex` keeps the entries of the aborted transactions
whose batches were still in the log when the round started; a marker (COMMIT or ABORT) stays while any batch
of its transaction does. Once none does, the marker gets Kafka's delete horizon (now + delete.retention.ms,
written in its header with the delete-horizon attribute, as Kafka 2.8+ writes it) and a later cleaning past
that horizon removes it, unless it is its producer's last batch (its epoch fences zombies).
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from crc32c import crc32c

from logbroker.protocol.records import (
    ABORT,
    COMMIT,
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    BatchHeader,
    compress,
    control_type,
    decompress,
    parse_header,
    read_varint,
    write_varint,
)

from .configs import LogConfig
from .files import FileCache, fsync_dir, write_atomic
from .segment import Segment, segment_name
from .txnindex import AbortedTxn


class CleanableLog(Protocol):
    """What the cleaner uses of a partition log (`log.PartitionLog` is one)."""

    dir: Path
    config: LogConfig
    files: FileCache | None
    segments: list[Segment]
    unsynced: set[Segment]
    log_start_offset: int

    @property
    def last_stable_offset(self) -> int: ...

    def aborted_transactions(self, fetch_offset: int, upper: int) -> list[AbortedTxn]: ...


log = logging.getLogger(__name__)

STAGING_PREFIX = ".cleaning-"
MARKER = "swap.json"
LOCK = ".cleaner.lock"  # held (flock) by the process writing a partition's staging directories
LOCK_WAIT_S = 1.0  # how long an open waits for a dying worker (killed with its broker) to let go
CHECKPOINT = "cleaner-checkpoint"
KEY_ENTRY_BYTES = 120  # what one key of the map costs in this process (16-byte digest, int, dict slot)

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_CRC_FROM = 21  # CRC32C covers attributes..end
_MAX_TS_AT = 35
_RECORDS_COUNT_AT = 57
_BASE_TS_AT = 27
DELETE_HORIZON_FLAG = 0x40  # Kafka's batch attribute: the base timestamp is the delete horizon
SUFFIXES = (".index", ".timeindex", ".txnindex", ".log")  # a segment's files; the log last when moving


@dataclass(frozen=True)
class SegmentFile:
    base: int
    path: str
    mtime_ms: int
    skip: tuple[tuple[int, int], ...] = ()  # quarantined stretches (position, size): damaged, never cleaned in


@dataclass(frozen=True)
class CleanJob:
    """One cleaning of one partition: plain data, so it crosses into the worker process."""

    directory: str
    segments: tuple[SegmentFile, ...]  # the closed segments considered, in offset order
    first_dirty: int  # records at or past this offset have not been cleaned before
    log_start: int
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    max_keys: int
    index_interval: int
    io_bytes_per_second: float = float("inf")
    # The aborted transactions overlapping the segments (producer id, first offset, marker offset, LSO): the
    # log's aborted index as read_committed fetches read it.
    aborted: tuple[tuple[int, int, int, int], ...] = ()


@dataclass
class Group:
    """Old segments replaced by one cleaned segment staged in `staging`."""

    base: int
    replaced: list[int]
    staging: str


@dataclass
class CleanResult:
    groups: list[Group] = field(default_factory=list)
    end: int = 0  # the new first dirty offset (the checkpoint)
    bytes_read: int = 0
    bytes_written: int = 0
    records_kept: int = 0
    records_removed: int = 0
    tombstones_kept_until_ms: int | None = None  # when a kept tombstone or marker may go: clean again then
    seconds: float = 0.0


def _key_id(key: bytes) -> bytes:
    """Keys up to 16 bytes are their own id; longer ones a 16-byte digest (Kafka's map hashes them too)."""
    return key if len(key) <= 16 else hashlib.blake2b(key, digest_size=16).digest()


def _records(body: bytes, count: int) -> Iterator[tuple[bytes, int, int, bytes | None, bool]]:
    """(raw record, offset delta, timestamp delta, key, value is null) of each record."""
    pos = 0
    for _ in range(count):
        length, p = read_varint(body, pos)
        end = p + length
        p += 1  # attributes
        ts_delta, p = read_varint(body, p)
        off_delta, p = read_varint(body, p)
        klen, p = read_varint(body, p)
        key = None if klen < 0 else body[p : p + klen]
        p += max(klen, 0)
        vlen, p = read_varint(body, p)
        yield body[pos:end], off_delta, ts_delta, key, vlen < 0
        pos = end


def _batches(data: bytes, skip: tuple[tuple[int, int], ...] = ()) -> Iterator[tuple[BatchHeader, bytes]]:
    """The intact batches of a segment's bytes, quarantined stretches stepped over. A batch whose CRC fails (rot
    not fenced off yet) is left out: a rebuilt batch would get a valid CRC over damaged records. Framing that
    breaks before the end (reserved zeros aside) fails the cleaning: a cleaned segment must not lose the
    batches after it, and the scrubber or an index rebuild fences the stretch off for the next round."""
    view = memoryview(data)
    pos = 0
    jumps = dict(skip)
    while pos < len(data):
        if pos in jumps:  # a quarantined stretch: its offsets are a gap already, and stay one
            pos += jumps[pos]
            continue
        if pos + HEADER_SIZE > len(data):
            break
        h = parse_header(data, pos)
        size = h.batch_length + LOG_OVERHEAD
        if h.magic != 2 or h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + size > len(data):
            break
        if crc32c(view[pos + _CRC_FROM : pos + size]) != h.crc:
            pos += size
            continue
        yield h, data[pos : pos + size]
        pos += size
    if pos < len(data) and view[pos:].tobytes().count(0) != len(data) - pos:
        raise ValueError(f"unreadable batch framing at byte {pos} (not yet quarantined)")


class _Throttle:
    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.start = time.monotonic()
        self.done = 0

    def account(self, n: int) -> None:
        self.done += n
        if self.rate == float("inf"):
            return
        ahead = self.done / self.rate - (time.monotonic() - self.start)
        if ahead > 0:
            time.sleep(ahead)


class _Aborted:
    """The aborted transactions of the job, looked up by batch: a producer's transactions never overlap, so
    a transactional batch is aborted when it lies between the first offset and the ABORT marker of one of its
    producer's aborted transactions (Kafka's CleanedTransactionMetadata reaches the same answer by scanning)."""

    def __init__(self, entries: tuple[tuple[int, int, int, int], ...]) -> None:
        self.by_marker: dict[tuple[int, int], AbortedTxn] = {}
        spans: dict[int, list[tuple[int, int]]] = {}
        for pid, first, last, lso in entries:
            self.by_marker[(pid, last)] = AbortedTxn(pid, first, last, lso)
            spans.setdefault(pid, []).append((first, last))
        self._spans = {pid: sorted(set(s)) for pid, s in spans.items()}
        self._firsts = {pid: [f for f, _l in s] for pid, s in self._spans.items()}

    def marker_of(self, h: BatchHeader) -> int | None:
        """The ABORT marker's offset when `h` is a data batch of an aborted transaction, else None."""
        if h.is_control or not h.is_transactional or h.producer_id not in self._spans:
            return None
        i = bisect.bisect_right(self._firsts[h.producer_id], h.last_offset) - 1
        if i < 0:
            return None
        _first, marker = self._spans[h.producer_id][i]
        return marker if h.last_offset < marker else None


@dataclass
class _TxnState:
    """What one scan of the range (before anything is removed) says about transactions."""

    aborted_batches: set[int] = field(default_factory=set)  # base offsets of aborted data batches
    kept_aborts: dict[int, AbortedTxn] = field(default_factory=dict)  # marker offset -> entry to keep
    spent_markers: set[int] = field(default_factory=set)  # markers no batch of whose transaction remains
    last_of_producer: dict[int, int] = field(default_factory=dict)  # pid -> base offset of its last batch


def _scan_transactions(segments: list[SegmentFile], aborted: _Aborted, throttle: _Throttle,
                       out: CleanResult) -> _TxnState:  # fmt: skip
    """Kafka's CleanedTransactionMetadata over the whole range, in offset order: an ABORT marker keeps its
    index entry (and stays) while a batch of its transaction is present; a COMMIT marker stays while a
    batch of its transaction is; an empty control batch was cleaned before and is spent."""
    st = _TxnState()
    seen_aborted: set[tuple[int, int]] = set()  # (pid, marker) of aborted transactions with a batch here
    open_committed: set[int] = set()  # pids with a batch of a committed transaction since their last marker
    for seg in segments:
        data = Path(seg.path).read_bytes()
        throttle.account(len(data))
        out.bytes_read += len(data)
        for h, raw in _batches(data, seg.skip):
            if h.producer_id != NO_PRODUCER_ID:
                st.last_of_producer[h.producer_id] = h.base_offset
            if h.is_control:
                pid = h.producer_id
                body = raw if not h.compression else raw[:HEADER_SIZE] + decompress(h.compression, raw[HEADER_SIZE:])
                kind = control_type(body) if h.records_count else -1
                if h.records_count == 0:
                    st.spent_markers.add(h.base_offset)
                elif kind == ABORT:
                    entry = aborted.by_marker.get((pid, h.base_offset))
                    if entry is not None and (pid, h.base_offset) in seen_aborted:
                        st.kept_aborts[h.base_offset] = entry
                    elif pid not in open_committed:  # (batches but no index entry: kept, the safe side)
                        st.spent_markers.add(h.base_offset)
                    open_committed.discard(pid)
                elif kind == COMMIT:
                    if pid not in open_committed:
                        st.spent_markers.add(h.base_offset)
                    open_committed.discard(pid)
                continue
            marker = aborted.marker_of(h)
            if marker is not None:
                st.aborted_batches.add(h.base_offset)
                seen_aborted.add((h.producer_id, marker))
            elif h.is_transactional:
                open_committed.add(h.producer_id)
    return st


@contextlib.contextmanager
def _cleaning_lock(directory: str) -> Iterator[None]:
    """Held while a worker writes a partition's staging directories: a second worker (a restarted broker's,
    while a killed broker's worker is still exiting) waits here instead of writing the same files."""
    fd = os.open(Path(directory) / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _worker_alive(directory: Path, wait_s: float = LOCK_WAIT_S) -> bool:
    """Whether a worker still holds the partition's cleaning lock after `wait_s` (a worker dies with its broker,
    so one left is either exiting or this broker's own, busy)."""
    try:
        fd = os.open(directory / LOCK, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return False
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return True
                time.sleep(0.02)
    finally:
        os.close(fd)


def clean_segments(job: CleanJob) -> CleanResult:
    """Build the key map over the dirty segments, then write every group of segments cleaned (staged)."""
    with _cleaning_lock(job.directory):
        return _clean_segments(job)


def _clean_segments(job: CleanJob) -> CleanResult:
    started = time.monotonic()
    out = CleanResult()
    throttle = _Throttle(job.io_bytes_per_second)
    aborted = _Aborted(job.aborted)
    # 1. The key map: last offset of each key at or past first_dirty, aborted records left out. A full map ends
    # the range at a segment boundary (at least one dirty segment is always mapped, as Kafka requires).
    latest: dict[bytes, int] = {}
    end = job.segments[-1].base if job.segments else job.first_dirty
    included: list[SegmentFile] = []
    for i, seg in enumerate(job.segments):
        nxt = job.segments[i + 1].base if i + 1 < len(job.segments) else None
        if nxt is not None and nxt <= job.first_dirty:
            included.append(seg)
            continue
        if len(latest) >= job.max_keys and any(s.base >= job.first_dirty for s in included):
            end = seg.base
            break
        data = Path(seg.path).read_bytes()
        throttle.account(len(data))
        out.bytes_read += len(data)
        for h, raw in _batches(data, seg.skip):
            if h.is_control or h.last_offset < job.first_dirty or aborted.marker_of(h) is not None:
                continue
            body = decompress(h.compression, raw[HEADER_SIZE:])
            for _rec, off_delta, _ts, key, _null in _records(body, h.records_count):
                offset = h.base_offset + off_delta
                if key is not None and offset >= job.first_dirty:
                    latest[_key_id(key)] = offset
        included.append(seg)
        end = nxt if nxt is not None else _segment_end(data, seg.base, seg.skip)
    # 2. Transactions over the whole range; the last batch of each producer in it is kept, empty if need be,
    # for the producer's sequence state.
    txns = _scan_transactions(included, aborted, throttle, out)
    keep_batches = set(txns.last_of_producer.values())
    # 3. Groups of consecutive segments whose sizes add up to at most segment.bytes.
    groups: list[list[SegmentFile]] = []
    size = 0
    for seg in included:
        n = os.path.getsize(seg.path)
        if groups and size + n <= job.segment_bytes:
            groups[-1].append(seg)
            size += n
        else:
            groups.append([seg])
            size = n
    for group in groups:
        out.groups.append(_write_group(job, group, latest, keep_batches, txns, out, throttle))
    out.end = end
    out.seconds = time.monotonic() - started
    return out


def _segment_end(data: bytes, base: int, skip: tuple[tuple[int, int], ...] = ()) -> int:
    end = base
    for h, _raw in _batches(data, skip):
        end = h.next_offset
    return end


def _keep_until(out: CleanResult, until: int) -> None:
    prev = out.tombstones_kept_until_ms
    out.tombstones_kept_until_ms = until if prev is None else min(prev, until)


def _write_group(
    job: CleanJob,
    group: list[SegmentFile],
    latest: dict[bytes, int],
    keep_batches: set[int],
    txns: _TxnState,
    out: CleanResult,
    throttle: _Throttle,
) -> Group:
    base = group[0].base
    staging = Path(job.directory) / f"{STAGING_PREFIX}{segment_name(base)}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    cleaned = bytearray()
    entries: list[AbortedTxn] = []
    for seg in group:
        data = Path(seg.path).read_bytes()
        throttle.account(len(data))
        out.bytes_read += len(data)
        horizon_passed = job.now_ms - seg.mtime_ms > job.delete_retention_ms
        for h, raw in _batches(data, seg.skip):
            if h.is_control:
                if h.base_offset in txns.kept_aborts:
                    entries.append(txns.kept_aborts[h.base_offset])
                if h.base_offset not in txns.spent_markers or h.compression:
                    cleaned += raw
                elif not h.attributes & DELETE_HORIZON_FLAG:  # spent just now: the horizon starts
                    cleaned += _with_delete_horizon(raw, h, job.now_ms + job.delete_retention_ms)
                    _keep_until(out, job.now_ms + job.delete_retention_ms)
                elif job.now_ms < h.base_timestamp or h.base_offset in keep_batches:
                    cleaned += raw
                    if job.now_ms < h.base_timestamp:
                        _keep_until(out, h.base_timestamp)
                else:
                    out.records_removed += h.records_count
                continue
            body = decompress(h.compression, raw[HEADER_SIZE:])
            kept: list[bytes] = []
            max_ts = -1
            aborted = h.base_offset in txns.aborted_batches
            for rec, off_delta, ts_delta, key, null_value in _records(body, h.records_count):
                offset = h.base_offset + off_delta
                keep = key is not None and offset >= job.log_start and latest.get(_key_id(key), -1) <= offset
                keep = keep and not aborted
                if keep and null_value and offset < job.first_dirty and horizon_passed:
                    keep = False  # a tombstone past delete.retention.ms, seen by a cleaning before
                if keep:
                    kept.append(rec)
                    max_ts = max(max_ts, h.base_timestamp + ts_delta)
                    if null_value:
                        _keep_until(out, seg.mtime_ms + job.delete_retention_ms + 1)
            out.records_kept += len(kept)
            out.records_removed += h.records_count - len(kept)
            if len(kept) == h.records_count:
                cleaned += raw
            elif kept or h.base_offset in keep_batches:
                cleaned += _rebuild(raw, h, kept, max_ts)
    with open(staging / f"{segment_name(base)}.log", "wb") as f:
        f.write(cleaned)
        f.flush()
        os.fsync(f.fileno())
    out.bytes_written += len(cleaned)
    # Fresh indexes beside it, built as recovery builds them, and the aborted index (always a file, empty or
    # not: finish_swap tells a moved file from a missing one); then every file and the directory are durable.
    files = FileCache()
    seg = Segment(staging, base, job.index_interval, job.now_ms, files)
    seg.recover(verify_crc=False)
    seg.txn.path.touch()
    for entry in entries:
        seg.txn.append(entry)
    seg.sync_indexes()
    seg.close()
    mtime = max(s.mtime_ms for s in group) / 1000
    os.utime(staging / f"{segment_name(base)}.log", (mtime, mtime))  # the delete horizon counts from here
    fsync_dir(staging)
    return Group(base, [s.base for s in group], str(staging))


def _with_delete_horizon(raw: bytes, h: BatchHeader, horizon: int) -> bytes:
    """The (uncompressed) batch with Kafka's delete horizon: the attribute set and the base timestamp the
    horizon, each record's timestamp delta rewritten so its timestamp stays the same."""
    body = bytearray()
    for rec, _off_delta, ts_delta, _key, _null in _records(raw[HEADER_SIZE:], h.records_count):
        _length, p = read_varint(rec, 0)
        attrs = rec[p]
        _ts, rest = read_varint(rec, p + 1)
        inner = bytearray([attrs])
        write_varint(inner, h.base_timestamp + ts_delta - horizon)
        inner += rec[rest:]
        write_varint(body, len(inner))
        body += inner
    hdr = bytearray(raw[:HEADER_SIZE])
    struct.pack_into(">h", hdr, _CRC_FROM, h.attributes | DELETE_HORIZON_FLAG)
    _I64.pack_into(hdr, _BASE_TS_AT, horizon)
    _I32.pack_into(hdr, 8, HEADER_SIZE - LOG_OVERHEAD + len(body))
    out = hdr + body
    struct.pack_into(">I", out, 17, crc32c(bytes(out[_CRC_FROM:])))
    return bytes(out)


def _rebuild(raw: bytes, h: BatchHeader, kept: list[bytes], max_ts: int) -> bytes:
    """The batch with only `kept` records: same base and last offset, producer fields and codec; new count,
    max timestamp, length and CRC. No record left: an empty batch, uncompressed (Kafka's empty header)."""
    hdr = bytearray(raw[:HEADER_SIZE])
    body = b"".join(kept)
    attrs = struct.unpack_from(">h", hdr, _CRC_FROM)[0]
    codec = attrs & COMPRESSION_MASK
    if kept:
        body = compress(codec, body)
    else:
        struct.pack_into(">h", hdr, _CRC_FROM, attrs & ~COMPRESSION_MASK)
        max_ts = struct.unpack_from(">q", hdr, _MAX_TS_AT)[0]
    _I64.pack_into(hdr, _MAX_TS_AT, max_ts)
    _I32.pack_into(hdr, _RECORDS_COUNT_AT, len(kept))
    _I32.pack_into(hdr, 8, HEADER_SIZE - LOG_OVERHEAD + len(body))
    out = hdr + body
    struct.pack_into(">I", out, 17, crc32c(bytes(out[_CRC_FROM:])))
    return bytes(out)


# ---------------------------------------------------------------------------------------------- the swap


def write_marker(group: Group) -> None:
    """The commit point of a swap: from here, recovery finishes it rather than undoing it."""
    staging = Path(group.staging)
    tmp = staging / f".{MARKER}.tmp"
    with open(tmp, "w") as f:
        json.dump({"base": group.base, "replaced": group.replaced}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, staging / MARKER)
    fsync_dir(staging)


def finish_swap(directory: Path, staging: Path) -> int | None:
    """Delete the replaced segments' files, move the cleaned ones in, drop the staging directory. Idempotent
    (recovery may run it again after a crash in the middle). Returns the new segment's base, or None when the
    staging directory had no marker (then it is discarded and nothing changes)."""
    try:
        marker = json.loads((staging / MARKER).read_text())
        base, replaced = int(marker["base"]), [int(b) for b in marker["replaced"]]
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        shutil.rmtree(staging, ignore_errors=True)
        return None
    name = segment_name(base)
    if (staging / f"{name}.log").exists():
        # The other replaced segments' files go; the first one's (same name as the new segment's) are
        # overwritten by the renames, so a run after a crash never deletes a file already moved in.
        # Staging holds every file of the new segment (an empty `.txnindex` too), so one that is missing there
        # has been moved.
        for old in replaced:
            # A replaced segment's quarantine list goes (the cleaned segment holds none of its damage); the
            # first one's before the renames, which would otherwise leave it beside the new segment.
            (directory / f"{segment_name(old)}.quarantine").unlink(missing_ok=True)
            if old != base:
                for suffix in SUFFIXES:
                    (directory / f"{segment_name(old)}{suffix}").unlink(missing_ok=True)
        fsync_dir(directory)
        for suffix in SUFFIXES:  # the log last: its presence says the move is not done
            src = staging / f"{name}{suffix}"
            if src.exists():
                os.replace(src, directory / f"{name}{suffix}")
        fsync_dir(directory)
    shutil.rmtree(staging, ignore_errors=True)
    fsync_dir(directory)
    return base


def complete_swaps(directory: Path) -> None:
    """On open: finish every committed swap, discard every uncommitted one, unless a worker still writes it
    (then that worker's next successor, which waits for its lock, starts the directory over)."""
    stagings = [p for p in sorted(directory.glob(f"{STAGING_PREFIX}*")) if p.is_dir()]
    busy = bool(stagings) and _worker_alive(directory)
    for staging in stagings:
        if busy and not (staging / MARKER).exists():
            log.warning("%s: a cleaner process still writes %s; leaving it", directory, staging.name)
            continue
        finish_swap(directory, staging)


def read_checkpoint(directory: Path) -> dict:
    try:
        raw = json.loads((directory / CHECKPOINT).read_text())
        return raw if isinstance(raw, dict) else {}
    except (FileNotFoundError, ValueError):
        return {}


# ------------------------------------------------------------------------------ planning and swapping


@dataclass(frozen=True)
class Plan:
    job: CleanJob
    ratio: float
    reason: str


def plan(plog: CleanableLog, now_ms: int, max_keys: int, io_rate: float = float("inf")) -> Plan | None:
    """What Kafka's LogCleanerManager would pick for this log now, or None: the closed segments below the
    first one that holds records younger than min.compaction.lag.ms, when the dirty share of their bytes
    reaches min.cleanable.dirty.ratio, the dirty part is older than max.compaction.lag.ms, or a kept
    tombstone's delete.retention.ms has run out."""
    cfg = plog.config
    if not cfg.cleanup_compact:
        return None
    closed = plog.segments[:-1]
    lag_bound = now_ms - cfg.min_compaction_lag_ms
    # Kafka's first uncleanable offset: the active segment, the segment holding the last stable offset (an
    # open transaction's records, and what follows them, are never cleaned), min.compaction.lag.ms.
    lso = plog.last_stable_offset
    cleanable = []
    for seg in closed:
        if seg.next_offset > lso:
            break
        if cfg.min_compaction_lag_ms > 0 and seg.max_timestamp > lag_bound:
            break
        cleanable.append(seg)
    if not cleanable:
        return None
    point = read_checkpoint(plog.dir)
    first_dirty = max(int(point.get("first_dirty", 0)), plog.log_start_offset)
    end = plog.segments[len(cleanable)].base_offset
    clean = sum(s.size for s in cleanable if s.next_offset <= first_dirty)
    dirty = sum(s.size for s in cleanable) - clean
    ratio = dirty / (clean + dirty) if clean + dirty else 0.0
    reason = ""
    if first_dirty < end and dirty and ratio >= cfg.min_cleanable_dirty_ratio:
        reason = f"dirty ratio {ratio:.2f} >= {cfg.min_cleanable_dirty_ratio}"
    elif first_dirty < end and dirty:
        first = next(s for s in cleanable if s.next_offset > first_dirty)
        oldest = first.created_ms if first.max_timestamp < 0 else min(first.created_ms, first.max_timestamp)
        if now_ms - oldest > cfg.max_compaction_lag_ms:
            reason = "max.compaction.lag.ms passed"
    if not reason and (until := point.get("tombstones_until")) is not None and now_ms >= int(until):
        reason = "tombstones past delete.retention.ms"
    if not reason:
        return None
    files = tuple(SegmentFile(s.base_offset, str(s.log_path), int(os.stat(s.log_path).st_mtime * 1000),
                              tuple((d.position, d.size) for d in s.quarantined))
                  for s in cleanable)  # fmt: skip
    aborted = tuple((e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
                    for e in plog.aborted_transactions(cleanable[0].base_offset, end))  # fmt: skip
    job = CleanJob(str(plog.dir), files, min(first_dirty, end), plog.log_start_offset, now_ms,
                   cfg.delete_retention_ms, cfg.segment_bytes, max_keys, cfg.index_interval_bytes, io_rate,
                   aborted)  # fmt: skip
    return Plan(job, ratio, reason)


def swap(plog: CleanableLog, group: Group) -> bool:
    """Put one cleaned group in place of its segments (cheap: renames). False, and the work discarded, when
    the log changed meanwhile (retention, DeleteRecords, a roll is fine) so those segments are not all its."""
    staging = Path(group.staging)
    bases = [s.base_offset for s in plog.segments[:-1]]
    if not staging.is_dir() or any(b not in bases for b in group.replaced):
        shutil.rmtree(staging, ignore_errors=True)
        return False
    first = bases.index(group.replaced[0])
    olds = plog.segments[first : first + len(group.replaced)]
    if [s.base_offset for s in olds] != group.replaced:
        shutil.rmtree(staging, ignore_errors=True)
        return False
    write_marker(group)
    for seg in olds:
        seg.sync()  # a descriptor the budget closes later must not write to a file being replaced
        seg.close()
        plog.unsynced.discard(seg)
    finish_swap(plog.dir, staging)
    new = Segment(plog.dir, group.base, plog.config.index_interval_bytes, olds[0].created_ms, plog.files)
    if not new.load_indexes():
        new.recover(verify_crc=False)
    plog.segments[first : first + len(olds)] = [new]
    return True


def write_checkpoint(plog: CleanableLog, first_dirty: int, tombstones_until: int | None) -> None:
    point = {"first_dirty": first_dirty}
    if tombstones_until is not None:
        point["tombstones_until"] = tombstones_until
    write_atomic(plog.dir / CHECKPOINT, json.dumps(point).encode())


def clean_now(plog: CleanableLog, now_ms: int | None = None, max_keys: int = 1 << 20) -> CleanResult | None:
    """Plan, clean and swap in this process (tools and tests; the broker runs `clean_segments` in a worker)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    p = plan(plog, now, max_keys)
    if p is None:
        return None
    result = clean_segments(p.job)
    for group in result.groups:
        swap(plog, group)
    write_checkpoint(plog, result.end, result.tombstones_kept_until_ms)
    return result
