"""StreamsGroupHeartbeat (88): KIP-1071 membership of a Kafka Streams application, its topology and the tasks
the broker assigns (`groups/streams.py`).

Kafka's gatekeeping first (KafkaApis): READ on the group (GROUP_AUTHORIZATION_FAILED); then every topic the
topology names must be neither one of Kafka's internal topics nor an invalid name (STREAMS_INVALID_TOPOLOGY with
Kafka's messages) and must be DESCRIBE-able (TOPIC_AUTHORIZATION_FAILED). After the coordinator has answered,
the internal topics it found missing (repartition and changelog topics, with the partition counts it worked
out and the configs the application asked for) are created on behalf of the member's principal: with an
authorizer only those it may CREATE (on the cluster or the topic); the others are named in the
MISSING_INTERNAL_TOPICS status, as are creations that failed, as Kafka does.
"""

from __future__ import annotations

import logging
from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..auth.checks import KAFKA_INTERNAL_TOPICS, cluster_allows
from ..context import BrokerContext
from ..dispatch import handles
from ..features import DISABLED_MESSAGE
from ..groups.streams import MISSING_INTERNAL_TOPICS, StreamsResult, TopicInfo
from ..seams import TopicError, parse_topic_configs
from ._groups import fit_message
from ._partitions import MAX_PARTITIONS_PER_REQUEST

log = logging.getLogger(__name__)
API = api(ApiKey.StreamsGroupHeartbeat)
R = API.response
T = R.TaskIds
_LEGAL = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _valid_topic(name: str) -> bool:
    return 0 < len(name) <= 249 and name not in (".", "..") and set(name) <= _LEGAL


def _error(ctx: BrokerContext, code: int, message: str | None) -> R:
    err, msg = fit_message(code, message)
    return R(throttle_time_ms=0, error_code=err, error_message=msg, member_id="", member_epoch=0,
             heartbeat_interval_ms=0, task_offset_interval_ms=0, status=None, endpoint_information_epoch=0)  # fmt: skip


def _topology_topics(topology: Any) -> list[str]:
    names: list[str] = []
    for s in topology.subtopologies:
        names += list(s.source_topics) + list(s.repartition_sink_topics)
        names += [t.name for t in (*s.repartition_source_topics, *s.state_changelog_topics)]
    return list(dict.fromkeys(names))


def _task_ids(tasks: set[tuple[str, int]]) -> list[Any]:
    by_sub: dict[str, list[int]] = {}
    for sid, p in tasks:
        by_sub.setdefault(sid, []).append(p)
    return [T(subtopology_id=sid, partitions=sorted(ps)) for sid, ps in sorted(by_sub.items())]


@handles(ApiKey.StreamsGroupHeartbeat, 0, 1)
async def handle(ctx: BrokerContext, req: Request) -> R:
    b = req.body
    if ctx.features.level("streams.version") < 1:  # streams groups off (kafka-features disable)
        return _error(ctx, E.UNSUPPORTED_VERSION, DISABLED_MESSAGE)
    if not ctx.access.authorize(req, AclOperation.READ, ResourceType.GROUP, b.group_id):
        return _error(ctx, E.GROUP_AUTHORIZATION_FAILED, None)
    if b.topology is not None:
        names = _topology_topics(b.topology)
        internal = [n for n in names if n in KAFKA_INTERNAL_TOPICS]
        if internal:
            return _error(ctx, E.STREAMS_INVALID_TOPOLOGY, f"Use of Kafka internal topics {', '.join(internal)} in a "
                          f"Kafka Streams topology is prohibited.")  # fmt: skip
        invalid = [n for n in names if not _valid_topic(n)]
        if invalid:
            return _error(ctx, E.STREAMS_INVALID_TOPOLOGY, f"Topic names {', '.join(invalid)} are not valid topic "
                          f"names.")  # fmt: skip
        if ctx.access.authorizer is not None:
            allowed = ctx.access.authorize_names(req, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
            if len(allowed) < len(set(names)):
                return _error(ctx, E.TOPIC_AUTHORIZATION_FAILED, None)
    res = await ctx.groups.streams_heartbeat(b, req.header.client_id or "", req.client_host, req.version)
    if res.error:
        return _error(ctx, int(res.error), res.message)
    if res.to_create:
        _create_internal_topics(ctx, req, res)
    settings = ctx.groups.streams.settings
    out = R(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        member_id=res.member_id,
        member_epoch=res.epoch,
        heartbeat_interval_ms=settings.heartbeat_interval_ms,
        task_offset_interval_ms=settings.task_offset_interval_ms,
        status=[R.Status(status_code=code, status_detail=detail) for code, detail in res.status],
        endpoint_information_epoch=res.endpoint_epoch,
    )
    if req.version >= 1:
        out.acceptable_recovery_lag = settings.acceptable_recovery_lag
    if res.assignment is not None:
        out.active_tasks = _task_ids(res.assignment.active)
        out.standby_tasks = _task_ids(res.assignment.standby)
        out.warmup_tasks = []
    if res.endpoints is not None:
        E2P = R.EndpointToPartitions
        out.partitions_by_user_endpoint = [
            E2P(
                user_endpoint=E2P.Endpoint(host=host, port=port),
                active_partitions=[E2P.TopicPartition(topic=t, partitions=sorted(ps)) for t, ps in sorted(a.items())],
                standby_partitions=[E2P.TopicPartition(topic=t, partitions=sorted(ps)) for t, ps in sorted(s.items())],
            )
            for (host, port), a, s in res.endpoints
        ]
    return out


def _create_internal_topics(ctx: BrokerContext, req: Request, res: StreamsResult) -> None:
    """Create the missing internal topics for the member's principal; say in the status what was not."""
    may_all = cluster_allows(ctx, req, AclOperation.CREATE)
    denied: list[str] = []
    failed: list[str] = []
    if sum(max(t.partitions, 0) for t in res.to_create) > MAX_PARTITIONS_PER_REQUEST:
        # As CreateTopics refuses it (Kafka's controller: one batch of records at most); nothing is created.
        failed = [f"{t.name} (Unable to perform excessively large batch operation.)" for t in res.to_create]
        res.to_create = []
    for info in res.to_create:
        if not may_all and not ctx.access.authorize(req, AclOperation.CREATE, ResourceType.TOPIC, info.name):
            denied.append(info.name)
            continue
        if ctx.topics.get(info.name) is not None:
            continue
        try:
            _create(ctx, info)
        except (TopicError, OSError) as exc:
            log.warning("streams group %s: internal topic %s not created: %s", req.body.group_id, info.name, exc)
            failed.append(f"{info.name} ({exc})")
    extra = ""
    if denied:
        extra += f"; Unauthorized to CREATE on topics {', '.join(denied)}."
    if failed:
        extra += f"; Creation failed: {', '.join(failed[:3])}" + (
            f" and {len(failed) - 3} more" if len(failed) > 3 else ""
        )
    if extra:
        res.status = [(c, d + extra) if c == MISSING_INTERNAL_TOPICS else (c, d) for c, d in res.status]


def _create(ctx: BrokerContext, info: TopicInfo) -> None:
    """As CreateTopics would: a partition count, the replication factor one node has, valid configs."""
    if info.partitions <= 0:
        raise TopicError(E.INVALID_PARTITIONS, f"Number of partitions must be larger than 0, got {info.partitions}")
    if info.replication_factor not in (-1, 0, 1):
        message = f"Replication factor: {info.replication_factor} larger than available brokers: 1."
        raise TopicError(E.INVALID_REPLICATION_FACTOR, message)
    configs: dict[str, str | None] = dict(info.configs)
    parse_topic_configs(dict(info.configs), ctx.log_defaults)
    ctx.topics.create(info.name, info.partitions, configs)
    log.info("streams internal topic %s created: %d partitions", info.name, info.partitions)
