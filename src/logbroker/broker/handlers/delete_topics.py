"""DeleteTopics (20): by name (v1-5) or by name or topic id (v6)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from kafka.protocol.admin import DeleteTopicsResponse

from logbroker.protocol.connection import Request
from logbroker.storage.manager import TopicError

from .common import code

if TYPE_CHECKING:
    from logbroker.broker.server import Broker

R = DeleteTopicsResponse
TR = R.DeletableTopicResult
ZERO_UUID = uuid.UUID(int=0)


def handle(broker: Broker, req: Request) -> R:
    assert broker.logs is not None
    body = req.body
    wanted = [(t.name, t.topic_id) for t in body.topics] if req.version >= 6 else [(n, None) for n in body.topic_names]
    results = []
    for name, topic_id in wanted:
        if name is None and topic_id is not None and topic_id != ZERO_UUID:
            name = next((m.name for m in broker.logs.topics.values() if m.topic_id == str(topic_id)), None)
            if name is None:
                results.append(
                    TR(
                        name=None,
                        topic_id=topic_id,
                        error_code=code("UNKNOWN_TOPIC_ID"),
                        error_message=f"no topic has id {topic_id}",
                    )
                )
                continue
        try:
            if not broker.settings.delete_topic_enable:
                raise TopicError("TOPIC_DELETION_DISABLED", "topic deletion is disabled on this broker")
            meta = broker.logs.topics.get(name or "")
            if meta is not None and meta.internal:
                raise TopicError("INVALID_REQUEST", f"internal topic {name!r} cannot be deleted")
            meta = broker.logs.delete_topic(name or "")
            broker.topic_deleted(meta.name, meta.partitions)
            results.append(TR(name=name, topic_id=uuid.UUID(meta.topic_id), error_code=0, error_message=None))
        except TopicError as exc:
            results.append(
                TR(name=name, topic_id=topic_id or ZERO_UUID, error_code=code(exc.error), error_message=str(exc))
            )
    return R(throttle_time_ms=0, responses=results)
