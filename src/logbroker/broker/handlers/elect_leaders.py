"""ElectLeaders (43): on one node every partition already has its preferred (and only) replica as leader,
so each named partition is answered ELECTION_NOT_NEEDED, as Kafka's controller answers a one-node KRaft
cluster (ReplicationControlManager.electLeaders): the code with its default message, and the top-level code
0. An unknown topic is UNKNOWN_TOPIC_OR_PARTITION "No such topic as x", an unknown partition "No such
partition as t-7"; a null list means every topic (internal ones too), each listed with no partitions
(partitions needing no election are left out); an empty list is answered empty; an unknown election type
fails every partition and the top level with INVALID_REQUEST. Needs ALTER on the cluster: without it every
named partition and the top level carry CLUSTER_AUTHORIZATION_FAILED (ElectLeadersRequest.getErrorResponse).
v0 has no election type (preferred) and no top-level code.
"""

from __future__ import annotations

from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation
from ..auth.checks import cluster_denial
from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.ElectLeaders)
R = API.response
Result = R.ReplicaElectionResult
PR = Result.PartitionResult

ELECTION_NOT_NEEDED = 84
PREFERRED, UNCLEAN = 0, 1
NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."


def _all(topics: Any, code: int, message: str | None) -> R:
    return R(
        throttle_time_ms=0,
        error_code=code,
        replica_election_results=[
            Result(topic=t.topic, partition_result=[PR(partition_id=p, error_code=code, error_message=message)
                                                    for p in t.partitions])
            for t in topics or ()
        ],
    )  # fmt: skip


@handles(ApiKey.ElectLeaders, 0, 2)
def handle(ctx: BrokerContext, req: Request) -> R:
    b = req.body
    if (denied := cluster_denial(ctx, req, AclOperation.ALTER)) is not None:
        return _all(b.topic_partitions, E.CLUSTER_AUTHORIZATION_FAILED, denied)
    election = b.election_type if req.version >= 1 else PREFERRED
    if election not in (PREFERRED, UNCLEAN):
        return _all(b.topic_partitions, E.INVALID_REQUEST, f"Unknown election type {election}")
    if b.topic_partitions is None:
        every = [Result(topic=m.name, partition_result=[]) for m in ctx.topics.all()]
        return R(throttle_time_ms=0, error_code=0, replica_election_results=every)
    results = []
    for t in b.topic_partitions:
        meta = ctx.topics.get(t.topic)
        parts = []
        for p in t.partitions:
            if meta is None:
                parts.append(PR(partition_id=p, error_code=E.UNKNOWN_TOPIC_OR_PARTITION,
                                error_message=f"No such topic as {t.topic}"))  # fmt: skip
            elif not 0 <= p < meta.partitions:
                parts.append(PR(partition_id=p, error_code=E.UNKNOWN_TOPIC_OR_PARTITION,
                                error_message=f"No such partition as {t.topic}-{p}"))  # fmt: skip
            else:
                parts.append(PR(partition_id=p, error_code=ELECTION_NOT_NEEDED, error_message=NOT_NEEDED_MESSAGE))
        results.append(Result(topic=t.topic, partition_result=parts))
    return R(throttle_time_ms=0, error_code=0, replica_election_results=results)
