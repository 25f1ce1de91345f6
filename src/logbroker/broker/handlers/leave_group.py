"""LeaveGroup (13): one member (v0-2) or a batch of members by id or static instance id (v3+)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.consumer import LeaveGroupResponse

from logbroker.protocol.connection import Request

if TYPE_CHECKING:
    from logbroker.broker.server import Broker

R = LeaveGroupResponse


def handle(broker: Broker, req: Request) -> R:
    b = req.body
    wanted = [(m.member_id, m.group_instance_id) for m in b.members] if req.version >= 3 else [(b.member_id, None)]
    top, results = broker.groups.leave(b.group_id, wanted)
    return R(
        throttle_time_ms=0,
        error_code=int(top),
        members=[R.MemberResponse(member_id=m, group_instance_id=i, error_code=int(e)) for m, i, e in results],
    )
