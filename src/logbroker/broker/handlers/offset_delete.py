"""OffsetDelete (47): drop committed offsets of partitions the group no longer consumes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.consumer import OffsetDeleteResponse

from logbroker.broker.groups.coordinator import GroupError
from logbroker.protocol.connection import Request

if TYPE_CHECKING:
    from logbroker.broker.server import Broker

R = OffsetDeleteResponse
TR = R.OffsetDeleteResponseTopic


async def handle(broker: Broker, req: Request) -> R:
    b = req.body
    wanted = [(t.name, p.partition_index) for t in b.topics for p in t.partitions]
    try:
        result = await broker.groups.delete_offsets(b.group_id, wanted)
    except GroupError as exc:
        return R(error_code=int(exc.code), throttle_time_ms=0, topics=[])
    topics: dict[str, list] = {}
    for (t, p), err in result.items():
        topics.setdefault(t, []).append(TR.OffsetDeleteResponsePartition(partition_index=p, error_code=int(err)))
    return R(error_code=0, throttle_time_ms=0, topics=[TR(name=t, partitions=ps) for t, ps in topics.items()])
