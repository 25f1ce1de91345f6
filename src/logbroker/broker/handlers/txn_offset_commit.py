"""TxnOffsetCommit (28): a transaction's consumed offsets, pending in the group until the transaction ends.

Kafka's order (KafkaApis.handleTxnOffsetCommitRequest, then CoordinatorRuntime.scheduleTransactionalWriteOperation):
unknown topics and partitions are answered UNKNOWN_TOPIC_OR_PARTITION on their own; the rest share one refusal,
if any: first the transaction's verification (KIP-890 part 1, in every version: the group must have been added
to the producer's open transaction), then the group's KIP-447 member checks. v0-2 carry no member id or
generation: they commit as generation -1, member "". v5 is transaction version 2 (KIP-890 part 2): the
commit adds the group to the producer's transaction itself (no AddOffsetsToTxn), a fenced producer being
INVALID_PRODUCER_EPOCH.

With an authorizer, before all that (KafkaApis): WRITE on the transactional id, then READ on the group, each
refusing every partition (TRANSACTIONAL_ID_ / GROUP_AUTHORIZATION_FAILED); then a topic without READ is
TOPIC_AUTHORIZATION_FAILED for its partitions and kept from the group.
"""

from __future__ import annotations

import time
from typing import Any

from logbroker.broker.groups import Committed
from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext, NoResponse
from ..dispatch import handles

API = api(ApiKey.TxnOffsetCommit)
R = API.response
TR = R.TxnOffsetCommitResponseTopic
PR = TR.TxnOffsetCommitResponsePartition


@handles(ApiKey.TxnOffsetCommit, 0, 5, exclusive=True)  # one connection's requests in order, as Kafka
async def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    b = req.body
    v = req.version
    member_id = b.member_id if v >= 3 else ""
    generation = b.generation_id if v >= 3 else -1
    instance_id = b.group_instance_id if v >= 3 else None
    now = int(time.time() * 1000)
    errors: dict[tuple[str, int], E] = {}
    wanted: dict[tuple[str, int], Committed] = {}
    readable = None
    if ctx.access.authorizer is not None:
        if not ctx.access.authorize(req, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, b.transactional_id):
            return _refused(b, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not ctx.access.authorize(req, AclOperation.READ, ResourceType.GROUP, b.group_id):
            return _refused(b, E.GROUP_AUTHORIZATION_FAILED)
        readable = ctx.access.authorize_names(req, AclOperation.READ, ResourceType.TOPIC, (t.name for t in b.topics))
    for t in b.topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if readable is not None and t.name not in readable:
                errors[tp] = E.TOPIC_AUTHORIZATION_FAILED
            elif ctx.topics.log(t.name, p.partition_index) is None:
                errors[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                epoch = p.committed_leader_epoch if v >= 2 else -1
                # Kafka stores a null metadata as "" and gives transactional offsets no explicit expiry.
                wanted[tp] = Committed(p.committed_offset, epoch, p.committed_metadata or "", now)
    if wanted:
        for tp, err in (await _commit(ctx, req, member_id, generation, instance_id, wanted)).items():
            errors[tp] = err
    topics = []
    for t in b.topics:
        parts = [
            PR(partition_index=p.partition_index, error_code=int(errors[(t.name, p.partition_index)]))
            for p in t.partitions
        ]
        topics.append(TR(name=t.name, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)


def _refused(b: Any, error: E) -> R:
    """Kafka's TxnOffsetCommitRequest.getErrorResponse: `error` for every partition."""
    return R(throttle_time_ms=0, topics=[
        TR(name=t.name, partitions=[PR(partition_index=p.partition_index, error_code=int(error)) for p in t.partitions])
        for t in b.topics
    ])  # fmt: skip


async def _commit(
    ctx: BrokerContext,
    req: Request,
    member_id: str,
    generation: int,
    instance_id: str | None,
    wanted: dict[tuple[str, int], Committed],
) -> dict[tuple[str, int], E]:
    b = req.body
    if req.version >= 5:
        err = await ctx.txns.add_partitions(
            b.transactional_id, b.producer_id, b.producer_epoch, set(), {b.group_id}, tv=2
        )
        if err != E.NONE:
            return dict.fromkeys(wanted, E.INVALID_PRODUCER_EPOCH if err == E.PRODUCER_FENCED else err)
    err = ctx.txns.check_offset_commit(b.transactional_id, b.producer_id, b.producer_epoch, b.group_id)
    if err != E.NONE:
        return dict.fromkeys(wanted, err)
    try:
        return await ctx.groups.txn_commit(
            b.group_id,
            b.producer_id,
            b.producer_epoch,
            member_id,
            generation,
            instance_id,
            wanted,
            req.version,
        )
    except OSError:
        # Kafka answers a coordinator write that failed on storage with NOT_COORDINATOR: producers look the
        # coordinator up again and retry (KAFKA_STORAGE_ERROR would be fatal to them).
        return dict.fromkeys(wanted, E.NOT_COORDINATOR)
