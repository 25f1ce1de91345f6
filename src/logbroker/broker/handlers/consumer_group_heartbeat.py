"""ConsumerGroupHeartbeat (68): KIP-848 membership, subscription and server-side assignment.

With an authorizer (as Kafka 4): READ on the group (GROUP_AUTHORIZATION_FAILED), then DESCRIBE on every topic
named in the subscription (TOPIC_AUTHORIZATION_FAILED if any is refused); both answers carry only the code."""

from __future__ import annotations

import uuid

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext, NoResponse
from ..dispatch import handles
from ..features import DISABLED_MESSAGE
from ._groups import fit_message

API = api(ApiKey.ConsumerGroupHeartbeat)
R = API.response
A = R.Assignment


@handles(ApiKey.ConsumerGroupHeartbeat, 0, 1)
async def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    if ctx.features.level("group.version") < 1:  # KIP-848 groups off (kafka-features disable)
        return R(throttle_time_ms=0, error_code=int(E.UNSUPPORTED_VERSION), error_message=DISABLED_MESSAGE,
                 member_id=None, member_epoch=0, heartbeat_interval_ms=0, assignment=None)  # fmt: skip
    if ctx.access.authorizer is not None:
        b = req.body
        refused = None
        if not ctx.access.authorize(req, AclOperation.READ, ResourceType.GROUP, b.group_id):
            refused = E.GROUP_AUTHORIZATION_FAILED
        elif b.subscribed_topic_names:
            names = set(b.subscribed_topic_names)
            if len(ctx.access.authorize_names(req, AclOperation.DESCRIBE, ResourceType.TOPIC, names)) < len(names):
                refused = E.TOPIC_AUTHORIZATION_FAILED
        if refused is not None:
            return R(throttle_time_ms=0, error_code=int(refused), error_message=None, member_id=None, member_epoch=0,
                     heartbeat_interval_ms=0, assignment=None)  # fmt: skip
    res = await ctx.groups.consumer_heartbeat(req.body, req.header.client_id or "", req.client_host, req.version)
    if res.error:
        # Kafka's error answers carry only the code and message (epoch 0, no member id, no interval).
        err, msg = fit_message(int(res.error), res.message)
        return R(throttle_time_ms=0, error_code=err, error_message=msg, member_id=None, member_epoch=0,
                 heartbeat_interval_ms=0, assignment=None)  # fmt: skip
    assignment = None
    if res.assignment is not None:
        assignment = A(
            topic_partitions=[
                A.TopicPartitions(topic_id=uuid.UUID(tid), partitions=sorted(parts))
                for tid, parts in sorted(res.assignment.items())
            ]
        )
    return R(
        throttle_time_ms=0,
        error_code=int(res.error),
        error_message=res.message,
        member_id=res.member_id,
        member_epoch=res.epoch,
        heartbeat_interval_ms=ctx.groups.consumer.heartbeat_interval_ms,
        assignment=assignment,
    )
