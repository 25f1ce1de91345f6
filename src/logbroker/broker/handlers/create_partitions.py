"""CreatePartitions (37): grow a topic's partition count."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E
from logbroker.storage.manager import TopicError

from ..context import BrokerContext
from ..dispatch import handles

API = api(ApiKey.CreatePartitions)
R = API.response
TR = R.CreatePartitionsTopicResult


@handles(ApiKey.CreatePartitions, 0, 3)
def handle(ctx: BrokerContext, req: Request) -> R:
    results = []
    for t in req.body.topics:
        try:
            meta = ctx.topic(t.name)
            if meta is None:
                raise TopicError(E.UNKNOWN_TOPIC_OR_PARTITION, f"topic {t.name!r} does not exist")
            if t.count <= meta.partitions:
                raise TopicError(
                    E.INVALID_PARTITIONS,
                    f"Topic currently has {meta.partitions} partitions, which is higher than or "
                    f"equal to the requested {t.count}.",
                )
            for a in t.assignments or []:
                if list(a.broker_ids) != [ctx.node_id]:
                    raise TopicError(
                        E.INVALID_REPLICA_ASSIGNMENT,
                        f"assignment {list(a.broker_ids)} names brokers other than {ctx.node_id}",
                    )
            if not req.body.validate_only:
                ctx.create_partitions(t.name, t.count)
            results.append(TR(name=t.name, error_code=0, error_message=None))
        except TopicError as exc:
            results.append(TR(name=t.name, error_code=exc.error, error_message=str(exc)))
    return R(throttle_time_ms=0, results=results)
