"""DescribeProducers (61, KIP-664): the producers a partition keeps state for, with each one's open
transaction (what an operator looks at to find a hanging transaction)."""

from __future__ import annotations

from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E
from logbroker.storage import PartitionLog

from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.DescribeProducers)
R = API.response
TR = R.TopicResponse
PR = TR.PartitionResponse
PS = PR.ProducerState


@handles(ApiKey.DescribeProducers, 0, 0)
def handle(ctx: BrokerContext, req: Request) -> R:
    def answer(plog: PartitionLog, index: int) -> PR:
        producers = [
            PS(
                producer_id=pid,
                producer_epoch=e.epoch,
                last_sequence=e.last_seq,
                last_timestamp=e.last_timestamp,
                coordinator_epoch=e.coordinator_epoch,
                current_txn_start_offset=plog.producers.ongoing.get(pid, -1),
            )
            for pid, e in sorted(plog.producers.producers.items())
        ]
        return PR(partition_index=index, error_code=0, error_message=None, active_producers=producers)

    def error(index: int, code: E) -> PR:
        return PR(partition_index=index, error_code=code, error_message=None, active_producers=[])

    topics: list[Any] = []
    for t in req.body.topics:
        rows = []
        for index in t.partition_indexes:
            plog = ctx.get_log(t.name, index)
            rows.append(error(index, E.UNKNOWN_TOPIC_OR_PARTITION) if plog is None else answer(plog, index))
        topics.append(TR(name=t.name, partitions=rows))
    return R(throttle_time_ms=0, topics=topics)
