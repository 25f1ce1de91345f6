"""LeaveGroup (13): one member (v0-2) or a batch of members by id or static instance id (v3+).

As in Kafka, v0-2 carry the member's error at the top level; v3+ carry it per member, with a top-level
error only for the group itself (INVALID_GROUP_ID). Leaving needs READ on the group: Kafka refuses the
whole request with a top-level GROUP_AUTHORIZATION_FAILED and no members.
"""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext, NoResponse
from ..dispatch import handles

API = api(ApiKey.LeaveGroup)
R = API.response


@handles(ApiKey.LeaveGroup, 0, 5)
def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    b = req.body
    if not ctx.access.authorize(req, AclOperation.READ, ResourceType.GROUP, b.group_id):
        return R(throttle_time_ms=0, error_code=int(E.GROUP_AUTHORIZATION_FAILED), members=[])
    wanted = [(m.member_id, m.group_instance_id) for m in b.members] if req.version >= 3 else [(b.member_id, None)]
    top, results = ctx.groups.leave(b.group_id, wanted)
    if req.version >= 3 and results:
        top = E.NONE
    return R(
        throttle_time_ms=0,
        error_code=int(top),
        members=[R.MemberResponse(member_id=m, group_instance_id=i, error_code=int(e)) for m, i, e in results],
    )
