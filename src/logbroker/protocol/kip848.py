"""KIP-848 consumer-group and KIP-932 share-group messages, declared from our own schema files
(kafka-python lacks them)."""

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


class ShareGroupHeartbeatRequest(ApiMessage, load_json=schemas):
    pass


class ShareGroupHeartbeatResponse(ApiMessage, load_json=schemas):
    pass


class ShareGroupDescribeRequest(ApiMessage, load_json=schemas):
    pass


class ShareGroupDescribeResponse(ApiMessage, load_json=schemas):
    pass


class ShareFetchRequest(ApiMessage, load_json=schemas):
    pass


class ShareFetchResponse(ApiMessage, load_json=schemas):
    pass


class ShareAcknowledgeRequest(ApiMessage, load_json=schemas):
    pass


class ShareAcknowledgeResponse(ApiMessage, load_json=schemas):
    pass


class DescribeShareGroupOffsetsRequest(ApiMessage, load_json=schemas):
    pass


class DescribeShareGroupOffsetsResponse(ApiMessage, load_json=schemas):
    pass


class AlterShareGroupOffsetsRequest(ApiMessage, load_json=schemas):
    pass


class AlterShareGroupOffsetsResponse(ApiMessage, load_json=schemas):
    pass


class DeleteShareGroupOffsetsRequest(ApiMessage, load_json=schemas):
    pass


class DeleteShareGroupOffsetsResponse(ApiMessage, load_json=schemas):
    pass
