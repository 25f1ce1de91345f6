"""Internal keyed logs: broker state (group offsets today; transactions, configs, ACLs, users later) kept as
records in a partition log of its own under `<data>/<name>/`.

A record's key is a JSON list naming what it describes and its value is JSON, or null for a deletion; the
state is the last value per key. On open the log is recovered like a data log (torn tail truncated, indexes
rebuilt) and replayed with every batch's CRC32C checked. A damaged batch does not stop the broker: it is
skipped, the offsets it held are logged at WARNING, and the log is rewritten from what was intact so the
damage is gone from disk. Skipping (rather than truncating there, as a data log must) keeps every later
record: for last-value-wins state that loses only the damaged batch's own updates.

Security state is the exception (`keep_damage`): a lost record there may be a DENY or a deletion, and dropping
it fails open. Such a log keeps its damaged bytes (every start finds them again and says so at ERROR) and
its owner distrusts it until an operator accepts the loss (`accept_damage`, `logbroker storage accept`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from logbroker.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    NewRecord,
    build_batch,
    decode_batch,
    parse_header,
    validate_produce,
)

from .files import fsync_dir
from .log import AppendListener, LogConfig, PartitionLog
from .segment import Segment, after_damage

log = logging.getLogger(__name__)

COMPACT_MIN_RECORDS = 1000
READ_CHUNK = 8 << 20
# Internal logs take small records, each append synced on its own: space reserved ahead spares every such
# fdatasync a file-length commit (see Segment._reserve). Four such logs reserve a megabyte between them.
PREALLOCATE = 256 << 10
MAX_DAMAGE_LINES = 20  # per load; the rest are counted in one summary line
CUT_NOTE = "damage-cut.json"  # a `keep_damage` log's record of what recovery cut (gone from disk)

Key = tuple[Any, ...]
Record = tuple[Key, Any]  # (key, JSON value); a None value deletes the key


@dataclass(frozen=True, slots=True)
class Damage:
    """A stretch of an internal log that replay could not use."""

    segment: int
    position: int
    bytes: int
    first_offset: int | None
    last_offset: int | None
    reason: str

    def describe(self) -> str:
        if self.first_offset is None:
            span = "offsets unknown"
        elif self.last_offset is None or self.last_offset == self.first_offset:
            span = f"offset {self.first_offset}"
        else:
            span = f"offsets {self.first_offset}-{self.last_offset}"
        return f"{span} ({self.bytes} bytes at byte {self.position} of segment {self.segment}): {self.reason}"


class InternalLog:
    """A keyed JSON-record log with replay, damage recovery and compaction on load.

    `load()` once after construction, then `append()`; appends are made durable by the owner's fsync
    policy, which `on_append` tells of each."""

    def __init__(
        self, directory: Path, clean_shutdown: bool, segment_bytes: int = 64 << 20, keep_damage: bool = False
    ) -> None:
        self.dir = directory
        self.keep_damage = keep_damage  # damaged batches stay on disk, and `untrusted` says so
        self.config = LogConfig(segment_bytes=segment_bytes, retention_ms=-1, max_message_bytes=64 << 20)
        tmp, old = self._side(".compact"), self._side(".old")
        if not self.dir.exists() and tmp.exists():  # crashed between the two renames of a rewrite
            os.replace(tmp, self.dir)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
        # Recovery truncates torn tails but leaves CRC checks to the replay, which skips a damaged batch.
        self.log = PartitionLog(self.dir, self.config, clean_shutdown, verify_crc=False, preallocate=PREALLOCATE)
        self._on_append: AppendListener | None = None
        self.records_in_log = 0
        self.damage: list[Damage] = []  # found by the last load()
        if keep_damage:
            self._note_cuts(clean_shutdown)

    @property
    def on_append(self) -> AppendListener | None:
        """Told of every append (the owner's fsync policy), across rewrites of the log."""
        return self._on_append

    @on_append.setter
    def on_append(self, listener: AppendListener | None) -> None:
        self._on_append = self.log.on_append = listener

    def _note_cuts(self, clean_shutdown: bool) -> None:
        """What recovery cut that was not a torn tail (after a clean stop nothing may be cut at all) is damage
        too, and its bytes are gone: written down (`CUT_NOTE`) so that every start distrusts the log until
        an operator accepts the loss."""
        torn = ("a torn batch", "a batch header cut short")
        cuts = [
            [base, cut.position, cut.bytes, cut.first_offset, cut.last_offset, f"cut by recovery: {cut.reason}"]
            for base, cut in self.log.truncations
            if clean_shutdown or not cut.reason.startswith(torn)
        ]
        if not cuts:
            return
        note = self.dir / CUT_NOTE
        try:
            earlier = json.loads(note.read_text())
        except (FileNotFoundError, ValueError):
            earlier = []
        tmp = self.dir / f"{CUT_NOTE}.part"
        with open(tmp, "w") as f:
            json.dump([*earlier, *cuts], f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, note)
        fsync_dir(self.dir)

    def _noted_cuts(self) -> list[Damage]:
        if not self.keep_damage:
            return []
        try:
            return [Damage(*entry) for entry in json.loads((self.dir / CUT_NOTE).read_text())]
        except FileNotFoundError:
            return []
        except (ValueError, TypeError) as exc:
            return [Damage(0, 0, 0, None, None, f"unreadable {CUT_NOTE} ({exc})")]

    def _side(self, suffix: str) -> Path:
        return self.dir.with_name(self.dir.name + suffix)

    # ------------------------------------------------------------------ replay

    def load(self) -> dict[Key, Any]:
        """Replay the log: the live value of every key (deleted keys are absent).

        Damaged batches are skipped and reported; when there were any, or when more than half of the log is
        superseded, the log is rewritten with only the live records."""
        live, count = self._live()
        self.records_in_log = count
        if self.damage:
            self._report()
            if self.keep_damage:
                return live  # no rewrite: that would erase the damage, and with it the reason to distrust
        if self.damage or (count >= COMPACT_MIN_RECORDS and count > 2 * len(live)):
            self._rewrite(live)
        return live

    @property
    def untrusted(self) -> bool:
        """Whether the last load skipped damaged records this log keeps (`keep_damage`): what they said is
        unknown, so the state replayed may lack a deletion or a denial."""
        return self.keep_damage and bool(self.damage)

    def accept_damage(self) -> int:
        """The operator accepts the loss: rewrite the log from its intact records (the damage goes). Returns
        the number of damaged batches dropped."""
        live, _count = self._live()
        dropped = len(self.damage)
        if dropped:
            self._rewrite(live)
        self.damage = []
        return dropped

    def _live(self) -> tuple[dict[Key, Any], int]:
        """Replay: the live value of every key, and how many records the log holds; `damage` as found."""
        live: dict[Key, Any] = {}
        count = 0
        self.damage = self._noted_cuts()
        for key, value in self._replay():
            count += 1
            if value is None:
                live.pop(key, None)
            else:
                live[key] = value
        return live, count

    def _replay(self) -> Iterator[Record]:
        start = self.log.log_start_offset
        for seg in self.log.segments:
            for h, raw in self._batches(seg):
                if h.last_offset < start:
                    continue
                try:
                    _hdr, records = decode_batch(raw, verify_crc=True)
                    decoded = [
                        (tuple(json.loads(r.key)), None if r.value is None else json.loads(r.value))
                        for r in records
                        if r.offset >= start and r.key is not None
                    ]
                except (ValueError, TypeError) as exc:  # InvalidBatch is a ValueError, as are JSON errors
                    self.damage.append(
                        Damage(seg.base_offset, h.position, h.size, h.base_offset, h.last_offset, str(exc))
                    )
                    continue
                yield from decoded

    def _batches(self, seg: Segment) -> Iterator[tuple[BatchHeader, memoryview]]:
        """(header, whole batch bytes) of each batch of the segment, read in large chunks. A quarantined stretch
        (recovery fenced it off) is stepped over and recorded as damage; so is broken framing, up to the next
        intact batch (found byte by byte), or to the end when none follows: what was appended after damage
        is read back."""
        pos = 0
        expected = seg.base_offset
        buf, buf_at = memoryview(b""), 0  # the chunk read last, and its file position
        fenced = {d.position: d for d in seg.quarantined}
        while pos < seg.size:
            if (d := fenced.get(pos)) is not None:
                self.damage.append(Damage(seg.base_offset, pos, d.size, d.first_offset, d.last_offset,
                                          f"quarantined: {d.reason}"))  # fmt: skip
                pos += d.size
                continue
            at = pos - buf_at
            if at + HEADER_SIZE > len(buf):
                buf, buf_at, at = memoryview(os.pread(seg.fd, min(READ_CHUNK, seg.size - pos), pos)), pos, 0
                if len(buf) < HEADER_SIZE:
                    self._framing_lost(seg, pos, None, "a batch header cut short")
                    return
            h = parse_header(buf, at)
            if h.magic != 2 or h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + h.size > seg.size:
                good = after_damage(seg.fd, pos, seg.size, expected)
                if good is None:
                    self._framing_lost(seg, pos, h, "an unreadable batch header")
                    return
                self.damage.append(Damage(seg.base_offset, pos, good.position - pos, expected,
                                          good.base_offset - 1, "an unreadable batch header"))  # fmt: skip
                pos = good.position
                buf, buf_at = memoryview(b""), 0
                continue
            if at + h.size > len(buf):
                buf, buf_at, at = (
                    memoryview(os.pread(seg.fd, max(h.size, min(READ_CHUNK, seg.size - pos)), pos)),
                    pos,
                    0,
                )
            h.position = pos
            yield h, buf[at : at + h.size]
            pos += h.size
            expected = max(expected, h.next_offset)

    def _framing_lost(self, seg: Segment, pos: int, h: BatchHeader | None, reason: str) -> None:
        first = h.base_offset if h is not None and h.magic == 2 and h.base_offset >= 0 else None
        last = seg.next_offset - 1 if first is not None and seg.next_offset > first else None
        self.damage.append(Damage(seg.base_offset, pos, seg.size - pos, first, last, reason))

    def _report(self) -> None:
        level = logging.ERROR if self.keep_damage else logging.WARNING
        for d in self.damage[:MAX_DAMAGE_LINES]:
            log.log(level, "%s: skipped damaged records, %s", self.dir, d.describe())
        if len(self.damage) > MAX_DAMAGE_LINES:
            log.log(level, "%s: ... and %d more damaged batches", self.dir, len(self.damage) - MAX_DAMAGE_LINES)
        if self.keep_damage:
            log.error(
                "%s: %d damaged batches (%d bytes) kept on disk; the state replayed from the %d intact records "
                "may lack a deletion or a denial, so it is not trusted until an operator repairs the file or "
                "accepts the loss (logbroker storage accept)",
                self.dir, len(self.damage), sum(d.bytes for d in self.damage), self.records_in_log,
            )  # fmt: skip
            return
        log.warning(
            "%s: %d damaged batches (%d bytes) dropped; rewriting the log from the %d intact records",
            self.dir,
            len(self.damage),
            sum(d.bytes for d in self.damage),
            self.records_in_log,
        )

    # ------------------------------------------------------------------ rewrite, append, close

    def _rewrite(self, live: dict[Key, Any]) -> None:
        """Replace the log with one holding only the live records: written aside, fsynced, swapped by rename."""
        tmp = self._side(".compact")
        shutil.rmtree(tmp, ignore_errors=True)
        fresh: PartitionLog | None = None
        try:
            fresh = PartitionLog(tmp, self.config, True)
            items = list(live.items())
            for i in range(0, len(items), 500):
                self._append_to(fresh, items[i : i + 500])
            fresh.close()
        except OSError as exc:  # no space for the copy: keep the old log, which replays the same state
            for s in fresh.segments if fresh is not None else []:
                s.close()
            shutil.rmtree(tmp, ignore_errors=True)
            log.warning("%s: could not rewrite the log (%s); it is kept as it is and replayed again", self.dir, exc)
            return
        for s in self.log.segments:
            s.close()
        old = self._side(".old")
        os.replace(self.dir, old)
        os.replace(tmp, self.dir)
        fsync_dir(self.dir.parent)
        shutil.rmtree(old, ignore_errors=True)
        log.info("rewrote %s: %d records -> %d live keys", self.dir, self.records_in_log, len(live))
        self.log = PartitionLog(
            self.dir, self.config, True, verify_crc=False, preallocate=PREALLOCATE, on_append=self._on_append
        )
        self.records_in_log = len(live)

    @staticmethod
    def _append_to(plog: PartitionLog, items: list[Record]) -> None:
        recs = [
            NewRecord(json.dumps(list(k)).encode(), None if v is None else json.dumps(v).encode()) for k, v in items
        ]
        buf = bytearray(build_batch(recs))
        plog.append(buf, validate_produce(buf, 1 << 30))

    def superseded(self, live_keys: int) -> bool:
        """Whether most of the log is superseded records (the rule `load` rewrites by), for owners that
        compact while running: their state changes far more often than it grows."""
        return self.records_in_log >= COMPACT_MIN_RECORDS and self.records_in_log > 2 * live_keys

    def rewrite(self, live: dict[Key, Any]) -> None:
        """Replace the log with `live` (the owner's whole current state); no append may be in flight. Not
        while untrusted: the damaged bytes stay until an operator accepts their loss."""
        if not self.untrusted:
            self._rewrite(live)

    def append(self, items: list[Record]) -> PartitionLog:
        """Write records (value None deletes the key); the caller awaits the fsync policy."""
        if items:
            self._append_to(self.log, items)
            self.records_in_log += len(items)
        return self.log

    def close(self) -> None:
        self.log.close()
