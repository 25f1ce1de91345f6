"""Small helpers shared by handlers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from logbroker.protocol.errors import ErrorCode
from logbroker.storage import PartitionLog
from logbroker.storage.manager import TopicError, validate_topic_name

if TYPE_CHECKING:
    from logbroker.broker.server import Broker


def code(name: str) -> int:
    return int(ErrorCode[name])


def ensure_topic(broker: Broker, topic: str, allow_auto_create: bool = True) -> int:
    """Error code for `topic`, auto-creating it when the broker allows (Kafka's auto.create.topics.enable)."""
    assert broker.logs is not None
    if topic in broker.logs.topics:
        return 0
    try:
        validate_topic_name(topic)
    except TopicError as exc:
        return code(exc.error)
    if not (allow_auto_create and broker.settings.auto_create_topics):
        return code("UNKNOWN_TOPIC_OR_PARTITION")
    broker.logs.create_topic(topic, broker.settings.num_partitions)
    return 0


def partition_log(broker: Broker, topic: str, partition: int) -> PartitionLog | None:
    return broker.get_log(topic, partition)
