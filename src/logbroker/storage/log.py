"""A partition's log: ordered segments, offset assignment, reads, retention, recovery."""

from __future__ import annotations

import bisect
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from logbroker.protocol.buffers import BufferPool
from logbroker.protocol.errors import ErrorCode
from logbroker.protocol.records import (
    ABORT,
    COMMIT,
    BatchHeader,
    Compression,
    InvalidBatch,
    assign_offsets,
    build_marker,
    control_type,
    decode_batch,
    parse_header,
    recompress,
    stamp_log_append_time,
)
from logbroker.protocol.validate import keyless_records, validate_batch

from .compaction import complete_swaps
from .configs import LogConfig
from .files import FileCache, Unsynced, write_atomic
from .producers import BatchMeta, CompletedTxn, ProducerEntry, ProducerStateTable
from .segment import FileRange, Segment, Truncation
from .txnindex import AbortedTxn

log = logging.getLogger(__name__)

PRODUCER_SNAPSHOT = "producer-state.json"
LOG_START_FILE = "log-start-offset"


class OffsetOutOfRange(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Appended:
    """What `PartitionLog.append_as_leader` did: the batch's offsets (a retried duplicate's first ones), its
    record count, and its LogAppendTime (-1 for a CreateTime topic)."""

    base_offset: int
    last_offset: int
    records: int
    append_time: int = -1
    duplicate: bool = False


# compression.type -> the codec batches are stored in (producer: none, kept as they came).
CODECS = {"uncompressed": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
          "lz4": Compression.LZ4, "zstd": Compression.ZSTD}  # fmt: skip


def _level(cfg: LogConfig, codec: int) -> int | None:
    if codec == Compression.GZIP:
        return cfg.compression_gzip_level
    if codec == Compression.LZ4:
        return cfg.compression_lz4_level
    if codec == Compression.ZSTD:
        return cfg.compression_zstd_level
    return None


# Told of every write to a log (the log, its bytes): the owner's fsync policy and long polls listen here.
AppendListener = Callable[["PartitionLog", int], None]


def _now_ms() -> int:
    return int(time.time() * 1000)


class PartitionLog:
    """Append-only log of record batches for one topic partition.

    Not thread-safe: the broker drives every log from its event loop; only `sync_targets()`' file
    descriptors are handed to a worker thread for fdatasync.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clean_shutdown: bool,
        verify_crc: bool = True,
        files: FileCache | None = None,
        preallocate: int = 0,
        key: tuple[str, int] | None = None,
        on_append: AppendListener | None = None,
    ) -> None:
        self.dir = directory
        self.key = key  # (topic, partition) of a topic's log; None for a coordinator's own log
        self.on_append = on_append
        self.files = files  # the broker's descriptor budget (None: descriptors stay open)
        self.preallocate = preallocate  # bytes the active segment reserves ahead of small appends (0: none)
        self.config = config
        self.verify_crc = verify_crc  # False: recovery keeps well-framed batches whose CRC fails (internal logs)
        directory.mkdir(parents=True, exist_ok=True)
        self.segments: list[Segment] = []
        self.producers = ProducerStateTable()
        self.unsynced: set[Segment] = set()
        self.truncated_bytes = 0
        self.truncations: list[tuple[int, Truncation]] = []  # (segment base, what recovery cut) on this open
        try:
            self._load(clean_shutdown)
        except BaseException:  # out of descriptors or space: give back every descriptor opened so far
            for seg in self.segments:
                seg.close()
            raise

    # ------------------------------------------------------------------ loading and recovery

    def _load(self, clean: bool) -> None:
        """Open the segments; recover what cannot be trusted.

        The active segment's batches after its last index entry are CRC-checked on every start (a clean
        stop's marker does not vouch for bytes cut or damaged afterwards); without the marker it is
        recovered whole. A segment whose indexes are missing or inconsistent is recovered too. Recovery
        truncates at the first bad batch, as Kafka's does, and says which offsets it dropped. Later
        segments are kept (Kafka keeps them when it rebuilds one segment's index): their offsets are still
        above the truncated one's, and readers step over the gap as over a compacted range.
        """
        complete_swaps(self.dir)  # a compaction's swap cut short: finished if committed, else discarded
        bases = sorted(int(p.stem) for p in self.dir.glob("*.log") if p.stem.isdigit())
        for p in self.dir.glob("*.tmp"):
            p.unlink()
        for i, base in enumerate(bases):
            seg = Segment(self.dir, base, self.config.index_interval_bytes, _now_ms(), self.files)
            self.segments.append(seg)
            last = i == len(bases) - 1
            crc = self.verify_crc
            if last and not clean:
                cut = seg.recover(crc)
            elif not seg.load_indexes():
                log.warning("%s: rebuilding indexes of segment %d", self.dir, base)
                cut = seg.recover(crc, closed=not last)
            elif last and not seg.check_tail(crc):
                log.warning("%s: the tail of segment %d is torn or corrupt; recovering it", self.dir, base)
                cut = seg.recover(crc)
            else:
                cut = None
            for d in seg.newly_quarantined:
                log.warning("%s: segment %d: damaged stored bytes quarantined, %s; the batches after them are kept "
                            "and readers step over the gap", self.dir, base, d.describe())  # fmt: skip
            if cut is not None:
                self._report(seg, cut, None if last else bases[i + 1])
        # Drop segments recovery emptied (they hold no offsets) and empty trailing segments left by a crash
        # right after a roll, but keep one.
        for seg in [s for s in self.segments[:-1] if s.size == 0 and self.truncations]:
            self.segments.remove(seg)
            seg.delete()
        while len(self.segments) > 1 and self.segments[-1].size == 0:
            self.segments.pop().delete()
        if not self.segments:
            self.segments.append(self._new_segment(self._stored_log_start() or 0))
        self.log_start_offset = max(self.segments[0].base_offset, self._stored_log_start() or 0)
        if self.truncations:  # the snapshot may remember batches that are gone: rebuild from the log
            (self.dir / PRODUCER_SNAPSHOT).unlink(missing_ok=True)
        self._load_producer_state()

    def _report(self, seg: Segment, cut: Truncation, next_base: int | None) -> None:
        """Log what recovery dropped: the offsets, the bytes and why (acknowledged records may be among them)."""
        self.truncated_bytes += cut.bytes
        self.truncations.append((seg.base_offset, cut))
        last = cut.last_offset
        if next_base is not None:  # a later segment bounds what this one held
            last = next_base - 1 if last is None else min(last, next_base - 1)
        span = (
            f"offsets {cut.first_offset}-{last}"
            if last is not None and last >= cut.first_offset
            else f"offsets from {cut.first_offset} (no readable batch header)"
        )
        log.warning(
            "%s: truncated %d bytes of torn or corrupt data at byte %d of segment %d, dropping %s: %s%s",
            self.dir,
            cut.bytes,
            cut.position,
            seg.base_offset,
            span,
            cut.reason,
            "" if next_base is None else f"; later segments are kept (the log continues at offset {next_base})",
        )

    def _stored_log_start(self) -> int | None:
        try:
            return int((self.dir / LOG_START_FILE).read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _new_segment(self, base: int) -> Segment:
        seg = Segment(self.dir, base, self.config.index_interval_bytes, _now_ms(), self.files)
        try:
            seg.recover()  # empty: just creates fresh index files
        except BaseException:
            seg.close()
            raise
        return seg

    def _load_producer_state(self) -> None:
        """Producer state from the snapshot, then every batch after it replayed. Replaying the markers also
        rebuilds the aborted-transaction index entries after the snapshot (the newest entries are the ones
        a crash can lose), so the LSO and the aborted index come back as they were."""
        start = self.log_start_offset
        try:
            snap = json.loads((self.dir / PRODUCER_SNAPSHOT).read_text())
            if snap["offset"] <= self.next_offset:
                table = self.producers
                for pid_text, e in snap["producers"].items():
                    pid = int(pid_text)
                    entry = table.producers[pid] = ProducerEntry(e["epoch"])
                    for b in e["batches"]:
                        entry.batches.append(BatchMeta(*b))
                    entry.coordinator_epoch = e.get("coordinator_epoch", -1)
                    entry.timestamp = e.get("timestamp", -1)
                    if e.get("txn", -1) >= 0:
                        table.ongoing[pid] = e["txn"]
                start = max(start, snap["offset"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            self.producers = ProducerStateTable()
        for seg in self.segments:
            if seg.next_offset <= start:
                continue
            seg.txn.truncate_from(start)
            pos = seg.position_of(start)[0] if start > seg.base_offset else 0
            for h in seg.iter_headers(pos):
                if h.is_control:
                    self._replay_marker(seg, h)
                else:
                    self.producers.update(h)

    def _replay_marker(self, seg: Segment, h: BatchHeader) -> None:
        kind = control_type(os.pread(seg.fd, min(h.size, 4096), h.position))
        if kind not in (ABORT, COMMIT):
            return  # another control record type: not a transaction's end
        done = self.producers.end_txn(h.producer_id, h.producer_epoch, h.base_offset, kind == ABORT, -1,
                                      h.max_timestamp)  # fmt: skip
        if done is not None and done.aborted:
            lso = self.producers.last_stable_offset(h.next_offset)
            seg.txn.append(AbortedTxn(done.producer_id, done.first_offset, done.last_offset, lso))

    def _write_producer_snapshot(self) -> None:
        snap = {
            "offset": self.next_offset,
            "producers": {
                str(pid): {
                    "epoch": e.epoch,
                    "batches": [
                        [b.first_seq, b.last_seq, b.base_offset, b.last_offset, b.timestamp] for b in e.batches
                    ],
                    "txn": self.producers.ongoing.get(pid, -1),
                    "coordinator_epoch": e.coordinator_epoch,
                    "timestamp": e.timestamp,
                }
                for pid, e in self.producers.producers.items()
            },
        }
        write_atomic(self.dir / PRODUCER_SNAPSHOT, json.dumps(snap).encode())

    # ------------------------------------------------------------------ properties

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def next_offset(self) -> int:
        """The log end offset (high watermark on a single node)."""
        return self.active.next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def last_stable_offset(self) -> int:
        """Where read_committed consumers stop: the first offset of the oldest open transaction, else the end."""
        return self.producers.last_stable_offset(self.next_offset)

    # ------------------------------------------------------------------ append

    def check_duplicates(self, headers: list[BatchHeader]) -> BatchMeta | None:
        """Raise SequenceError for a sequence gap; return the original batch for a retried duplicate."""
        dup = None
        for h in headers:
            d = self.producers.check(h)
            if d is not None:
                dup = d
        return dup

    def append_as_leader(self, batch: memoryview, *, now_ms: int, max_inflated_bytes: int) -> Appended:
        """The way a client's batch enters the log (Kafka's appendAsLeader): validated against this log's
        configs, a retried duplicate answered with its first append, then offsets assigned and written.
        `batch` is exactly one writable batch; raises InvalidBatch or SequenceError with Kafka's code, and
        OSError when the write fails."""
        cfg = self.config
        header = validate_batch(
            batch,
            now_ms=now_ms,
            max_message_bytes=cfg.max_message_bytes,
            log_append_time=cfg.log_append_time,
            before_max_ms=cfg.message_timestamp_before_max_ms,
            after_max_ms=cfg.message_timestamp_after_max_ms,
            max_inflated_bytes=max_inflated_bytes,
        )
        if cfg.cleanup_compact and (keyless := keyless_records(batch, header)):
            where = f"{self.key[0]}-{self.key[1]}" if self.key else str(self.dir)
            why = f"Compacted topic cannot accept message without key in topic partition {where}."
            raise InvalidBatch(
                f"One or more records have been rejected due to {len(keyless)} record errors in total, and only "
                f"showing the first error message: {why}",
                ErrorCode.INVALID_RECORD,
                record_errors=[(i, why) for i in keyless],
            )
        dup = self.check_duplicates([header])
        if dup is not None:
            return Appended(dup.base_offset, dup.last_offset, header.records_count, duplicate=True)
        codec = CODECS.get(cfg.compression_type)
        if codec is not None and codec != header.compression:
            batch = memoryview(recompress(batch, header, codec, _level(cfg, codec)))
            header = parse_header(batch)
            self._check_size(len(batch), cfg.max_message_bytes, "maximum configured size", ErrorCode.MESSAGE_TOO_LARGE)
        base, last = self.append(batch, [header])
        return Appended(base, last, header.records_count, header.max_timestamp if cfg.log_append_time else -1)

    def _check_size(self, size: int, limit: int, what: str, error: ErrorCode) -> None:
        """UnifiedLog.append's size check of a batch it rebuilt. (Kafka also refuses a batch larger than
        segment.bytes, RECORD_LIST_TOO_LARGE, which its 1 MiB minimum makes moot; logbroker takes segments
        down to 14 bytes and gives such a batch a segment of its own.)"""
        if size > limit:
            where = f"{self.key[0]}-{self.key[1]}" if self.key else str(self.dir)
            raise InvalidBatch(
                f"Message batch size is {size} bytes in append to partition {where} which exceeds the {what} "
                f"of {limit}.",
                error,
            )

    def append(self, buf: bytearray | memoryview, headers: list[BatchHeader]) -> tuple[int, int]:
        """Assign offsets, write validated batches and tell the listener; returns (base offset, last offset).

        The data reaches the page cache here; durability comes from the owner's fsync policy.
        """
        seg = self.active
        now = _now_ms()
        if seg.size and (
            seg.size + len(buf) > self.config.segment_bytes or now - seg.created_ms >= self.config.segment_ms
        ):
            seg = self.roll()
        base = self.next_offset
        end = assign_offsets(buf, headers, base)
        if self.config.log_append_time:
            stamp_log_append_time(buf, headers, now)
        seg.append(buf, headers, self.preallocate)
        for h in headers:
            self.producers.update(h)
        self.unsynced.add(seg)
        if self.on_append is not None:
            self.on_append(self, len(buf))
        return base, end - 1

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int = 0,
        transaction_version: int = 0,
    ) -> tuple[int, CompletedTxn | None]:
        """Write a COMMIT or ABORT marker for the producer's transaction; an abort is added to the aborted
        index of the segment the marker lands in. Returns (the marker's offset, the transaction it closed).
        SequenceError when the marker's epoch is older than the producer's (not newer, under transaction
        version 2)."""
        self.producers.check_marker(producer_id, producer_epoch, transaction_version)
        now = _now_ms()
        buf = bytearray(build_marker(producer_id, producer_epoch, commit, coordinator_epoch, now))
        header = parse_header(buf)
        seg = self.active
        if seg.size and (
            seg.size + len(buf) > self.config.segment_bytes or now - seg.created_ms >= self.config.segment_ms
        ):
            seg = self.roll()
        base = self.next_offset
        assign_offsets(buf, [header], base)
        seg.append(buf, [header], self.preallocate)
        self.unsynced.add(seg)
        done = self.producers.end_txn(producer_id, producer_epoch, base, not commit, coordinator_epoch, now)
        if done is not None and done.aborted:
            seg.txn.append(AbortedTxn(producer_id, done.first_offset, base, self.last_stable_offset))
        if self.on_append is not None:
            self.on_append(self, len(buf))
        return base, done

    def aborts_from(self, offset: int) -> bool:
        """Whether any aborted transaction is indexed in the segments from `offset`'s on (most partitions
        have none: their read_committed fetches then skip working out the range they return)."""
        return any(seg.txn.entries for seg in self.segments[self._segment_for(offset) :])

    def aborted_transactions(self, fetch_offset: int, upper: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper): what a read_committed fetch returning
        that range must list. Scans from the segment holding `fetch_offset` until an entry's LSO shows that no
        later one can overlap (Kafka's collectAbortedTransactions)."""
        found: list[AbortedTxn] = []
        for seg in self.segments[self._segment_for(fetch_offset) :]:
            if seg.txn.entries and seg.txn.collect(fetch_offset, upper, found):
                break
        return found

    def roll(self) -> Segment:
        old = self.active
        old.trim()  # only the active segment may end in reserved space: recovery checks only its tail
        old.sync()
        old.sync_indexes()
        self.unsynced.discard(old)
        seg = self._new_segment(old.next_offset)
        self.segments.append(seg)
        self._write_producer_snapshot()
        return seg

    # ------------------------------------------------------------------ read

    def _segment_for(self, offset: int) -> int:
        i = bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1
        return max(i, 0)

    def read(
        self,
        offset: int,
        max_bytes: int,
        first_whole: bool = True,
        pool: BufferPool | None = None,
        max_offset: int | None = None,
        zero_copy_min: int = 0,
    ) -> memoryview | FileRange:
        """Whole batches starting with the one that holds `offset` (in a buffer from `pool`, if given), none
        at or beyond `max_offset` (the LSO, for read_committed).

        With `zero_copy_min`, a read of at least that many bytes is a `FileRange` instead: the caller
        sends it from the file and closes it. Smaller ones are copied (a sendfile per few kilobytes costs
        more than the copy)."""
        if offset < self.log_start_offset or offset > self.next_offset:
            raise OffsetOutOfRange(
                f"offset {offset} is outside [{self.log_start_offset}, {self.next_offset}] of {self.dir.name}"
            )
        if max_offset is not None and offset >= max_offset:
            return memoryview(b"")
        i = self._segment_for(offset)
        while i < len(self.segments):
            seg = self.segments[i]
            pos, h = seg.position_of(offset)
            if h is not None:
                limit = None
                if max_offset is not None and max_offset < seg.next_offset:
                    # An open transaction's first batch starts at the LSO: read only what lies before it.
                    limit = seg.position_of(max_offset)[0]
                    if limit <= pos:
                        return memoryview(b"")
                    max_bytes = min(max_bytes, limit - pos)
                end_of_data = seg.size if limit is None else limit
                if zero_copy_min and max(min(end_of_data - pos, max_bytes), h.batch_length) >= zero_copy_min:
                    rng = seg.file_range(h, max_bytes, first_whole, limit, max_offset if limit is not None else -1)
                    if rng is not None and rng.length >= zero_copy_min:
                        return rng
                    if rng is not None:
                        rng.close()
                return seg.read(pos, max_bytes, first_whole, pool, limit=limit)
            i += 1
        return memoryview(b"")

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp`, or None."""
        for seg in self.segments:
            if seg.max_timestamp < timestamp:
                continue
            for h in seg.iter_headers(seg.offset_for_time(timestamp)):
                if h.max_timestamp < timestamp or h.last_offset < self.log_start_offset:
                    continue
                if h.is_control:  # a marker counts, with its one record's timestamp (as in Kafka)
                    return h.base_offset, h.max_timestamp
                raw = os.pread(seg.fd, h.batch_length + 12, h.position)
                _hdr, records = decode_batch(raw, verify_crc=False)
                for r in records:
                    if r.timestamp >= timestamp and r.offset >= self.log_start_offset:
                        return r.offset, r.timestamp
        return None

    def offsets_before(self, timestamp: int, max_count: int) -> list[int]:
        """ListOffsets v0's answer (Kafka 3.x's legacyFetchOffsetsBefore): segment start offsets, newest
        first, from the newest segment last modified at or before ``timestamp``; -1 (latest) starts from the
        log end, -2 (earliest) is the log start offset alone. At most ``max_count`` offsets."""
        if timestamp == -2:
            return [self.log_start_offset][:max_count]
        pairs = [(max(seg.base_offset, self.log_start_offset), seg.modified_ms()) for seg in self.segments]
        if self.active.size:
            pairs.append((self.next_offset, _now_ms()))
        if timestamp == -1:
            start = len(pairs) - 1
        else:
            start = next((i for i in range(len(pairs) - 1, -1, -1) if pairs[i][1] <= timestamp), -1)
        return [pairs[i][0] for i in range(start, max(start - max_count, -1), -1)]

    def max_timestamp(self) -> tuple[int, int]:
        """(offset, timestamp) of the first record carrying the largest timestamp (ListOffsets
        MAX_TIMESTAMP, as Kafka 4): the segment and batch come from the time index, and only that one
        batch is decoded. (-1, -1) on an empty log."""
        seg = max(self.segments, key=lambda s: s.max_timestamp)  # the first of equal maxima, as Kafka
        if seg.max_timestamp < 0:
            return -1, -1
        raw = seg.batch_at(seg.base_offset + seg.max_timestamp_rel)
        if raw:
            _hdr, records = decode_batch(raw, verify_crc=False)
            for r in records:
                if r.timestamp == seg.max_timestamp:
                    return r.offset, r.timestamp
        return -1, -1

    # ------------------------------------------------------------------ deletion and retention

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset forward and drop whole segments below it."""
        if offset < 0 or offset > self.next_offset:
            raise OffsetOutOfRange(f"offset {offset} is beyond the log end {self.next_offset}")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            write_atomic(self.dir / LOG_START_FILE, str(offset).encode())
            self._drop_segments_below(offset)
        return self.log_start_offset

    def _drop_segments_below(self, offset: int) -> int:
        dropped = 0
        while len(self.segments) > 1 and self.segments[1].base_offset <= offset:
            self.segments.pop(0).delete()
            dropped += 1
        if dropped:
            self.producers.remove_below(self.segments[0].base_offset)
        return dropped

    def enforce_retention(self, now_ms: int | None = None) -> int:
        """Delete whole segments past retention.ms or beyond retention.bytes.

        As in Kafka, an active segment whose every record is past retention.ms is rolled first, so old
        data goes even on a partition that receives nothing new. Without `delete` in cleanup.policy nothing
        is deleted by time or size (Kafka's UnifiedLog.deleteOldSegments).
        """
        now = now_ms if now_ms is not None else _now_ms()
        cfg = self.config
        if not cfg.cleanup_delete:
            return 0
        deleted = 0
        active = self.active
        if cfg.retention_ms >= 0 and active.size and 0 <= active.max_timestamp < now - cfg.retention_ms:
            self.roll()
        while len(self.segments) > 1:
            first = self.segments[0]
            too_old = (
                cfg.retention_ms >= 0 and first.max_timestamp >= 0 and now - first.max_timestamp > cfg.retention_ms
            )
            too_big = cfg.retention_bytes >= 0 and self.size_bytes - first.size >= cfg.retention_bytes
            too_big = too_big and self.size_bytes > cfg.retention_bytes
            if not (too_old or too_big):
                break
            self.segments.pop(0).delete()
            deleted += 1
        if deleted:
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
            self.producers.remove_below(self.log_start_offset)
        return deleted

    # ------------------------------------------------------------------ durability

    def take_unsynced(self) -> list[Unsynced]:
        """Descriptors written since the last sync; the caller fdatasyncs them off the loop, then calls
        `synced()` on each. A segment whose descriptor the budget closed meanwhile was synced as it closed."""
        targets = [t for s in self.unsynced if (t := s.unsynced()) is not None]
        self.unsynced.clear()
        return targets

    def sync(self) -> None:
        for t in self.take_unsynced():
            os.fdatasync(t.fd)
            t.synced()

    def close(self) -> None:
        if self.active.trim():  # a clean stop leaves the file ending at its last batch
            self.unsynced.add(self.active)
        self.sync()
        for s in self.segments:
            s.sync_indexes()
        self._write_producer_snapshot()
        for s in self.segments:
            s.close()

    def delete(self) -> None:
        for s in self.segments:
            s.delete()
        for p in self.dir.iterdir():
            p.unlink()
        self.dir.rmdir()
