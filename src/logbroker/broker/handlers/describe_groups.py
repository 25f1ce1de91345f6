"""DescribeGroups (15): state, protocol and members with their metadata and assignments."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.DescribeGroups)
R = API.response
DG = R.DescribedGroup


@handles(ApiKey.DescribeGroups, 0, 6)
def handle(ctx: BrokerContext, req: Request) -> R:
    out = []
    for gid in req.body.groups:
        g = ctx.groups.group(gid)
        if g is None or g.group_type != "classic":
            # v6+ names the problem as Kafka does; older versions report an unknown group as Dead.
            err, msg = 0, None
            if g is not None:
                err, msg = int(E.GROUP_ID_NOT_FOUND), f"Group {gid} is not a classic group."
            elif req.version >= 6:
                err, msg = int(E.GROUP_ID_NOT_FOUND), f"Group {gid} not found."
            out.append(
                DG(
                    error_code=err,
                    error_message=msg,
                    group_id=gid,
                    group_state="Dead",
                    protocol_type="",
                    protocol_data="",
                    members=[],
                    authorized_operations=None,
                )
            )
            continue
        members = [
            DG.DescribedGroupMember(
                member_id=m.member_id,
                group_instance_id=m.instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata_for(g.protocol),
                member_assignment=m.assignment,
            )
            for m in g.members.values()
        ]
        out.append(
            DG(
                error_code=0,
                group_id=gid,
                group_state=g.state_name,
                protocol_type=g.protocol_type or "",
                protocol_data=g.protocol or "",
                members=members,
                authorized_operations=None,
            )
        )
    return R(throttle_time_ms=0, groups=out)
