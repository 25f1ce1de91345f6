"""JoinGroup (11): waits until the rebalance completes; v4+ requires a known member id (KIP-394)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.consumer import JoinGroupResponse

from logbroker.protocol.connection import Request

if TYPE_CHECKING:
    from logbroker.broker.server import Broker

R = JoinGroupResponse


async def handle(broker: Broker, req: Request) -> R:
    b = req.body
    v = req.version
    res = await broker.groups.join(
        b.group_id,
        b.member_id,
        b.group_instance_id if v >= 5 else None,
        req.header.client_id or "",
        req.client_host,
        b.session_timeout_ms,
        b.rebalance_timeout_ms if v >= 1 else b.session_timeout_ms,
        b.protocol_type,
        [(p.name, bytes(p.metadata)) for p in b.protocols],
        require_known_member_id=v >= 4,
        supports_skip_assignment=v >= 9,
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
