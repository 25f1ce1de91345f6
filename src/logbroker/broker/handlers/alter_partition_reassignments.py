"""AlterPartitionReassignments (45): one node has one place for a replica. Answered per partition as Kafka's
controller answers a one-node KRaft cluster (ReplicationControlManager.alterPartitionReassignment, checks in
its order): an unknown topic UNKNOWN_TOPIC_OR_PARTITION "Unable to find a topic named x.", an unknown
partition "Unable to find partition t:7."; a cancel (null replicas) NO_REASSIGNMENT_IN_PROGRESS (no message:
Kafka drops a default one); an empty list, a broker other than this one (the smallest such id first) or a
broker named twice INVALID_REPLICA_ASSIGNMENT with Kafka's words; [this broker] changes nothing and succeeds.
The top level is always NONE (its message null, "" for a request with no topics); v1 echoes
allow_replication_factor_change. Needs ALTER on the cluster: without it every partition and the top level
carry CLUSTER_AUTHORIZATION_FAILED with the refusal's message.
"""

from __future__ import annotations

from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation
from ..auth.checks import cluster_denial
from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.AlterPartitionReassignments)
R = API.response
TR = R.ReassignableTopicResponse
PR = TR.ReassignablePartitionResponse

NO_REASSIGNMENT_IN_PROGRESS = 85
_ASSIGNMENT = "The manual partition assignment includes"


def _answer(req: Request, code: int, message: str | None, topics: list[Any]) -> R:
    allow = req.body.allow_replication_factor_change if req.version >= 1 else True
    return R(throttle_time_ms=0, allow_replication_factor_change=allow, error_code=code, error_message=message,
             responses=topics)  # fmt: skip


def _refusal(node: int, replicas: list[int]) -> tuple[int, str | None]:
    """validateManualPartitionAssignment on a cluster of one broker: ids are looked at in ascending order."""
    if not replicas:
        return E.INVALID_REPLICA_ASSIGNMENT, f"{_ASSIGNMENT} an empty replica list."
    seen: set[int] = set()
    for r in sorted(replicas):
        if r != node:
            return E.INVALID_REPLICA_ASSIGNMENT, f"{_ASSIGNMENT} broker {r}, but no such broker is registered."
        if r in seen:
            return E.INVALID_REPLICA_ASSIGNMENT, f"{_ASSIGNMENT} the broker {r} more than once."
        seen.add(r)
    return E.NONE, None


@handles(ApiKey.AlterPartitionReassignments, 0, 1)
def handle(ctx: BrokerContext, req: Request) -> R:
    b = req.body
    if (denied := cluster_denial(ctx, req, AclOperation.ALTER)) is not None:
        code = E.CLUSTER_AUTHORIZATION_FAILED
        return _answer(req, code, denied, [
            TR(name=t.name, partitions=[PR(partition_index=p.partition_index, error_code=code, error_message=denied)
                                        for p in t.partitions]) for t in b.topics])  # fmt: skip
    if not b.topics:
        return _answer(req, E.NONE, "", [])
    topics = []
    for t in b.topics:
        meta = ctx.topics.get(t.name)
        parts = []
        for p in t.partitions:
            i = p.partition_index
            if meta is None:
                code, message = E.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {t.name}."
            elif not 0 <= i < meta.partitions:
                code, message = E.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {t.name}:{i}."
            elif p.replicas is None:
                code, message = NO_REASSIGNMENT_IN_PROGRESS, None
            else:
                code, message = _refusal(ctx.node_id, list(p.replicas))
            parts.append(PR(partition_index=i, error_code=code, error_message=message))
        topics.append(TR(name=t.name, partitions=parts))
    return _answer(req, E.NONE, None, topics)
