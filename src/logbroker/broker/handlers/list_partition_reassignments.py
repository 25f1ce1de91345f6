"""ListPartitionReassignments (46): nothing is ever being reassigned on one node, so the answer lists no
topic, whatever was asked (Kafka leaves out unknown topics and partitions not moving, without an error).
Needs DESCRIBE on the cluster: without it the top level is CLUSTER_AUTHORIZATION_FAILED with the refusal's
message, and the named topics come back with their partitions and no replicas
(ListPartitionReassignmentsRequest.getErrorResponse).
"""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation
from ..auth.checks import cluster_denial
from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.ListPartitionReassignments)
R = API.response
TR = R.OngoingTopicReassignment
PR = TR.OngoingPartitionReassignment


@handles(ApiKey.ListPartitionReassignments, 0, 0)
def handle(ctx: BrokerContext, req: Request) -> R:
    if (denied := cluster_denial(ctx, req, AclOperation.DESCRIBE)) is not None:
        topics = [
            TR(name=t.name, partitions=[PR(partition_index=i, replicas=[], adding_replicas=[], removing_replicas=[])
                                        for i in t.partition_indexes])
            for t in req.body.topics or ()
        ]  # fmt: skip
        return R(throttle_time_ms=0, error_code=E.CLUSTER_AUTHORIZATION_FAILED, error_message=denied, topics=topics)
    return R(throttle_time_ms=0, error_code=E.NONE, error_message=None, topics=[])
