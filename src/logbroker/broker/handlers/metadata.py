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


@handles(ApiKey.Metadata, 0, 12)
def handle(ctx: BrokerContext, req: Request) -> R:
    body = req.body
    v = req.version
    auto = bool(body.allow_auto_topic_creation) if v >= 4 else True
    unknown_ids: list[uuid.UUID] = []
    if body.topics is None or (v == 0 and not body.topics):
        names = [m.name for m in ctx.topics(include_internal=False)]
        requested = False
    else:
        names = []
        for t in body.topics:
            if t.name is not None:
                names.append(t.name)
            elif v >= 10 and t.topic_id is not None and t.topic_id != ZERO_UUID:
                # KIP-516 lookup by id (KIP-848 clients resolve their assignment this way).
                found = ctx.topic_by_id(t.topic_id)
                if found is None:
                    unknown_ids.append(t.topic_id)
                else:
                    names.append(found.name)
        requested = True
    topics = []
    for name in names:
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
                    authorized_operations=NO_OPS,
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
                authorized_operations=NO_OPS,
            )
        )
    for tid in unknown_ids:
        topics.append(
            T(
                error_code=E.UNKNOWN_TOPIC_ID,
                name=None,
                topic_id=tid,
                is_internal=False,
                partitions=[],
                authorized_operations=NO_OPS,
            )
        )
    return R(
        throttle_time_ms=0,
        brokers=[R.MetadataResponseBroker(node_id=ctx.node_id, host=ctx.host, port=ctx.port, rack=None)],
        cluster_id=ctx.cluster_id,
        controller_id=ctx.node_id,
        topics=topics,
        authorized_operations=NO_OPS,
    )
