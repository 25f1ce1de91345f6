"""ListGroups (16): every group with its state (v4 filters by state, v5 by type), share groups included.
With an authorizer, as Kafka: DESCRIBE on the cluster lists every group, otherwise only the groups the
principal may DESCRIBE."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api

from ..auth.acls import AclOperation, ResourceType
from ..auth.checks import cluster_allows
from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.ListGroups)
R = API.response


@handles(ApiKey.ListGroups, 0, 5)
def handle(ctx: BrokerContext, req: Request) -> R:
    b = req.body
    states = {s.lower() for s in b.states_filter} if req.version >= 4 and b.states_filter else None
    types = {t.lower() for t in b.types_filter} if req.version >= 5 and b.types_filter else None
    every = ctx.access.authorizer is None or cluster_allows(ctx, req, AclOperation.DESCRIBE)
    out = []
    for g in ctx.groups.all_groups():
        if not every and not ctx.access.authorize(req, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id):
            continue
        gtype = g.group_type
        if states is not None and g.state_name.lower() not in states:
            continue
        if types is not None and gtype not in types:
            continue
        out.append(
            R.ListedGroup(
                group_id=g.group_id, protocol_type=g.protocol_type or "", group_state=g.state_name, group_type=gtype
            )
        )
    for sg in sorted(ctx.share.groups.values(), key=lambda g: g.group_id):
        if not every and not ctx.access.authorize(req, AclOperation.DESCRIBE, ResourceType.GROUP, sg.group_id):
            continue
        if (states is not None and sg.state.lower() not in states) or (types is not None and "share" not in types):
            continue
        out.append(R.ListedGroup(group_id=sg.group_id, protocol_type="share", group_state=sg.state,
                                 group_type="share"))  # fmt: skip
    return R(throttle_time_ms=0, error_code=0, groups=out)
