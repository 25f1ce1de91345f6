"""JoinGroup (11): waits until the rebalance completes; v4+ requires a known member id (KIP-394).

With an authorizer, joining needs READ on the group; Kafka refuses before the coordinator sees the request."""

from __future__ import annotations

from logbroker.broker.groups import JoinRequest
from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext, NoResponse
from ..dispatch import handles

API = api(ApiKey.JoinGroup)
R = API.response


@handles(ApiKey.JoinGroup, 0, 9)
async def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    b = req.body
    v = req.version
    if not ctx.access.authorize(req, AclOperation.READ, ResourceType.GROUP, b.group_id):
        # Kafka's JoinGroupRequest.getErrorResponse: no generation, member, leader or members.
        return R(throttle_time_ms=0, error_code=int(E.GROUP_AUTHORIZATION_FAILED), generation_id=-1,
                 protocol_type=None, protocol_name=None if v >= 7 else "", leader="", skip_assignment=False,
                 member_id="", members=[])  # fmt: skip
    res = await ctx.groups.join(
        JoinRequest(
            group_id=b.group_id,
            member_id=b.member_id,
            instance_id=b.group_instance_id if v >= 5 else None,
            client_id=req.header.client_id or "",
            client_host=req.client_host,
            session_timeout_ms=b.session_timeout_ms,
            rebalance_timeout_ms=b.rebalance_timeout_ms if v >= 1 else b.session_timeout_ms,
            protocol_type=b.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in b.protocols],
            require_known_member_id=v >= 4,
            supports_skip_assignment=v >= 9,
        )
    )
    return R(
        throttle_time_ms=0,
        error_code=int(res.error),
        generation_id=res.generation,
        protocol_type=res.protocol_type,
        protocol_name=res.protocol,
        leader=res.leader,
        skip_assignment=res.skip_assignment,
        member_id=res.member_id,
        members=[
            R.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=meta) for m, i, meta in res.members
        ],
    )
