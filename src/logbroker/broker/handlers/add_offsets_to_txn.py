"""AddOffsetsToTxn (25): a consumer group joins the producer's transaction, so that its TxnOffsetCommit
offsets are committed or dropped with the transaction's end. As Kafka, needs WRITE on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then READ on the group (GROUP_AUTHORIZATION_FAILED)."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.AddOffsetsToTxn)
R = API.response


@handles(ApiKey.AddOffsetsToTxn, 0, 4, exclusive=True)  # one connection's requests in order, as Kafka
async def handle(ctx: BrokerContext, req: Request) -> R:
    b = req.body
    if not ctx.access.authorize(req, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, b.transactional_id):
        return R(throttle_time_ms=0, error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.access.authorize(req, AclOperation.READ, ResourceType.GROUP, b.group_id):
        return R(throttle_time_ms=0, error_code=E.GROUP_AUTHORIZATION_FAILED)
    err = await ctx.txns.add_partitions(b.transactional_id, b.producer_id, b.producer_epoch, set(), {b.group_id})
    if err == E.PRODUCER_FENCED and req.version < 2:
        err = E.INVALID_PRODUCER_EPOCH
    return R(throttle_time_ms=0, error_code=err)
