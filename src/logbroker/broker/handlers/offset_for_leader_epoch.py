"""OffsetForLeaderEpoch (23): the single leader epoch 0 ends at the log end offset."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.consumer import OffsetForLeaderEpochResponse

from logbroker.protocol.connection import Request

from .common import code

if TYPE_CHECKING:
    from logbroker.broker.server import Broker

R = OffsetForLeaderEpochResponse
TR = R.OffsetForLeaderTopicResult
EO = TR.EpochEndOffset


def handle(broker: Broker, req: Request) -> R:
    topics = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            plog = broker.get_log(t.topic, p.partition)
            if plog is None:
                parts.append(
                    EO(
                        error_code=code("UNKNOWN_TOPIC_OR_PARTITION"),
                        partition=p.partition,
                        leader_epoch=-1,
                        end_offset=-1,
                    )
                )
            elif p.current_leader_epoch > 0:
                parts.append(
                    EO(error_code=code("UNKNOWN_LEADER_EPOCH"), partition=p.partition, leader_epoch=-1, end_offset=-1)
                )
            elif p.leader_epoch < 0:
                parts.append(EO(error_code=0, partition=p.partition, leader_epoch=-1, end_offset=-1))
            else:
                parts.append(EO(error_code=0, partition=p.partition, leader_epoch=0, end_offset=plog.next_offset))
        topics.append(TR(topic=t.topic, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)
