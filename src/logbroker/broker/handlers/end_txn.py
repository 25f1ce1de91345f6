"""EndTxn (26): commit or abort the producer's transaction; answered once the outcome is durable and the
markers are written (so a read_committed consumer sees a committed transaction as soon as this returns).
Needs WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka).

v5 is transaction version 2 (KIP-890 part 2): the end bumps the producer's epoch and the answer carries the
producer id and epoch to go on with (-1/-1 with an error)."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.EndTxn)
R = API.response


@handles(ApiKey.EndTxn, 0, 5, exclusive=True)  # one connection's requests in order, as Kafka
async def handle(ctx: BrokerContext, req: Request) -> R:
    b = req.body
    if not ctx.access.authorize(req, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, b.transactional_id):
        return R(throttle_time_ms=0, error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if req.version >= 5:
        done = await ctx.txns.end_txn_v2(b.transactional_id, b.producer_id, b.producer_epoch, b.committed)
        return R(throttle_time_ms=0, error_code=done.error, producer_id=done.producer_id, producer_epoch=done.epoch)
    err = await ctx.txns.end_txn(b.transactional_id, b.producer_id, b.producer_epoch, b.committed)
    if err == E.PRODUCER_FENCED and req.version < 2:
        err = E.INVALID_PRODUCER_EPOCH
    return R(throttle_time_ms=0, error_code=err)
