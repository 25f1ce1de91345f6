"""Committed offsets: who may commit, and what commit, fetch, delete and expiry change.

Offsets belong to a group whatever its kind, and outlive its members. These functions change the groups in
memory and return the store records that make the change durable; the coordinator writes them (and owns the
group table, so dropping a group from it is its call too).

Transactional offsets (TxnOffsetCommit, KIP-98/447) wait in `Group.txn_offsets` under their producer id until the
transaction coordinator ends the transaction (`complete`): a commit makes them committed offsets, an abort
drops them. While they wait they are invisible to OffsetFetch, make `require_stable` fetches answer
UNSTABLE_OFFSET_COMMIT, keep their partitions' offsets from expiring and their group from being removed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from logbroker.protocol.errors import ErrorCode as E

from .kinds import AnyGroup
from .model import (
    ClassicGroup,
    Committed,
    ConsumerGroup,
    GroupError,
    GroupState,
    PendingOffset,
    TopicPartition,
)
from .store import Record, group_key, offset_key, pending_key


def check_commit(g: AnyGroup | None, member_id: str, generation: int, instance_id: str | None, version: int) -> E:
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
        if cm.classic is not None:  # a classic member of a consumer group: its epoch is its generation
            return E.ILLEGAL_GENERATION if generation != cm.epoch else E.NONE
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


def check_txn_commit(g: AnyGroup | None, member_id: str, generation: int, instance_id: str | None) -> E:
    """TxnOffsetCommit's group check, Kafka's (OffsetMetadataManager.validateTransactionalOffsetCommit): like
    OffsetCommit's, except that an unknown group with a generation is ILLEGAL_GENERATION in every version, a
    stale KIP-848 member epoch is ILLEGAL_GENERATION too (what producers understand), and neither a rebalance
    in progress nor members in the group refuse a commit without member id and generation (TxnOffsetCommit
    v0-2 have neither)."""
    if g is None:
        return E.NONE if generation < 0 else E.ILLEGAL_GENERATION
    if isinstance(g, ConsumerGroup):
        if generation < 0 and not g.members:
            return E.NONE
        cm = g.members.get(member_id)
        if cm is None:
            return E.UNKNOWN_MEMBER_ID
        return E.ILLEGAL_GENERATION if generation != cm.epoch else E.NONE
    if g.state == GroupState.DEAD:
        return E.COORDINATOR_NOT_AVAILABLE
    if generation < 0 and g.state == GroupState.EMPTY:
        return E.NONE
    if generation >= 0 or member_id or instance_id is not None:
        err = g.validate_member(member_id, instance_id)
        if err != E.NONE:
            return err
        if generation != g.generation:
            return E.ILLEGAL_GENERATION
    return E.NONE


def metadata_too_large(metadata: str | None, limit: int) -> bool:
    """Kafka's offset.metadata.max.bytes check, which counts Java chars (UTF-16 code units), not bytes."""
    if metadata is None or len(metadata) <= limit // 2:
        return False
    return len(metadata.encode("utf-16-le", errors="surrogatepass")) // 2 > limit


def commit(g: AnyGroup, offsets: dict[TopicPartition, Committed]) -> list[Record]:
    """Plain commits; a pending transactional offset of the same partition is now older than the committed one,
    so its transaction's commit must not overwrite it (Kafka keeps the most recent write)."""
    g.offsets.update(offsets)
    records: list[Record] = [(offset_key(g.group_id, t, p), c.to_json()) for (t, p), c in offsets.items()]
    if g.txn_offsets:
        for tp in offsets:
            records += _supersede(g, tp, None)
    return records


def store_pending(g: AnyGroup, producer_id: int, offsets: dict[TopicPartition, Committed], seq: int) -> list[Record]:
    """Pending offsets of a producer's transaction (a second write of a partition replaces the first)."""
    mine = g.txn_offsets.setdefault(producer_id, {})
    records: list[Record] = []
    for (t, p), c in offsets.items():
        po = mine[(t, p)] = PendingOffset(c, seq)
        records.append((pending_key(g.group_id, producer_id, t, p), po.to_json()))
    return records


def complete(g: AnyGroup, producer_id: int, commit: bool) -> list[Record]:
    """The end of a producer's transaction for this group (Kafka's replayEndTransactionMarker): on commit its
    pending offsets become committed ones, unless a later write of the partition was committed first; on
    abort they are dropped. Nothing to do (a repeated call) returns no records."""
    mine = g.txn_offsets.pop(producer_id, None)
    if mine is None:
        return []
    records: list[Record] = [(pending_key(g.group_id, producer_id, t, p), None) for t, p in mine]
    if commit:
        for tp, po in mine.items():
            if po.stale:
                continue
            g.offsets[tp] = po.committed
            records.append((offset_key(g.group_id, tp[0], tp[1]), po.committed.to_json()))
            records += _supersede(g, tp, po.seq)
    return records


def _supersede(g: AnyGroup, tp: TopicPartition, before: int | None) -> list[Record]:
    """Mark other transactions' pending offsets of `tp` older than a commit just made (all, or those written
    before `before`) as superseded, durably."""
    records: list[Record] = []
    for pid, entries in g.txn_offsets.items():
        po = entries.get(tp)
        if po is not None and not po.stale and (before is None or po.seq < before):
            po.stale = True
            records.append((pending_key(g.group_id, pid, tp[0], tp[1]), po.to_json()))
    return records


def unstable(g: AnyGroup | None, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
    """Which of `partitions` have transactional offsets waiting (OffsetFetch `require_stable` answers
    UNSTABLE_OFFSET_COMMIT for them)."""
    if g is None or not g.txn_offsets:
        return set()
    waiting = {tp for entries in g.txn_offsets.values() for tp in entries}
    return waiting.intersection(partitions)


def _drop_pending(g: AnyGroup, tp: TopicPartition) -> list[Record]:
    """An offset tombstone removes every transaction's pending offset of the partition, as in Kafka (their
    producers still count as open transactions of the group until they end)."""
    records: list[Record] = []
    for pid, entries in g.txn_offsets.items():
        if entries.pop(tp, None) is not None:
            records.append((pending_key(g.group_id, pid, tp[0], tp[1]), None))
    return records


def fetch(g: AnyGroup | None, partitions: list[TopicPartition] | None) -> dict[TopicPartition, Committed]:
    """The committed offsets of `partitions` (all of them when None); uncommitted ones are left out."""
    if g is None:
        return {}
    if partitions is None:
        return dict(g.offsets)
    return {tp: g.offsets[tp] for tp in partitions if tp in g.offsets}


def delete(
    g: AnyGroup | None, group_id: str, partitions: list[TopicPartition], known: Iterable[str] = ()
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
        deletes += _drop_pending(g, tp)
        result[tp] = E.NONE
    return result, deletes


def delete_all(g: AnyGroup) -> list[Record]:
    """Every offset of a group being deleted, pending transactional ones too (the caller adds the group
    record's deletion)."""
    records: list[Record] = [(offset_key(g.group_id, t, p), None) for t, p in g.offsets]
    for pid, entries in g.txn_offsets.items():
        records += [(pending_key(g.group_id, pid, t, p), None) for t, p in entries]
    return records


def expire(
    groups: Iterable[AnyGroup], now: int, retention_ms: int, known: Iterable[str] = ()
) -> tuple[list[Record], list[str], int]:
    """Kafka's offsets cleanup (OffsetMetadataManager.cleanupExpiredOffsets): in each group, an offset of a
    topic the group does not subscribe to expires at its explicit expiry (OffsetCommit v2-4), else a retention
    period after its group's `expiry_base`; a group left with no offsets that is empty goes as well, offsets
    or not (so groups made by failed joins or idle consumers do not pile up). An offset with a transactional
    offset of its partition pending does not expire, and a group with an open transaction is not removed
    (Kafka's rules). Returns the tombstones, the groups to drop and how many offsets expired."""
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
            waiting = unstable(g, g.offsets)
            for tp, c in list(g.offsets.items()):
                if subscribed(tp[0]) or tp in waiting:
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
        if all_expired and g.is_empty and not g.txn_offsets:
            if g.persisted:
                deletes.append((group_key(g.group_id), None))
            gone.append(g.group_id)
    return deletes, gone, expired


def forget_topic(groups: Iterable[AnyGroup], topic: str) -> list[Record]:
    """A deleted topic takes its committed and pending offsets with it (as in Kafka)."""
    deletes: list[Record] = []
    for g in groups:
        for tp in [tp for tp in g.offsets if tp[0] == topic]:
            del g.offsets[tp]
            deletes.append((offset_key(g.group_id, tp[0], tp[1]), None))
        for tp in {tp for entries in g.txn_offsets.values() for tp in entries if tp[0] == topic}:
            deletes += _drop_pending(g, tp)
    return deletes


def _subscribed(g: AnyGroup, known: Iterable[str]) -> Callable[[str], bool]:
    """Whether the group reads a topic (its offsets then never expire or get deleted), worked out once for
    many offsets. Kafka's rule: when a classic group's subscriptions are unknown, a consumer-protocol group
    counts as subscribed to everything, any other group to nothing."""
    topics = g.subscribed_topics(known)
    if topics is None:
        everything = g.protocol_type == "consumer"
        return lambda _topic: everything
    return topics.__contains__
