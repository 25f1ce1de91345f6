"""OffsetCommit (8): validated against the group's generation, durable before the answer."""

from __future__ import annotations

import time

from logbroker.broker.groups import Committed
from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.OffsetCommit)
R = API.response
TR = R.OffsetCommitResponseTopic
PR = TR.OffsetCommitResponsePartition


@handles(ApiKey.OffsetCommit, 0, 9)
async def handle(ctx: BrokerContext, req: Request) -> R:
    b = req.body
    v = req.version
    coord = ctx.groups
    group_err = coord.check_commit(
        b.group_id,
        b.member_id if v >= 1 else "",
        b.generation_id_or_member_epoch if v >= 1 else -1,
        b.group_instance_id if v >= 7 else None,
    )
    now = int(time.time() * 1000)
    accepted: dict[tuple[str, int], Committed] = {}
    topics = []
    for t in b.topics:
        parts = []
        for p in t.partitions:
            err = group_err
            if err == E.NONE:
                if ctx.get_log(t.name, p.partition_index) is None:
                    err = E.UNKNOWN_TOPIC_OR_PARTITION
                elif p.committed_metadata is not None and (
                    len(p.committed_metadata.encode()) > coord.config.offset_metadata_max_bytes
                ):
                    err = E.OFFSET_METADATA_TOO_LARGE
                else:
                    epoch = p.committed_leader_epoch if v >= 6 else -1
                    accepted[(t.name, p.partition_index)] = Committed(
                        p.committed_offset, epoch, p.committed_metadata, now
                    )
            parts.append(PR(partition_index=p.partition_index, error_code=int(err)))
        topics.append(TR(name=t.name, partitions=parts))
    if accepted:
        try:
            await coord.commit(b.group_id, accepted)
        except OSError:
            for tr in topics:
                for pr in tr.partitions:
                    if pr.error_code == 0:
                        pr.error_code = int(E.KAFKA_STORAGE_ERROR)
    return R(throttle_time_ms=0, topics=topics)
