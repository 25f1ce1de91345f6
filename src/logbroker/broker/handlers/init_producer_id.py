"""InitProducerId (22): ids for idempotent producers; an epoch bump for KIP-360 recovery.

Transactions are not offered: a transactional id gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which
clients report as a clear, fatal error instead of retrying forever.
"""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.InitProducerId)
R = API.response
MAX_EPOCH = 32767


@handles(ApiKey.InitProducerId, 0, 4)
def handle(ctx: BrokerContext, req: Request) -> R:
    body = req.body
    if body.transactional_id is not None:
        return R(
            throttle_time_ms=0,
            error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            producer_id=-1,
            producer_epoch=-1,
        )
    if req.version >= 3 and body.producer_id >= 0 and 0 <= body.producer_epoch < MAX_EPOCH - 1:
        return R(throttle_time_ms=0, error_code=0, producer_id=body.producer_id, producer_epoch=body.producer_epoch + 1)
    return R(throttle_time_ms=0, error_code=0, producer_id=ctx.producer_ids.next_id(), producer_epoch=0)
