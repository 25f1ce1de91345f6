"""AddPartitionsToTxn (24): partitions join the producer's transaction.

As Kafka: a partition the broker does not have fails the request (UNKNOWN_TOPIC_OR_PARTITION for it,
OPERATION_NOT_ATTEMPTED for the others); otherwise the coordinator's answer goes to every partition.

v4-5 is the broker-to-broker form (a partition leader adding or verifying a produce's partition for many
transactions at once; transaction version 2). One node has no other broker, but Kafka serves it to any
principal with CLUSTER_ACTION on the cluster (else CLUSTER_AUTHORIZATION_FAILED at the top, no results), so
does this broker: each transaction is added (as Produce v12 adds it) or, VerifyOnly, checked; a partition not
in the open transaction is TRANSACTION_ABORTABLE (in v4 too: the calling leader translates it for old clients).

With an authorizer (Kafka's KafkaApis): without WRITE on the transactional id every partition is answered
TRANSACTIONAL_ID_AUTHORIZATION_FAILED; a topic without WRITE (an internal one never has it) fails the request
like a missing partition, with TOPIC_AUTHORIZATION_FAILED for its partitions.
Kafka's internal topics (__consumer_offsets...) are refused that way even without an authorizer.
"""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..auth.checks import KAFKA_INTERNAL_TOPICS, cluster_allows
from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.AddPartitionsToTxn)
R = API.response
TR = R.AddPartitionsToTxnTopicResult
PR = TR.AddPartitionsToTxnPartitionResult


@handles(ApiKey.AddPartitionsToTxn, 0, 5, exclusive=True)  # one connection's requests in order, as Kafka
async def handle(ctx: BrokerContext, req: Request) -> R:
    b = req.body
    if req.version >= 4:
        return await _broker_form(ctx, req)
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


async def _broker_form(ctx: BrokerContext, req: Request) -> R:
    if not cluster_allows(ctx, req, AclOperation.CLUSTER_ACTION):
        return R(throttle_time_ms=0, error_code=E.CLUSTER_AUTHORIZATION_FAILED, results_by_transaction=[])
    results = []
    for txn in req.body.transactions:
        wanted: dict[str, list[int]] = {}
        for t in txn.topics:
            wanted.setdefault(t.name, []).extend(t.partitions)
        parts = {(t, p) for t, ps in wanted.items() for p in ps}
        missing = {tp for tp in parts if ctx.topics.log(*tp) is None}
        if missing:
            errors = {tp: E.UNKNOWN_TOPIC_OR_PARTITION if tp in missing else E.OPERATION_NOT_ATTEMPTED for tp in parts}
        elif txn.verify_only:
            errors = ctx.txns.verify_partitions(txn.transactional_id, txn.producer_id, txn.producer_epoch, parts)
        else:
            err = await ctx.txns.add_partitions(txn.transactional_id, txn.producer_id, txn.producer_epoch, parts, tv=2)
            errors = dict.fromkeys(parts, err)
        topic_results = _answer(wanted, errors).results_by_topic_v3_and_below
        results.append(R.AddPartitionsToTxnResult(transactional_id=txn.transactional_id, topic_results=topic_results))
    return R(throttle_time_ms=0, error_code=0, results_by_transaction=results)
