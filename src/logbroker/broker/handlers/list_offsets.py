"""ListOffsets (2): earliest (-2), latest (-1), max timestamp (-3), earliest local (-4), by timestamp."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.ListOffsets)
R = API.response
TR = R.ListOffsetsTopicResponse
PR = TR.ListOffsetsPartitionResponse

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5


@handles(ApiKey.ListOffsets, 1, 8)
def handle(ctx: BrokerContext, req: Request) -> R:
    topics = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            plog = ctx.get_log(t.name, p.partition_index)
            if plog is None:
                parts.append(
                    PR(
                        partition_index=p.partition_index,
                        error_code=E.UNKNOWN_TOPIC_OR_PARTITION,
                        timestamp=-1,
                        offset=-1,
                        leader_epoch=-1,
                    )
                )
                continue
            if req.version >= 4 and p.current_leader_epoch > 0:
                parts.append(
                    PR(
                        partition_index=p.partition_index,
                        error_code=E.UNKNOWN_LEADER_EPOCH,
                        timestamp=-1,
                        offset=-1,
                        leader_epoch=-1,
                    )
                )
                continue
            ts = p.timestamp
            offset, stamp = -1, -1
            if ts in (LATEST, LATEST_TIERED):
                offset = plog.next_offset
            elif ts in (EARLIEST, EARLIEST_LOCAL):
                offset = plog.log_start_offset
            elif ts == MAX_TIMESTAMP:
                offset, stamp = plog.max_timestamp()
            elif ts >= 0:
                found = plog.offset_for_timestamp(ts)
                if found is not None:
                    offset, stamp = found
            else:
                parts.append(
                    PR(
                        partition_index=p.partition_index,
                        error_code=E.INVALID_REQUEST,
                        timestamp=-1,
                        offset=-1,
                        leader_epoch=-1,
                    )
                )
                continue
            parts.append(
                PR(
                    partition_index=p.partition_index,
                    error_code=0,
                    timestamp=stamp,
                    offset=offset,
                    leader_epoch=0 if offset >= 0 else -1,
                )
            )
        topics.append(TR(name=t.name, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)
