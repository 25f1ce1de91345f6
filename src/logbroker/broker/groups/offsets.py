"""Committed offsets: who may commit, and what commit, fetch, delete and expiry change.

Offsets belong to a group whatever its kind, and outlive its members. These functions change the groups in
memory and return the store records that make the change durable; the coordinator writes them (and owns the
group table, so dropping a group from it is its call too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from logbroker.protocol.errors import ErrorCode as E

from .model import ClassicGroup, Committed, ConsumerGroup, Group, GroupError, GroupState, TopicPartition
from .store import Record, group_key, offset_key


def check_commit(g: Group | None, member_id: str, generation: int, instance_id: str | None, version: int) -> E:
    """OffsetCommit's group-level check, Kafka's: any group id is accepted (the empty one too), and a commit
    from outside any generation (`generation` < 0: assign() users, admin tools) creates a simple group or
    goes to an empty one. `generation` is the member epoch for KIP-848 groups."""
    if g is None:
        if generation < 0:
            return E.NONE
        # v9 says what is wrong; older versions keep the answer their clients know.
        return E.GROUP_ID_NOT_FOUND if version >= 9 else E.ILLEGAL_GENERATION
    if isinstance(g, ConsumerGroup):
        if generation < 0 and not g.members:
            return E.NONE
        cm = g.members.get(member_id)
        if cm is None:
            return E.UNKNOWN_MEMBER_ID
        if version < 9:
            return E.UNSUPPORTED_VERSION  # KIP-848 members commit with v9+
        return E.STALE_MEMBER_EPOCH if generation != cm.epoch else E.NONE
    if generation < 0 and g.state == GroupState.EMPTY:
        return E.NONE
    if generation >= 0 or member_id or instance_id is not None:
        err = g.validate_member(member_id, instance_id)
        if err != E.NONE:
            return err
        if generation != g.generation:
            return E.ILLEGAL_GENERATION
    elif g.state != GroupState.EMPTY:
        return E.UNKNOWN_MEMBER_ID  # no member id and no generation: only while the group has no members
    if g.state == GroupState.COMPLETING:
        return E.REBALANCE_IN_PROGRESS
    m = g.members.get(member_id)
    if m is not None:
        m.touch()  # a commit counts as a sign of life, as in Kafka
    return E.NONE


def commit(g: Group, offsets: dict[TopicPartition, Committed]) -> list[Record]:
    g.offsets.update(offsets)
    return [(offset_key(g.group_id, t, p), c.to_json()) for (t, p), c in offsets.items()]


def fetch(g: Group | None, partitions: list[TopicPartition] | None) -> dict[TopicPartition, Committed]:
    """The committed offsets of `partitions` (all of them when None); uncommitted ones are left out."""
    if g is None:
        return {}
    if partitions is None:
        return dict(g.offsets)
    return {tp: g.offsets[tp] for tp in partitions if tp in g.offsets}


def delete(
    g: Group | None, group_id: str, partitions: list[TopicPartition], known: Iterable[str] = ()
) -> tuple[dict[TopicPartition, E], list[Record]]:
    """OffsetDelete: refused per partition while a member subscribes to its topic (Kafka's rule)."""
    if not group_id:
        raise GroupError(E.INVALID_GROUP_ID)
    if g is None:
        raise GroupError(E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
    if isinstance(g, ClassicGroup) and not g.is_empty and g.protocol_type != "consumer":
        raise GroupError(E.NON_EMPTY_GROUP)  # Kafka cannot tell what such a group reads
    result: dict[TopicPartition, E] = {}
    deletes: list[Record] = []
    subscribed = _subscribed(g, known)
    for tp in partitions:
        if subscribed(tp[0]):
            result[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
            continue
        if g.offsets.pop(tp, None) is not None:
            deletes.append((offset_key(group_id, tp[0], tp[1]), None))
        result[tp] = E.NONE
    return result, deletes


def delete_all(g: Group) -> list[Record]:
    """Every offset of a group being deleted (the caller adds the group record's deletion)."""
    return [(offset_key(g.group_id, t, p), None) for t, p in g.offsets]


def expire(
    groups: Iterable[Group], now: int, retention_ms: int, known: Iterable[str] = ()
) -> tuple[list[Record], list[str], int]:
    """Kafka's offsets cleanup (OffsetMetadataManager.cleanupExpiredOffsets): in each group, an offset of a
    topic the group does not subscribe to expires at its explicit expiry (OffsetCommit v2-4), else a retention
    period after its group's `expiry_base`; a group left with no offsets that is empty goes as well, offsets
    or not (so groups made by failed joins or idle consumers do not pile up). Returns the tombstones, the
    groups to drop and how many offsets expired."""
    deletes: list[Record] = []
    gone: list[str] = []
    expired = 0
    names = list(known)
    for g in groups:
        all_expired = True
        if g.offsets:
            base = g.expiry_base()
            if base is None:
                continue
            subscribed = _subscribed(g, names)
            for tp, c in list(g.offsets.items()):
                if subscribed(tp[0]):
                    all_expired = False
                    continue
                if c.expire_ms is not None:
                    due = now >= c.expire_ms
                else:
                    due = now - (g.empty_since_ms if base == "empty" else c.commit_ms) >= retention_ms
                if due:
                    del g.offsets[tp]
                    deletes.append((offset_key(g.group_id, tp[0], tp[1]), None))
                    expired += 1
                else:
                    all_expired = False
        if all_expired and g.is_empty:
            if g.persisted:
                deletes.append((group_key(g.group_id), None))
            gone.append(g.group_id)
    return deletes, gone, expired


def forget_topic(groups: Iterable[Group], topic: str) -> list[Record]:
    """A deleted topic takes its committed offsets with it (as in Kafka)."""
    deletes: list[Record] = []
    for g in groups:
        for tp in [tp for tp in g.offsets if tp[0] == topic]:
            del g.offsets[tp]
            deletes.append((offset_key(g.group_id, tp[0], tp[1]), None))
    return deletes


def _subscribed(g: Group, known: Iterable[str]) -> Callable[[str], bool]:
    """Whether the group reads a topic (its offsets then never expire or get deleted), worked out once for
    many offsets. Kafka's rule: when a classic group's subscriptions are unknown, a consumer-protocol group
    counts as subscribed to everything, any other group to nothing."""
    topics = g.subscribed_topics(known)
    if topics is None:
        everything = g.protocol_type == "consumer"
        return lambda _topic: everything
    return topics.__contains__
