"""DescribeShareGroupOffsets (90): a share group's start offsets and lag (`kafka-share-groups --describe`).

As measured on Kafka 4.4: each share-partition's start offset, leader epoch 0 and (v1) its lag (what is
left to deliver up to the log end), -1 and -1 for a partition without state; no topics for a group that
does not exist. A group needs DESCRIBE (GROUP_AUTHORIZATION_FAILED)."""

from __future__ import annotations

import uuid
from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext
from ..dispatch import handles

R = api(ApiKey.DescribeShareGroupOffsets).response
DG = R.DescribeShareGroupOffsetsResponseGroup
DT = DG.DescribeShareGroupOffsetsResponseTopic
DP = DT.DescribeShareGroupOffsetsResponsePartition


@handles(ApiKey.DescribeShareGroupOffsets, 0, 1)
def handle(ctx: BrokerContext, req: Request) -> Any:
    share = ctx.share
    names = share.topic_ids()
    groups = []
    for g in req.body.groups:
        if not ctx.access.authorize(req, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id):
            groups.append(DG(group_id=g.group_id, topics=[], error_code=int(E.GROUP_AUTHORIZATION_FAILED),
                             error_message=None))  # fmt: skip
            continue
        if not share.is_group(g.group_id):
            groups.append(DG(group_id=g.group_id, topics=[], error_code=0, error_message=None))
            continue
        if g.topics is None:
            asked = sorted((names[t], t, ps) for t, ps in share.partitions_of(g.group_id).items() if t in names)
        else:
            asked = []
            for t in g.topics:
                meta = ctx.topics.get(t.topic_name)
                if meta is not None:
                    asked.append((t.topic_name, meta.topic_id, list(t.partitions)))
        topics = []
        for name, tid, ps in asked:

            def end(p: int, name: str = name) -> int:
                plog = ctx.topics.log(name, p)
                return plog.next_offset if plog is not None else 0

            rows = share.start_offsets(g.group_id, tid, ps, end)
            topics.append(DT(topic_name=name, topic_id=uuid.UUID(tid), partitions=[
                DP(partition_index=p, start_offset=start, leader_epoch=0, lag=lag, error_code=0, error_message=None)
                for p, start, lag in rows]))  # fmt: skip
        groups.append(DG(group_id=g.group_id, topics=topics, error_code=0, error_message=None))
    return R(throttle_time_ms=0, groups=groups)
