"""DeleteGroups (42): only empty groups; their committed offsets go with them. Any id is looked up, the
empty one too (Kafka checks only for null)."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api

from ..context import BrokerContext, NoResponse
from ..dispatch import handles

API = api(ApiKey.DeleteGroups)
R = API.response


@handles(ApiKey.DeleteGroups, 0, 2)
async def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    results = []
    for gid in req.body.groups_names:
        err = await ctx.groups.delete_group(gid)
        results.append(R.DeletableGroupResult(group_id=gid, error_code=int(err)))
    return R(throttle_time_ms=0, results=results)
