"""SyncGroup (14): the leader hands in assignments; followers wait for theirs.

As Kafka's KafkaApis, before the coordinator: v5+ must name the protocol type and name
(INCONSISTENT_GROUP_PROTOCOL), then READ on the group is needed (GROUP_AUTHORIZATION_FAILED)."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext, NoResponse
from ..dispatch import handles

API = api(ApiKey.SyncGroup)
R = API.response


@handles(ApiKey.SyncGroup, 0, 5)
async def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    b = req.body
    v = req.version
    if v >= 5 and (b.protocol_type is None or b.protocol_name is None):
        return _refused(E.INCONSISTENT_GROUP_PROTOCOL)
    if not ctx.access.authorize(req, AclOperation.READ, ResourceType.GROUP, b.group_id):
        return _refused(E.GROUP_AUTHORIZATION_FAILED)
    groups = ctx.groups
    err, assignment = await groups.sync(
        b.group_id,
        b.member_id,
        b.generation_id,
        b.group_instance_id if v >= 3 else None,
        b.protocol_type if v >= 5 else None,
        b.protocol_name if v >= 5 else None,
        {a.member_id: bytes(a.assignment) for a in b.assignments or []},
    )
    g = groups.group(b.group_id)
    return R(
        throttle_time_ms=0,
        error_code=int(err),
        protocol_type=g.protocol_type if g else None,
        protocol_name=g.protocol if g else None,
        assignment=assignment,
    )


def _refused(error: E) -> R:
    """Kafka's SyncGroupRequest.getErrorResponse: the code and an empty assignment."""
    return R(throttle_time_ms=0, error_code=int(error), protocol_type=None, protocol_name=None, assignment=b"")
