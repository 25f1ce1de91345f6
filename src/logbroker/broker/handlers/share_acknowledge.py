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

from ..context import BrokerContext
from ..dispatch import handles
from ..share import ShareError
from ._share import AckErrors, error_response, read_acks, readable_acks, refusal

API = api(ApiKey.ShareAcknowledge)
R = API.response
TR = R.ShareAcknowledgeTopicResponse
PD = TR.PartitionData


@handles(ApiKey.ShareAcknowledge, 1, 2)
async def handle(ctx: BrokerContext, req: Request) -> R:
    b = req.body
    share = ctx.share
    if (refused := refusal(ctx, req)) is not None:
        return error_response(ctx, req, *refused)
    epoch = b.share_session_epoch
    if epoch == 0:
        return error_response(ctx, req, E.INVALID_SHARE_SESSION_EPOCH, "A share session is opened by a ShareFetch")
    try:
        share.session(b.group_id, b.member_id, epoch, [], [], req.connection_id)
    except ShareError as exc:
        return error_response(ctx, req, exc.error, exc.message)
    acks, bad = read_acks(b.topics, req.version)
    errors: AckErrors = {k: (int(E.INVALID_REQUEST), why) for k, why in bad.items()}
    acks = readable_acks(ctx, req, acks, errors)
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
