"""Share groups (KIP-932, Kafka 4's queues): membership, assignment, share sessions and share-partition
state, on one node.

Membership follows Kafka's share-group heartbeat: a member joins with epoch 0 and the topics it subscribes
to, leaves with epoch -1, and is fenced (FENCED_MEMBER_EPOCH) for an epoch that is neither its current nor
its previous one. Every change of the members, their subscriptions or the topics' partition counts bumps
the group epoch and recomputes the assignment with Kafka's "simple" assignor's rules: partitions spread
evenly, sticky where possible, and shared by several members when there are more members than partitions
(records, not partitions, are what members exclusively hold). There is no revocation handshake: a member's
new assignment applies at its next heartbeat. A member silent for the session timeout is removed, and the
records it held are released.

Share-partition state (`partition.SharePartition`) is created when a partition is first assigned in a
group, at the log end (Kafka's default `share.auto.offset.reset` latest), and kept in an internal log
(`<data>/__share_groups`): every acknowledgement is durable before it is answered; acquisitions are not
stored, so after a restart what members held is available again. Membership and sessions live in memory,
as Kafka's sessions do: after a restart members rejoin (UNKNOWN_MEMBER_ID) and open new sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logbroker.protocol import ErrorCode as E
from logbroker.storage.internal import InternalLog

from ..group_configs import duration_ms
from ..seams import Durability, GroupDirectory, TopicDirectory
from .partition import FINISHED, AckRefused, SharePartition

log = logging.getLogger(__name__)

STORE_DIR = "__share_groups"
MAX_MEMBER_ID = 36  # Kafka refuses longer share member ids (INVALID_REQUEST)
TopicTable = Mapping[str, tuple[str, int]]  # topic name -> (topic id, partitions)
PartitionKey = tuple[str, str, int]  # (group, topic id, partition)


@dataclass(frozen=True)
class ShareConfig:
    """The broker-wide limits (Kafka's group.share.max.size and group.share.max.share.sessions)."""

    max_size: int = 200
    max_share_sessions: int = 2_000


@dataclass(frozen=True)
class GroupSettings:
    """One share group's settings: the broker's group.share.* configs, or the group's own overrides
    (share.* group configs)."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    partition_max_record_locks: int = 2_000
    auto_offset_reset: str = "latest"
    read_committed: bool = False


class ShareError(Exception):
    def __init__(self, error: E, message: str | None = None) -> None:
        super().__init__(message or error.name)
        self.error = error
        self.message = message


@dataclass
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    rack: str | None
    subscribed: list[str]
    epoch: int = 0
    previous_epoch: int = -1
    # Topic id -> partitions: the target the assignor gave it, and what it was last sent (what Kafka's
    # ShareGroupDescribe shows: a member learns its new partitions at its next heartbeat).
    target: dict[str, set[int]] = field(default_factory=dict)
    assignment: dict[str, set[int]] = field(default_factory=dict)
    sent_epoch: int = -1  # the member epoch whose assignment the member was last sent
    deadline: float = 0.0


@dataclass
class ShareGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    topics: dict[str, tuple[str, int]] = field(default_factory=dict)  # what the assignment was computed on

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"


@dataclass
class HeartbeatAnswer:
    member_id: str
    epoch: int
    assignment: dict[str, set[int]] | None  # None: unchanged since last sent


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    epoch: int
    connection_id: int = 0  # the connection that used it last
    partitions: dict[tuple[str, int], None] = field(default_factory=dict)  # (topic id, partition), in order


def simple_assign(members: Mapping[str, ShareMember], topics: TopicTable,
                  previous: Mapping[str, dict[str, set[int]]]) -> dict[str, dict[str, set[int]]]:  # fmt: skip
    """Kafka's simple share assignor, in its rules: for each topic, its subscribers share its partitions;
    with no more members than partitions every partition has one member and counts differ by at most one,
    a member keeping what it had where the balance allows; with more members, each partition goes to
    ceil(members / partitions) of them."""
    out: dict[str, dict[str, set[int]]] = {m: {} for m in members}
    for name, (tid, count) in sorted(topics.items()):
        subs = sorted(m for m, mem in members.items() if name in mem.subscribed)
        if not subs or count <= 0:
            continue
        if len(subs) > count:
            sharing = -(-len(subs) // count)
            for p in range(count):
                for k in range(sharing):
                    out[subs[(p + k * count) % len(subs)]].setdefault(tid, set()).add(p)
            continue
        per, extra = divmod(count, len(subs))
        quota = {m: per + (1 if i < extra else 0) for i, m in enumerate(subs)}
        free = set(range(count))
        for m in subs:  # stickiness: keep what fits the quota
            kept = sorted(previous.get(m, {}).get(tid, set()) & free)[: quota[m]]
            out[m][tid] = set(kept)
            free -= set(kept)
        for m in subs:
            while len(out[m][tid]) < quota[m] and free:
                p = min(free)
                free.discard(p)
                out[m][tid].add(p)
    return {m: {t: ps for t, ps in a.items() if ps} for m, a in out.items()}


class ShareStore(InternalLog):
    """Share-partition state: key ["s", group, topic id, partition] -> SharePartition.snapshot()."""

    def __init__(self, data_dir: Path, clean_shutdown: bool, segment_bytes: int = 64 << 20) -> None:
        super().__init__(data_dir / STORE_DIR, clean_shutdown, segment_bytes)


class ShareCoordinator:
    def __init__(
        self,
        store: ShareStore,
        config: ShareConfig,
        *,
        durability: Durability,
        topics: TopicDirectory,
        other_groups: GroupDirectory,
        settings_for: Callable[[str], GroupSettings] = lambda _g: GroupSettings(),
    ) -> None:
        self.store = store
        self.config = config
        self.settings = settings_for  # group id -> its share settings (group configs over the broker's)
        self._durability = durability
        self._topics = topics
        self._other_groups = other_groups  # consumer and classic groups: their ids are no share group's
        self.groups: dict[str, ShareGroup] = {}
        self.partitions: dict[PartitionKey, SharePartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._released: list[asyncio.Future[None]] = []  # long polls waiting for records to come back
        self._sweeper: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._ids: dict[str, str] = {}
        self._ids_of: object = None
        for key, value in store.load().items():
            if key and key[0] == "s" and len(key) == 4:
                self.partitions[(str(key[1]), str(key[2]), int(key[3]))] = SharePartition.restore(value)
                self.groups.setdefault(str(key[1]), ShareGroup(str(key[1])))  # empty until members rejoin

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_loop(), name="share-group-sweeper")

    async def stop_tasks(self) -> None:
        """Stop the sweeper and answer waiting long polls (the store is closed by the owner, after the last
        sync)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        self.wake_all()

    async def _sweep_loop(self) -> None:
        """Expired locks and silent members, checked at least every 0.5 s (a lock is at least 1 s)."""
        while True:
            await asyncio.sleep(0.5)
            try:
                await self.sweep(time.monotonic())
            except Exception:  # a sweep must never stop: the next one tries again
                log.exception("share-group sweep failed")

    async def sweep(self, now: float) -> None:
        for g in list(self.groups.values()):
            for m in [m for m in g.members.values() if m.deadline <= now]:
                await self._remove_member(g, m.member_id, timed_out=True)
        changed = [key for key, sp in self.partitions.items()
                   if sp.expire(now, self.settings(key[0]).delivery_count_limit)]  # fmt: skip
        if changed:
            await self.save(changed)
            self.wake_all()

    # ------------------------------------------------------------------ membership

    def is_group(self, group_id: str) -> bool:
        return group_id in self.groups

    async def heartbeat(self, body: Any, client_id: str, client_host: str) -> HeartbeatAnswer:
        gid, mid, epoch = body.group_id, body.member_id, body.member_epoch
        if not gid:
            raise ShareError(E.INVALID_REQUEST, "GroupId can't be empty.")
        if body.rack_id is not None and not body.rack_id:
            raise ShareError(E.INVALID_REQUEST, "RackId can't be empty.")
        if epoch == 0:
            if not mid:
                raise ShareError(E.INVALID_REQUEST, "MemberId can't be empty.")
            if not body.subscribed_topic_names:
                raise ShareError(E.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
        elif epoch > 0 or epoch == -1:
            if not mid:
                raise ShareError(E.INVALID_REQUEST, "MemberId can't be empty.")
        else:
            raise ShareError(E.INVALID_REQUEST, f"MemberEpoch is invalid: {epoch}")
        if len(mid) > MAX_MEMBER_ID:
            raise ShareError(E.INVALID_REQUEST, f"MemberId can't be longer than {MAX_MEMBER_ID} characters.")
        if self._other_groups.group(gid) is not None:
            raise ShareError(E.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
        g = self.groups.get(gid)
        if epoch == -1:
            if g is None or mid not in g.members:
                raise ShareError(E.UNKNOWN_MEMBER_ID, f"Member {mid} is not a member of group {gid}.")
            await self._remove_member(g, mid)
            return HeartbeatAnswer(mid, -1, None)
        if g is None:
            if epoch != 0:
                raise ShareError(E.GROUP_ID_NOT_FOUND, f"Share group {gid} not found.")
            g = self.groups[gid] = ShareGroup(gid)
            log.info("share group %s: created by client %s at %s", gid, client_id, client_host)
        m = g.members.get(mid)
        now = time.monotonic()
        if m is None:
            if epoch != 0:
                raise ShareError(E.UNKNOWN_MEMBER_ID, f"Member {mid} is not a member of group {gid}.")
            if len(g.members) >= self.config.max_size:
                raise ShareError(E.GROUP_MAX_SIZE_REACHED, f"The share group has reached its maximum capacity of "
                                 f"{self.config.max_size} members.")  # fmt: skip
            m = g.members[mid] = ShareMember(mid, client_id, client_host, body.rack_id,
                                             list(body.subscribed_topic_names))  # fmt: skip
            g.epoch += 1
            log.info("share group %s: member %s joined (epoch %d)", gid, mid, g.epoch)
        elif epoch not in (m.epoch, m.previous_epoch) and epoch != 0:
            raise ShareError(E.FENCED_MEMBER_EPOCH, f"The share group member has a smaller member epoch ({epoch}) "
                             f"than the one known by the group coordinator ({m.epoch}).")  # fmt: skip
        elif epoch == 0:
            m.sent_epoch = -1  # a rejoin: send it everything again
        if body.subscribed_topic_names is not None and list(body.subscribed_topic_names) != m.subscribed:
            m.subscribed = list(body.subscribed_topic_names)
            g.epoch += 1
        m.deadline = now + self.settings(gid).session_timeout_ms / 1000
        await self._reassign(g)
        if m.epoch != g.epoch:
            m.previous_epoch, m.epoch = m.epoch, g.epoch
        if m.sent_epoch != m.epoch:
            m.sent_epoch = m.epoch
            m.assignment = {t: set(p) for t, p in m.target.items()}
            return HeartbeatAnswer(mid, m.epoch, {t: set(p) for t, p in m.assignment.items()})
        return HeartbeatAnswer(mid, m.epoch, None)

    async def _reassign(self, g: ShareGroup) -> None:
        """Recompute the assignment when the members, subscriptions or partition counts changed; partitions
        new to the group get their share-partition state at the log end."""
        table = self._topics.table()
        wanted = {n for m in g.members.values() for n in m.subscribed}
        topics = {n: table[n] for n in wanted if n in table}
        if topics != g.topics:
            g.topics = topics
            g.epoch += 1
        if g.assignment_epoch == g.epoch:
            return
        target = simple_assign(g.members, topics, {mid: m.target for mid, m in g.members.items()})
        for mid, m in g.members.items():
            m.target = target.get(mid, {})
        g.assignment_epoch = g.epoch
        created = []
        for tid, count in topics.values():
            for p in range(count):
                key = (g.group_id, tid, p)
                if key not in self.partitions:
                    self.partitions[key] = SharePartition(self._start_offset(g.group_id, tid, p))
                    created.append(key)
        if created:
            await self.save(created)

    async def _remove_member(self, g: ShareGroup, mid: str, timed_out: bool = False) -> None:
        """A member leaves the group. Its share session outlives a leave, as Kafka's does (the session
        belongs to the share-partition side): a closing consumer leaves, then sends its last
        acknowledgements with session epoch -1, which close the session and release what is left; its
        connection closing or its locks expiring do the same otherwise. A member timed out is gone
        altogether: its session ends and its records go back at once."""
        g.members.pop(mid, None)
        g.epoch += 1
        if timed_out:
            self.sessions.pop((g.group_id, mid), None)
            await self.release_member(g.group_id, mid)
        log.info("share group %s: member %s %s (epoch %d)", g.group_id, mid, "timed out" if timed_out else "left",
                 g.epoch)  # fmt: skip
        if g.members:
            await self._reassign(g)

    async def release_member(self, group_id: str, mid: str, undo_count: bool = True) -> None:
        """Release what a member holds: it left or closed its session (`undo_count`: that delivery does not
        count), or its connection dropped (it does, as on Kafka 4.4: measured)."""
        limit = self.settings(group_id).delivery_count_limit
        changed = [key for key, sp in self.partitions.items()
                   if key[0] == group_id and sp.release_member(mid, limit, undo_count)]  # fmt: skip
        if changed:
            await self.save(changed)
            self.wake_all()

    # ------------------------------------------------------------------ sessions

    def session(self, group_id: str, member_id: str, epoch: int, topics: Iterable[tuple[str, int]],
                forgotten: Iterable[tuple[str, int]], connection_id: int = 0) -> ShareSession:  # fmt: skip
        """The share session a ShareFetch names (Kafka's SharePartitionManager.newContext): epoch 0 opens one
        (replacing any), a positive epoch must be the session's next one, -1 closes it (the caller releases
        and drops it once the acknowledgements are applied)."""
        key = (group_id, member_id)
        if epoch == 0:
            if key not in self.sessions and len(self.sessions) >= self.config.max_share_sessions:
                raise ShareError(E.SHARE_SESSION_LIMIT_REACHED, "The share session cache is full.")
            s = self.sessions[key] = ShareSession(group_id, member_id, 1, connection_id)
            s.partitions.update(dict.fromkeys(topics))
            return s
        s = self.sessions.get(key)
        if s is None:
            raise ShareError(E.SHARE_SESSION_NOT_FOUND, f"Share session for member {member_id} not found.")
        if epoch == -1:
            return s
        if s.epoch != epoch:
            raise ShareError(E.INVALID_SHARE_SESSION_EPOCH, f"Expected epoch {s.epoch}, got {epoch}.")
        s.epoch = 1 if epoch == 0x7FFFFFFF else epoch + 1
        s.connection_id = connection_id
        for tp in forgotten:
            s.partitions.pop(tp, None)
        s.partitions.update(dict.fromkeys(topics))
        return s

    def close_session(self, group_id: str, member_id: str) -> None:
        self.sessions.pop((group_id, member_id), None)

    def connection_closed(self, connection_id: int) -> None:
        """The sessions last used on a closed connection end, and their members' records go back to the
        group at once instead of when their locks expire (as Kafka 4.4 does, the delivery counting)."""
        gone = [s for s in self.sessions.values() if s.connection_id == connection_id]
        for s in gone:
            del self.sessions[(s.group_id, s.member_id)]
            release = self.release_member(s.group_id, s.member_id, undo_count=False)
            task = asyncio.get_running_loop().create_task(release)
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    # ------------------------------------------------------------------ records

    def partition(self, group_id: str, topic_id: str, index: int) -> SharePartition:
        """The share-partition a fetch reads: made at the log end when the group has never had it."""
        key = (group_id, topic_id, index)
        sp = self.partitions.get(key)
        if sp is None:
            sp = self.partitions[key] = SharePartition(self._start_offset(group_id, topic_id, index))
        return sp

    def _start_offset(self, group_id: str, topic_id: str, index: int) -> int:
        """Where a share-partition new to its group starts (the group's share.auto.offset.reset): the log
        start (earliest), the log end (latest), or the first record at or after now minus a duration."""
        meta = self._topics.by_id(topic_id)
        plog = self._topics.log(meta.name, index) if meta is not None else None
        if plog is None:
            return 0
        reset = self.settings(group_id).auto_offset_reset
        if reset == "earliest":
            return plog.log_start_offset
        if reset.startswith("by_duration:"):
            ms = duration_ms(reset.removeprefix("by_duration:")) or 0
            found = plog.offset_for_timestamp(int(time.time() * 1000) - ms)
            return found[0] if found is not None and found[0] >= 0 else plog.next_offset
        return plog.next_offset

    async def acknowledge(
        self, group_id: str, member_id: str, acks: list[tuple[str, int, Any]]
    ) -> dict[tuple[str, int], tuple[E, str | None]]:
        """Apply acknowledgement batches ((topic id, partition, batches) each) and make them durable; an
        error per partition that had one (its batches are applied all or nothing, each partition alone)."""
        errors: dict[tuple[str, int], tuple[E, str | None]] = {}
        changed: list[PartitionKey] = []
        now = time.monotonic()
        cfg = self.settings(group_id)
        lock_s = cfg.record_lock_duration_ms / 1000
        for tid, index, batches in acks:
            key = (group_id, tid, index)
            sp = self.partitions.get(key)
            if sp is None:
                errors[(tid, index)] = (E.INVALID_RECORD_STATE, "no records of this partition were acquired")
                continue
            ranges = [(b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in batches]
            try:
                sp.acknowledge(member_id, ranges, cfg.delivery_count_limit, now, lock_s)
            except AckRefused as exc:
                log.info("share group %s: acknowledgement of member %s refused for %s-%d: %s: %s", group_id,
                         member_id, tid, index, exc.error.name, exc)  # fmt: skip
                errors[(tid, index)] = (exc.error, str(exc))
                continue
            changed.append(key)
        if changed:
            await self.save(changed)
            self.wake_all()
        return errors

    async def save(self, keys: Iterable[PartitionKey]) -> None:
        items = [(("s", *key), self.partitions[key].snapshot()) for key in keys if key in self.partitions]
        if items:
            self.store.append(items)
            await self._durability.commit()

    # ------------------------------------------------------------------ long polls

    def released(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._released.append(fut)
        return fut

    def wake_all(self) -> None:
        waiting, self._released = self._released, []
        for fut in waiting:
            if not fut.done():
                fut.set_result(None)

    async def delete_group(self, group_id: str) -> E:
        """DeleteGroups of a share group: only an empty one (NON_EMPTY_GROUP), with its share-partition
        state (its progress is gone: a new group of the id starts afresh)."""
        g = self.groups.get(group_id)
        if g is None:
            return E.GROUP_ID_NOT_FOUND
        if g.members:
            return E.NON_EMPTY_GROUP
        del self.groups[group_id]
        keys = [k for k in self.partitions if k[0] == group_id]
        for k in keys:
            del self.partitions[k]
        for s in [s for s in self.sessions if s[0] == group_id]:
            del self.sessions[s]
        if keys:
            self.store.append([(("s", *k), None) for k in keys])
            await self._durability.commit()
        log.info("share group %s: deleted (%d share-partitions)", group_id, len(keys))
        return E.NONE

    def start_offsets(self, group_id: str, topic_id: str, partitions: Iterable[int],
                      end_offset: Callable[[int], int]) -> list[tuple[int, int, int]]:  # fmt: skip
        """(partition, start offset, lag) of a group's share-partitions, as DescribeShareGroupOffsets answers:
        -1 and -1 for one without state; the lag counts what is left to deliver between the start offset and
        the log end (KIP-1226: records finished inside the window are not lag)."""
        out = []
        for p in partitions:
            sp = self.partitions.get((group_id, topic_id, p))
            if sp is None:
                out.append((p, -1, -1))
                continue
            done = sum(1 for s in sp.slots.values() if s.state in FINISHED)
            out.append((p, sp.start, end_offset(p) - sp.start - done))
        return out

    def partitions_of(self, group_id: str) -> dict[str, list[int]]:
        """Topic id -> partitions that have share-partition state in the group."""
        out: dict[str, list[int]] = {}
        for g, t, p in sorted(self.partitions):
            if g == group_id:
                out.setdefault(t, []).append(p)
        return out

    def other_kind(self, group_id: str) -> bool:
        """Whether a consumer or classic group has this id (no share group can then)."""
        return self._other_groups.group(group_id) is not None

    async def set_start(self, group_id: str, starts: list[tuple[str, int, int]]) -> None:
        """AlterShareGroupOffsets: each (topic id, partition) starts afresh at its offset (a new state epoch:
        nothing in flight any more), durably."""
        keys = []
        for tid, p, offset in starts:
            key = (group_id, tid, p)
            old = self.partitions.get(key)
            self.partitions[key] = SharePartition(offset, (old.state_epoch + 1) if old is not None else 0)
            keys.append(key)
        self.groups.setdefault(group_id, ShareGroup(group_id))
        await self.save(keys)

    async def delete_topic_state(self, group_id: str, topic_id: str) -> None:
        """DeleteShareGroupOffsets of one topic: its share-partitions are gone (a later assignment starts them
        where share.auto.offset.reset says)."""
        keys = [k for k in self.partitions if k[0] == group_id and k[1] == topic_id]
        for k in keys:
            del self.partitions[k]
        if keys:
            self.store.append([(("s", *k), None) for k in keys])
            await self._durability.commit()

    def forget_topic(self, topic_id: str) -> None:
        """A deleted topic takes its share-partition state with it (written in the background: a restart
        before that only brings back state no fetch can reach, the id being gone)."""
        keys = [k for k in self.partitions if k[1] == topic_id]
        for k in keys:
            del self.partitions[k]
        if keys:
            self.store.append([(("s", *k), None) for k in keys])
            task = asyncio.get_running_loop().create_task(self._durability.commit())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    # ------------------------------------------------------------------ describe

    def describe(self, group_id: str) -> ShareGroup | None:
        return self.groups.get(group_id)

    def topic_ids(self) -> Mapping[str, str]:
        """Topic id -> name, rebuilt only when the topic table is (it is replaced on every topic change)."""
        table = self._topics.table()
        if self._ids_of is not table:
            self._ids = {tid: name for name, (tid, _n) in table.items()}
            self._ids_of = table
        return self._ids
