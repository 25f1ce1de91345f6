"""Metadata (3): this broker leads every partition and is the controller (admin clients send
CreateTopics/DeleteTopics to the controller)."""

from __future__ import annotations

import uuid

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.Metadata)
R = API.response
T = R.MetadataResponseTopic
P = T.MetadataResponsePartition
ZERO_UUID = uuid.UUID(int=0)
NO_OPS = None  # INT32_MIN on the wire: "not requested"
# With no authorizer Kafka grants everything a resource type supports (AclOperation codes):
# topics READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS; the cluster CREATE,
# ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE.
TOPIC_OPERATIONS = frozenset({3, 4, 5, 6, 7, 8, 10, 11})
CLUSTER_OPERATIONS = frozenset({5, 7, 8, 9, 10, 11, 12})


@handles(ApiKey.Metadata, 0, 12)
def handle(ctx: BrokerContext, req: Request) -> R:
    body = req.body
    v = req.version
    auto = bool(body.allow_auto_topic_creation) if v >= 4 else True
    unknown_ids: list[uuid.UUID] = []
    if v in (10, 11) and body.topics and any(t.topic_id not in (None, ZERO_UUID) for t in body.topics):
        # The field exists from v10, but Kafka looks topics up by id only from v12: the request is refused.
        return R(
            throttle_time_ms=0,
            brokers=[],
            cluster_id=None,
            controller_id=-1,
            topics=[
                T(
                    error_code=E.INVALID_REQUEST,
                    name=t.name,
                    topic_id=t.topic_id,
                    is_internal=False,
                    partitions=[],
                    authorized_operations=NO_OPS,
                )
                for t in body.topics
            ],
            authorized_operations=NO_OPS,
        )
    topic_ops = TOPIC_OPERATIONS if v >= 8 and body.include_topic_authorized_operations else NO_OPS
    cluster_ops = CLUSTER_OPERATIONS if 8 <= v <= 10 and body.include_cluster_authorized_operations else NO_OPS
    if body.topics is None or (v == 0 and not body.topics):
        names = [m.name for m in ctx.topics(include_internal=False)]
        requested = False
    else:
        names = []
        for t in body.topics:
            if v >= 12 and t.topic_id is not None and t.topic_id != ZERO_UUID:
                # KIP-516 lookup by id (KIP-848 clients resolve their assignment this way).
                found = ctx.topic_by_id(t.topic_id)
                if found is None:
                    unknown_ids.append(t.topic_id)
                else:
                    names.append(found.name)  # by id when one is given (Kafka ignores the name then)
            elif t.name is not None:
                names.append(t.name)
        requested = True
    topics = []
    for name in dict.fromkeys(names):  # a topic asked for twice is answered once, as in Kafka
        err = ctx.ensure_topic(name, auto) if requested else E.NONE
        meta = ctx.topic(name)
        if meta is None:
            topics.append(
                T(
                    error_code=err or E.UNKNOWN_TOPIC_OR_PARTITION,
                    name=name,
                    topic_id=ZERO_UUID,
                    is_internal=False,
                    partitions=[],
                    authorized_operations=topic_ops,
                )
            )
            continue
        parts = [
            P(
                error_code=0,
                partition_index=i,
                leader_id=ctx.node_id,
                leader_epoch=0,
                replica_nodes=[ctx.node_id],
                isr_nodes=[ctx.node_id],
                offline_replicas=[],
            )
            for i in range(meta.partitions)
        ]
        topics.append(
            T(
                error_code=0,
                name=name,
                topic_id=uuid.UUID(meta.topic_id),
                is_internal=meta.internal,
                partitions=parts,
                authorized_operations=topic_ops,
            )
        )
    for tid in dict.fromkeys(unknown_ids):
        topics.append(
            T(
                error_code=E.UNKNOWN_TOPIC_ID,
                name=None,
                topic_id=tid,
                is_internal=False,
                partitions=[],
                authorized_operations=topic_ops,
            )
        )
    return R(
        throttle_time_ms=0,
        brokers=[
            R.MetadataResponseBroker(
                node_id=ctx.node_id, host=ctx.endpoint(req.listener)[0], port=ctx.endpoint(req.listener)[1], rack=None
            )
        ],
        cluster_id=ctx.cluster_id,
        controller_id=ctx.node_id,
        topics=topics,
        authorized_operations=cluster_ops,
    )
