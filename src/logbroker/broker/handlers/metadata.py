"""Metadata (3): this broker leads every partition and is the controller (admin clients send
CreateTopics/DeleteTopics to the controller).

With an authorizer, as Kafka: a topic the principal may not DESCRIBE is left out of an all-topics answer
and answered TOPIC_AUTHORIZATION_FAILED when named (without saying whether it exists); auto-creating a
named topic needs CREATE on the cluster or on that topic.
"""

from __future__ import annotations

import uuid

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import CLUSTER_NAME, AclOperation, ResourceType
from ..auth.checks import KAFKA_INTERNAL_TOPICS, authorized_operations, cluster_allows
from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.Metadata)
R = API.response
T = R.MetadataResponseTopic
P = T.MetadataResponsePartition
ZERO_UUID = uuid.UUID(int=0)
NO_OPS = None  # INT32_MIN on the wire: "not requested"


def _refused(error: E, name: str | None, topic_id: uuid.UUID, ops: frozenset[int] | None, internal: bool = False) -> T:
    return T(error_code=error, name=name, topic_id=topic_id, is_internal=internal, partitions=[],
             authorized_operations=ops)  # fmt: skip


def _authorize(
    ctx: BrokerContext, req: Request, names: list[str], requested: bool, auto: bool
) -> tuple[list[str], list[T]]:
    """The topics to describe, and the refusals that follow them (Kafka's handleTopicMetadataRequest):
    first those the principal may describe but not auto-create, then (when named) those it may not
    describe. A topic named by id is refused by its id, which Kafka does not treat as secret."""
    allowed = ctx.access.authorize_names(req, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    uncreatable: list[str] = []
    missing = [n for n in names if n in allowed and ctx.topics.get(n) is None]
    creating = requested and auto and ctx.settings.auto_create_topics and missing
    if creating and not cluster_allows(ctx, req, AclOperation.CREATE):
        creatable = ctx.access.authorize_names(req, AclOperation.CREATE, ResourceType.TOPIC, missing)
        uncreatable = [n for n in missing if n not in creatable]
    refused = [
        _refused(E.TOPIC_AUTHORIZATION_FAILED, n, ZERO_UUID, NO_OPS, n in KAFKA_INTERNAL_TOPICS) for n in uncreatable
    ]
    if requested:
        by_id = req.version >= 12 and any(t.topic_id not in (None, ZERO_UUID) for t in req.body.topics)
        for n in names:
            if n in allowed:
                continue
            meta = ctx.topics.get(n) if by_id else None
            if meta is not None:
                refused.append(_refused(E.TOPIC_AUTHORIZATION_FAILED, None, uuid.UUID(meta.topic_id), NO_OPS))
            else:
                refused.append(_refused(E.TOPIC_AUTHORIZATION_FAILED, n, ZERO_UUID, NO_OPS))
    skip = set(uncreatable)
    return [n for n in names if n in allowed and n not in skip], refused


@handles(ApiKey.Metadata, 0, 13)
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
    if body.topics is None or (v == 0 and not body.topics):
        names = [m.name for m in ctx.topics.all()]  # internal ones too (is_internal), as Kafka lists them
        requested = False
    else:
        names = []
        for t in body.topics:
            if v >= 12 and t.topic_id is not None and t.topic_id != ZERO_UUID:
                # KIP-516 lookup by id (KIP-848 clients resolve their assignment this way).
                found = ctx.topics.by_id(t.topic_id)
                if found is None:
                    unknown_ids.append(t.topic_id)
                else:
                    names.append(found.name)  # by id when one is given (Kafka ignores the name then)
            elif t.name is not None:
                names.append(t.name)
        requested = True
    names = list(dict.fromkeys(names))  # a topic asked for twice is answered once, as in Kafka
    # Kafka's order: topics looked up by an unknown id, the described ones, then those refused.
    topics = [_refused(E.UNKNOWN_TOPIC_ID, None, tid, NO_OPS) for tid in dict.fromkeys(unknown_ids)]
    refused: list[T] = []
    if ctx.access.authorizer is not None:
        names, refused = _authorize(ctx, req, names, requested, auto)
    with_ops = v >= 8 and body.include_topic_authorized_operations
    for name in names:
        err = ctx.topics.ensure(name, auto, by=req) if requested else E.NONE
        meta = ctx.topics.get(name)
        ops = authorized_operations(ctx, req, ResourceType.TOPIC, name) if with_ops else NO_OPS
        if meta is None:
            topics.append(_refused(err or E.UNKNOWN_TOPIC_OR_PARTITION, name, ZERO_UUID, ops))
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
                authorized_operations=ops,
            )
        )
    topics += refused
    cluster_ops = NO_OPS
    if 8 <= v <= 10 and body.include_cluster_authorized_operations:
        # Kafka answers 0 (not "not requested") to a principal that may not describe the cluster.
        described = cluster_allows(ctx, req, AclOperation.DESCRIBE)
        cluster_ops = authorized_operations(ctx, req, ResourceType.CLUSTER, CLUSTER_NAME) if described else frozenset()
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
