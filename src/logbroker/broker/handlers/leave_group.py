"""LeaveGroup (13): one member (v0-2) or a batch of members by id or static instance id (v3+)."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api

from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.LeaveGroup)
R = API.response


@handles(ApiKey.LeaveGroup, 0, 5)
def handle(ctx: BrokerContext, req: Request) -> R:
    b = req.body
    wanted = [(m.member_id, m.group_instance_id) for m in b.members] if req.version >= 3 else [(b.member_id, None)]
    top, results = ctx.groups.leave(b.group_id, wanted)
    return R(
        throttle_time_ms=0,
        error_code=int(top),
        members=[R.MemberResponse(member_id=m, group_instance_id=i, error_code=int(e)) for m, i, e in results],
    )
