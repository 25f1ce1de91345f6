"""AddPartitionsToTxn (24), the client form (v0-3): partitions join the producer's transaction.

As Kafka: a partition the broker does not have fails the request (UNKNOWN_TOPIC_OR_PARTITION for it,
OPERATION_NOT_ATTEMPTED for the others); otherwise the coordinator's answer goes to every partition. The
broker-to-broker form (v4+, batched and verify-only) is not served: there is no other broker.

With an authorizer (Kafka's KafkaApis): without WRITE on the transactional id every partition is answered
TRANSACTIONAL_ID_AUTHORIZATION_FAILED; a topic without WRITE (an internal one never has it) fails the request
like a missing partition, with TOPIC_AUTHORIZATION_FAILED for its partitions.
Kafka's internal topics (__consumer_offsets...) are refused that way even without an authorizer.
"""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..auth.checks import KAFKA_INTERNAL_TOPICS
from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.AddPartitionsToTxn)
R = API.response
TR = R.AddPartitionsToTxnTopicResult
PR = TR.AddPartitionsToTxnPartitionResult


@handles(ApiKey.AddPartitionsToTxn, 0, 3, exclusive=True)  # one connection's requests in order, as Kafka
async def handle(ctx: BrokerContext, req: Request) -> R:
    b = req.body
    wanted: dict[str, list[int]] = {}
    for t in b.v3_and_below_topics:
        wanted.setdefault(t.name, []).extend(t.partitions)
    tid = b.v3_and_below_transactional_id
    if not ctx.access.authorize(req, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        denied = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return _answer(wanted, {(t, p): denied for t, ps in wanted.items() for p in ps})
    # Kafka's internal topics are never writable by a client, with or without an authorizer.
    writable = ctx.access.authorize_names(
        req, AclOperation.WRITE, ResourceType.TOPIC, [t for t in wanted if t not in KAFKA_INTERNAL_TOPICS]
    )
    failed = {(t, p): E.TOPIC_AUTHORIZATION_FAILED for t, ps in wanted.items() if t not in writable for p in ps}
    for t, ps in wanted.items():
        for p in ps:
            if (t, p) not in failed and ctx.topics.log(t, p) is None:
                failed[(t, p)] = E.UNKNOWN_TOPIC_OR_PARTITION
    if failed:
        errors = {(t, p): failed.get((t, p), E.OPERATION_NOT_ATTEMPTED) for t, ps in wanted.items() for p in ps}
    else:
        parts = {(t, p) for t, ps in wanted.items() for p in ps}
        err = await ctx.txns.add_partitions(tid, b.v3_and_below_producer_id, b.v3_and_below_producer_epoch, parts)
        if err == E.PRODUCER_FENCED and req.version < 2:
            err = E.INVALID_PRODUCER_EPOCH
        errors = dict.fromkeys(parts, err)
    return _answer(wanted, errors)


def _answer(wanted: dict[str, list[int]], errors: dict[tuple[str, int], E]) -> R:
    return R(
        throttle_time_ms=0,
        results_by_topic_v3_and_below=[
            TR(
                name=t,
                results_by_partition=[
                    PR(partition_index=p, partition_error_code=errors[(t, p)]) for p in dict.fromkeys(ps)
                ],
            )
            for t, ps in wanted.items()
        ],
    )
