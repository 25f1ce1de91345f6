"""ConsumerGroupDescribe (69): KIP-848 groups with members' current and target assignments.

Errors are answered as Kafka does: INVALID_GROUP_ID (no message) for the empty id, GROUP_ID_NOT_FOUND with
Kafka's message for an unknown or classic group, with an empty state and zero epochs.

With an authorizer (Kafka 4's KafkaApis): a group needs DESCRIBE (the refused ones come first, with
GROUP_AUTHORIZATION_FAILED), and a group whose members' assignments name a topic the principal may not
DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED with Kafka's message and no members.
"""

from __future__ import annotations

import uuid

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..auth.checks import authorized_operations
from ..context import BrokerContext, NoResponse
from ..dispatch import handles
from ..features import DISABLED_MESSAGE
from ._groups import fit_message

API = api(ApiKey.ConsumerGroupDescribe)
R = API.response
DG = R.DescribedGroup
M = DG.Member
# v1's MemberType (KIP-1099): a member that joined with JoinGroup/SyncGroup (a group upgrading from the classic
# protocol), or one that heartbeats with ConsumerGroupHeartbeat; the admin client reports it as `upgraded`.
CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1


def _parts(ctx: BrokerContext, tm: dict[str, set[int]], cls: type) -> list:
    return [cls(topic_id=uuid.UUID(t), topic_name=_name(ctx, t), partitions=sorted(p)) for t, p in sorted(tm.items())]


def _name(ctx: BrokerContext, topic_id: str) -> str:
    meta = ctx.topics.by_id(topic_id)
    return meta.name if meta is not None else ""


def _error(gid: str, code: E, message: str | None) -> DG:
    err, msg = fit_message(int(code), message)
    return DG(
        error_code=err,
        error_message=msg,
        group_id=gid,
        group_state="",
        group_epoch=0,
        assignment_epoch=0,
        assignor_name="",
        members=[],
    )


HIDDEN_TOPICS = "The group has described topic(s) that the client is not authorized to describe."


NO_OPS = -(1 << 31)  # "not requested"


def _bits(ops: frozenset[int]) -> int:
    """KIP-430's bitfield: bit n set for operation code n."""
    return sum(1 << op for op in ops)


@handles(ApiKey.ConsumerGroupDescribe, 0, 1)
def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    if ctx.features.level("group.version") < 1:
        return R(throttle_time_ms=0, groups=[_error(gid, E.UNSUPPORTED_VERSION, DISABLED_MESSAGE)
                                             for gid in req.body.group_ids])  # fmt: skip
    out = _describe(ctx, req)
    if ctx.access.authorizer is not None:
        topics = [_topics(g) for g in out]
        allowed = ctx.access.authorize_names(req, AclOperation.DESCRIBE, ResourceType.TOPIC, set().union(*topics))
        out = [g if t <= allowed else _hidden(g.group_id) for g, t in zip(out, topics, strict=True)]
    return R(throttle_time_ms=0, groups=out)


def _topics(g: DG) -> set[str]:
    """The topics a described group shows: its members' current and target assignments."""
    return {tp.topic_name for m in g.members for a in (m.assignment, m.target_assignment) for tp in a.topic_partitions}


def _hidden(gid: str) -> DG:
    """Kafka's answer for a group that would show topics the principal may not describe: only the id,
    the code and the message (its state and epochs are left at their defaults)."""
    return _error(gid, E.TOPIC_AUTHORIZATION_FAILED, HIDDEN_TOPICS)


def _describe(ctx: BrokerContext, req: Request) -> list[DG]:
    wanted = req.body.group_ids
    out = []
    if ctx.access.authorizer is not None:
        allowed = [ctx.access.authorize(req, AclOperation.DESCRIBE, ResourceType.GROUP, gid) for gid in wanted]
        out = [
            _error(gid, E.GROUP_AUTHORIZATION_FAILED, None) for gid, ok in zip(wanted, allowed, strict=True) if not ok
        ]
        wanted = [gid for gid, ok in zip(wanted, allowed, strict=True) if ok]
    with_ops = bool(req.body.include_authorized_operations)
    for gid in wanted:
        if not gid:
            out.append(_error(gid, E.INVALID_GROUP_ID, None))
            continue
        g = ctx.groups.group(gid)
        if g is None:
            out.append(_error(gid, E.GROUP_ID_NOT_FOUND, f"Group {gid} not found."))
            continue
        if g.group_type != "consumer":
            out.append(_error(gid, E.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group."))
            continue
        members = [
            M(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed),
                subscribed_topic_regex=m.regex,
                assignment=M.Assignment(topic_partitions=_parts(ctx, m.assigned, M.Assignment.TopicPartitions)),
                target_assignment=M.TargetAssignment(
                    topic_partitions=_parts(
                        ctx, g.target.get(m.member_id, {}), M.TargetAssignment.TargetTopicPartitions
                    )
                ),
                member_type=CLASSIC_MEMBER if m.classic is not None else CONSUMER_MEMBER,
            )
            for m in g.members.values()
        ]
        out.append(
            DG(
                error_code=0,
                error_message=None,
                group_id=gid,
                group_state=g.state_name,
                group_epoch=g.epoch,
                assignment_epoch=g.assignment_epoch,
                assignor_name=g.assignor,
                members=members,
                **(
                    {"authorized_operations": _bits(authorized_operations(ctx, req, ResourceType.GROUP, gid))}
                    if with_ops
                    else {}
                ),
            )
        )
    return out
