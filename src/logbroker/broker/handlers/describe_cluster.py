"""DescribeCluster (60): one ctx, which is also the controller."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.DescribeCluster)
R = API.response


@handles(ApiKey.DescribeCluster, 0, 1)
def handle(ctx: BrokerContext, req: Request) -> R:
    if req.version >= 1 and req.body.endpoint_type not in (1,):
        return R(
            throttle_time_ms=0,
            error_code=E.UNSUPPORTED_VERSION,
            error_message="only broker endpoints are served",
            endpoint_type=req.body.endpoint_type,
            cluster_id=ctx.cluster_id,
            controller_id=-1,
            brokers=[],
            authorized_operations=None,
        )
    return R(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=1,
        cluster_id=ctx.cluster_id,
        controller_id=ctx.node_id,
        brokers=[R.DescribeClusterBroker(broker_id=ctx.node_id, host=ctx.host, port=ctx.port, rack=None)],
        authorized_operations=None,
    )
