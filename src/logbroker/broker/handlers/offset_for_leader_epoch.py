"""OffsetForLeaderEpoch (23): the single leader epoch 0 ends at the log end offset; older epochs end where
the log starts, newer ones are unknown, as Kafka's leader-epoch cache answers.

With an authorizer: CLUSTER_ACTION on the cluster (a follower's right) answers every topic; otherwise a
topic needs DESCRIBE, and those refused are answered TOPIC_AUTHORIZATION_FAILED after the others (KIP-320)."""

from __future__ import annotations

from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import CLUSTER_NAME, AclOperation, ResourceType
from ..context import BrokerContext
from ..dispatch import handles
from ..seams import PartitionLog
from ._partitions import LEADER_EPOCH, NO_EPOCH, by_partition, leader_epoch_error

API = api(ApiKey.OffsetForLeaderEpoch)
R = API.response
TR = R.OffsetForLeaderTopicResult
EO = TR.EpochEndOffset


@handles(ApiKey.OffsetForLeaderEpoch, 0, 4, kafka4_min=2)
def handle(ctx: BrokerContext, req: Request) -> R:
    def answer(plog: PartitionLog, p: Any) -> Any:
        code = leader_epoch_error(p.current_leader_epoch)
        if code is not None:
            return error(p, code)
        wanted = p.leader_epoch
        if wanted == LEADER_EPOCH:
            return EO(error_code=0, partition=p.partition, leader_epoch=LEADER_EPOCH, end_offset=plog.next_offset)
        if wanted < NO_EPOCH:
            # Older than the first epoch the log knows: Kafka answers that epoch, ending where the log starts.
            return EO(error_code=0, partition=p.partition, leader_epoch=wanted, end_offset=plog.log_start_offset)
        return EO(error_code=0, partition=p.partition, leader_epoch=-1, end_offset=-1)  # -1, or not yet seen

    def error(p: Any, code: E) -> Any:
        return EO(error_code=code, partition=p.partition, leader_epoch=-1, end_offset=-1)

    topics = req.body.topics
    refused: list[Any] = []
    if ctx.access.authorizer is not None and not ctx.access.authorize(
        req, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
    ):
        allowed = ctx.access.authorize_names(req, AclOperation.DESCRIBE, ResourceType.TOPIC, {t.topic for t in topics})
        refused = [
            TR(topic=t.topic, partitions=[error(p, E.TOPIC_AUTHORIZATION_FAILED) for p in t.partitions])
            for t in topics
            if t.topic not in allowed
        ]
        topics = [t for t in topics if t.topic in allowed]
    rows = by_partition(ctx, topics, answer, error, topic_field="topic", partition_field="partition")
    return R(throttle_time_ms=0, topics=[TR(topic=name, partitions=parts) for name, parts in rows] + refused)
