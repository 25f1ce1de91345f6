"""CreatePartitions (37): grow a topic's partition count."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.admin import CreatePartitionsResponse

from logbroker.protocol.connection import Request
from logbroker.storage.manager import TopicError

from .common import code

if TYPE_CHECKING:
    from logbroker.broker.server import Broker

R = CreatePartitionsResponse
TR = R.CreatePartitionsTopicResult


def handle(broker: Broker, req: Request) -> R:
    assert broker.logs is not None
    results = []
    for t in req.body.topics:
        try:
            meta = broker.logs.topics.get(t.name)
            if meta is None:
                raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {t.name!r} does not exist")
            if t.count <= meta.partitions:
                raise TopicError(
                    "INVALID_PARTITIONS",
                    f"Topic currently has {meta.partitions} partitions, which is higher than or "
                    f"equal to the requested {t.count}.",
                )
            for a in t.assignments or []:
                if list(a.broker_ids) != [broker.node_id]:
                    raise TopicError(
                        "INVALID_REPLICA_ASSIGNMENT",
                        f"assignment {list(a.broker_ids)} names brokers other than {broker.node_id}",
                    )
            if not req.body.validate_only:
                broker.logs.create_partitions(t.name, t.count)
            results.append(TR(name=t.name, error_code=0, error_message=None))
        except TopicError as exc:
            results.append(TR(name=t.name, error_code=code(exc.error), error_message=str(exc)))
    return R(throttle_time_ms=0, results=results)
