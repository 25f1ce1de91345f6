"""DescribeTransactions (65, KIP-664): each transactional id's state, producer, timeout and partitions.

With an authorizer (as Kafka): an id without DESCRIBE is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
and a described transaction lists only the topics the principal may DESCRIBE."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.DescribeTransactions)
R = API.response
TS = R.TransactionState
TD = TS.TopicData


@handles(ApiKey.DescribeTransactions, 0, 0)
def handle(ctx: BrokerContext, req: Request) -> R:
    out = []
    for tid in req.body.transactional_ids:
        if ctx.access.authorize(req, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            err, meta = ctx.txns.describe(tid)
        else:
            err, meta = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
        if meta is None:
            out.append(
                TS(
                    error_code=err,
                    transactional_id=tid,
                    transaction_state="",
                    transaction_timeout_ms=0,
                    transaction_start_time_ms=0,
                    producer_id=0,
                    producer_epoch=0,
                    topics=[],
                )
            )
            continue
        topics: dict[str, list[int]] = {}
        for t, p in sorted(meta.partitions):
            topics.setdefault(t, []).append(p)
        if ctx.access.authorizer is not None:
            shown = ctx.access.authorize_names(req, AclOperation.DESCRIBE, ResourceType.TOPIC, topics)
            topics = {t: ps for t, ps in topics.items() if t in shown}
        out.append(
            TS(
                error_code=err,
                transactional_id=tid,
                transaction_state=meta.state.value,
                transaction_timeout_ms=meta.timeout_ms,
                transaction_start_time_ms=meta.start_ms,
                producer_id=meta.producer_id,
                producer_epoch=meta.epoch,
                topics=[TD(topic=t, partitions=ps) for t, ps in topics.items()],
            )
        )
    return R(throttle_time_ms=0, transaction_states=out)
