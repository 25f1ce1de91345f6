"""ShareGroupDescribe (77): share groups' members and assignments.

An id that is no group is GROUP_ID_NOT_FOUND; one of a classic or consumer group too ("... is not a share
group"), as from Kafka. With an authorizer a group needs DESCRIBE (GROUP_AUTHORIZATION_FAILED)."""

from __future__ import annotations

import uuid

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..auth.checks import authorized_operations
from ..context import BrokerContext
from ..dispatch import handles
from ..features import DISABLED_MESSAGE

API = api(ApiKey.ShareGroupDescribe)
R = API.response
G = R.DescribedGroup
M = G.Member
NOT_REQUESTED = -(1 << 31)


def _missing(group_id: str, code: E, message: str | None) -> G:
    return G(error_code=int(code), error_message=message, group_id=group_id, group_state="Dead", group_epoch=-1,
             assignment_epoch=-1, assignor_name="", members=[], authorized_operations=NOT_REQUESTED)  # fmt: skip


@handles(ApiKey.ShareGroupDescribe, 1, 1)
def handle(ctx: BrokerContext, req: Request) -> R:
    b = req.body
    names = ctx.share.topic_ids()
    out = []
    if ctx.features.level("share.version") < 1:
        return R(throttle_time_ms=0, groups=[_missing(gid, E.UNSUPPORTED_VERSION, DISABLED_MESSAGE)
                                             for gid in b.group_ids])  # fmt: skip
    for gid in b.group_ids:
        if not ctx.access.authorize(req, AclOperation.DESCRIBE, ResourceType.GROUP, gid):
            out.append(_missing(gid, E.GROUP_AUTHORIZATION_FAILED, None))
            continue
        g = ctx.share.describe(gid)
        if g is None:
            other = ctx.groups.group(gid)
            msg = f"Group {gid} is not a share group." if other is not None else f"Group {gid} not found."
            out.append(_missing(gid, E.GROUP_ID_NOT_FOUND, msg))
            continue
        members = [
            M(member_id=m.member_id, rack_id=m.rack, member_epoch=m.epoch, client_id=m.client_id,
              client_host=m.client_host, subscribed_topic_names=sorted(m.subscribed),
              assignment=M.Assignment(topic_partitions=[
                  M.Assignment.TopicPartitions(topic_id=uuid.UUID(t), topic_name=names.get(t, ""),
                                               partitions=sorted(ps))
                  for t, ps in sorted(m.assignment.items())]))
            for m in g.members.values()
        ]  # fmt: skip
        ops = NOT_REQUESTED
        if b.include_authorized_operations:
            ops = sum(1 << op for op in authorized_operations(ctx, req, ResourceType.GROUP, gid))
        out.append(G(error_code=0, error_message=None, group_id=gid, group_state=g.state, group_epoch=g.epoch,
                     assignment_epoch=g.assignment_epoch, assignor_name="simple", members=members,
                     authorized_operations=ops))  # fmt: skip
    return R(throttle_time_ms=0, groups=out)
