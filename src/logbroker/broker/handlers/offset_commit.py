"""OffsetCommit (8): validated against the group's generation, durable before the answer.

As in Kafka, any group id is accepted (the empty one too), a commit from outside a generation creates a
"simple" group, and v2-4's `retention_time_ms` gives the offsets an explicit expiry. v10 names topics by
id: an unknown one is UNKNOWN_TOPIC_ID on each of its partitions, before anything else is looked at.
v0 (clients of Kafka 0.8.1, whose brokers kept these offsets in ZooKeeper) and a v1 commit without a member
id (0.8.2 clients such as kpax, which send generation 0) commit as member-less commits: accepted for a group
without members, UNKNOWN_MEMBER_ID while it has some. Kafka 3.9 in KRaft mode answers v0 UNSUPPORTED_VERSION
and such a v1 commit to a group it does not know ILLEGAL_GENERATION; logbroker lets those clients work.

With an authorizer (Kafka's KafkaApis order): without READ on the group every partition is answered
GROUP_AUTHORIZATION_FAILED and nothing is looked at; then a topic without READ is TOPIC_AUTHORIZATION_FAILED
for each of its partitions. The group sees only what remains (nothing at all when nothing remains).
"""

from __future__ import annotations

import time
from typing import Any

from logbroker.broker.groups import Committed
from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext, NoResponse
from ..dispatch import handles
from ._groups import resolve_topic_ids

TOPIC_IDS_FROM = 10  # OffsetCommit versions that name topics by id

API = api(ApiKey.OffsetCommit)
R = API.response
TR = R.OffsetCommitResponseTopic
PR = TR.OffsetCommitResponsePartition


@handles(ApiKey.OffsetCommit, 0, 10, kafka4_min=2, kafka4_advertises=True)
async def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    b = req.body
    v = req.version
    by_id = v >= TOPIC_IDS_FROM
    if by_id:
        resolve_topic_ids(ctx, b.topics)
    readable: set[str] | None = None
    if ctx.access.authorizer is not None:
        if not ctx.access.authorize(req, AclOperation.READ, ResourceType.GROUP, b.group_id):
            return _refused(b, E.GROUP_AUTHORIZATION_FAILED)
        readable = ctx.access.authorize_names(
            req, AclOperation.READ, ResourceType.TOPIC, (t.name for t in b.topics if t.name or not by_id)
        )
        if not any(
            t.name in readable and ctx.topics.log(t.name, p.partition_index) is not None
            for t in b.topics
            for p in t.partitions
        ):
            # Kafka answers without the coordinator when no partition is both readable and known.
            return _refused(b, E.TOPIC_AUTHORIZATION_FAILED, readable, by_id)
    coord = ctx.groups
    member = b.member_id if v >= 1 else ""
    generation = b.generation_id_or_member_epoch if v >= 1 else -1
    if v <= 1 and not member:
        # A 0.8.2-era commit (kpax sends generation 0): those brokers had no group membership and took it.
        # As a member-less commit it is accepted for a group without members, refused while it has some.
        generation = -1
    group_err = coord.check_commit(b.group_id, member, generation, b.group_instance_id if v >= 7 else None, v,
                                   [(t.name, p.partition_index) for t in b.topics for p in t.partitions])  # fmt: skip
    now = int(time.time() * 1000)
    retention = b.retention_time_ms if 2 <= v <= 4 else -1
    expire_ms = None if retention == -1 else now + retention
    accepted: dict[tuple[str, int], Committed] = {}
    topics = []
    for t in b.topics:
        parts = []
        for p in t.partitions:
            # Unknown partitions are answered before the group is looked at (Kafka's KafkaApis does so).
            if by_id and not t.name:
                err = E.UNKNOWN_TOPIC_ID
            elif readable is not None and t.name not in readable:
                err = E.TOPIC_AUTHORIZATION_FAILED
            elif ctx.topics.log(t.name, p.partition_index) is None:
                err = E.UNKNOWN_TOPIC_OR_PARTITION
            elif group_err != E.NONE:
                err = group_err
            elif p.committed_metadata is not None and (
                len(p.committed_metadata.encode()) > coord.config.offset_metadata_max_bytes
            ):
                err = E.OFFSET_METADATA_TOO_LARGE
            else:
                err = E.NONE
                epoch = p.committed_leader_epoch if v >= 6 else -1
                # v1 carries the commit's time (-1: now), kept as given: expiry counts from it.
                stamp = p.commit_timestamp if v == 1 and p.commit_timestamp != -1 else now
                accepted[(t.name, p.partition_index)] = Committed(
                    p.committed_offset, epoch, p.committed_metadata, stamp, expire_ms
                )
            parts.append(PR(partition_index=p.partition_index, error_code=int(err)))
        topics.append(TR(name=t.name, topic_id=t.topic_id, partitions=parts))
    if by_id:  # Kafka answers unknown ids first
        topics.sort(key=lambda tr: bool(tr.name))
    if accepted:
        try:
            await coord.commit(b.group_id, accepted)
        except OSError:
            for tr in topics:
                for pr in tr.partitions:
                    if pr.error_code == 0:
                        pr.error_code = int(E.KAFKA_STORAGE_ERROR)
    return R(throttle_time_ms=0, topics=topics)


def _refused(b: Any, error: E, readable: set[str] | None = None, by_id: bool = False) -> R:
    """Every partition answered `error`; with `readable`, only the unreadable topics get it and the others
    UNKNOWN_TOPIC_OR_PARTITION (the answer Kafka gives without asking the group)."""
    topics = []
    for t in b.topics:
        code = error if readable is None or t.name not in readable else E.UNKNOWN_TOPIC_OR_PARTITION
        if by_id and not t.name and error == E.TOPIC_AUTHORIZATION_FAILED:
            code = E.UNKNOWN_TOPIC_ID
        topics.append(
            TR(
                name=t.name,
                topic_id=t.topic_id,
                partitions=[PR(partition_index=p.partition_index, error_code=int(code)) for p in t.partitions],
            )
        )
    return R(throttle_time_ms=0, topics=topics)
