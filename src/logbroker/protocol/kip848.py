"""KIP-848 consumer-group messages, declared from our own schema files (kafka-python lacks them)."""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from . import schemas


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=schemas):
    pass


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=schemas):
    pass


class ConsumerGroupDescribeRequest(ApiMessage, load_json=schemas):
    pass


class ConsumerGroupDescribeResponse(ApiMessage, load_json=schemas):
    pass
