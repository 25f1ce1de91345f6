"""Errors of `logbroker.mq`: one base class so callers can catch the layer, subclasses for what they act on."""

from __future__ import annotations


class MQError(Exception):
    """Anything `logbroker.mq` refuses or the broker reports."""


class MQConfigError(MQError, ValueError):
    """A refused configuration; the message names the offending key (``mq.kafka.sasl.password``)."""


class MQClosedError(MQError):
    """The client, producer or consumer was used after close()."""


class TopicNotFound(MQError):
    """The topic does not exist and could not (or may not) be created."""


class TopicNotEmpty(MQError):
    """check_topic_valid() found messages in a topic that should be new."""


class MessageTooLarge(MQError):
    """The payload exceeds the broker's (or the topic's) size limit; the producer stays usable."""


class SeekError(MQError):
    """Seek was refused: consumption already started, the partition was sought before, or a foreign ID."""
