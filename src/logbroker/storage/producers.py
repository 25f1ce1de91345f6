"""Idempotent-producer state per partition: the last five batches of each producer id.

Kept so that a retried batch is answered with its original offsets instead of being written twice,
and so that a gap in sequence numbers is refused. The state is rebuilt from batch headers on open.
The rules are Kafka's (ProducerAppendInfo, ProducerStateManager): a producer this partition does not know
(new, or expired) may start at any sequence; entries expire once their last batch's timestamp is
`producer.id.expiration.ms` old, so clients that each use a new producer id cannot grow the table
without bound.

Transactions (KIP-98): a producer's first transactional batch opens its transaction here, at that batch's
offset; the coordinator's COMMIT or ABORT marker closes it. The smallest open first offset is the
partition's last stable offset (LSO): read_committed consumers read no further. A producer with an open
transaction never expires, and a plain batch from it is refused (INVALID_TXN_STATE), as in Kafka.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from logbroker.protocol.errors import ErrorCode as E
from logbroker.protocol.records import BatchHeader

MAX_BATCHES_PER_PRODUCER = 5
_SEQ_MOD = 1 << 31


@dataclass(slots=True)
class BatchMeta:
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchMeta] = field(default_factory=lambda: deque(maxlen=MAX_BATCHES_PER_PRODUCER))
    coordinator_epoch: int = -1  # of the last marker
    timestamp: int = -1  # of the last batch or marker

    @property
    def last_timestamp(self) -> int:
        return max(self.timestamp, self.batches[-1].timestamp if self.batches else -1)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


class SequenceError(Exception):
    """An idempotent batch refused with Kafka's error code `error`."""

    def __init__(self, error: E, message: str) -> None:
        super().__init__(message)
        self.error = error


class ProducerStateTable:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction

    def last_stable_offset(self, end: int) -> int:
        """The first offset of the oldest open transaction, or `end` (the high watermark) when none is open."""
        return min(self.ongoing.values(), default=end)

    def check(self, h: BatchHeader) -> BatchMeta | None:
        """Validate a batch before it is written; returns the original batch if this one is a duplicate."""
        pid = h.producer_id
        if pid < 0 or h.base_sequence < 0:
            return None
        entry = self.producers.get(pid)
        last_seq = h.last_sequence
        if not h.is_transactional and pid in self.ongoing:
            raise SequenceError(
                E.INVALID_TXN_STATE, f"Expected transactional write from producer {pid} (it has a transaction open)"
            )
        if entry is None:
            # Kafka accepts any sequence from a producer it has no state for: its state may have expired
            # or been deleted with the log's start (KIP-360).
            return None
        if h.producer_epoch < entry.epoch:
            raise SequenceError(
                E.INVALID_PRODUCER_EPOCH, f"producer {pid} epoch {h.producer_epoch} is older than {entry.epoch}"
            )
        if h.producer_epoch > entry.epoch:
            if h.base_sequence != 0:
                raise SequenceError(
                    E.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {pid} new epoch {h.producer_epoch} must start at sequence 0",
                )
            return None
        for b in entry.batches:
            if b.first_seq == h.base_sequence and b.last_seq == last_seq:
                return b
        expected = (entry.last_seq + 1) % _SEQ_MOD
        if h.base_sequence != expected:
            raise SequenceError(
                E.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {pid} sent sequence {h.base_sequence}, expected {expected}",
            )
        return None

    def update(self, h: BatchHeader) -> None:
        """Record a batch that was appended (or replayed from the log)."""
        pid = h.producer_id
        if pid < 0 or h.base_sequence < 0:
            return
        entry = self.producers.get(pid)
        if entry is None or h.producer_epoch > entry.epoch:
            entry = ProducerEntry(h.producer_epoch)
            self.producers[pid] = entry
        elif h.producer_epoch < entry.epoch:
            return
        entry.batches.append(BatchMeta(h.base_sequence, h.last_sequence, h.base_offset, h.last_offset, h.max_timestamp))
        if h.is_transactional and pid not in self.ongoing:
            self.ongoing[pid] = h.base_offset

    def check_marker(self, producer_id: int, producer_epoch: int, transaction_version: int = 0) -> None:
        """A marker from an epoch older than the producer's is refused (Kafka's fencing of a stale coordinator
        or admin write). Under transaction version 2 (KIP-1228: the coordinator bumps the epoch before it
        writes markers) the marker's epoch must be newer than the producer's, except a retried marker of the
        same epoch once the transaction is closed (Kafka's ProducerAppendInfo)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if transaction_version >= 2:
            retry = producer_epoch == entry.epoch and (producer_id not in self.ongoing or producer_epoch == 0x7FFF)
            if producer_epoch <= entry.epoch and not retry:
                raise SequenceError(
                    E.INVALID_PRODUCER_EPOCH,
                    f"marker epoch {producer_epoch} is not newer than producer {producer_id}'s epoch {entry.epoch} "
                    f"(TV{transaction_version})",
                )
        elif producer_epoch < entry.epoch:
            raise SequenceError(
                E.INVALID_PRODUCER_EPOCH,
                f"marker epoch {producer_epoch} is older than producer {producer_id}'s epoch {entry.epoch}",
            )

    def end_txn(
        self, producer_id: int, producer_epoch: int, offset: int, aborted: bool, coordinator_epoch: int, timestamp: int
    ) -> CompletedTxn | None:
        """Apply a marker at `offset`: the producer's open transaction (if any) is complete."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_epoch)
        elif producer_epoch > entry.epoch:  # a fencing abort: sequences start again in the new epoch
            entry.epoch = producer_epoch
            entry.batches.clear()
        entry.coordinator_epoch = coordinator_epoch
        entry.timestamp = max(entry.timestamp, timestamp)
        first = self.ongoing.pop(producer_id, None)
        return None if first is None else CompletedTxn(producer_id, first, offset, aborted)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers whose last batch's timestamp is `expiration_ms` or more before `now_ms`
        (Kafka's rule: the batch's own max timestamp, the broker's clock only on LogAppendTime topics).
        Returns how many were dropped."""
        expired = [
            p for p, e in self.producers.items() if p not in self.ongoing and now_ms - e.last_timestamp >= expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def remove_below(self, offset: int) -> None:
        """Forget producers whose every batch lies below `offset` (their data was deleted)."""
        for pid in [
            p
            for p, e in self.producers.items()
            if e.batches and e.batches[-1].last_offset < offset and p not in self.ongoing
        ]:
            del self.producers[pid]
