"""The consumer protocol's embedded formats (member metadata and assignments), for layers that may not
import the codec."""

from __future__ import annotations

from dataclasses import dataclass

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

__all__ = [
    "Subscription",
    "assignment_partitions",
    "assignment_user_data",
    "encode_assignment",
    "parse_subscription",
    "subscription_topics",
]


def subscription_topics(metadata: bytes) -> list[str]:
    """Topics named in a consumer-protocol subscription; ValueError when the bytes are not one.

    Member metadata is opaque to the broker and user-supplied (any `protocol_type` may carry anything), so a
    parse failure is an ordinary outcome the caller decides about, not a broker fault.
    """
    try:
        sub = ConsumerProtocolSubscription.decode(metadata, header=True)
    except Exception as exc:  # the codec raises struct.error, IndexError, UnicodeDecodeError... on garbage
        raise ValueError(f"not a consumer-protocol subscription: {exc}") from exc
    return list(sub.topics or [])


def assignment_partitions(assignment: bytes) -> list[tuple[str, int]]:
    """(topic, partition) pairs of a consumer-protocol assignment; ValueError when the bytes are not one."""
    try:
        a = ConsumerProtocolAssignment.decode(assignment, header=True)
    except Exception as exc:  # as above: garbage makes the codec raise anything
        raise ValueError(str(exc)) from exc
    return [(t.topic, p) for t in a.assigned_partitions or [] for p in t.partitions]


@dataclass(frozen=True)
class Subscription:
    """A consumer-protocol subscription as a classic JoinGroup carries it (KIP-848 reads it for the classic
    members of a consumer group)."""

    version: int
    topics: list[str]
    owned: list[tuple[str, int]]  # owned partitions (v1+, cooperative rebalancing)
    rack: str | None  # v3+
    user_data: bytes | None


def parse_subscription(metadata: bytes) -> Subscription:
    """The subscription; ValueError when the bytes are not one."""
    try:
        sub = ConsumerProtocolSubscription.decode(metadata, header=True)
    except Exception as exc:  # garbage makes the codec raise anything
        raise ValueError(f"not a consumer-protocol subscription: {exc}") from exc
    version = int(sub.version or 0)
    owned = [(t.topic, p) for t in (getattr(sub, "owned_partitions", None) or []) for p in t.partitions]
    return Subscription(version, list(sub.topics or []), owned, getattr(sub, "rack_id", None), sub.user_data)


def assignment_user_data(assignment: bytes) -> bytes | None:
    """The user data of a consumer-protocol assignment (custom assignors put state there); ValueError when
    the bytes are not one."""
    try:
        return ConsumerProtocolAssignment.decode(assignment, header=True).user_data
    except Exception as exc:
        raise ValueError(str(exc)) from exc


def encode_assignment(partitions: dict[str, list[int]], version: int) -> bytes:
    """A consumer-protocol assignment in `version` (0-3; the subscription's version, as Kafka answers)."""
    a = ConsumerProtocolAssignment(
        assigned_partitions=[ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=sorted(ps))
                             for t, ps in sorted(partitions.items())],
        user_data=None,
    )  # fmt: skip
    return bytes(a.encode(version=min(max(version, 0), 3), header=True))
