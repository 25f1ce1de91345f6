"""ListOffsets (2): earliest (-2), latest (-1), max timestamp (-3), earliest local (-4), by timestamp."""

from __future__ import annotations

from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E
from logbroker.storage import PartitionLog

from ..context import BrokerContext
from ..dispatch import handles
from ._partitions import by_partition

API = api(ApiKey.ListOffsets)
R = API.response
TR = R.ListOffsetsTopicResponse
PR = TR.ListOffsetsPartitionResponse

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5


@handles(ApiKey.ListOffsets, 1, 8)
def handle(ctx: BrokerContext, req: Request) -> R:
    def answer(plog: PartitionLog, p: Any) -> Any:
        if req.version >= 4 and p.current_leader_epoch > 0:
            return error(p, E.UNKNOWN_LEADER_EPOCH)
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
            return error(p, E.INVALID_REQUEST)
        leader_epoch = 0 if offset >= 0 else -1
        return PR(partition_index=p.partition_index, error_code=0, timestamp=stamp, offset=offset,
                  leader_epoch=leader_epoch)  # fmt: skip

    def error(p: Any, code: E) -> Any:
        return PR(partition_index=p.partition_index, error_code=code, timestamp=-1, offset=-1, leader_epoch=-1)

    rows = by_partition(ctx, req.body.topics, answer, error)
    return R(throttle_time_ms=0, topics=[TR(name=name, partitions=parts) for name, parts in rows])
