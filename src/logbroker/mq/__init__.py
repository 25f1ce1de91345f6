"""Milvus-style message streams (mqwrapper/msgstream semantics) over the embedded broker or any Kafka cluster."""

from logbroker.mq.client import (
    BatchDelivery,
    Client,
    Consumer,
    Delivery,
    InitialPosition,
    Message,
    MessageIDs,
    Producer,
)
from logbroker.mq.config import EmbeddedConfig, KafkaConfig, MQConfig, SaslConfig, SslConfig, load_config
from logbroker.mq.errors import (
    MessageTooLarge,
    MQClosedError,
    MQConfigError,
    MQError,
    SeekError,
    TopicNotEmpty,
    TopicNotFound,
)
from logbroker.mq.ids import MessageID, message_id_from_bytes, message_id_from_string
from logbroker.mq.msgstream import MsgPack, MsgPosition, MsgStream, StreamMessage, default_repack

__all__ = [
    "BatchDelivery",
    "Client",
    "Consumer",
    "Delivery",
    "EmbeddedConfig",
    "InitialPosition",
    "KafkaConfig",
    "MQClosedError",
    "MQConfig",
    "MQConfigError",
    "MQError",
    "Message",
    "MessageID",
    "MessageIDs",
    "MessageTooLarge",
    "MsgPack",
    "MsgPosition",
    "MsgStream",
    "Producer",
    "SaslConfig",
    "SeekError",
    "SslConfig",
    "StreamMessage",
    "TopicNotEmpty",
    "TopicNotFound",
    "default_repack",
    "load_config",
    "message_id_from_bytes",
    "message_id_from_string",
]  # fmt: skip
