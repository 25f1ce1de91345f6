"""The consumer protocol's embedded formats (member metadata and assignments), for layers that may not
import the codec."""

from __future__ import annotations

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

__all__ = ["assignment_partitions", "subscription_topics"]


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
