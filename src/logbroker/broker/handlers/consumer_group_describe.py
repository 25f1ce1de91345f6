"""ConsumerGroupDescribe (69): KIP-848 groups with members' current and target assignments."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from logbroker.protocol.connection import Request
from logbroker.protocol.errors import ErrorCode as E
from logbroker.protocol.kip848 import ConsumerGroupDescribeResponse

if TYPE_CHECKING:
    from logbroker.broker.server import Broker

R = ConsumerGroupDescribeResponse
DG = R.DescribedGroup
M = DG.Member


def _parts(broker: Broker, tm: dict[str, set[int]], cls: type) -> list:
    assert broker.logs is not None
    names = {meta.topic_id: name for name, meta in broker.logs.topics.items()}
    return [
        cls(topic_id=uuid.UUID(t), topic_name=names.get(t, ""), partitions=sorted(p)) for t, p in sorted(tm.items())
    ]


def handle(broker: Broker, req: Request) -> R:
    out = []
    for gid in req.body.group_ids:
        g = broker.groups.groups.get(gid)
        if g is None or g.group_type != "consumer":
            err = E.GROUP_ID_NOT_FOUND
            msg = f"group {gid} does not exist" if g is None else f"group {gid} is not a consumer group"
            out.append(
                DG(
                    error_code=int(err),
                    error_message=msg,
                    group_id=gid,
                    group_state="Dead",
                    group_epoch=-1,
                    assignment_epoch=-1,
                    assignor_name="",
                    members=[],
                )
            )
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
                assignment=M.Assignment(topic_partitions=_parts(broker, m.assigned, M.Assignment.TopicPartitions)),
                target_assignment=M.TargetAssignment(
                    topic_partitions=_parts(
                        broker, g.target.get(m.member_id, {}), M.TargetAssignment.TargetTopicPartitions
                    )
                ),
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
            )
        )
    return R(throttle_time_ms=0, groups=out)
