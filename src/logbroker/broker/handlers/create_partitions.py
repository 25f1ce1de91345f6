"""CreatePartitions (37): grow a topic's partition count; at most 10,000 new partitions per request in
all, as Kafka's controller allows (POLICY_VIOLATION for every topic).

Needs ALTER on each topic: without it TOPIC_AUTHORIZATION_FAILED (no message) whether the topic exists or
not, and the topic counts for nothing else (ControllerApis.createPartitions)."""

from __future__ import annotations

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext
from ..dispatch import handles
from ..seams import TopicError

API = api(ApiKey.CreatePartitions)
R = API.response
TR = R.CreatePartitionsTopicResult


MAX_NEW_PARTITIONS_PER_REQUEST = 10_000


@handles(ApiKey.CreatePartitions, 0, 3)
def handle(ctx: BrokerContext, req: Request) -> R:
    allowed = ctx.access.authorize_names(req, AclOperation.ALTER, ResourceType.TOPIC, [t.name for t in req.body.topics])
    denied = [
        TR(name=t.name, error_code=E.TOPIC_AUTHORIZATION_FAILED, error_message=None)
        for t in req.body.topics
        if t.name not in allowed
    ]
    topics = [t for t in req.body.topics if t.name in allowed]
    added = 0
    for t in topics:
        meta = ctx.topics.get(t.name)
        if meta is not None and t.count > meta.partitions:
            added += t.count - meta.partitions
    if added > MAX_NEW_PARTITIONS_PER_REQUEST:
        message = "Excessively large number of additional partitions per request."
        return R(
            throttle_time_ms=0,
            results=[
                *denied,
                *(TR(name=t.name, error_code=E.POLICY_VIOLATION, error_message=message) for t in topics),
            ],
        )
    results = denied
    for t in topics:
        try:
            meta = ctx.topics.get(t.name)
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
                ctx.topics.create_partitions(t.name, t.count)
            results.append(TR(name=t.name, error_code=0, error_message=None))
        except TopicError as exc:
            results.append(TR(name=t.name, error_code=exc.error, error_message=str(exc)))
    return R(throttle_time_ms=0, results=results)
