"""ListOffsets (2): earliest (-2), latest (-1; the last stable offset under read_committed), max timestamp (-3,
v7+), earliest local (-4, v8+), latest tiered (-5, v9+), earliest pending upload (-6, v11+), by timestamp.
v0 (clients before Kafka 0.10.1) asks for up to `max_num_offsets` segment start offsets instead, answered
as Kafka 3.x answers it (`PartitionLog.offsets_before`).

Without tiered storage, as on a Kafka 4.4 broker without it: -4 is -2, and -5 and -6 find nothing (offset,
timestamp and leader epoch -1, no error). v10 adds a timeout for remote-storage lookups, unused here.

With an authorizer, a topic the principal may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED for each
of its partitions, after the others (Kafka appends them to the answer)."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import AclOperation, ResourceType
from ..context import BrokerContext
from ..dispatch import handles
from ..seams import PartitionLog
from ._partitions import by_partition, leader_epoch_error

API = api(ApiKey.ListOffsets)
R = API.response
TR = R.ListOffsetsTopicResponse
PR = TR.ListOffsetsPartitionResponse

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5, -6
# The special timestamps a version may ask for (Kafka answers any other negative one UNSUPPORTED_VERSION).
SPECIAL_SINCE = {LATEST: 0, EARLIEST: 0, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9,
                 EARLIEST_PENDING_UPLOAD: 11}  # fmt: skip
TIERED = (LATEST_TIERED, EARLIEST_PENDING_UPLOAD)  # nothing is tiered here: no offset to answer


@handles(ApiKey.ListOffsets, 0, 11, kafka4_min=1)
def handle(ctx: BrokerContext, req: Request) -> R:
    v = req.version
    body = req.body

    def error(p: Any, code: int) -> Any:
        return PR(partition_index=p.partition_index, error_code=code, timestamp=-1, offset=-1, leader_epoch=-1,
                  old_style_offsets=[])  # fmt: skip

    if v >= 2 and body.isolation_level not in (0, 1):
        # Kafka fails every partition (the isolation level does not parse), keeping the request's shape.
        return R(
            throttle_time_ms=0,
            topics=[
                TR(name=t.name, partitions=[error(p, E.UNKNOWN_SERVER_ERROR) for p in t.partitions])
                for t in body.topics
            ],
        )

    def unsupported(ts: int) -> bool:
        return ts < 0 and SPECIAL_SINCE.get(ts, 1 << 15) > v

    def answer(plog: PartitionLog, p: Any) -> Any:
        ts = p.timestamp
        if v == 0:
            return answer_v0(plog, p)
        if v >= 4:
            code = leader_epoch_error(p.current_leader_epoch)
            if code is not None:
                return error(p, code)
        offset, stamp = -1, -1
        # What a consumer of this isolation level may fetch (Kafka's lastFetchableOffset): read_committed
        # ones start from the last stable offset, not the end, and no lookup answers at or beyond it.
        fetchable = plog.last_stable_offset if v >= 2 and body.isolation_level == 1 else plog.next_offset
        if ts in TIERED:
            return PR(partition_index=p.partition_index, error_code=0, timestamp=-1, offset=-1, leader_epoch=-1)
        if ts == LATEST:
            offset = fetchable
        elif ts in (EARLIEST, EARLIEST_LOCAL):
            offset = plog.log_start_offset
        else:
            found = plog.max_timestamp() if ts == MAX_TIMESTAMP else plog.offset_for_timestamp(ts)
            if found is not None and 0 <= found[0] < fetchable:
                offset, stamp = found
        leader_epoch = 0 if offset >= 0 else -1
        return PR(
            partition_index=p.partition_index, error_code=0, timestamp=stamp, offset=offset, leader_epoch=leader_epoch
        )

    def answer_v0(plog: PartitionLog, p: Any) -> Any:
        if p.max_num_offsets < 0:  # Kafka fails to size its answer: an unexpected error
            return error(p, E.UNKNOWN_SERVER_ERROR)
        offsets = plog.offsets_before(p.timestamp, p.max_num_offsets)
        high = plog.next_offset
        if body.replica_id == -1 and any(o > high for o in offsets):  # a consumer never gets past the HW
            offsets = [high, *(o for o in offsets if o <= high)]
        return PR(partition_index=p.partition_index, error_code=0, old_style_offsets=offsets)

    forbidden: list[Any] = []
    asked_topics = body.topics
    if ctx.access.authorizer is not None:
        names = {t.name for t in body.topics}
        allowed = ctx.access.authorize_names(req, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        asked_topics = [t for t in body.topics if t.name in allowed]
        forbidden = [
            TR(name=t.name, partitions=[error(p, E.TOPIC_AUTHORIZATION_FAILED) for p in t.partitions])
            for t in body.topics
            if t.name not in allowed
        ]
    # As Kafka: one entry per topic (topics named twice are merged, those with no partitions dropped) and
    # a partition asked for twice is one INVALID_REQUEST instead of an answer.
    merged: dict[str, list[Any]] = {}
    for t in asked_topics:
        if t.partitions:
            merged.setdefault(t.name, []).extend(t.partitions)
    topics = []
    for name, parts in merged.items():
        seen = Counter(p.partition_index for p in parts)
        once = [p for p in parts if seen[p.partition_index] == 1]
        twice = {p.partition_index: p for p in parts if seen[p.partition_index] > 1}
        # A timestamp this version cannot ask for is refused before the partition is looked up.
        refused = [error(p, E.UNSUPPORTED_VERSION) for p in once if unsupported(p.timestamp)]
        asked = [p for p in once if not unsupported(p.timestamp)]
        [(_, rows)] = by_partition(ctx, [SimpleNamespace(name=name, partitions=asked)], answer, error)
        rows += refused + [error(p, E.INVALID_REQUEST) for p in twice.values()]
        topics.append(TR(name=name, partitions=rows))
    return R(throttle_time_ms=0, topics=topics + forbidden)
