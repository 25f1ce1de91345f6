"""ConsumerGroupHeartbeat (68): KIP-848 membership, subscription and server-side assignment."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from logbroker.protocol.connection import Request
from logbroker.protocol.kip848 import ConsumerGroupHeartbeatResponse

if TYPE_CHECKING:
    from logbroker.broker.server import Broker

R = ConsumerGroupHeartbeatResponse
A = R.Assignment


async def handle(broker: Broker, req: Request) -> R:
    res = await broker.groups.consumer_heartbeat(req.body, req.header.client_id or "", req.client_host)
    assignment = None
    if res.assignment is not None:
        assignment = A(
            topic_partitions=[
                A.TopicPartitions(topic_id=uuid.UUID(tid), partitions=sorted(parts))
                for tid, parts in sorted(res.assignment.items())
            ]
        )
    return R(
        throttle_time_ms=0,
        error_code=int(res.error),
        error_message=res.message,
        member_id=res.member_id,
        member_epoch=res.epoch,
        heartbeat_interval_ms=broker.groups.consumer.heartbeat_interval_ms,
        assignment=assignment,
    )
