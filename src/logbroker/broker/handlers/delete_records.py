"""DeleteRecords (21): move the log start offset; offset -1 means the high watermark."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.admin import DeleteRecordsResponse

from logbroker.protocol.connection import Request
from logbroker.storage.log import OffsetOutOfRange

from .common import code

if TYPE_CHECKING:
    from logbroker.broker.server import Broker

R = DeleteRecordsResponse
TR = R.DeleteRecordsTopicResult
PR = TR.DeleteRecordsPartitionResult


def handle(broker: Broker, req: Request) -> R:
    topics = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            plog = broker.get_log(t.name, p.partition_index)
            if plog is None:
                parts.append(
                    PR(
                        partition_index=p.partition_index,
                        low_watermark=-1,
                        error_code=code("UNKNOWN_TOPIC_OR_PARTITION"),
                    )
                )
                continue
            try:
                target = plog.next_offset if p.offset == -1 else p.offset
                low = plog.delete_records_before(target)
                parts.append(PR(partition_index=p.partition_index, low_watermark=low, error_code=0))
            except OffsetOutOfRange:
                parts.append(
                    PR(partition_index=p.partition_index, low_watermark=-1, error_code=code("OFFSET_OUT_OF_RANGE"))
                )
        topics.append(TR(name=t.name, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)
