"""A transactional id's state, as Kafka's TransactionMetadata keeps it, and its durable form."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

MAX_EPOCH = 32767  # Short.MAX_VALUE
NO_PRODUCER_ID = -1
NO_EPOCH = -1

TopicPartition = tuple[str, int]


class TxnState(Enum):
    """Kafka's transaction states, by the names DescribeTransactions and ListTransactions use."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        try:
            return cls(name)
        except ValueError:
            return None


# States in which no transaction is open: a new one may begin, the id may expire.
IDLE = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
PREPARED = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})


def now_ms() -> int:
    return int(time.time() * 1000)


def epoch_exhausted(epoch: int) -> bool:
    """Kafka's rule: at MAX-1 the next bump would leave no epoch for fencing, so a new producer id is due."""
    return epoch >= MAX_EPOCH - 1


@dataclass(slots=True)
class TxnMeta:
    transactional_id: str
    producer_id: int
    prev_producer_id: int = NO_PRODUCER_ID
    epoch: int = NO_EPOCH
    last_epoch: int = NO_EPOCH
    timeout_ms: int = 60_000
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)  # consumer groups added with AddOffsetsToTxn
    start_ms: int = -1  # when the open transaction began (-1: none)
    update_ms: int = -1
    # The transaction version its client uses (KIP-890: 2 once it ends with EndTxn v5 or joins partitions with
    # Produce v12 / TxnOffsetCommit v5); markers are checked by it.
    client_tv: int = 0
    # Under version 2, the producer id the transaction's end hands over once the epoch is exhausted.
    next_producer_id: int = NO_PRODUCER_ID
    # A state change is being written: other requests for the id get CONCURRENT_TRANSACTIONS meanwhile.
    pending: bool = False

    def transit(self, **changes: Any) -> TxnMeta:
        """The next state, not yet applied: it is applied once written durably."""
        changes.setdefault("update_ms", now_ms())
        changes.setdefault("partitions", set(self.partitions))
        changes.setdefault("groups", set(self.groups))
        return dataclasses.replace(self, pending=False, **changes)

    def apply(self, other: TxnMeta) -> None:
        for f in dataclasses.fields(self):
            if f.name != "pending":
                setattr(self, f.name, getattr(other, f.name))

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.producer_id,
            "prev_pid": self.prev_producer_id,
            "epoch": self.epoch,
            "last_epoch": self.last_epoch,
            "timeout_ms": self.timeout_ms,
            "state": self.state.value,
            "partitions": sorted([t, p] for t, p in self.partitions),
            "groups": sorted(self.groups),
            "start_ms": self.start_ms,
            "update_ms": self.update_ms,
            "tv": self.client_tv,
            "next_pid": self.next_producer_id,
        }

    @classmethod
    def from_json(cls, tid: str, v: dict[str, Any]) -> TxnMeta:
        return cls(
            transactional_id=tid,
            producer_id=int(v["pid"]),
            prev_producer_id=int(v.get("prev_pid", NO_PRODUCER_ID)),
            epoch=int(v["epoch"]),
            last_epoch=int(v.get("last_epoch", NO_EPOCH)),
            timeout_ms=int(v["timeout_ms"]),
            state=TxnState(v["state"]),
            partitions={(str(t), int(p)) for t, p in v.get("partitions", [])},
            groups=set(v.get("groups", [])),
            start_ms=int(v.get("start_ms", -1)),
            update_ms=int(v.get("update_ms", -1)),
            client_tv=int(v.get("tv", 0)),
            next_producer_id=int(v.get("next_pid", NO_PRODUCER_ID)),
        )
