"""Classic consumer-group coordinator (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) and committed offsets.

The state machine follows Kafka's: Empty -> PreparingRebalance -> CompletingRebalance -> Stable, with
generations, session and rebalance timeouts, KIP-394 member ids, static membership (KIP-345) and an
initial rebalance delay so members starting together land in one generation. Assignment is the
clients' business (range, roundrobin, cooperative-sticky all run in the group leader).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from logbroker.protocol.errors import ErrorCode as E

from .store import GroupStore

log = logging.getLogger(__name__)


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING = "PreparingRebalance"
    COMPLETING = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupError(Exception):
    def __init__(self, code: E, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


@dataclass
class Committed:
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_ms: int

    def to_json(self) -> list[Any]:
        return [self.offset, self.leader_epoch, self.metadata, self.commit_ms]


@dataclass
class JoinResult:
    error: E
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    deadline: float = 0.0
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[tuple[E, bytes]] | None = None

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def touch(self) -> None:
        self.deadline = time.monotonic() + self.session_timeout_ms / 1000

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.member_id,
            "instance": self.instance_id,
            "client": self.client_id,
            "host": self.client_host,
            "session": self.session_timeout_ms,
            "rebalance": self.rebalance_timeout_ms,
            "protocols": [[n, m.hex()] for n, m in self.protocols],
            "assignment": self.assignment.hex(),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any], protocol_type: str) -> Member:
        m = cls(
            d["id"],
            d["instance"],
            d["client"],
            d["host"],
            d["session"],
            d["rebalance"],
            protocol_type,
            [(n, bytes.fromhex(h)) for n, h in d["protocols"]],
            bytes.fromhex(d["assignment"]),
        )
        m.touch()
        return m


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)  # static instance id -> member id
    pending: dict[str, float] = field(default_factory=dict)  # KIP-394 member ids handed out -> expiry
    offsets: dict[tuple[str, int], Committed] = field(default_factory=dict)
    rebalance_deadline: float = 0.0
    delay_deadline: float = 0.0
    empty_since_ms: int = 0

    @property
    def is_empty(self) -> bool:
        return not self.members

    @property
    def group_type(self) -> str:
        return "classic"

    @property
    def state_name(self) -> str:
        return self.state.value

    def all_joined(self) -> bool:
        return not self.pending and all(m.join_future is not None for m in self.members.values())

    def choose_protocol(self) -> str | None:
        """The protocol every member supports, preferring the members' earliest-listed choices."""
        if not self.members:
            return None
        common = None
        for m in self.members.values():
            names = {n for n, _ in m.protocols}
            common = names if common is None else common & names
        if not common:
            return None
        votes: dict[str, int] = {}
        for m in self.members.values():
            for n, _ in m.protocols:
                if n in common:
                    votes[n] = votes.get(n, 0) + 1
                    break
        return max(sorted(votes), key=lambda n: votes[n])

    def subscribed_topics(self) -> set[str]:
        """Topics named in the members' consumer-protocol subscriptions (for OffsetDelete)."""
        from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

        topics: set[str] = set()
        if self.protocol_type != "consumer":
            return topics
        for m in self.members.values():
            meta = m.metadata_for(self.protocol)
            try:
                sub = ConsumerProtocolSubscription.decode(meta, header=True)
                topics.update(sub.topics or [])
            except Exception:  # unparsable user metadata: treat as subscribing to nothing we know
                continue
        return topics


@dataclass
class CoordinatorConfig:
    initial_rebalance_delay_ms: int = 100
    min_session_timeout_ms: int = 1000
    max_session_timeout_ms: int = 1_800_000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offset_metadata_max_bytes: int = 4096
    max_group_size: int = 1000
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000


def _now_ms() -> int:
    return int(time.time() * 1000)


class Coordinator:
    """All groups of the broker. Runs on the event loop; persistence goes through `GroupStore`."""

    def __init__(
        self,
        store: GroupStore,
        config: CoordinatorConfig,
        persist: Callable[[Any], Any],
        topics: Callable[[], dict[str, tuple[str, int]]] | None = None,
    ) -> None:
        from .consumer import ConsumerGroups

        self.store = store
        self.config = config
        self.groups: dict[str, Any] = {}  # Group (classic) or ConsumerGroup (KIP-848)
        self.consumer = ConsumerGroups(
            topics or dict, config.consumer_session_timeout_ms, config.consumer_heartbeat_interval_ms
        )
        self._persist_cb = persist  # awaits the broker's fsync policy for a written log
        self._sweeper: asyncio.Task[None] | None = None
        self._load()

    # ------------------------------------------------------------------ persistence

    def _load(self) -> None:
        for key, value in self.store.load().items():
            kind, gid = key[0], key[1]
            if kind == "g" and value.get("type") == "consumer":
                from .consumer import ConsumerGroup

                cg = ConsumerGroup.from_json(gid, value)
                old = self.groups.get(gid)
                if old is not None:
                    cg.offsets = old.offsets
                self.groups[gid] = cg
                now = time.monotonic()
                for m in cg.members.values():
                    m.deadline = now + self.config.consumer_session_timeout_ms / 1000
                continue
            g = self.groups.setdefault(gid, Group(gid))
            if kind == "o":
                g.offsets[(key[2], key[3])] = Committed(*value)
            elif kind == "g":
                g.generation = value["generation"]
                g.protocol_type = value["protocol_type"]
                g.protocol = value["protocol"]
                g.leader = value["leader"]
                g.empty_since_ms = value.get("empty_since", _now_ms())
                for md in value["members"]:
                    m = Member.from_json(md, g.protocol_type or "")
                    g.members[m.member_id] = m
                    if m.instance_id:
                        g.instances[m.instance_id] = m.member_id
                # A group caught mid-rebalance resumes as Stable with its last assignment: members
                # that rejoin trigger a fresh rebalance exactly as after a coordinator move in Kafka.
                g.state = GroupState.STABLE if g.members else GroupState.EMPTY
        for gid in [
            gid for gid, g in self.groups.items() if not g.members and not g.offsets and not getattr(g, "generation", 1)
        ]:
            del self.groups[gid]

    def _group_record(self, g: Any) -> tuple[tuple[Any, ...], Any]:
        if g.group_type == "consumer":
            return ("g", g.group_id), g.to_json()
        value = {
            "generation": g.generation,
            "protocol_type": g.protocol_type,
            "protocol": g.protocol,
            "leader": g.leader,
            "empty_since": g.empty_since_ms,
            "members": [m.to_json() for m in g.members.values()],
        }
        return ("g", g.group_id), value

    async def _persist(self, items: list[tuple[tuple[Any, ...], Any]]) -> None:
        if items:
            plog = self.store.append(items)
            await self._persist_cb(plog)

    def _persist_soon(self, g: Group) -> None:
        task = asyncio.ensure_future(self._persist([self._group_record(g)]))
        task.add_done_callback(_log_failure)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_loop(), name="group-sweeper")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            try:
                await self._sweeper
            except asyncio.CancelledError:
                pass
        for g in self.groups.values():
            if g.group_type == "consumer":
                continue
            for m in g.members.values():
                for fut in (m.join_future, m.sync_future):
                    if fut is not None and not fut.done():
                        fut.cancel()

    async def _sweep_loop(self) -> None:
        last_retention = 0.0
        while True:
            await asyncio.sleep(0.05)
            now = time.monotonic()
            for g in list(self.groups.values()):
                if g.group_type == "consumer":
                    if self.consumer.expire(g, now):
                        self._persist_soon(g)
                else:
                    self._sweep_group(g, now)
            if now - last_retention > 60:
                last_retention = now
                await self.expire_offsets()

    def _sweep_group(self, g: Group, now: float) -> None:
        for mid, exp in list(g.pending.items()):
            if exp < now:
                del g.pending[mid]
        # As in Kafka, a member parked in JoinGroup or SyncGroup is not expired; any other member whose
        # session runs out is, in every state: a crashed member must not hold a rebalance up until the
        # (much longer) rebalance timeout.
        expired = [
            m
            for m in g.members.values()
            if m.deadline < now and m.join_future is None and (m.sync_future is None or m.sync_future.done())
        ]
        for m in expired:
            log.info("group %s: member %s session expired", g.group_id, m.member_id)
            self._remove_member(g, m, E.UNKNOWN_MEMBER_ID)
        if g.state == GroupState.PREPARING:
            if now >= g.rebalance_deadline or (now >= g.delay_deadline and g.all_joined()):
                self._complete_join(g)
            return
        if expired and g.state in (GroupState.STABLE, GroupState.COMPLETING):
            self._prepare_rebalance(g, "member session expired")
        elif expired and not g.members:
            self._become_empty(g)

    async def expire_offsets(self) -> None:
        """Offsets of groups empty for longer than offsets_retention_ms go (Kafka's 7-day default)."""
        cutoff = _now_ms() - self.config.offsets_retention_ms
        deletes: list[tuple[tuple[Any, ...], Any]] = []
        for g in list(self.groups.values()):
            if g.state != GroupState.EMPTY or g.members:
                continue
            for tp, c in list(g.offsets.items()):
                if max(c.commit_ms, g.empty_since_ms) < cutoff:
                    del g.offsets[tp]
                    deletes.append((("o", g.group_id, tp[0], tp[1]), None))
            if not g.offsets:
                deletes.append((("g", g.group_id), None))
                del self.groups[g.group_id]
        await self._persist(deletes)

    # ------------------------------------------------------------------ membership

    def _remove_member(self, g: Group, m: Member, error: E) -> None:
        g.members.pop(m.member_id, None)
        if m.instance_id and g.instances.get(m.instance_id) == m.member_id:
            del g.instances[m.instance_id]
        for fut in (m.join_future, m.sync_future):
            if fut is not None and not fut.done():
                if fut is m.join_future:
                    fut.set_result(JoinResult(error, member_id=m.member_id))
                else:
                    fut.set_result((error, b""))
        m.join_future = m.sync_future = None
        if g.leader == m.member_id:
            g.leader = next(iter(g.members), None)

    def _become_empty(self, g: Group) -> None:
        g.state = GroupState.EMPTY
        g.leader = None
        g.protocol = None
        g.empty_since_ms = _now_ms()
        self._persist_soon(g)

    def _prepare_rebalance(self, g: Group, reason: str) -> None:
        log.info("group %s: rebalancing (%s), generation %d", g.group_id, reason, g.generation)
        for m in g.members.values():
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result((E.REBALANCE_IN_PROGRESS, b""))
            m.sync_future = None
        was_empty = g.state == GroupState.EMPTY
        g.state = GroupState.PREPARING
        now = time.monotonic()
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0) / 1000
        g.rebalance_deadline = now + max(timeout, 0.001)
        delay = self.config.initial_rebalance_delay_ms / 1000 if was_empty else 0.0
        g.delay_deadline = now + delay
        if not delay and g.all_joined():
            self._complete_join(g)
        elif delay:
            self._wake_at(g, g.delay_deadline)

    def _wake_at(self, g: Group, when: float) -> None:
        """Complete the join exactly when the initial delay ends (the sweep loop is only a backstop)."""

        def check() -> None:
            if g.state == GroupState.PREPARING and time.monotonic() >= g.delay_deadline and g.all_joined():
                self._complete_join(g)

        loop = asyncio.get_running_loop()
        loop.call_later(max(when - time.monotonic(), 0) + 0.0005, check)

    def _complete_join(self, g: Group) -> None:
        for m in [m for m in g.members.values() if m.join_future is None]:
            log.info("group %s: member %s did not rejoin in time", g.group_id, m.member_id)
            self._remove_member(g, m, E.UNKNOWN_MEMBER_ID)
        g.pending.clear()
        g.generation += 1
        if not g.members:
            self._become_empty(g)
            return
        g.protocol = g.choose_protocol()
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.state = GroupState.COMPLETING
        members = [(m.member_id, m.instance_id, m.metadata_for(g.protocol)) for m in g.members.values()]
        for m in g.members.values():
            fut = m.join_future
            m.join_future = None
            m.touch()
            if fut is not None and not fut.done():
                fut.set_result(
                    JoinResult(
                        E.NONE,
                        g.generation,
                        g.protocol_type,
                        g.protocol,
                        g.leader or "",
                        m.member_id,
                        members if m.member_id == g.leader else [],
                    )
                )

    def _check_timeouts(self, session_ms: int, rebalance_ms: int) -> None:
        c = self.config
        if not c.min_session_timeout_ms <= session_ms <= c.max_session_timeout_ms:
            raise GroupError(
                E.INVALID_SESSION_TIMEOUT,
                f"session timeout {session_ms} ms outside [{c.min_session_timeout_ms}, {c.max_session_timeout_ms}]",
            )
        del rebalance_ms

    async def join(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        session_ms: int,
        rebalance_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
        supports_skip_assignment: bool = True,
    ) -> JoinResult:
        if not group_id:
            return JoinResult(E.INVALID_GROUP_ID, member_id=member_id)
        try:
            self._check_timeouts(session_ms, rebalance_ms)
        except GroupError as exc:
            return JoinResult(exc.code, member_id=member_id)
        if not protocols or not protocol_type:
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        g = self.groups.get(group_id)
        if g is not None and g.group_type == "consumer":
            if g.members:
                return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
            old, g = g, Group(group_id, offsets=g.offsets)
            self.groups[group_id] = g
            del old
        if g is None:
            g = self.groups[group_id] = Group(group_id)
        if g.members and g.protocol_type != protocol_type:
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        others = [m for mid, m in g.members.items() if mid != member_id]
        if others and not set.intersection({n for n, _ in protocols}, *({n for n, _ in m.protocols} for m in others)):
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)

        if member_id == "":
            if instance_id is not None:
                return await self._join_static(
                    g,
                    instance_id,
                    client_id,
                    client_host,
                    session_ms,
                    rebalance_ms,
                    protocol_type,
                    protocols,
                    supports_skip_assignment,
                )
            new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if require_known_member_id:
                g.pending[new_id] = time.monotonic() + session_ms / 1000
                return JoinResult(E.MEMBER_ID_REQUIRED, member_id=new_id)
            return await self._add_and_wait(
                g, Member(new_id, None, client_id, client_host, session_ms, rebalance_ms, protocol_type, protocols)
            )

        if instance_id is not None and g.instances.get(instance_id) not in (None, member_id):
            return JoinResult(E.FENCED_INSTANCE_ID, member_id=member_id)
        m = g.members.get(member_id)
        if m is None:
            if member_id in g.pending:
                del g.pending[member_id]
                return await self._add_and_wait(
                    g,
                    Member(
                        member_id,
                        instance_id,
                        client_id,
                        client_host,
                        session_ms,
                        rebalance_ms,
                        protocol_type,
                        protocols,
                    ),
                )
            return JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member_id)
        changed = m.protocols != protocols
        m.protocols, m.session_timeout_ms, m.rebalance_timeout_ms = protocols, session_ms, rebalance_ms
        m.touch()
        if g.state == GroupState.STABLE and not changed and member_id != g.leader:
            # A follower rejoining without change gets the current generation back (no rebalance).
            return JoinResult(E.NONE, g.generation, g.protocol_type, g.protocol, g.leader or "", member_id, [])
        return await self._wait_join(g, m)

    async def _join_static(
        self,
        g: Group,
        instance_id: str,
        client_id: str,
        client_host: str,
        session_ms: int,
        rebalance_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        supports_skip_assignment: bool,
    ) -> JoinResult:
        old_id = g.instances.get(instance_id)
        new_id = f"{instance_id}-{uuid.uuid4()}"
        if old_id is None or old_id not in g.members:
            return await self._add_and_wait(
                g,
                Member(new_id, instance_id, client_id, client_host, session_ms, rebalance_ms, protocol_type, protocols),
            )
        # A known static member restarting: it takes over its old identity; the old id is fenced.
        old = g.members.pop(old_id)
        for fut in (old.join_future, old.sync_future):
            if fut is not None and not fut.done():
                fut.set_result(
                    JoinResult(E.FENCED_INSTANCE_ID, member_id=old_id)
                    if fut is old.join_future
                    else (E.FENCED_INSTANCE_ID, b"")
                )
        m = Member(
            new_id,
            instance_id,
            client_id,
            client_host,
            session_ms,
            rebalance_ms,
            protocol_type,
            protocols,
            assignment=old.assignment,
        )
        m.touch()
        g.members[new_id] = m
        g.instances[instance_id] = new_id
        if g.leader == old_id:
            g.leader = new_id
        if g.state == GroupState.STABLE and g.choose_protocol() == g.protocol:
            # KIP-345: a restart within the session timeout causes no rebalance, as long as the group would
            # keep its protocol. The metadata may well differ (a restarted consumer owns no partitions yet
            # and has no generation, and the Java client sends both): as in Kafka, that alone is no reason.
            self._persist_soon(g)
            is_leader = g.leader == new_id
            if is_leader and not supports_skip_assignment:
                # Before JoinGroup v9 a leader cannot be told to skip the assignment; as Kafka does, name the
                # old leader id so the restarted client acts as a follower and keeps what it had.
                return JoinResult(E.NONE, g.generation, g.protocol_type, g.protocol, old_id, new_id, [])
            members = (
                [(x.member_id, x.instance_id, x.metadata_for(g.protocol)) for x in g.members.values()]
                if is_leader
                else []
            )
            return JoinResult(
                E.NONE,
                g.generation,
                g.protocol_type,
                g.protocol,
                g.leader or "",
                new_id,
                members,
                skip_assignment=is_leader,
            )
        return await self._wait_join(g, m)

    async def _add_and_wait(self, g: Group, m: Member) -> JoinResult:
        if len(g.members) >= self.config.max_group_size:
            return JoinResult(E.GROUP_MAX_SIZE_REACHED, member_id=m.member_id)
        m.touch()
        g.members[m.member_id] = m
        if m.instance_id:
            g.instances[m.instance_id] = m.member_id
        if g.protocol_type is None or len(g.members) == 1:
            g.protocol_type = m.protocol_type
        return await self._wait_join(g, m)

    async def _wait_join(self, g: Group, m: Member) -> JoinResult:
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        if m.join_future is not None and not m.join_future.done():
            m.join_future.set_result(JoinResult(E.UNKNOWN_MEMBER_ID, member_id=m.member_id))
        m.join_future = fut
        if g.state == GroupState.PREPARING:
            if time.monotonic() >= g.delay_deadline and g.all_joined():
                self._complete_join(g)
            elif g.delay_deadline > time.monotonic():
                # Each newcomer during the initial delay extends it, up to the rebalance deadline.
                self._wake_at(
                    g, min(time.monotonic() + self.config.initial_rebalance_delay_ms / 1000, g.rebalance_deadline)
                )
                g.delay_deadline = min(
                    time.monotonic() + self.config.initial_rebalance_delay_ms / 1000, g.rebalance_deadline
                )
        else:
            self._prepare_rebalance(g, f"member {m.member_id} joined")
        try:
            return await fut
        except asyncio.CancelledError:
            # The client connection went away mid-join; the session timeout will clean up.
            if m.join_future is fut:
                m.join_future = None
            raise

    async def sync(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        instance_id: str | None,
        protocol_type: str | None,
        protocol: str | None,
        assignments: dict[str, bytes],
    ) -> tuple[E, bytes]:
        g = self.groups.get(group_id)
        if g is None or g.group_type != "classic":
            return E.UNKNOWN_MEMBER_ID, b""
        err = _validate_member(g, member_id, instance_id)
        if err != E.NONE:
            return err, b""
        if generation != g.generation:
            return E.ILLEGAL_GENERATION, b""
        if (protocol_type is not None and protocol_type != g.protocol_type) or (
            protocol is not None and protocol != g.protocol
        ):
            return E.INCONSISTENT_GROUP_PROTOCOL, b""
        m = g.members[member_id]
        m.touch()
        if g.state == GroupState.PREPARING:
            return E.REBALANCE_IN_PROGRESS, b""
        if g.state == GroupState.STABLE:
            return E.NONE, m.assignment
        # CompletingRebalance
        if member_id == g.leader:
            for mid, mem in g.members.items():
                mem.assignment = assignments.get(mid, b"")
            g.state = GroupState.STABLE
            await self._persist([self._group_record(g)])
            if g.state != GroupState.STABLE:  # a rebalance began while the group record was being synced
                return E.REBALANCE_IN_PROGRESS, b""
            for mem in g.members.values():
                if mem.sync_future is not None and not mem.sync_future.done():
                    mem.sync_future.set_result((E.NONE, mem.assignment))
                mem.sync_future = None
            return E.NONE, m.assignment
        fut: asyncio.Future[tuple[E, bytes]] = asyncio.get_running_loop().create_future()
        m.sync_future = fut
        try:
            return await fut
        except asyncio.CancelledError:
            if m.sync_future is fut:
                m.sync_future = None
            raise

    def heartbeat(self, group_id: str, member_id: str, generation: int, instance_id: str | None) -> E:
        g = self.groups.get(group_id)
        if g is not None and g.group_type != "classic":
            return E.UNKNOWN_MEMBER_ID
        if g is None:
            return E.UNKNOWN_MEMBER_ID
        err = _validate_member(g, member_id, instance_id)
        if err != E.NONE:
            return err
        m = g.members[member_id]
        m.touch()
        if g.state == GroupState.PREPARING:
            return E.REBALANCE_IN_PROGRESS
        if generation != g.generation:
            return E.ILLEGAL_GENERATION
        return E.NONE

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[E, list[tuple[str, str | None, E]]]:
        g = self.groups.get(group_id)
        if g is None or g.group_type != "classic":
            return E.UNKNOWN_MEMBER_ID, [(mid, iid, E.UNKNOWN_MEMBER_ID) for mid, iid in members]
        results = []
        removed = False
        for mid, iid in members:
            if iid is not None:
                known = g.instances.get(iid)
                if known is None:
                    results.append((mid, iid, E.UNKNOWN_MEMBER_ID))
                    continue
                if mid and mid != known:
                    results.append((mid, iid, E.FENCED_INSTANCE_ID))
                    continue
                mid = known
            m = g.members.get(mid)
            if m is None:
                results.append((mid, iid, E.UNKNOWN_MEMBER_ID))
                continue
            self._remove_member(g, m, E.UNKNOWN_MEMBER_ID)
            results.append((mid, iid, E.NONE))
            removed = True
        if removed:
            if not g.members and g.state != GroupState.PREPARING:
                self._become_empty(g)
            elif g.state in (GroupState.STABLE, GroupState.COMPLETING):
                self._prepare_rebalance(g, "member left")
            elif g.state == GroupState.PREPARING and g.all_joined() and time.monotonic() >= g.delay_deadline:
                self._complete_join(g)
        top = E.NONE if len(members) != 1 or results[0][2] == E.NONE else results[0][2]
        return top, results

    async def consumer_heartbeat(self, req: Any, client_id: str, client_host: str) -> Any:
        """KIP-848 ConsumerGroupHeartbeat; returns a consumer.HeartbeatResult."""
        from .consumer import ConsumerGroup, HeartbeatResult

        if not req.group_id:
            return HeartbeatResult(E.INVALID_REQUEST, message="group id must not be empty")
        g = self.groups.get(req.group_id)
        if g is not None and g.group_type != "consumer":
            if g.members:
                return HeartbeatResult(
                    E.GROUP_ID_NOT_FOUND, message=f"group {req.group_id} is a classic group with members"
                )
            g = None if not g.offsets else ConsumerGroup(req.group_id, offsets=g.offsets)
            if g is not None:
                self.groups[req.group_id] = g
            else:
                del self.groups[req.group_id]
        if g is None:
            if req.member_epoch != 0:
                return HeartbeatResult(E.UNKNOWN_MEMBER_ID, message=f"group {req.group_id} does not exist")
            g = self.groups[req.group_id] = ConsumerGroup(req.group_id)
        if req.member_epoch == 0 and req.member_id not in g.members and len(g.members) >= self.config.max_group_size:
            return HeartbeatResult(E.GROUP_MAX_SIZE_REACHED)
        result, changed = self.consumer.heartbeat(g, req, client_id, client_host)
        if changed:
            await self._persist([self._group_record(g)])
        return result

    # ------------------------------------------------------------------ offsets

    def check_commit(self, group_id: str, member_id: str, generation: int, instance_id: str | None) -> E:
        if not group_id:
            return E.INVALID_GROUP_ID
        g = self.groups.get(group_id)
        if generation < 0 and not member_id:
            # A commit from outside any generation (assign() users, admin tools): only for groups with no
            # members; Kafka answers UNKNOWN_MEMBER_ID otherwise.
            if g is not None and g.members:
                return E.UNKNOWN_MEMBER_ID
            return E.NONE
        if g is not None and g.group_type == "consumer":
            return self.consumer.check_commit(g, member_id, generation)
        if g is None:
            return E.UNKNOWN_MEMBER_ID
        err = _validate_member(g, member_id, instance_id)
        if err != E.NONE:
            return err
        if generation != g.generation:
            return E.ILLEGAL_GENERATION
        if g.state == GroupState.COMPLETING:
            return E.REBALANCE_IN_PROGRESS
        g.members[member_id].touch()
        return E.NONE

    async def commit(self, group_id: str, offsets: dict[tuple[str, int], Committed]) -> None:
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = Group(group_id, empty_since_ms=_now_ms())
        g.offsets.update(offsets)
        await self._persist([(("o", group_id, t, p), c.to_json()) for (t, p), c in offsets.items()])

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], Committed]:
        g = self.groups.get(group_id)
        if g is None:
            return {}
        if partitions is None:
            return dict(g.offsets)
        return {tp: g.offsets[tp] for tp in partitions if tp in g.offsets}

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], E]:
        g = self.groups.get(group_id)
        if g is None:
            raise GroupError(E.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
        subscribed = g.subscribed_topics() if g.members else set()
        result: dict[tuple[str, int], E] = {}
        deletes = []
        for tp in partitions:
            if tp[0] in subscribed:
                result[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            if g.offsets.pop(tp, None) is not None:
                deletes.append((("o", group_id, tp[0], tp[1]), None))
            result[tp] = E.NONE
        await self._persist(deletes)
        return result

    async def delete_group(self, group_id: str) -> E:
        g = self.groups.get(group_id)
        if g is None:
            return E.GROUP_ID_NOT_FOUND
        if g.members or g.state != GroupState.EMPTY:
            return E.NON_EMPTY_GROUP
        deletes = [(("o", group_id, t, p), None) for t, p in g.offsets] + [(("g", group_id), None)]
        del self.groups[group_id]
        g.state = GroupState.DEAD
        await self._persist(deletes)
        return E.NONE

    def forget_topic(self, topic: str) -> None:
        """A deleted topic takes its committed offsets with it (as in Kafka)."""
        deletes = []
        for g in self.groups.values():
            for tp in [tp for tp in g.offsets if tp[0] == topic]:
                del g.offsets[tp]
                deletes.append((("o", g.group_id, tp[0], tp[1]), None))
        if deletes:
            asyncio.ensure_future(self._persist(deletes)).add_done_callback(_log_failure)


def _validate_member(g: Group, member_id: str, instance_id: str | None) -> E:
    """Kafka's member check for SyncGroup, Heartbeat and OffsetCommit: a static member is looked up by its
    instance id first, so an incarnation replaced by a newer one is told FENCED_INSTANCE_ID (fatal for the
    client) rather than UNKNOWN_MEMBER_ID (on which it would rejoin and fence the newer one in turn)."""
    if instance_id is not None:
        known = g.instances.get(instance_id)
        if known is None:
            return E.UNKNOWN_MEMBER_ID
        return E.NONE if known == member_id else E.FENCED_INSTANCE_ID
    return E.NONE if member_id in g.members else E.UNKNOWN_MEMBER_ID


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("persisting group state failed: %s", task.exception())
