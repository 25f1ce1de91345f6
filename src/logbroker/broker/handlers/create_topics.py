"""CreateTopics (19): replication factor must be 1 (or -1, the default) on a single node.

As Kafka's controller, a request may create at most 10,000 partitions in all (POLICY_VIOLATION for every
topic, before anything else is looked at) and generate at most 10,000 metadata records (one per topic,
partition and config: POLICY_VIOLATION for every topic), so no single request can exhaust the broker.

Authorization is Kafka's controller's (ControllerApis.createTopics): CREATE on the cluster, or else on each
topic; a topic without it is TOPIC_AUTHORIZATION_FAILED "Authorization failed." (answered after the others,
counted in no limit). A created topic the principal may not DESCRIBE_CONFIGS comes back without its configs,
partition count or replication factor and with TOPIC_AUTHORIZATION_FAILED as its config error (v5+).
"""

from __future__ import annotations

import uuid
from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import CLUSTER_NAME, AclOperation, ResourceType
from ..context import BrokerContext
from ..dispatch import handles
from ..seams import TopicError, parse_topic_configs, validate_topic_name
from ._configs import topic_config_entries
from ._partitions import MAX_PARTITIONS_PER_REQUEST

API = api(ApiKey.CreateTopics)
R = API.response
TR = R.CreatableTopicResult
ZERO_UUID = uuid.UUID(int=0)
MAX_RECORDS_PER_REQUEST = 10_000  # Kafka's MAX_RECORDS_PER_USER_OP


def requested_partitions(topics: Any, default: int) -> int:
    """Partitions a request asks for, counted as Kafka counts them before validating anything."""
    total = 0
    for t in topics:
        if t.assignments:
            total += len(t.assignments)
        elif t.num_partitions == -1:
            total += default
        elif t.num_partitions > 0:
            total += t.num_partitions
    return total


@handles(ApiKey.CreateTopics, 0, 7, kafka4_min=2)
def handle(ctx: BrokerContext, req: Request) -> R:
    names = [t.name for t in req.body.topics]
    if ctx.access.authorize(req, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME):
        creatable = set(names)
    else:
        creatable = ctx.access.authorize_names(req, AclOperation.CREATE, ResourceType.TOPIC, names)
    describable = ctx.access.authorize_names(req, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, names)
    topics = [t for t in req.body.topics if t.name in creatable]
    denied = [
        _failed(t.name, E.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
        for t in req.body.topics
        if t.name not in creatable
    ]
    response = _create(ctx, req, topics, describable)
    response.topics = [*response.topics, *denied]
    return response


def _create(ctx: BrokerContext, req: Request, topics: list[Any], describable: set[str]) -> R:
    if requested_partitions(topics, ctx.settings.num_partitions) > MAX_PARTITIONS_PER_REQUEST:
        return _refuse_all(topics, "Excessively large number of partitions per request.")
    checked: list[tuple[Any, int, dict[str, str | None]] | TopicError] = []
    seen: set[str] = set()
    records = 0
    for t in topics:
        try:
            if t.name in seen:
                raise TopicError(E.INVALID_REQUEST, f"topic {t.name!r} appears twice in the request")
            seen.add(t.name)
            partitions, configs = _validate(ctx, t)
            checked.append((t, partitions, configs))
            records += 1 + partitions + sum(v is not None for v in configs.values())
        except TopicError as exc:
            checked.append(exc)
    if records > MAX_RECORDS_PER_REQUEST:
        return _refuse_all(topics, "Unable to perform excessively large batch operation.")
    results = []
    for t, item in zip(topics, checked, strict=True):
        try:
            if isinstance(item, TopicError):
                raise item
            _, partitions, configs = item
            if req.body.validate_only:
                meta_id, meta_configs = ZERO_UUID, configs
            else:
                meta = ctx.topics.create(t.name, partitions, configs)
                meta_id, meta_configs = uuid.UUID(meta.topic_id), meta.configs
            if t.name not in describable:
                hidden = _failed(t.name, 0, None)
                hidden.topic_id, hidden.topic_config_error_code = meta_id, E.TOPIC_AUTHORIZATION_FAILED
                results.append(hidden)
                continue
            results.append(
                TR(
                    name=t.name,
                    topic_id=meta_id,
                    error_code=0,
                    error_message=None,
                    topic_config_error_code=0,
                    num_partitions=partitions,
                    replication_factor=1,
                    configs=[
                        TR.CreatableTopicConfigs(
                            name=e.name,
                            value=e.value,
                            read_only=e.read_only,
                            config_source=e.source,
                            is_sensitive=False,
                        )
                        for e in topic_config_entries(ctx, meta_configs, None)
                    ],
                )
            )
        except TopicError as exc:
            results.append(_failed(t.name, exc.error, str(exc)))
    return R(throttle_time_ms=0, topics=results)


def _validate(ctx: BrokerContext, t: Any) -> tuple[int, dict[str, str | None]]:
    """(partitions, configs) of a topic that may be created; raises TopicError with Kafka's code."""
    validate_topic_name(t.name)
    partitions = t.num_partitions
    if t.assignments:
        if partitions != -1 or t.replication_factor != -1:
            raise TopicError(E.INVALID_REQUEST, "give either assignments or num_partitions/replication_factor")
        for a in t.assignments:
            if list(a.broker_ids) != [ctx.node_id]:
                raise TopicError(
                    E.INVALID_REPLICA_ASSIGNMENT,
                    f"partition {a.partition_index} assigned to {list(a.broker_ids)}; the only broker is {ctx.node_id}",
                )
        partitions = len(t.assignments)
    elif partitions == -1:
        partitions = ctx.settings.num_partitions
    if t.replication_factor not in (-1, 1):
        raise TopicError(
            E.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {t.replication_factor} larger than available brokers: 1.",
        )
    configs = {c.name: c.value for c in (t.configs or [])}
    parse_topic_configs({k: v for k, v in configs.items() if v is not None}, ctx.log_defaults)
    if ctx.topics.get(t.name) is not None:
        raise TopicError(E.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
    if partitions <= 0:
        raise TopicError(E.INVALID_PARTITIONS, f"Number of partitions must be larger than 0, got {partitions}")
    return partitions, configs


def _failed(name: str, error: int, message: str | None) -> Any:
    return TR(
        name=name,
        topic_id=ZERO_UUID,
        error_code=error,
        error_message=message,
        topic_config_error_code=0,
        num_partitions=-1,
        replication_factor=-1,
        configs=[],
    )


def _refuse_all(topics: Any, message: str) -> R:
    return R(throttle_time_ms=0, topics=[_failed(t.name, E.POLICY_VIOLATION, message) for t in topics])
