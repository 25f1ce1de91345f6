"""Heartbeat (12): keeps a member's session alive; tells it when to rejoin."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api

from ..context import BrokerContext, NoResponse
from ..dispatch import handles

API = api(ApiKey.Heartbeat)
R = API.response


@handles(ApiKey.Heartbeat, 0, 4)
def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    b = req.body
    err = ctx.groups.heartbeat(
        b.group_id, b.member_id, b.generation_id, b.group_instance_id if req.version >= 3 else None
    )
    return R(throttle_time_ms=0, error_code=int(err))
