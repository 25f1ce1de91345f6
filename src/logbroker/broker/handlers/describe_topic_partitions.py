"""DescribeTopicPartitions (75): topic descriptions a page at a time (KIP-966), which Kafka 4's admin
clients use for describeTopics by name.

Kafka's rules (its KRaftMetadataCache.describeTopicResponse): an empty topic list means every topic,
internal ones included; the topics are answered in name order, from the cursor's topic and partition on,
until the page's partition budget (the request's limit, clamped to 1..the broker's
max.request.partition.size.limit) runs out, when `next_cursor` says where to go on. A topic named but
missing is UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for a name that cannot be one) and costs
no budget; nothing is ever auto-created. A cursor whose topic the list does not name, or whose partition is
negative, fails every topic named with INVALID_REQUEST. With an authorizer a topic needs DESCRIBE: an
all-topics page leaves the others out, a named one is answered TOPIC_AUTHORIZATION_FAILED after the rest.
"""

from __future__ import annotations

import uuid

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..auth.checks import KAFKA_INTERNAL_TOPICS, authorized_operations
from ..context import BrokerContext
from ..dispatch import handles
from ..seams import TopicError, validate_topic_name

API = api(ApiKey.DescribeTopicPartitions)
R = API.response
T = R.DescribeTopicPartitionsResponseTopic
P = T.DescribeTopicPartitionsResponsePartition
ZERO_UUID = uuid.UUID(int=0)
NOT_REQUESTED = -(1 << 31)  # the schema's default for authorized operations


def _error(code: int, name: str) -> T:
    return T(error_code=code, name=name, topic_id=ZERO_UUID, is_internal=name in KAFKA_INTERNAL_TOPICS,
             partitions=[], topic_authorized_operations=NOT_REQUESTED)  # fmt: skip


def _missing(name: str) -> int:
    try:
        validate_topic_name(name)
    except TopicError:
        return int(E.INVALID_TOPIC_EXCEPTION)
    return int(E.UNKNOWN_TOPIC_OR_PARTITION)


@handles(ApiKey.DescribeTopicPartitions, 0, 0)
def handle(ctx: BrokerContext, req: Request) -> R:
    body = req.body
    cursor = body.cursor
    everything = not body.topics
    names = sorted({m.name for m in ctx.topics.all()} if everything else {t.name for t in body.topics})
    if cursor is not None and (cursor.partition_index < 0 or (not everything and cursor.topic_name not in names)):
        return R(throttle_time_ms=0, topics=[_error(int(E.INVALID_REQUEST), n) for n in names], next_cursor=None)
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    denied: list[str] = []
    if ctx.access.authorizer is not None:
        allowed = ctx.access.authorize_names(req, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        denied = [] if everything else [n for n in names if n not in allowed]
        names = [n for n in names if n in allowed]
    budget = max(min(ctx.settings.max_request_partition_size_limit, body.response_partition_limit), 1)
    topics = []
    next_cursor = None
    for name in names:
        if budget == 0:  # the page filled up exactly: go on at this topic (Kafka does not look it up first)
            next_cursor = R.Cursor(topic_name=name, partition_index=0)
            break
        meta = ctx.topics.get(name)
        if meta is None:
            topics.append(_error(_missing(name), name))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        end = min(meta.partitions, start + budget)
        parts = [
            P(error_code=0, partition_index=p, leader_id=ctx.node_id, leader_epoch=0, replica_nodes=[ctx.node_id],
              isr_nodes=[ctx.node_id], eligible_leader_replicas=[], last_known_elr=[], offline_replicas=[])
            for p in range(start, end)
        ]  # fmt: skip
        budget -= max(end - start, 0)
        ops = sum(1 << op for op in authorized_operations(ctx, req, ResourceType.TOPIC, name))  # Kafka's bitfield
        topics.append(T(error_code=0, name=name, topic_id=uuid.UUID(meta.topic_id), is_internal=meta.internal,
                        partitions=parts, topic_authorized_operations=ops))  # fmt: skip
        if end < meta.partitions:
            next_cursor = R.Cursor(topic_name=name, partition_index=end)
            break
    topics += [_error(int(E.TOPIC_AUTHORIZATION_FAILED), n) for n in denied]
    return R(throttle_time_ms=0, topics=topics, next_cursor=next_cursor)
