"""UnregisterController (94, KIP-1312, Kafka 4.4): removes a controller's registration. The one node is the
active controller, which cannot unregister itself (INVALID_REQUEST "Controller cannot unregister itself while
it is active.", as Kafka's QuorumController answers), and no other controller was ever registered. Needs
ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED with the refusal's message). A success would carry an
empty message, not null, as Kafka's does.
"""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation
from ..auth.checks import cluster_denial
from ..context import BrokerContext
from ..dispatch import handles

R = api(ApiKey.UnregisterController).response

CONTROLLER_ID_NOT_REGISTERED = 136


@handles(ApiKey.UnregisterController, 0, 0)
def handle(ctx: BrokerContext, req: Request) -> R:
    if (denied := cluster_denial(ctx, req, AclOperation.ALTER)) is not None:
        return R(throttle_time_ms=0, error_code=E.CLUSTER_AUTHORIZATION_FAILED, error_message=denied)
    cid = req.body.controller_id
    if cid == ctx.node_id:
        return R(throttle_time_ms=0, error_code=E.INVALID_REQUEST,
                 error_message="Controller cannot unregister itself while it is active.")  # fmt: skip
    return R(throttle_time_ms=0, error_code=CONTROLLER_ID_NOT_REGISTERED,
             error_message=f"Controller ID {cid} is not currently registered.")  # fmt: skip
