"""Committed offsets: who may commit, and what commit, fetch, delete and expiry change.

Offsets belong to a group whatever its kind, and outlive its members. These functions change the groups in
memory and return the store records that make the change durable; the coordinator writes them (and owns the
group table, so dropping a group from it is its call too).
"""

from __future__ import annotations

from collections.abc import Iterable

from logbroker.protocol.errors import ErrorCode as E

from .model import Committed, ConsumerGroup, Group, GroupError, GroupState, TopicPartition
from .store import Record, group_key, offset_key


def check_commit(g: Group | None, group_id: str, member_id: str, generation: int, instance_id: str | None) -> E:
    """OffsetCommit's group-level check; `generation` is the member epoch for KIP-848 groups."""
    if not group_id:
        return E.INVALID_GROUP_ID
    if generation < 0 and not member_id:
        # A commit from outside any generation (assign() users, admin tools): only for groups with no
        # members; Kafka answers UNKNOWN_MEMBER_ID otherwise.
        if g is not None and g.members:
            return E.UNKNOWN_MEMBER_ID
        return E.NONE
    if isinstance(g, ConsumerGroup):
        cm = g.members.get(member_id)
        if cm is None:
            return E.UNKNOWN_MEMBER_ID
        return E.STALE_MEMBER_EPOCH if generation != cm.epoch else E.NONE
    if g is None:
        return E.UNKNOWN_MEMBER_ID
    err = g.validate_member(member_id, instance_id)
    if err != E.NONE:
        return err
    if generation != g.generation:
        return E.ILLEGAL_GENERATION
    if g.state == GroupState.COMPLETING:
        return E.REBALANCE_IN_PROGRESS
    g.members[member_id].touch()  # a commit counts as a sign of life, as in Kafka
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
    g: Group | None, group_id: str, partitions: list[TopicPartition]
) -> tuple[dict[TopicPartition, E], list[Record]]:
    """OffsetDelete: refused per partition while a member subscribes to its topic (Kafka's rule)."""
    if g is None:
        raise GroupError(E.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
    subscribed = g.subscribed_topics() if g.members else set()
    result: dict[TopicPartition, E] = {}
    deletes: list[Record] = []
    for tp in partitions:
        if tp[0] in subscribed:
            result[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
            continue
        if g.offsets.pop(tp, None) is not None:
            deletes.append((offset_key(group_id, tp[0], tp[1]), None))
        result[tp] = E.NONE
    return result, deletes


def delete_all(g: Group) -> list[Record]:
    """Every offset of a group being deleted (the caller adds the group record's deletion)."""
    return [(offset_key(g.group_id, t, p), None) for t, p in g.offsets]


def expire(groups: Iterable[Group], cutoff_ms: int) -> tuple[list[Record], list[str]]:
    """Offsets committed before `cutoff_ms` in groups empty since before it; also which groups are left with
    nothing (no members, no offsets) and go from the table."""
    deletes: list[Record] = []
    gone: list[str] = []
    for g in groups:
        if g.state != GroupState.EMPTY or g.members:
            continue
        for tp, c in list(g.offsets.items()):
            if max(c.commit_ms, g.empty_since_ms) < cutoff_ms:
                del g.offsets[tp]
                deletes.append((offset_key(g.group_id, tp[0], tp[1]), None))
        if not g.offsets:
            deletes.append((group_key(g.group_id), None))
            gone.append(g.group_id)
    return deletes, gone


def forget_topic(groups: Iterable[Group], topic: str) -> list[Record]:
    """A deleted topic takes its committed offsets with it (as in Kafka)."""
    deletes: list[Record] = []
    for g in groups:
        for tp in [tp for tp in g.offsets if tp[0] == topic]:
            del g.offsets[tp]
            deletes.append((offset_key(g.group_id, tp[0], tp[1]), None))
    return deletes
