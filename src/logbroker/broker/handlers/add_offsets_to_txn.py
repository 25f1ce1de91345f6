"""AddOffsetsToTxn (25): a consumer group joins the producer's transaction, so that its TxnOffsetCommit
offsets are committed or dropped with the transaction's end."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.AddOffsetsToTxn)
R = API.response


@handles(ApiKey.AddOffsetsToTxn, 0, 4, exclusive=True)  # one connection's requests in order, as Kafka
async def handle(ctx: BrokerContext, req: Request) -> R:
    b = req.body
    err = await ctx.txns.add_partitions(b.transactional_id, b.producer_id, b.producer_epoch, set(), {b.group_id})
    if err == E.PRODUCER_FENCED and req.version < 2:
        err = E.INVALID_PRODUCER_EPOCH
    return R(throttle_time_ms=0, error_code=err)
