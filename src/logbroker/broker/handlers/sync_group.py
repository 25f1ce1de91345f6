"""SyncGroup (14): the leader hands in assignments; followers wait for theirs."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api

from ..context import BrokerContext, NoResponse
from ..dispatch import handles

API = api(ApiKey.SyncGroup)
R = API.response


@handles(ApiKey.SyncGroup, 0, 5)
async def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    b = req.body
    v = req.version
    groups = ctx.groups
    err, assignment = await groups.sync(
        b.group_id,
        b.member_id,
        b.generation_id,
        b.group_instance_id if v >= 3 else None,
        b.protocol_type if v >= 5 else None,
        b.protocol_name if v >= 5 else None,
        {a.member_id: bytes(a.assignment) for a in b.assignments or []},
    )
    g = groups.group(b.group_id)
    return R(
        throttle_time_ms=0,
        error_code=int(err),
        protocol_type=g.protocol_type if g else None,
        protocol_name=g.protocol if g else None,
        assignment=assignment,
    )
