"""DeleteShareGroupOffsets (92): forget a share group's state of whole topics (`kafka-share-groups
--delete-offsets`); a later assignment starts them where share.auto.offset.reset says.

As for AlterShareGroupOffsets: an existing, empty group; a topic that does not exist is
UNKNOWN_TOPIC_OR_PARTITION. The group needs DELETE (GROUP_AUTHORIZATION_FAILED)."""

from __future__ import annotations

import uuid
from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation
from ..context import BrokerContext
from ..dispatch import handles
from ._share import NOT_HOSTED, ZERO_UUID, offsets_refusal

R = api(ApiKey.DeleteShareGroupOffsets).response
XT = R.DeleteShareGroupOffsetsResponseTopic


@handles(ApiKey.DeleteShareGroupOffsets, 0, 0)
async def handle(ctx: BrokerContext, req: Request) -> Any:
    refused = offsets_refusal(ctx, req, AclOperation.DELETE)
    if refused is not None:
        return R(throttle_time_ms=0, error_code=int(refused[0]), error_message=refused[1], responses=[])
    out = []
    for t in req.body.topics:
        meta = ctx.topics.get(t.topic_name)
        if meta is None:
            out.append(XT(topic_name=t.topic_name, topic_id=ZERO_UUID, error_code=int(E.UNKNOWN_TOPIC_OR_PARTITION),
                          error_message=NOT_HOSTED))  # fmt: skip
            continue
        await ctx.share.delete_topic_state(req.body.group_id, meta.topic_id)
        out.append(XT(topic_name=t.topic_name, topic_id=uuid.UUID(meta.topic_id), error_code=0, error_message=None))
    return R(throttle_time_ms=0, error_code=0, error_message=None, responses=out)
