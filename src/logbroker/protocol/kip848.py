"""KIP-848 consumer-group and KIP-932 share-group messages, declared from our own schema files
(kafka-python lacks them)."""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsRequest as _CodecApiVersionsRequest
from kafka.protocol.metadata import ApiVersionsResponse as _CodecApiVersionsResponse

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


# KIP-1071 streams groups (kafka-python names the keys, 88 and 89, but has no schemas for them).
class StreamsGroupHeartbeatRequest(ApiMessage, load_json=schemas):
    pass


class StreamsGroupHeartbeatResponse(ApiMessage, load_json=schemas):
    pass


class StreamsGroupDescribeRequest(ApiMessage, load_json=schemas):
    pass


class StreamsGroupDescribeResponse(ApiMessage, load_json=schemas):
    pass


# Kafka 4.4's newest keys (kafka-python has neither): 93 (KIP-1331) and 94 (KIP-1312).
class StreamsGroupTopologyDescriptionUpdateRequest(ApiMessage, load_json=schemas):
    pass


class StreamsGroupTopologyDescriptionUpdateResponse(ApiMessage, load_json=schemas):
    pass


class UnregisterControllerRequest(ApiMessage, load_json=schemas):
    pass


class UnregisterControllerResponse(ApiMessage, load_json=schemas):
    pass


# ApiVersions v5 (KIP-1242: the cluster and node a client believes it reaches), over kafka-python's classes,
# which keep the response's v0 header and its error fallback.
class ApiVersionsRequest(_CodecApiVersionsRequest, load_json=schemas):
    pass


class ApiVersionsResponse(_CodecApiVersionsResponse, load_json=schemas):
    pass


# DeleteGroups v3 (KIP-1331: a message per group result).
class DeleteGroupsRequest(ApiMessage, load_json=schemas):
    pass


class DeleteGroupsResponse(ApiMessage, load_json=schemas):
    pass
