"""OffsetForLeaderEpoch (23): the single leader epoch 0 ends at the log end offset."""

from __future__ import annotations

from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E
from logbroker.storage import PartitionLog

from ..context import BrokerContext
from ..dispatch import handles
from ._partitions import by_partition

API = api(ApiKey.OffsetForLeaderEpoch)
R = API.response
TR = R.OffsetForLeaderTopicResult
EO = TR.EpochEndOffset


@handles(ApiKey.OffsetForLeaderEpoch, 2, 4)
def handle(ctx: BrokerContext, req: Request) -> R:
    def answer(plog: PartitionLog, p: Any) -> Any:
        if p.current_leader_epoch > 0:
            return error(p, E.UNKNOWN_LEADER_EPOCH)
        if p.leader_epoch < 0:
            return EO(error_code=0, partition=p.partition, leader_epoch=-1, end_offset=-1)
        return EO(error_code=0, partition=p.partition, leader_epoch=0, end_offset=plog.next_offset)

    def error(p: Any, code: E) -> Any:
        return EO(error_code=code, partition=p.partition, leader_epoch=-1, end_offset=-1)

    rows = by_partition(ctx, req.body.topics, answer, error, topic_field="topic", partition_field="partition")
    return R(throttle_time_ms=0, topics=[TR(topic=name, partitions=parts) for name, parts in rows])
