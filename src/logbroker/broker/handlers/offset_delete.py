"""OffsetDelete (47): drop committed offsets of partitions the group no longer consumes."""

from __future__ import annotations

from logbroker.broker.groups import GroupError
from logbroker.protocol import ApiKey, Request, api

from ..context import BrokerContext, NoResponse
from ..dispatch import handles

API = api(ApiKey.OffsetDelete)
R = API.response
TR = R.OffsetDeleteResponseTopic


@handles(ApiKey.OffsetDelete, 0, 0)
async def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    b = req.body
    wanted = [(t.name, p.partition_index) for t in b.topics for p in t.partitions]
    try:
        result = await ctx.groups.delete_offsets(b.group_id, wanted)
    except GroupError as exc:
        return R(error_code=int(exc.code), throttle_time_ms=0, topics=[])
    topics: dict[str, list] = {}
    for (t, p), err in result.items():
        topics.setdefault(t, []).append(TR.OffsetDeleteResponsePartition(partition_index=p, error_code=int(err)))
    return R(error_code=0, throttle_time_ms=0, topics=[TR(name=t, partitions=ps) for t, ps in topics.items()])
