"""DescribeCluster (60): one ctx, which is also the controller.

Kafka refuses no one here (AuthHelper.computeDescribeClusterResponse): asked for the cluster's authorized
operations, a principal without DESCRIBE on the cluster gets none, one with it gets every cluster operation
it may do; not asked, the field keeps its default."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api

from ..auth.acls import CLUSTER_NAME, AclOperation, ResourceType
from ..auth.checks import authorized_operations
from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.DescribeCluster)
R = API.response


# Not in ErrorCode (no other API uses them); Kafka's codes since KIP-919.
MISMATCHED_ENDPOINT_TYPE = 114
UNSUPPORTED_ENDPOINT_TYPE = 115
BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2


@handles(ApiKey.DescribeCluster, 0, 2)
def handle(ctx: BrokerContext, req: Request) -> R:
    endpoint = req.body.endpoint_type if req.version >= 1 else BROKER_ENDPOINT
    if endpoint != BROKER_ENDPOINT:
        # As Kafka's broker listener: a controller request is sent to the wrong kind of endpoint, any other
        # type is unknown; the answer then carries no cluster (empty id, no controller, no brokers).
        if endpoint == CONTROLLER_ENDPOINT:
            code, message = MISMATCHED_ENDPOINT_TYPE, "this is a broker endpoint; controllers are not served here"
        else:
            code, message = UNSUPPORTED_ENDPOINT_TYPE, f"endpoint type {endpoint} is not supported"
        return R(
            throttle_time_ms=0,
            error_code=code,
            error_message=message,
            endpoint_type=BROKER_ENDPOINT,
            cluster_id="",
            controller_id=-1,
            brokers=[],
            authorized_operations=None,
        )
    ops: frozenset[int] | None = None
    if req.body.include_cluster_authorized_operations:
        ops = frozenset()
        if ctx.access.authorize(req, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            ops = authorized_operations(ctx, req, ResourceType.CLUSTER, CLUSTER_NAME)
    return R(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=BROKER_ENDPOINT,
        cluster_id=ctx.cluster_id,
        controller_id=ctx.node_id,
        brokers=[
            R.DescribeClusterBroker(
                broker_id=ctx.node_id,
                host=ctx.endpoint(req.listener)[0],
                port=ctx.endpoint(req.listener)[1],
                rack=None,
                is_fenced=False,
            )
        ],
        authorized_operations=ops,
    )
