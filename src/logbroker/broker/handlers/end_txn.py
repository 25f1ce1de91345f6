"""EndTxn (26): commit or abort the producer's transaction; answered once the outcome is durable and the
markers are written (so a read_committed consumer sees a committed transaction as soon as this returns).
Needs WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka)."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.EndTxn)
R = API.response


@handles(ApiKey.EndTxn, 0, 4, exclusive=True)  # one connection's requests in order, as Kafka
async def handle(ctx: BrokerContext, req: Request) -> R:
    b = req.body
    if not ctx.access.authorize(req, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, b.transactional_id):
        return R(throttle_time_ms=0, error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    err = await ctx.txns.end_txn(b.transactional_id, b.producer_id, b.producer_epoch, b.committed)
    if err == E.PRODUCER_FENCED and req.version < 2:
        err = E.INVALID_PRODUCER_EPOCH
    return R(throttle_time_ms=0, error_code=err)
