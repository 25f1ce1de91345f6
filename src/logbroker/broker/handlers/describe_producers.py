"""DescribeProducers (61, KIP-664): the producers a partition keeps state for, with each one's open
transaction (what an operator looks at to find a hanging transaction).

Per topic, in Kafka's order: an invalid name is INVALID_TOPIC_EXCEPTION, a topic without READ (with an
authorizer) TOPIC_AUTHORIZATION_FAILED, a missing one UNKNOWN_TOPIC_OR_PARTITION, each with the error's
own message as Kafka's ApiError gives it."""

from __future__ import annotations

from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext
from ..dispatch import handles
from ..seams import PartitionLog, TopicError, validate_topic_name

API = api(ApiKey.DescribeProducers)
R = API.response
TR = R.TopicResponse
PR = TR.PartitionResponse
PS = PR.ProducerState
UNKNOWN = "This server does not host this topic-partition."  # Kafka's Errors messages
DENIED = "Topic authorization failed."


def _refusal(ctx: BrokerContext, req: Request, topic: str) -> tuple[E, str] | None:
    """Why every partition of `topic` is refused before its log is looked at, if it is."""
    try:
        validate_topic_name(topic)
    except TopicError as exc:
        return exc.error, str(exc)
    if not ctx.access.authorize(req, AclOperation.READ, ResourceType.TOPIC, topic):
        return E.TOPIC_AUTHORIZATION_FAILED, DENIED
    return None


@handles(ApiKey.DescribeProducers, 0, 0)
def handle(ctx: BrokerContext, req: Request) -> R:
    def answer(plog: PartitionLog, index: int) -> PR:
        producers = [
            PS(
                producer_id=pid,
                producer_epoch=e.epoch,
                last_sequence=e.last_seq,
                last_timestamp=e.last_timestamp,
                coordinator_epoch=e.coordinator_epoch,
                current_txn_start_offset=plog.producers.ongoing.get(pid, -1),
            )
            for pid, e in sorted(plog.producers.producers.items())
        ]
        return PR(partition_index=index, error_code=0, error_message=None, active_producers=producers)

    def error(index: int, code: E, message: str) -> PR:
        return PR(partition_index=index, error_code=code, error_message=message, active_producers=[])

    topics: list[Any] = []
    for t in req.body.topics:
        refusal = _refusal(ctx, req, t.name)
        rows = []
        for index in t.partition_indexes:
            plog = None if refusal else ctx.topics.log(t.name, index)
            if plog is None:
                code, message = refusal or (E.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN)
                rows.append(error(index, code, message))
            else:
                rows.append(answer(plog, index))
        topics.append(TR(name=t.name, partitions=rows))
    return R(throttle_time_ms=0, topics=topics)
