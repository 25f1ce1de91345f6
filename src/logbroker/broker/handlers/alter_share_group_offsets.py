"""AlterShareGroupOffsets (91): start a share group's partitions afresh at given offsets
(`kafka-share-groups --reset-offsets`): whatever was in flight is forgotten.

As measured on Kafka 4.4: a group id no group has is made a new, empty share group whose partitions start
there (the offsets are set before the first member, `kadm` and `kafka-share-groups --reset-offsets` do
that); an id of another kind of group is GROUP_ID_NOT_FOUND "Group G not found."; the group must be empty
(NON_EMPTY_GROUP "The group is not empty."); a partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION.
The group needs READ (GROUP_AUTHORIZATION_FAILED)."""

from __future__ import annotations

import uuid
from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation
from ..context import BrokerContext
from ..dispatch import handles
from ._share import NOT_HOSTED, ZERO_UUID, offsets_refusal

R = api(ApiKey.AlterShareGroupOffsets).response
AT = R.AlterShareGroupOffsetsResponseTopic
AP = AT.AlterShareGroupOffsetsResponsePartition


@handles(ApiKey.AlterShareGroupOffsets, 0, 0)
async def handle(ctx: BrokerContext, req: Request) -> Any:
    refused = offsets_refusal(ctx, req, AclOperation.READ, creates=True)
    if refused is not None:
        return R(throttle_time_ms=0, error_code=int(refused[0]), error_message=refused[1], responses=[])
    starts: list[tuple[str, int, int]] = []
    out = []
    for t in req.body.topics:
        meta = ctx.topics.get(t.topic_name)
        parts = []
        for p in t.partitions:
            if meta is None or not 0 <= p.partition_index < meta.partitions:
                parts.append(AP(partition_index=p.partition_index, error_code=int(E.UNKNOWN_TOPIC_OR_PARTITION),
                                error_message=NOT_HOSTED))  # fmt: skip
                continue
            starts.append((meta.topic_id, p.partition_index, p.start_offset))
            parts.append(AP(partition_index=p.partition_index, error_code=0, error_message=None))
        tid = uuid.UUID(meta.topic_id) if meta is not None else ZERO_UUID
        out.append(AT(topic_name=t.topic_name, topic_id=tid, partitions=parts))
    if starts:
        await ctx.share.set_start(req.body.group_id, starts)
    return R(throttle_time_ms=0, error_code=0, error_message=None, responses=out)
