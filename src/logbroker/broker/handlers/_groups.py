"""What the group handlers share: Kafka's limit on the strings a group answer echoes, and topic ids.

A request string over 32767 bytes never gets here (the request decoder closes the connection, as Kafka's
readers do); but Kafka's writers cannot send one either, so an error message that would exceed the limit
(one quoting a 32 KiB group id) is answered as UNKNOWN_SERVER_ERROR without a message.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from logbroker.broker.groups.model import too_long
from logbroker.protocol import ErrorCode as E

from ..context import BrokerContext

log = logging.getLogger("logbroker.broker")


def fit_message(code: int, message: str | None) -> tuple[int, str | None]:
    """An error message Kafka could send; one too long to be a Kafka string makes the answer Kafka's
    UNKNOWN_SERVER_ERROR with no message."""
    if too_long(message):
        return int(E.UNKNOWN_SERVER_ERROR), None
    return code, message


def resolve_topic_ids(ctx: BrokerContext, topics: Any) -> None:
    """OffsetCommit/OffsetFetch v10 name topics by id (KAFKA-14690): each gets its name, "" where the id is
    unknown or zero (Kafka answers those UNKNOWN_TOPIC_ID on every partition, before any other check)."""
    for t in topics or ():
        meta = ctx.topics.by_id(t.topic_id)
        t.name = meta.name if meta is not None else ""


def topic_id_of(ctx: BrokerContext, name: str) -> uuid.UUID:
    meta = ctx.topics.get(name)
    return uuid.UUID(meta.topic_id) if meta is not None else uuid.UUID(int=0)


__all__ = ["fit_message", "resolve_topic_ids", "topic_id_of"]
