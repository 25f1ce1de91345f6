"""InitProducerId (22): producer ids for idempotent producers (with KIP-360's epoch bump), and for
transactional ids through the transaction coordinator (fencing the id's older producer).

With an authorizer, first of all (Kafka's KafkaApis): a transactional id needs WRITE on it
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE
on some topic (CLUSTER_AUTHORIZATION_FAILED). Either refusal carries no producer id (-1, epoch -1)."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..auth.checks import cluster_allows
from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.InitProducerId)
R = API.response
MAX_EPOCH = 32767


def _answer(error: E, producer_id: int = -1, epoch: int = -1) -> R:
    return R(throttle_time_ms=0, error_code=error, producer_id=producer_id, producer_epoch=epoch)


@handles(ApiKey.InitProducerId, 0, 5, exclusive=True)  # one connection's requests in order, as Kafka
async def handle(ctx: BrokerContext, req: Request) -> R:
    body = req.body
    v = req.version
    if ctx.access.authorizer is not None:
        tid = body.transactional_id
        if tid is not None and not ctx.access.authorize(req, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
            return _answer(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if tid is None and not (
            cluster_allows(ctx, req, AclOperation.IDEMPOTENT_WRITE)
            or ctx.access.authorize_any(req, AclOperation.WRITE, ResourceType.TOPIC)
        ):
            return _answer(E.CLUSTER_AUTHORIZATION_FAILED)
    pid, epoch = (body.producer_id, body.producer_epoch) if v >= 3 else (-1, -1)
    if (pid == -1) != (epoch == -1):
        return _answer(E.INVALID_REQUEST)  # Kafka: an id without an epoch (or the reverse) is malformed
    if body.transactional_id is None:
        if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
            return _answer(E.NONE, pid, epoch + 1)
        return _answer(E.NONE, ctx.producer_ids.next_id(), 0)
    result = await ctx.txns.init_producer_id(body.transactional_id, body.transaction_timeout_ms, pid, epoch)
    error = result.error
    if error == E.PRODUCER_FENCED and v < 4:
        error = E.INVALID_PRODUCER_EPOCH  # older clients know only this one
    return _answer(error, result.producer_id, result.epoch)
