"""Partition-aware message IDs.

Milvus' Kafka ID is a bare offset, which only works with one partition per topic. Ours carries the
topic (so a foreign ID is refused by seek) and the partition; `from_bytes` still reads Milvus' 8-byte
form as partition 0 of any topic.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

OFFSET_BEGINNING = -2  # librdkafka's logical offset, as Milvus' EarliestMessageID
_HEAD = struct.Struct(">Biq")
_VERSION = 1


@dataclass(frozen=True, slots=True)
class MessageID:
    """Position of one message: (topic, partition, offset). An empty topic means "any topic"."""

    topic: str
    partition: int
    offset: int

    def serialize(self) -> bytes:
        return _HEAD.pack(_VERSION, self.partition, self.offset) + self.topic.encode()

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition}:{self.offset}"

    def at_earliest_position(self) -> bool:
        """True for the logical beginning and offset 0 (Milvus: offset <= 0)."""
        return self.offset <= 0

    def _check(self, other: object) -> MessageID:
        if isinstance(other, bytes | bytearray):
            other = message_id_from_bytes(bytes(other))
        if not isinstance(other, MessageID):
            return NotImplemented  # type: ignore[return-value]
        if self.topic and other.topic and self.topic != other.topic:
            raise ValueError(f"cannot order IDs of different topics: {self} vs {other}")
        if self.partition != other.partition:
            raise ValueError(f"cannot order IDs of different partitions: {self} vs {other}")
        return other

    def __lt__(self, other: object) -> bool:
        o = self._check(other)
        return o is NotImplemented or self.offset < o.offset  # type: ignore[comparison-overlap]

    def __le__(self, other: object) -> bool:
        o = self._check(other)
        return o is NotImplemented or self.offset <= o.offset  # type: ignore[comparison-overlap]

    def __gt__(self, other: object) -> bool:
        o = self._check(other)
        return o is NotImplemented or self.offset > o.offset  # type: ignore[comparison-overlap]

    def __ge__(self, other: object) -> bool:
        o = self._check(other)
        return o is NotImplemented or self.offset >= o.offset  # type: ignore[comparison-overlap]

    def equal(self, data: bytes) -> bool:
        """Milvus' Equal(bytes): same position, ignoring an unknown topic on either side."""
        o = message_id_from_bytes(data)
        same_topic = not o.topic or not self.topic or o.topic == self.topic
        return same_topic and o.partition == self.partition and o.offset == self.offset


def message_id_from_bytes(data: bytes) -> MessageID:
    if len(data) == 8:  # Milvus' KafkaID: a big-endian int64 offset
        return MessageID("", 0, struct.unpack(">q", data)[0])
    if len(data) < _HEAD.size or data[0] != _VERSION:
        raise ValueError(f"not a serialized MessageID: {data[:16]!r}")
    _, partition, offset = _HEAD.unpack_from(data)
    return MessageID(data[_HEAD.size :].decode(), partition, offset)


def message_id_from_string(text: str) -> MessageID:
    """Parse `str(id)`: ``topic:partition:offset`` (a bare offset means partition 0 of any topic)."""
    try:
        if ":" not in text:
            return MessageID("", 0, int(text))
        topic, partition, offset = text.rsplit(":", 2)
        return MessageID(topic, int(partition), int(offset))
    except ValueError as exc:
        raise ValueError(f"not a MessageID string: {text!r}") from exc
