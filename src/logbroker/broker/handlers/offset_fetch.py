"""OffsetFetch (9): one group (v0-7) or several (v8+); unknown partitions answer offset -1."""

from __future__ import annotations

from typing import Any

from logbroker.protocol import ApiKey, Request, api

from ..context import BrokerContext, NoResponse
from ..dispatch import handles

API = api(ApiKey.OffsetFetch)
R = API.response


def _lookup(ctx: BrokerContext, group_id: str, topics: Any) -> list[tuple[str, list[tuple[int, int, int, str | None]]]]:
    wanted = None
    if topics is not None:
        wanted = [(t.name, p) for t in topics for p in t.partition_indexes]
    found = ctx.groups.fetch_offsets(group_id, wanted)
    by_topic: dict[str, list[tuple[int, int, int, str | None]]] = {}
    keys = wanted if wanted is not None else sorted(found)
    for t, p in keys:
        c = found.get((t, p))
        row = (p, c.offset, c.leader_epoch, c.metadata) if c else (p, -1, -1, "")
        by_topic.setdefault(t, []).append(row)
    return list(by_topic.items())


@handles(ApiKey.OffsetFetch, 0, 9, rejected_below=1)
def handle(ctx: BrokerContext, req: Request) -> R | NoResponse:
    b = req.body
    if req.version >= 8:
        groups = []
        for g in b.groups:
            G = R.OffsetFetchResponseGroup
            T = G.OffsetFetchResponseTopics
            topics = [
                T(
                    name=name,
                    partitions=[
                        T.OffsetFetchResponsePartitions(
                            partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=m, error_code=0
                        )
                        for p, o, e, m in rows
                    ],
                )
                for name, rows in _lookup(ctx, g.group_id, g.topics)
            ]
            groups.append(G(group_id=g.group_id, topics=topics, error_code=0))
        return R(throttle_time_ms=0, groups=groups)
    T = R.OffsetFetchResponseTopic
    topics = [
        T(
            name=name,
            partitions=[
                T.OffsetFetchResponsePartition(
                    partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=m, error_code=0
                )
                for p, o, e, m in rows
            ],
        )
        for name, rows in _lookup(ctx, b.group_id, b.topics)
    ]
    return R(throttle_time_ms=0, topics=topics, error_code=0)
