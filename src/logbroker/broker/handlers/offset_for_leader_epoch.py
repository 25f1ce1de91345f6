"""OffsetForLeaderEpoch (23): the single leader epoch 0 ends at the log end offset."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.OffsetForLeaderEpoch)
R = API.response
TR = R.OffsetForLeaderTopicResult
EO = TR.EpochEndOffset


@handles(ApiKey.OffsetForLeaderEpoch, 2, 4)
def handle(ctx: BrokerContext, req: Request) -> R:
    topics = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            plog = ctx.get_log(t.topic, p.partition)
            if plog is None:
                parts.append(
                    EO(
                        error_code=E.UNKNOWN_TOPIC_OR_PARTITION,
                        partition=p.partition,
                        leader_epoch=-1,
                        end_offset=-1,
                    )
                )
            elif p.current_leader_epoch > 0:
                parts.append(
                    EO(error_code=E.UNKNOWN_LEADER_EPOCH, partition=p.partition, leader_epoch=-1, end_offset=-1)
                )
            elif p.leader_epoch < 0:
                parts.append(EO(error_code=0, partition=p.partition, leader_epoch=-1, end_offset=-1))
            else:
                parts.append(EO(error_code=0, partition=p.partition, leader_epoch=0, end_offset=plog.next_offset))
        topics.append(TR(topic=t.topic, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)
