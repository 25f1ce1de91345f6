"""Orleans-style persistent streams for asyncio: virtual streams on a topic's partitions, rewindable caches."""

from logbroker.streams.config import StreamsConfig
from logbroker.streams.errors import (
    PublishError,
    SerializationError,
    StreamsConfigError,
    StreamsError,
    TokenExpiredError,
    UnknownNamespaceError,
)
from logbroker.streams.model import HashRing, JsonSerializer, MsgpackSerializer, PydanticSerializer, SequenceToken
from logbroker.streams.provider import Stream, StreamProvider, Subscription

__all__ = [
    "HashRing",
    "JsonSerializer",
    "MsgpackSerializer",
    "PublishError",
    "PydanticSerializer",
    "SequenceToken",
    "SerializationError",
    "Stream",
    "StreamProvider",
    "StreamsConfig",
    "StreamsConfigError",
    "StreamsError",
    "Subscription",
    "TokenExpiredError",
    "UnknownNamespaceError",
]
