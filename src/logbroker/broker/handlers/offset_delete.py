"""OffsetDelete (47): drop committed offsets of partitions the group no longer consumes; a partition that does
not exist is UNKNOWN_TOPIC_OR_PARTITION.

With an authorizer (as Kafka): DELETE on the group, else a top-level GROUP_AUTHORIZATION_FAILED; then a
topic without READ is answered TOPIC_AUTHORIZATION_FAILED per partition and kept from the group."""

from __future__ import annotations

from logbroker.broker.groups import GroupError
from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext, NoResponse
from ..dispatch import handles

API = api(ApiKey.OffsetDelete)
R = API.response
TR = R.OffsetDeleteResponseTopic


@handles(ApiKey.OffsetDelete, 0, 0)
async def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    b = req.body
    denied: dict[tuple[str, int], E] = {}
    readable = None
    if ctx.access.authorizer is not None:
        if not ctx.access.authorize(req, AclOperation.DELETE, ResourceType.GROUP, b.group_id):
            return R(error_code=int(E.GROUP_AUTHORIZATION_FAILED), throttle_time_ms=0, topics=[])
        readable = ctx.access.authorize_names(req, AclOperation.READ, ResourceType.TOPIC, (t.name for t in b.topics))
        denied = {
            (t.name, p.partition_index): E.TOPIC_AUTHORIZATION_FAILED
            for t in b.topics
            if t.name not in readable
            for p in t.partitions
        }
    # Kafka (measured on 4.4): a partition or topic that does not exist is UNKNOWN_TOPIC_OR_PARTITION, after the
    # authorization check and without reaching the group.
    asked = [
        (t.name, p.partition_index) for t in b.topics if readable is None or t.name in readable for p in t.partitions
    ]
    unknown = {tp: E.UNKNOWN_TOPIC_OR_PARTITION for tp in asked if ctx.topics.log(*tp) is None}
    wanted = [tp for tp in asked if tp not in unknown]
    try:
        result = await ctx.groups.delete_offsets(b.group_id, wanted)
    except GroupError as exc:
        return R(error_code=int(exc.code), throttle_time_ms=0, topics=[])
    topics: dict[str, list] = {}
    for (t, p), err in (denied | unknown | result).items():
        topics.setdefault(t, []).append(TR.OffsetDeleteResponsePartition(partition_index=p, error_code=int(err)))
    return R(error_code=0, throttle_time_ms=0, topics=[TR(name=t, partitions=ps) for t, ps in topics.items()])
