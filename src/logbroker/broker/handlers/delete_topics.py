"""DeleteTopics (20): by name (v1-5) or by name or topic id (v6)."""

from __future__ import annotations

import uuid

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E
from logbroker.storage.manager import TopicError

from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.DeleteTopics)
R = API.response
TR = R.DeletableTopicResult
ZERO_UUID = uuid.UUID(int=0)


@handles(ApiKey.DeleteTopics, 1, 6)
def handle(ctx: BrokerContext, req: Request) -> R:
    body = req.body
    wanted = [(t.name, t.topic_id) for t in body.topics] if req.version >= 6 else [(n, None) for n in body.topic_names]
    results = []
    for name, topic_id in wanted:
        if name is None and topic_id is not None and topic_id != ZERO_UUID:
            by_id = ctx.topic_by_id(topic_id)
            name = by_id.name if by_id is not None else None
            if name is None:
                results.append(
                    TR(
                        name=None,
                        topic_id=topic_id,
                        error_code=E.UNKNOWN_TOPIC_ID,
                        error_message=f"no topic has id {topic_id}",
                    )
                )
                continue
        try:
            if not ctx.settings.delete_topic_enable:
                raise TopicError(E.TOPIC_DELETION_DISABLED, "topic deletion is disabled on this broker")
            meta = ctx.topic(name or "")
            if meta is not None and meta.internal:
                raise TopicError(E.INVALID_REQUEST, f"internal topic {name!r} cannot be deleted")
            meta = ctx.delete_topic(name or "")
            results.append(TR(name=name, topic_id=uuid.UUID(meta.topic_id), error_code=0, error_message=None))
        except TopicError as exc:
            results.append(
                TR(name=name, topic_id=topic_id or ZERO_UUID, error_code=exc.error, error_message=str(exc))
            )
    return R(throttle_time_ms=0, responses=results)
