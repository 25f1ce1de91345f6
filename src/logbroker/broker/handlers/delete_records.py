"""DeleteRecords (21): move the log start offset; offset -1 means the high watermark."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E
from logbroker.storage.log import OffsetOutOfRange

from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.DeleteRecords)
R = API.response
TR = R.DeleteRecordsTopicResult
PR = TR.DeleteRecordsPartitionResult


@handles(ApiKey.DeleteRecords, 0, 2)
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
                        low_watermark=-1,
                        error_code=E.UNKNOWN_TOPIC_OR_PARTITION,
                    )
                )
                continue
            try:
                target = plog.next_offset if p.offset == -1 else p.offset
                low = plog.delete_records_before(target)
                parts.append(PR(partition_index=p.partition_index, low_watermark=low, error_code=0))
            except OffsetOutOfRange:
                parts.append(
                    PR(partition_index=p.partition_index, low_watermark=-1, error_code=E.OFFSET_OUT_OF_RANGE)
                )
        topics.append(TR(name=t.name, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)
