"""Heartbeat (12): keeps a member's session alive; tells it when to rejoin."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.consumer import HeartbeatResponse

from logbroker.protocol.connection import Request

if TYPE_CHECKING:
    from logbroker.broker.server import Broker

R = HeartbeatResponse


def handle(broker: Broker, req: Request) -> R:
    b = req.body
    err = broker.groups.heartbeat(
        b.group_id, b.member_id, b.generation_id, b.group_instance_id if req.version >= 3 else None
    )
    return R(throttle_time_ms=0, error_code=int(err))
