"""DeleteRecords (21): move the log start offset; offset -1 means the high watermark.

Needs DELETE on each topic: a topic without it is TOPIC_AUTHORIZATION_FAILED (low watermark -1) whether it
exists or not, checked before existence (KafkaApis.handleDeleteRecordsRequest). An internal topic
(`__consumer_offsets`...) is INVALID_TOPIC_EXCEPTION, as from Kafka 4.4."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..auth.checks import KAFKA_INTERNAL_TOPICS
from ..context import BrokerContext
from ..dispatch import handles
from ..seams import OffsetOutOfRange, PartitionLog
from ._partitions import by_partition

API = api(ApiKey.DeleteRecords)
R = API.response
TR = R.DeleteRecordsTopicResult
PR = TR.DeleteRecordsPartitionResult


@handles(ApiKey.DeleteRecords, 0, 2)
def handle(ctx: BrokerContext, req: Request) -> R:
    def answer(plog: PartitionLog, p: Any) -> Any:
        if not plog.config.cleanup_delete:  # Kafka: a compact-only log's records are deleted by the cleaner only
            return error(p, E.POLICY_VIOLATION)
        try:
            low = plog.delete_records_before(plog.next_offset if p.offset == -1 else p.offset)
        except OffsetOutOfRange:
            return error(p, E.OFFSET_OUT_OF_RANGE)
        return PR(partition_index=p.partition_index, low_watermark=low, error_code=0)

    def error(p: Any, code: E) -> Any:
        return PR(partition_index=p.partition_index, low_watermark=-1, error_code=code)

    topics = _merged(req.body.topics)
    allowed = ctx.access.authorize_names(req, AclOperation.DELETE, ResourceType.TOPIC, [t.name for t in topics])

    def internal(plog: PartitionLog, p: Any) -> Any:  # Kafka: only its coordinators delete those records
        return error(p, E.INVALID_TOPIC_EXCEPTION)

    rows = [
        row
        for t in topics
        if t.name in allowed
        for row in by_partition(ctx, [t], internal if t.name in KAFKA_INTERNAL_TOPICS else answer, error)
    ]
    refused = E.TOPIC_AUTHORIZATION_FAILED
    denied = [(t.name, [error(p, refused) for p in t.partitions]) for t in topics if t.name not in allowed]
    return R(throttle_time_ms=0, topics=[TR(name=name, partitions=parts) for name, parts in [*rows, *denied]])


def _merged(topics: list[Any]) -> list[Any]:
    """As Kafka reads the request, into a map by partition: a topic named twice is one topic, a partition
    named twice one partition (its last offset), a topic with no partitions is not answered."""
    merged: dict[str, dict[int, Any]] = {}
    for t in topics:
        for p in t.partitions:
            merged.setdefault(t.name, {})[p.partition_index] = p
    return [SimpleNamespace(name=name, partitions=list(parts.values())) for name, parts in merged.items()]
