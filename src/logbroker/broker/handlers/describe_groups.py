"""DescribeGroups (15): state, protocol and members with their metadata and assignments.

Any id is looked up (Kafka checks only for null, so the empty one too). An unknown group, or a KIP-848 group,
is reported as Kafka does: Dead with no error before v6, GROUP_ID_NOT_FOUND with a message from v6.

With an authorizer a group needs DESCRIBE: the refused ones come first, GROUP_AUTHORIZATION_FAILED and
otherwise empty, then the others in request order (Kafka's KafkaApis). v3+ can ask for the operations the
principal holds on each group found (KIP-430).
"""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..auth.checks import authorized_operations
from ..context import BrokerContext, NoResponse
from ..dispatch import handles
from ._groups import fit_message

API = api(ApiKey.DescribeGroups)
R = API.response
DG = R.DescribedGroup


def _missing(gid: str, version: int, message: str, ops: frozenset[int] | None) -> DG:
    err, msg = (int(E.GROUP_ID_NOT_FOUND), message) if version >= 6 else (0, None)
    err, msg = fit_message(err, msg)
    return DG(
        error_code=err,
        error_message=msg,
        group_id=gid,
        group_state="Dead" if err != E.UNKNOWN_SERVER_ERROR else "",
        protocol_type="",
        protocol_data="",
        members=[],
        authorized_operations=ops if err == 0 else None,  # Kafka adds them to every answer without an error
    )


@handles(ApiKey.DescribeGroups, 0, 6)
def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    refused = []
    wanted = req.body.groups
    if ctx.access.authorizer is not None:
        allowed = [ctx.access.authorize(req, AclOperation.DESCRIBE, ResourceType.GROUP, gid) for gid in wanted]
        refused = [_denied(gid) for gid, ok in zip(wanted, allowed, strict=True) if not ok]
        wanted = [gid for gid, ok in zip(wanted, allowed, strict=True) if ok]
    with_ops = req.version >= 3 and req.body.include_authorized_operations
    out = []
    for gid in wanted:
        g = ctx.groups.group(gid)
        ops = authorized_operations(ctx, req, ResourceType.GROUP, gid) if with_ops else None
        if g is None:
            out.append(_missing(gid, req.version, f"Group {gid} not found.", ops))
            continue
        if g.group_type != "classic":
            out.append(_missing(gid, req.version, f"Group {gid} is not a classic group.", ops))
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
                authorized_operations=ops,
            )
        )
    return R(throttle_time_ms=0, groups=refused + out)


def _denied(gid: str) -> DG:
    return DG(error_code=int(E.GROUP_AUTHORIZATION_FAILED), error_message=None, group_id=gid, group_state="",
              protocol_type="", protocol_data="", members=[], authorized_operations=None)  # fmt: skip
