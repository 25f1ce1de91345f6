"""The classic group state machine (JoinGroup/SyncGroup/Heartbeat/LeaveGroup).

It follows Kafka's: Empty -> PreparingRebalance -> CompletingRebalance -> Stable, with generations, session and
rebalance timeouts, KIP-394 member ids, static membership (KIP-345) and an initial rebalance delay so members
starting together land in one generation. Assignment is the clients' business (range, roundrobin,
cooperative-sticky all run in the group leader). The coordinator owns the group table and persistence; this
module gets a group it has already routed here and two callbacks to save it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable

from logbroker.protocol.errors import ErrorCode as E

from .model import (
    ClassicGroup,
    ClassicMember,
    CoordinatorConfig,
    GroupState,
    JoinRequest,
    JoinResult,
    LeaveResult,
    MemberLeft,
    SyncResult,
    for_log,
    now_ms,
)

log = logging.getLogger(__name__)


class ClassicGroups:
    """Transitions of classic groups; `save` persists a group durably, `save_soon` in the background."""

    def __init__(
        self,
        config: CoordinatorConfig,
        save: Callable[[ClassicGroup], Awaitable[None]],
        save_soon: Callable[[ClassicGroup], None],
    ) -> None:
        self.config = config
        self._save = save
        self._save_soon = save_soon

    # ------------------------------------------------------------------ JoinGroup

    def validate_join(self, req: JoinRequest) -> E:
        """Kafka's checks before it looks at the group (a request failing them creates none)."""
        if not req.group_id:
            return E.INVALID_GROUP_ID
        c = self.config
        if not c.min_session_timeout_ms <= req.session_timeout_ms <= c.max_session_timeout_ms:
            return E.INVALID_SESSION_TIMEOUT
        return E.NONE

    def accepts(self, g: ClassicGroup, member_id: str) -> bool:
        """Kafka's acceptJoiningMember (group.max.size): an empty group takes anyone; while rebalancing, members
        already waiting plus newcomers up to the limit of waiting members; otherwise members plus newcomers up
        to the limit of members."""
        limit = self.config.max_group_size
        if g.state == GroupState.EMPTY:
            return True
        m = g.members.get(member_id)
        if g.state == GroupState.PREPARING:
            waiting = sum(1 for x in g.members.values() if x.join_future is not None)
            return (m is not None and m.join_future is not None) or waiting < limit
        return m is not None or len(g.members) < limit

    async def join(self, g: ClassicGroup, req: JoinRequest) -> JoinResult:
        """JoinGroup on a group `validate_join` accepted the request for; returns when the rebalance completes."""
        member_id, instance_id, protocols = req.member_id, req.instance_id, req.protocols
        if not self.accepts(g, member_id):
            m = g.members.get(member_id)
            if m is not None:
                self._remove_member(g, m, E.GROUP_MAX_SIZE_REACHED)
            g.pending.pop(member_id, None)
            limit = self.config.max_group_size
            log.debug("group %s: full (group.max.size %d), join refused", for_log(g.group_id), limit)
            return JoinResult(E.GROUP_MAX_SIZE_REACHED, member_id="")
        if g.state == GroupState.EMPTY and (not protocols or not req.protocol_type):
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        if g.members and g.protocol_type != req.protocol_type:
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        others = [m for mid, m in g.members.items() if mid != member_id]
        if others and not set.intersection({n for n, _ in protocols}, *({n for n, _ in m.protocols} for m in others)):
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)

        if member_id == "":
            if instance_id is not None:
                return await self._join_static(g, req, instance_id)
            new_id = f"{req.client_id or 'member'}-{uuid.uuid4()}"
            if req.require_known_member_id:
                g.pending[new_id] = time.monotonic() + req.session_timeout_ms / 1000
                return JoinResult(E.MEMBER_ID_REQUIRED, member_id=new_id)
            return await self._add_and_wait(g, _new_member(req, new_id, None))

        if instance_id is not None and g.instances.get(instance_id) not in (None, member_id):
            return JoinResult(E.FENCED_INSTANCE_ID, member_id=member_id)
        m = g.members.get(member_id)
        if m is None:
            if member_id in g.pending:
                del g.pending[member_id]
                return await self._add_and_wait(g, _new_member(req, member_id, instance_id))
            return JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member_id)
        changed = m.protocols != protocols
        m.protocols, m.session_timeout_ms, m.rebalance_timeout_ms = (
            protocols,
            req.session_timeout_ms,
            req.rebalance_timeout_ms,
        )
        m.touch()
        if g.state == GroupState.STABLE and not changed and member_id != g.leader:
            # A follower rejoining without change gets the current generation back (no rebalance).
            return JoinResult(E.NONE, g.generation, g.protocol_type, g.protocol, g.leader or "", member_id, [])
        return await self._wait_join(g, m)

    async def _join_static(self, g: ClassicGroup, req: JoinRequest, instance_id: str) -> JoinResult:
        old_id = g.instances.get(instance_id)
        new_id = f"{instance_id}-{uuid.uuid4()}"
        if old_id is None or old_id not in g.members:
            return await self._add_and_wait(g, _new_member(req, new_id, instance_id))
        # A known static member restarting: it takes over its old identity; the old id is fenced.
        old = g.members.pop(old_id)
        if old.join_future is not None and not old.join_future.done():
            old.join_future.set_result(JoinResult(E.FENCED_INSTANCE_ID, member_id=old_id))
        if old.sync_future is not None and not old.sync_future.done():
            old.sync_future.set_result(SyncResult(E.FENCED_INSTANCE_ID, b""))
        m = _new_member(req, new_id, instance_id)
        m.assignment = old.assignment
        m.touch()
        g.members[new_id] = m
        g.instances[instance_id] = new_id
        if g.leader == old_id:
            g.leader = new_id
        if g.state == GroupState.STABLE and g.choose_protocol() == g.protocol:
            # KIP-345: a restart within the session timeout causes no rebalance, as long as the group would
            # keep its protocol. The metadata may well differ (a restarted consumer owns no partitions yet
            # and has no generation, and the Java client sends both): as in Kafka, that alone is no reason.
            self._save_soon(g)
            is_leader = g.leader == new_id
            if is_leader and not req.supports_skip_assignment:
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

    async def _add_and_wait(self, g: ClassicGroup, m: ClassicMember) -> JoinResult:
        m.touch()
        g.members[m.member_id] = m
        if m.instance_id:
            g.instances[m.instance_id] = m.member_id
        if g.protocol_type is None or len(g.members) == 1:
            g.protocol_type = m.protocol_type
        return await self._wait_join(g, m)

    async def _wait_join(self, g: ClassicGroup, m: ClassicMember) -> JoinResult:
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

    # ------------------------------------------------------------------ SyncGroup, Heartbeat, LeaveGroup

    async def sync(
        self,
        g: ClassicGroup,
        member_id: str,
        generation: int,
        instance_id: str | None,
        protocol_type: str | None,
        protocol: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        """The leader's call stores the assignments (durably) and releases the followers waiting here."""
        err = g.validate_member(member_id, instance_id)
        if err != E.NONE:
            return SyncResult(err, b"")
        if generation != g.generation:
            return SyncResult(E.ILLEGAL_GENERATION, b"")
        if (protocol_type is not None and protocol_type != g.protocol_type) or (
            protocol is not None and protocol != g.protocol
        ):
            return SyncResult(E.INCONSISTENT_GROUP_PROTOCOL, b"")
        m = g.members[member_id]
        m.touch()
        if g.state == GroupState.PREPARING:
            return SyncResult(E.REBALANCE_IN_PROGRESS, b"")
        if g.state == GroupState.STABLE:
            return SyncResult(E.NONE, m.assignment)
        # CompletingRebalance
        if member_id == g.leader:
            for mid, mem in g.members.items():
                mem.assignment = assignments.get(mid, b"")
            g.state = GroupState.STABLE
            await self._save(g)
            if g.state != GroupState.STABLE:  # a rebalance began while the group record was being synced
                return SyncResult(E.REBALANCE_IN_PROGRESS, b"")
            for mem in g.members.values():
                if mem.sync_future is not None and not mem.sync_future.done():
                    mem.sync_future.set_result(SyncResult(E.NONE, mem.assignment))
                mem.sync_future = None
            return SyncResult(E.NONE, m.assignment)
        fut: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        m.sync_future = fut
        try:
            return await fut
        except asyncio.CancelledError:
            if m.sync_future is fut:
                m.sync_future = None
            raise

    def heartbeat(self, g: ClassicGroup, member_id: str, generation: int, instance_id: str | None) -> E:
        err = g.validate_member(member_id, instance_id)
        if err != E.NONE:
            return err
        m = g.members[member_id]
        m.touch()
        if g.state == GroupState.PREPARING:
            return E.REBALANCE_IN_PROGRESS
        if generation != g.generation:
            return E.ILLEGAL_GENERATION
        return E.NONE

    def leave(self, g: ClassicGroup, members: list[tuple[str, str | None]]) -> LeaveResult:
        """Members leave by id or static instance id (LeaveGroup v3+ batches them); one rebalance for all."""
        results: list[MemberLeft] = []
        removed = False
        for mid, iid in members:
            if iid is not None:
                known = g.instances.get(iid)
                if known is None:
                    results.append(MemberLeft(mid, iid, E.UNKNOWN_MEMBER_ID))
                    continue
                if mid and mid != known:
                    results.append(MemberLeft(mid, iid, E.FENCED_INSTANCE_ID))
                    continue
                mid = known
            m = g.members.get(mid)
            if m is None:
                results.append(MemberLeft(mid, iid, E.UNKNOWN_MEMBER_ID))
                continue
            self._remove_member(g, m, E.UNKNOWN_MEMBER_ID)
            results.append(MemberLeft(mid, iid, E.NONE))
            removed = True
        if removed:
            if not g.members and g.state != GroupState.PREPARING:
                self._become_empty(g)
            elif g.state in (GroupState.STABLE, GroupState.COMPLETING):
                self._prepare_rebalance(g, "member left")
            elif g.state == GroupState.PREPARING and g.all_joined() and time.monotonic() >= g.delay_deadline:
                self._complete_join(g)
        top = E.NONE if len(members) != 1 or results[0].error == E.NONE else results[0].error
        return LeaveResult(top, results)

    # ------------------------------------------------------------------ timeouts

    def sweep(self, g: ClassicGroup, now: float) -> None:
        """Expire pending member ids and sessions; complete a join whose deadline has passed."""
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
            log.info("group %s: member %s session expired", for_log(g.group_id), for_log(m.member_id))
            self._remove_member(g, m, E.UNKNOWN_MEMBER_ID)
        if g.state == GroupState.PREPARING:
            if now >= g.rebalance_deadline or (now >= g.delay_deadline and g.all_joined()):
                self._complete_join(g)
            return
        if expired and g.state in (GroupState.STABLE, GroupState.COMPLETING):
            self._prepare_rebalance(g, "member session expired")
        elif expired and not g.members:
            self._become_empty(g)

    def cancel_waiters(self, g: ClassicGroup) -> None:
        """On shutdown: release requests parked in JoinGroup/SyncGroup."""
        for m in g.members.values():
            for fut in (m.join_future, m.sync_future):
                if fut is not None and not fut.done():
                    fut.cancel()

    # ------------------------------------------------------------------ transitions

    def _remove_member(self, g: ClassicGroup, m: ClassicMember, error: E) -> None:
        g.members.pop(m.member_id, None)
        if m.instance_id and g.instances.get(m.instance_id) == m.member_id:
            del g.instances[m.instance_id]
        if m.join_future is not None and not m.join_future.done():
            m.join_future.set_result(JoinResult(error, member_id=m.member_id))
        if m.sync_future is not None and not m.sync_future.done():
            m.sync_future.set_result(SyncResult(error, b""))
        m.join_future = m.sync_future = None
        if g.leader == m.member_id:
            g.leader = next(iter(g.members), None)

    def _become_empty(self, g: ClassicGroup) -> None:
        g.state = GroupState.EMPTY
        g.leader = None
        g.protocol = None
        g.empty_since_ms = now_ms()
        self._save_soon(g)

    def _prepare_rebalance(self, g: ClassicGroup, reason: str) -> None:
        log.info("group %s: rebalancing (%s), generation %d", for_log(g.group_id), for_log(reason), g.generation)
        for m in g.members.values():
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result(SyncResult(E.REBALANCE_IN_PROGRESS, b""))
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

    def _wake_at(self, g: ClassicGroup, when: float) -> None:
        """Complete the join exactly when the initial delay ends (the sweeper is only a backstop)."""

        def check() -> None:
            if g.state == GroupState.PREPARING and time.monotonic() >= g.delay_deadline and g.all_joined():
                self._complete_join(g)

        loop = asyncio.get_running_loop()
        loop.call_later(max(when - time.monotonic(), 0) + 0.0005, check)

    def _complete_join(self, g: ClassicGroup) -> None:
        for m in [m for m in g.members.values() if m.join_future is None]:
            log.info("group %s: member %s did not rejoin in time", for_log(g.group_id), for_log(m.member_id))
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


def _new_member(req: JoinRequest, member_id: str, instance_id: str | None) -> ClassicMember:
    return ClassicMember(
        member_id,
        instance_id,
        req.client_id,
        req.client_host,
        req.session_timeout_ms,
        req.rebalance_timeout_ms,
        req.protocol_type,
        req.protocols,
    )
