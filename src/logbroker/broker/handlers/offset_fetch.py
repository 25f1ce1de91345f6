"""OffsetFetch (9): one group (v0-7) or several (v8+); unknown partitions answer offset -1.

With `require_stable` (v7+, set by read_committed consumers) a partition whose group has transactional offsets
pending answers UNSTABLE_OFFSET_COMMIT with offset -1, per partition in every version (Kafka's
OffsetMetadataManager.fetchOffsets/fetchAllOffsets): the consumer retries rather than start from the offset
the transaction is about to replace. A fetch of all partitions lists only committed ones, as in Kafka.
v10 names topics by id: an unknown id is UNKNOWN_TOPIC_ID on each partition asked for, its id echoed.
v9+ carry the member id and epoch: in a KIP-848 group they must be the member's (UNKNOWN_MEMBER_ID,
STALE_MEMBER_EPOCH) unless the id is null and the epoch negative.

With an authorizer (Kafka's KafkaApis): a group needs DESCRIBE (else GROUP_AUTHORIZATION_FAILED for the
group, with no topics); a named topic without DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED per partition
after the others, and a fetch of all partitions silently leaves such topics out.
"""

from __future__ import annotations

from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext, NoResponse
from ..dispatch import handles
from ._groups import resolve_topic_ids, topic_id_of

TOPIC_IDS_FROM = 10  # OffsetFetch versions that name topics by id (in the v8+ layout of groups)

API = api(ApiKey.OffsetFetch)
R = API.response


Row = tuple[int, int, int, str | None, int]  # partition, offset, leader epoch, metadata, error code


def _lookup(ctx: BrokerContext, group_id: str, topics: Any, require_stable: bool) -> list[tuple[str, list[Row]]]:
    wanted = None
    if topics is not None:
        wanted = [(t.name, p) for t in topics for p in t.partition_indexes]
    found = ctx.groups.fetch_offsets(group_id, wanted)
    keys = wanted if wanted is not None else sorted(found)
    unstable = ctx.groups.unstable_offsets(group_id, keys) if require_stable else set()
    by_topic: dict[str, list[Row]] = {}
    for t, p in keys:
        c = found.get((t, p))
        if (t, p) in unstable:
            row: Row = (p, -1, -1, "", int(E.UNSTABLE_OFFSET_COMMIT))
        elif c is None:
            row = (p, -1, -1, "", 0)
        else:
            row = (p, c.offset, c.leader_epoch, c.metadata, 0)
        by_topic.setdefault(t, []).append(row)
    return list(by_topic.items())


def _group(ctx: BrokerContext, req: Request, group_id: str, topics: Any, stable: bool) -> tuple[int, list]:
    """The group's error code and its topics' rows, as the principal may see them."""
    if ctx.access.authorizer is None:
        return 0, _lookup(ctx, group_id, topics, stable)
    if not ctx.access.authorize(req, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return int(E.GROUP_AUTHORIZATION_FAILED), []
    if topics is None:
        rows = _lookup(ctx, group_id, None, stable)
        allowed = ctx.access.authorize_names(req, AclOperation.DESCRIBE, ResourceType.TOPIC, (name for name, _ in rows))
        return 0, [(name, r) for name, r in rows if name in allowed]
    allowed = ctx.access.authorize_names(req, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in topics))
    rows = _lookup(ctx, group_id, [t for t in topics if t.name in allowed], stable)
    denied = int(E.TOPIC_AUTHORIZATION_FAILED)
    rows += [(t.name, [(p, -1, -1, "", denied) for p in t.partition_indexes]) for t in topics if t.name not in allowed]
    return 0, rows


def _topic_id(ctx: BrokerContext, name: Any, ids: dict[str, Any]) -> Any:
    """A v10 answer's topic id: the one asked by, the topic's own (all-partitions fetch), or the unknown
    id itself (such rows carry the id where the name would be)."""
    if not isinstance(name, str):
        return name
    return ids.get(name) or topic_id_of(ctx, name)


@handles(ApiKey.OffsetFetch, 0, 10, kafka4_min=1, kafka4_advertises=True)
def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    b = req.body
    stable = req.version >= 7 and bool(b.require_stable)
    by_id = req.version >= TOPIC_IDS_FROM
    if req.version >= 8:
        groups = []
        for g in b.groups:
            G = R.OffsetFetchResponseGroup
            T = G.OffsetFetchResponseTopics
            unknown: list[Any] = []
            ids: dict[str, Any] = {}
            asked = g.topics
            if by_id and asked is not None:
                resolve_topic_ids(ctx, asked)
                unknown = [t for t in asked if not t.name]
                asked = [t for t in asked if t.name]
                ids = {t.name: t.topic_id for t in asked}
            group_err, found = _group(ctx, req, g.group_id, asked, stable)
            if req.version >= 9 and group_err == 0:
                member_err = ctx.groups.check_fetch(g.group_id, g.member_id, g.member_epoch)
                if member_err:
                    group_err, found, unknown = int(member_err), [], []
            if by_id and group_err == 0:
                # An unknown id: UNKNOWN_TOPIC_ID on each partition, the id echoed (Kafka answers them last).
                missing = int(E.UNKNOWN_TOPIC_ID)
                found += [(t.topic_id, [(p, -1, -1, "", missing) for p in t.partition_indexes]) for t in unknown]
            topics = [
                T(
                    name=name if isinstance(name, str) else "",
                    topic_id=_topic_id(ctx, name, ids) if by_id else None,
                    partitions=[
                        T.OffsetFetchResponsePartitions(
                            partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=m, error_code=err
                        )
                        for p, o, e, m, err in rows
                    ],
                )
                for name, rows in found
            ]
            groups.append(G(group_id=g.group_id, topics=topics, error_code=group_err))
        return R(throttle_time_ms=0, groups=groups)
    T = R.OffsetFetchResponseTopic
    group_err, found = _group(ctx, req, b.group_id, b.topics, stable)
    topics = [
        T(
            name=name,
            partitions=[
                T.OffsetFetchResponsePartition(
                    partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=m, error_code=err
                )
                for p, o, e, m, err in rows
            ],
        )
        for name, rows in found
    ]
    return R(throttle_time_ms=0, topics=topics, error_code=group_err)
