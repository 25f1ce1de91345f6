"""DeleteGroups (42): only empty groups; their committed offsets go with them. Any id is looked up, the
empty one too (Kafka checks only for null). With an authorizer a group needs DELETE: as Kafka, the refused
ones (GROUP_AUTHORIZATION_FAILED) follow the others. v3 (Kafka 4.4, KIP-1331) adds a message per result,
which Kafka sets only when a streams topology plugin fails the deletion: null here, as on a Kafka without one."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext, NoResponse
from ..dispatch import handles

API = api(ApiKey.DeleteGroups)
R = API.response


@handles(ApiKey.DeleteGroups, 0, 3)
async def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    names = list(dict.fromkeys(req.body.groups_names))  # Kafka answers an id named twice once
    refused = []
    if ctx.access.authorizer is not None:
        allowed = ctx.access.authorize_names(req, AclOperation.DELETE, ResourceType.GROUP, names)
        refused = [
            R.DeletableGroupResult(group_id=gid, error_code=int(E.GROUP_AUTHORIZATION_FAILED), error_message=None)
            for gid in names
            if gid not in allowed
        ]
        names = [gid for gid in names if gid in allowed]
    results = []
    for gid in names:
        if ctx.share.is_group(gid):
            err = await ctx.share.delete_group(gid)
        else:
            err = await ctx.groups.delete_group(gid)
        results.append(R.DeletableGroupResult(group_id=gid, error_code=int(err), error_message=None))
    return R(throttle_time_ms=0, results=results + refused)
