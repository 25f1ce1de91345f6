"""One share-partition (KIP-932): which records of a partition a share group has delivered, to whom, and
how often.

The state is a window of offsets [start, end): `start` is the share-partition start offset (SPSO, the first
offset not yet finished), `end` one past the last offset ever acquired. Every offset in the window has a
state (Kafka's RecordState ids, which are also what is stored): AVAILABLE to hand out again, ACQUIRED by one
member until its lock expires, or finished (ACKNOWLEDGED, ARCHIVED). `start` moves over every finished
prefix, and those offsets leave the window; offsets past `end` have never been handed out.

A record is acquired for a member with its delivery count incremented and a lock deadline. Accept finishes
it, release and an expired lock make it available again, reject (and a gap: an offset the client found no
record at) archives it. A record released with its delivery count at the group's limit is archived instead
(a poison record stops being redelivered). The window holds at most `max_locks` offsets.

Nothing here does I/O: the coordinator reads the log, persists `snapshot()` after every transition a client
waits on, and rebuilds from it (`restore`) on start. ACQUIRED is never stored: after a restart a record a
member held comes back AVAILABLE with the delivery count it had before that acquisition.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from logbroker.protocol import ErrorCode as E

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4  # Kafka's RecordState ids (3, ARCHIVING, is internal)
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4  # AcknowledgeType ids
FINISHED = (ACKNOWLEDGED, ARCHIVED)


class AckRefused(Exception):
    """An acknowledgement the partition refuses: INVALID_RECORD_STATE (not this member's acquired records) or
    INVALID_REQUEST (offsets outside what was ever handed out)."""

    def __init__(self, error: E, message: str) -> None:
        super().__init__(message)
        self.error = error


@dataclass(slots=True)
class Slot:
    state: int
    count: int  # deliveries so far
    owner: str | None = None  # the member holding the lock (ACQUIRED only)
    deadline: float = 0.0  # when the lock expires (monotonic seconds; ACQUIRED only)


class SharePartition:
    def __init__(self, start: int, state_epoch: int = 0) -> None:
        self.start = start
        self.end = start
        self.state_epoch = state_epoch
        self.slots: dict[int, Slot] = {}  # offset -> slot, for every offset in [start, end)
        # No lock expires before this (a lower bound: the sweep looks at the slots only once it has passed).
        self.next_expiry = float("inf")

    # ------------------------------------------------------------------ persistence

    def snapshot(self) -> dict[str, Any]:
        """The durable form: start offset, state epoch and runs [first, last, state, count] of every offset
        that is not plainly available and never delivered. ACQUIRED is stored as AVAILABLE with the count
        it had before this delivery."""
        runs: list[list[int]] = []
        for off in range(self.start, self.end):
            s = self.slots[off]
            state, count = (AVAILABLE, s.count - 1) if s.state == ACQUIRED else (s.state, s.count)
            if runs and runs[-1][1] == off - 1 and runs[-1][2] == state and runs[-1][3] == count:
                runs[-1][1] = off
            else:
                runs.append([off, off, state, count])
        return {"start": self.start, "end": self.end, "epoch": self.state_epoch, "runs": runs}

    @classmethod
    def restore(cls, value: dict[str, Any]) -> SharePartition:
        sp = cls(int(value["start"]), int(value.get("epoch", 0)))
        sp.end = max(int(value.get("end", sp.start)), sp.start)
        for off in range(sp.start, sp.end):
            sp.slots[off] = Slot(AVAILABLE, 0)
        for first, last, state, count in value.get("runs", ()):
            for off in range(max(first, sp.start), min(last, sp.end - 1) + 1):
                sp.slots[off] = Slot(int(state), max(int(count), 0))
        sp._advance()
        return sp

    # ------------------------------------------------------------------ acquisition

    def acquirable(self, max_locks: int) -> int | None:
        """The first offset an acquisition would look at: the first available offset in the window, else
        `end` when the window has room; None when nothing can be handed out now."""
        for off in range(self.start, self.end):
            if self.slots[off].state == AVAILABLE:
                return off
        return self.end if self.end - self.start < max_locks else None

    def acquire(
        self,
        member: str,
        batches: Iterable[tuple[int, int, bool]],
        limit_offset: int,
        max_records: int,
        max_locks: int,
        lock_s: float,
        now: float,
        strict: bool = False,
    ) -> list[tuple[int, int, int]]:
        """Acquire for `member` the records of `batches` ((base offset, last offset, is control) of the
        batches read from the log, in order) below `limit_offset` (the high watermark): available ones in
        the window, then new ones past `end` while the window has room, whole batches at a time until
        `max_records` are acquired (`strict`: not one more, Kafka's record_limit mode). Control batches
        (transaction markers) are archived, never delivered. Returns the acquired ranges (first, last,
        delivery count)."""
        got: list[tuple[int, int, int]] = []
        taken = 0
        for base, last, control in batches:
            if taken >= max_records:
                break
            for off in range(max(base, self.start), min(last, limit_offset - 1) + 1):
                if off >= self.end:
                    if off - self.start >= max_locks:
                        break
                    for gap in range(self.end, off):  # offsets no batch holds (compacted away): finished
                        self.slots[gap] = Slot(ARCHIVED, 0)
                    self.slots[off] = Slot(AVAILABLE, 0)
                    self.end = off + 1
                s = self.slots[off]
                if s.state != AVAILABLE or (strict and taken >= max_records):
                    continue
                if control:
                    s.state = ARCHIVED
                    continue
                s.state, s.count, s.owner, s.deadline = ACQUIRED, s.count + 1, member, now + lock_s
                self.next_expiry = min(self.next_expiry, s.deadline)
                taken += 1
                if got and got[-1][1] == off - 1 and got[-1][2] == s.count:
                    got[-1] = (got[-1][0], off, s.count)
                else:
                    got.append((off, off, s.count))
        self._advance()
        return got

    # ------------------------------------------------------------------ transitions

    def acknowledge(self, member: str, batches: list[tuple[int, int, list[int]]], delivery_limit: int, now: float,
                    lock_s: float) -> None:  # fmt: skip
        """Apply `member`'s acknowledgement batches ((first, last, types): one type for the whole range, or one
        per offset), all or nothing: every offset must be acquired by it."""
        for first, last, _types in batches:
            if first < self.start:
                # Offsets the window has moved past: finished already.
                why = f"offsets from {first} are before the start offset {self.start}"
                raise AckRefused(E.INVALID_RECORD_STATE, why)
            if last >= self.end:
                raise AckRefused(E.INVALID_REQUEST, f"offset {last} was never acquired (end offset {self.end})")
            for off in range(first, last + 1):
                s = self.slots[off]
                if s.state != ACQUIRED or s.owner != member:
                    raise AckRefused(E.INVALID_RECORD_STATE, f"offset {off} is not acquired by member {member}")
        for first, last, types in batches:
            for i, off in enumerate(range(first, last + 1)):
                kind = types[0] if len(types) == 1 else types[i]
                s = self.slots[off]
                if kind == ACCEPT:
                    self._finish(s, ACKNOWLEDGED)
                elif kind == RELEASE:
                    self._release(s, delivery_limit)
                elif kind == RENEW:
                    s.deadline = now + lock_s
                else:  # REJECT, GAP
                    self._finish(s, ARCHIVED)
        self._advance()

    def release_member(self, member: str, delivery_limit: int, undo_count: bool = True) -> bool:
        """Release every record `member` holds (it left, or closed its session). As Kafka 4.4 does, the
        delivery does not count (the member never got to process it). True when anything changed."""
        changed = False
        for off in range(self.start, self.end):
            s = self.slots[off]
            if s.state == ACQUIRED and s.owner == member:
                if undo_count:
                    s.count = max(s.count - 1, 0)
                self._release(s, delivery_limit)
                changed = True
        if changed:
            self._advance()
        return changed

    def expire(self, now: float, delivery_limit: int) -> bool:
        """Release the records whose lock has expired (they count as delivered). True when any did."""
        if now < self.next_expiry:
            return False
        changed = False
        self.next_expiry = float("inf")
        for off in range(self.start, self.end):
            s = self.slots[off]
            if s.state == ACQUIRED:
                if s.deadline <= now:
                    self._release(s, delivery_limit)
                    changed = True
                else:
                    self.next_expiry = min(self.next_expiry, s.deadline)
        if changed:
            self._advance()
        return changed

    def move_start(self, log_start: int) -> bool:
        """The log's start offset moved past the window's (retention, DeleteRecords): what is gone is
        finished. True when the start moved."""
        if log_start <= self.start:
            return False
        for off in range(self.start, min(log_start, self.end)):
            del self.slots[off]
        self.start = log_start
        self.end = max(self.end, log_start)
        self._advance()
        return True

    def held_by(self, member: str) -> Iterator[int]:
        return (off for off, s in self.slots.items() if s.state == ACQUIRED and s.owner == member)

    @staticmethod
    def _finish(s: Slot, state: int) -> None:
        s.state, s.owner, s.deadline = state, None, 0.0

    @staticmethod
    def _release(s: Slot, delivery_limit: int) -> None:
        s.state = ARCHIVED if s.count >= delivery_limit else AVAILABLE
        s.owner, s.deadline = None, 0.0

    def _advance(self) -> None:
        while self.start < self.end and self.slots[self.start].state in FINISHED:
            del self.slots[self.start]
            self.start += 1
