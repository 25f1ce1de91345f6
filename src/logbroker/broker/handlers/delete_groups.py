"""DeleteGroups (42): only empty groups; their committed offsets go with them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.admin import DeleteGroupsResponse

from logbroker.protocol.connection import Request

if TYPE_CHECKING:
    from logbroker.broker.server import Broker

R = DeleteGroupsResponse


async def handle(broker: Broker, req: Request) -> R:
    results = []
    for gid in req.body.groups_names:
        err = await broker.groups.delete_group(gid)
        results.append(R.DeletableGroupResult(group_id=gid, error_code=int(err)))
    return R(throttle_time_ms=0, results=results)
