"""Heartbeat (12): keeps a member's session alive; tells it when to rejoin. Needs READ on the group
(GROUP_AUTHORIZATION_FAILED otherwise, as Kafka)."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext, NoResponse
from ..dispatch import handles

API = api(ApiKey.Heartbeat)
R = API.response


@handles(ApiKey.Heartbeat, 0, 4)
def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    b = req.body
    if not ctx.access.authorize(req, AclOperation.READ, ResourceType.GROUP, b.group_id):
        return R(throttle_time_ms=0, error_code=int(E.GROUP_AUTHORIZATION_FAILED))
    err = ctx.groups.heartbeat(
        b.group_id, b.member_id, b.generation_id, b.group_instance_id if req.version >= 3 else None
    )
    return R(throttle_time_ms=0, error_code=int(err))
