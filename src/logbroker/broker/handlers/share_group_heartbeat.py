"""ShareGroupHeartbeat (76): share-group membership and assignment (see `share.coordinator`).

With an authorizer, as Kafka 4.4: READ on the group (GROUP_AUTHORIZATION_FAILED), then DESCRIBE on every
subscribed topic (TOPIC_AUTHORIZATION_FAILED)."""

from __future__ import annotations

import uuid

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext
from ..dispatch import handles
from ..features import DISABLED_MESSAGE
from ..share import ShareError
from ._groups import fit_message

API = api(ApiKey.ShareGroupHeartbeat)
R = API.response
A = R.Assignment


def _error(code: int, message: str | None) -> R:
    code, message = fit_message(code, message)
    return R(throttle_time_ms=0, error_code=code, error_message=message, member_id=None, member_epoch=0,
             heartbeat_interval_ms=0, assignment=None)  # fmt: skip


@handles(ApiKey.ShareGroupHeartbeat, 1, 1)
async def handle(ctx: BrokerContext, req: Request) -> R:
    b = req.body
    if ctx.features.level("share.version") < 1:  # share groups off (kafka-features disable)
        return _error(int(E.UNSUPPORTED_VERSION), DISABLED_MESSAGE)
    if ctx.access.authorizer is not None:
        if not ctx.access.authorize(req, AclOperation.READ, ResourceType.GROUP, b.group_id):
            return _error(int(E.GROUP_AUTHORIZATION_FAILED), None)
        if b.subscribed_topic_names:
            names = set(b.subscribed_topic_names)
            if len(ctx.access.authorize_names(req, AclOperation.DESCRIBE, ResourceType.TOPIC, names)) < len(names):
                return _error(int(E.TOPIC_AUTHORIZATION_FAILED), None)
    try:
        res = await ctx.share.heartbeat(b, req.header.client_id or "", req.client_host)
    except ShareError as exc:
        ctx.metrics.errors(ApiKey.ShareGroupHeartbeat, [exc.error])
        return _error(int(exc.error), exc.message)
    assignment = None
    if res.assignment is not None:
        assignment = A(topic_partitions=[A.TopicPartitions(topic_id=uuid.UUID(t), partitions=sorted(ps))
                                         for t, ps in sorted(res.assignment.items())])  # fmt: skip
    return R(throttle_time_ms=0, error_code=0, error_message=None, member_id=res.member_id, member_epoch=res.epoch,
             heartbeat_interval_ms=ctx.share.settings(b.group_id).heartbeat_interval_ms,
             assignment=assignment)  # fmt: skip
