"""ListTransactions (66, KIP-664): transactional ids filtered by state, producer id, how long the
transaction has been open (v1, KIP-994) and an id pattern (v2, KIP-1152: a regular expression that must
match the whole id). With an authorizer only the ids the principal may DESCRIBE are listed (as Kafka)."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.ListTransactions)
R = API.response
TS = R.TransactionState


@handles(ApiKey.ListTransactions, 0, 2)
def handle(ctx: BrokerContext, req: Request) -> R:
    b = req.body
    duration = b.duration_filter if req.version >= 1 else -1
    pattern = b.transactional_id_pattern if req.version >= 2 else None
    err, unknown, found = ctx.txns.list(b.state_filters, b.producer_id_filters, duration, pattern)
    if ctx.access.authorizer is not None:
        shown = ctx.access.authorize_names(
            req, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, (m.transactional_id for m in found)
        )
        found = [m for m in found if m.transactional_id in shown]
    return R(
        throttle_time_ms=0,
        error_code=err,
        unknown_state_filters=unknown,
        transaction_states=[
            TS(transactional_id=m.transactional_id, producer_id=m.producer_id, transaction_state=m.state.value)
            for m in found
        ],
    )
