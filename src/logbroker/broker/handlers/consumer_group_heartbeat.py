"""ConsumerGroupHeartbeat (68): KIP-848 membership, subscription and server-side assignment."""

from __future__ import annotations

import uuid

from logbroker.protocol import ApiKey, Request, api

from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.ConsumerGroupHeartbeat)
R = API.response
A = R.Assignment


@handles(ApiKey.ConsumerGroupHeartbeat, 0, 1)
async def handle(ctx: BrokerContext, req: Request) -> R:
    res = await ctx.groups.consumer_heartbeat(req.body, req.header.client_id or "", req.client_host)
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
        heartbeat_interval_ms=ctx.groups.consumer.heartbeat_interval_ms,
        assignment=assignment,
    )
