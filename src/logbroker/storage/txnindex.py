"""The aborted-transaction index of one segment (Kafka's `.txnindex`).

A read_committed fetch must tell the consumer which producers' records in the range it returns belong to
aborted transactions; scanning the log for abort markers on every fetch would cost a read of the whole
range. So each abort marker adds an entry to the index of the segment it lands in: the producer, the
transaction's first and last offsets, and the last stable offset once it completed. Entries are in marker
order, so a reader stops at the first entry whose last stable offset reaches the end of what it returns:
no later entry can start below that (an open transaction holds the LSO at its first offset).

The file is a sequence of fixed 34-byte entries, Kafka's layout. It is made durable with the segment's
other indexes (on roll and close); a crash can lose the newest entries, which recovery rebuilds from the
log (`PartitionLog` replays every batch after its producer snapshot and re-adds the aborts it finds).
"""

from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass
from pathlib import Path

_ENTRY = struct.Struct(">hqqqq")  # version, producer id, first offset, last offset, last stable offset


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset
    last_stable_offset: int  # the partition's LSO right after the abort


class TxnIndex:
    """Aborted transactions of one segment, in memory and in `<base>.txnindex` (created on first use)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        self._lasts: list[int] = []  # last_offset of each entry, for bisect
        self._dirty = False

    def load(self) -> None:
        """Read the file; a torn trailing entry (a crash mid-write) is dropped."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            raw = b""
        whole = len(raw) - len(raw) % _ENTRY.size
        self.entries = []
        for _v, pid, first, last, lso in _ENTRY.iter_unpack(raw[:whole]):
            if self.entries and last < self.entries[-1].last_offset:
                break  # out of order: damage; recovery's replay re-adds what follows
            self.entries.append(AbortedTxn(pid, first, last, lso))
        self._lasts = [e.last_offset for e in self.entries]
        if whole != len(raw) or len(self.entries) * _ENTRY.size != whole:
            self._rewrite()

    def append(self, entry: AbortedTxn) -> None:
        self.entries.append(entry)
        self._lasts.append(entry.last_offset)
        # Opened per abort (aborts are rare next to appends): no descriptor is held outside the broker's budget.
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(
                fd, _ENTRY.pack(0, entry.producer_id, entry.first_offset, entry.last_offset, entry.last_stable_offset)
            )
        finally:
            os.close(fd)
        self._dirty = True

    def truncate_from(self, offset: int) -> None:
        """Forget entries whose marker is at or after `offset` (they are about to be rebuilt)."""
        i = bisect.bisect_left(self._lasts, offset)
        if i < len(self.entries):
            del self.entries[i:]
            del self._lasts[i:]
            self._rewrite()

    def collect(self, fetch_offset: int, upper: int, into: list[AbortedTxn]) -> bool:
        """Add the aborted transactions overlapping [fetch_offset, upper); True when no later segment's
        entries can overlap it."""
        for e in self.entries[bisect.bisect_left(self._lasts, fetch_offset) :]:
            if e.first_offset < upper:
                into.append(e)
            if e.last_stable_offset >= upper:
                return True
        return False

    def _rewrite(self) -> None:
        if not self.entries:
            self.path.unlink(missing_ok=True)
            return
        data = b"".join(
            _ENTRY.pack(0, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset) for e in self.entries
        )
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self.path)
        self._dirty = True

    def sync(self) -> None:
        if self._dirty and self.entries:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._dirty = False

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
