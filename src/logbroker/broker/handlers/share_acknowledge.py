"""ShareAcknowledge (79): a share-group member's acknowledgements without a fetch (commitSync, close, or
partitions no longer assigned); durable before the answer.

The session must exist (SHARE_SESSION_NOT_FOUND) and this be its next epoch (INVALID_SHARE_SESSION_EPOCH);
epoch 0 is INVALID_SHARE_SESSION_EPOCH (a session is opened by a fetch), epoch -1 closes the session and
releases whatever the member still holds. Malformed batches are INVALID_REQUEST for their partition, records
the member does not hold INVALID_RECORD_STATE."""

from __future__ import annotations

import uuid
from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext
from ..dispatch import handles
from ..share import ShareError
from ._share import read_acks, request_error

API = api(ApiKey.ShareAcknowledge)
R = API.response
TR = R.ShareAcknowledgeTopicResponse
PD = TR.PartitionData


def _error(ctx: BrokerContext, code: E, message: str | None) -> R:
    ctx.metrics.errors(ApiKey.ShareAcknowledge, [code])
    return R(throttle_time_ms=0, error_code=int(code), error_message=message, acquisition_lock_timeout_ms=0,
             responses=[], node_endpoints=[])  # fmt: skip


@handles(ApiKey.ShareAcknowledge, 1, 2)
async def handle(ctx: BrokerContext, req: Request) -> R:
    b = req.body
    share = ctx.share
    refused = request_error(b.group_id, b.member_id)
    if refused is not None:
        return _error(ctx, *refused)
    if not ctx.authorize(req, AclOperation.READ, ResourceType.GROUP, b.group_id):
        return _error(ctx, E.GROUP_AUTHORIZATION_FAILED, None)
    epoch = b.share_session_epoch
    if epoch == 0:
        return _error(ctx, E.INVALID_SHARE_SESSION_EPOCH, "A share session is opened by a ShareFetch")
    try:
        share.session(b.group_id, b.member_id, epoch, [], [])
    except ShareError as exc:
        return _error(ctx, exc.error, exc.message)
    acks, bad = read_acks(b.topics, req.version)
    errors: dict[tuple[str, int], tuple[int, str | None]] = {k: (int(E.INVALID_REQUEST), why) for k, why in bad.items()}
    if ctx.authorizer is not None:
        names = ctx.share.topic_ids()
        wanted = {names.get(tid, "") for tid, _i, _b in acks}
        readable = ctx.authorize_names(req, AclOperation.READ, ResourceType.TOPIC, wanted)
        for tid, index, _b in acks:
            if names.get(tid, "") not in readable:
                errors[(tid, index)] = (int(E.TOPIC_AUTHORIZATION_FAILED), None)
        acks = [a for a in acks if (a[0], a[1]) not in errors]
    for key, (code, message) in (await share.acknowledge(b.group_id, b.member_id, acks)).items():
        errors[key] = (int(code), message)
    if epoch == -1:
        share.close_session(b.group_id, b.member_id)
        await share.release_member(b.group_id, b.member_id)
    topics: dict[str, list[Any]] = {}
    for t in b.topics:
        for p in t.partitions:
            code, message = errors.get((str(t.topic_id), p.partition_index), (0, None))
            topics.setdefault(str(t.topic_id), []).append(
                PD(partition_index=p.partition_index, error_code=code, error_message=message,
                   current_leader=PD.LeaderIdAndEpoch(leader_id=ctx.node_id, leader_epoch=0)))  # fmt: skip
    return R(throttle_time_ms=0, error_code=0, error_message=None,
             acquisition_lock_timeout_ms=share.settings(b.group_id).record_lock_duration_ms,
             responses=[TR(topic_id=uuid.UUID(t), partitions=ps) for t, ps in topics.items()],
             node_endpoints=[])  # fmt: skip
