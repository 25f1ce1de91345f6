"""DescribeCluster (60): one broker, which is also the controller."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.admin import DescribeClusterResponse

from logbroker.protocol.connection import Request

if TYPE_CHECKING:
    from logbroker.broker.server import Broker

R = DescribeClusterResponse


def handle(broker: Broker, req: Request) -> R:
    if req.version >= 1 and req.body.endpoint_type not in (1,):
        return R(
            throttle_time_ms=0,
            error_code=35,
            error_message="only broker endpoints are served",
            endpoint_type=req.body.endpoint_type,
            cluster_id=broker.cluster_id,
            controller_id=-1,
            brokers=[],
            authorized_operations=None,
        )
    return R(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=1,
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        brokers=[R.DescribeClusterBroker(broker_id=broker.node_id, host=broker.host, port=broker.port, rack=None)],
        authorized_operations=None,
    )
