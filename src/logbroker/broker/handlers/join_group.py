"""JoinGroup (11): waits until the rebalance completes; v4+ requires a known member id (KIP-394)."""

from __future__ import annotations

from logbroker.broker.groups import JoinRequest
from logbroker.protocol import ApiKey, Request, api

from ..context import BrokerContext, NoResponse
from ..dispatch import handles

API = api(ApiKey.JoinGroup)
R = API.response


@handles(ApiKey.JoinGroup, 0, 9)
async def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    b = req.body
    v = req.version
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
