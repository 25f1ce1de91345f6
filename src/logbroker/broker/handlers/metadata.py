"""Metadata (3): this broker leads every partition and is the controller (admin clients send
CreateTopics/DeleteTopics to the controller)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from kafka.protocol.metadata import MetadataResponse

from logbroker.protocol.connection import Request

from .common import code, ensure_topic

if TYPE_CHECKING:
    from logbroker.broker.server import Broker

R = MetadataResponse
T = R.MetadataResponseTopic
P = T.MetadataResponsePartition
ZERO_UUID = uuid.UUID(int=0)
NO_OPS = None  # INT32_MIN on the wire: "not requested"


def handle(broker: Broker, req: Request) -> R:
    assert broker.logs is not None
    body = req.body
    v = req.version
    auto = bool(body.allow_auto_topic_creation) if v >= 4 else True
    unknown_ids: list[uuid.UUID] = []
    if body.topics is None or (v == 0 and not body.topics):
        names = [n for n, m in broker.logs.topics.items() if not m.internal]
        requested = False
    else:
        names = []
        by_id = {m.topic_id: n for n, m in broker.logs.topics.items()}
        for t in body.topics:
            if t.name is not None:
                names.append(t.name)
            elif v >= 10 and t.topic_id is not None and t.topic_id != ZERO_UUID:
                # KIP-516 lookup by id (KIP-848 clients resolve their assignment this way).
                name = by_id.get(str(t.topic_id))
                if name is None:
                    unknown_ids.append(t.topic_id)
                else:
                    names.append(name)
        requested = True
    topics = []
    for name in names:
        err = ensure_topic(broker, name, auto) if requested else 0
        meta = broker.logs.topics.get(name)
        if meta is None:
            topics.append(
                T(
                    error_code=err or code("UNKNOWN_TOPIC_OR_PARTITION"),
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
                leader_id=broker.node_id,
                leader_epoch=0,
                replica_nodes=[broker.node_id],
                isr_nodes=[broker.node_id],
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
                error_code=code("UNKNOWN_TOPIC_ID"),
                name=None,
                topic_id=tid,
                is_internal=False,
                partitions=[],
                authorized_operations=NO_OPS,
            )
        )
    return R(
        throttle_time_ms=0,
        brokers=[R.MetadataResponseBroker(node_id=broker.node_id, host=broker.host, port=broker.port, rack=None)],
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        topics=topics,
        authorized_operations=NO_OPS,
    )
