"""What ShareFetch and ShareAcknowledge share: request checks and acknowledgement batches read as Kafka
reads them (KafkaApis.validateAcknowledgementBatches)."""

from __future__ import annotations

from typing import Any

from logbroker.protocol import ErrorCode as E

from ..share.coordinator import MAX_MEMBER_ID
from ..share.partition import RENEW

Ack = tuple[str, int, list[Any]]  # (topic id, partition, its acknowledgement batches)


def request_error(group_id: str | None, member_id: str | None) -> tuple[E, str] | None:
    if not group_id:
        return E.INVALID_REQUEST, "Invalid group id"
    if not member_id or len(member_id) > MAX_MEMBER_ID:
        return E.INVALID_REQUEST, "Invalid member id"
    return None


def batches_error(batches: list[Any], version: int) -> str | None:
    """Why a partition's acknowledgement batches are malformed (INVALID_REQUEST for it), or None."""
    highest = RENEW if version >= 2 else RENEW - 1
    previous = -1
    for b in batches:
        if b.first_offset > b.last_offset:
            return "First offset of acknowledgement batch is greater than the last offset"
        if b.first_offset <= previous:
            return "Acknowledgement batches are not in order or overlap"
        previous = b.last_offset
        types = list(b.acknowledge_types)
        if not types:
            return "Acknowledge types must not be empty"
        if len(types) not in (1, b.last_offset - b.first_offset + 1):
            return "Acknowledge types count does not match the batch"
        if any(t < 0 or t > highest for t in types):
            return "Invalid acknowledge type"
    return None


def read_acks(topics: Any, version: int) -> tuple[list[Ack], dict[tuple[str, int], str]]:
    """The request's acknowledgements, and the partitions whose batches are malformed (with why)."""
    acks: list[Ack] = []
    bad: dict[tuple[str, int], str] = {}
    for t in topics:
        tid = str(t.topic_id)
        for p in t.partitions:
            batches = list(p.acknowledgement_batches or ())
            if not batches:
                continue
            why = batches_error(batches, version)
            if why is not None:
                bad[(tid, p.partition_index)] = why
            else:
                acks.append((tid, p.partition_index, batches))
    return acks, bad
