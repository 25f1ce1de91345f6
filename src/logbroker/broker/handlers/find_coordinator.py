"""FindCoordinator (10): this broker coordinates every group and every transactional id (any key, the
empty one too, as in Kafka); other coordinator kinds (share groups) are not offered. As in Kafka, the
first one of a kind makes that coordinator's internal topic (`__consumer_offsets`, `__transaction_state`).

With an authorizer the key needs DESCRIBE (on the group, or on the transactional id): GROUP_ /
TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise, with no coordinator (and, before v4, Kafka's message)."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext, NoResponse
from ..dispatch import handles

API = api(ApiKey.FindCoordinator)
R = API.response
GROUP, TRANSACTION = 0, 1
INTERNAL_TOPIC = {GROUP: "__consumer_offsets", TRANSACTION: "__transaction_state"}
# Kafka's v0-3 refusal carries the error's own message (Errors.message()); v4+ entries carry "".
DENIED = {
    E.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional Id authorization failed.",
}


def _answer(ctx: BrokerContext, req: Request, key: str, key_type: int) -> tuple[int, str | None, int, str, int]:
    if key_type == GROUP and not ctx.access.authorize(req, AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return int(E.GROUP_AUTHORIZATION_FAILED), DENIED[E.GROUP_AUTHORIZATION_FAILED], -1, "", -1
    if key_type == TRANSACTION and not ctx.access.authorize(
        req, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key
    ):
        return int(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), DENIED[E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED], -1, "", -1
    if key_type not in (GROUP, TRANSACTION):
        return int(E.INVALID_REQUEST), f"coordinator key type {key_type} is not served", -1, "", -1
    if ctx.topics.ensure_internal(INTERNAL_TOPIC[key_type]):
        return int(E.COORDINATOR_NOT_AVAILABLE), "the coordinator's topic could not be created", -1, "", -1
    host, port = ctx.endpoint(req.listener)
    return 0, "", ctx.node_id, host, port


@handles(ApiKey.FindCoordinator, 0, 6)
def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    body = req.body
    key_type = body.key_type if req.version >= 1 else GROUP
    if req.version >= 4:
        coords = []
        for key in body.coordinator_keys:
            err, msg, node, host, port = _answer(ctx, req, key, key_type)
            if err in DENIED:
                msg = ""
            coords.append(R.Coordinator(key=key, node_id=node, host=host, port=port, error_code=err, error_message=msg))
        return R(throttle_time_ms=0, coordinators=coords)
    err, msg, node, host, port = _answer(ctx, req, body.key, key_type)
    if err == 0:
        msg = "NONE"  # what Kafka says in v1-3 (v4+ entries say "")
    return R(throttle_time_ms=0, error_code=err, error_message=msg, node_id=node, host=host, port=port)
