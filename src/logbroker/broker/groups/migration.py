"""Online migration between the classic protocol and KIP-848's consumer protocol, as Kafka 4 does it
(`group.consumer.migration.policy`, default bidirectional).

Upgrade: the first ConsumerGroupHeartbeat (epoch 0) of a consumer-protocol member to a live classic group
turns the group into a consumer group without stopping it. Every classic member becomes a member of it
that still speaks the classic protocol, keeping its id, its last assignment and the generation as its
epoch; the newcomer's subscription then starts a server-side rebalance. Refused (GROUP_ID_NOT_FOUND,
"Cannot upgrade classic group ...") when the policy forbids it, the group is no consumer-protocol group,
it is larger than group.consumer.max.size, a member's metadata does not parse, or a custom assignor left
user data in an assignment.

Classic members inside a consumer group keep using JoinGroup/SyncGroup/Heartbeat/LeaveGroup, and the
broker assigns for them as for everyone: JoinGroup reconciles the member and answers with its epoch as
the generation (no leader, no member list: every classic member is a follower), SyncGroup hands it its
current partitions in the consumer protocol's format, and Heartbeat answers REBALANCE_IN_PROGRESS while it
has partitions to give up or to take, so it rejoins until it has its target.

Downgrade: when the last consumer-protocol member leaves (or is fenced or times out) and the policy allows
it, a group made only of classic members becomes a classic group again (generation = the group epoch,
each member's assignment its target) and rebalances, the members learning of it from Heartbeat.
"""

from __future__ import annotations

import time

from logbroker.protocol.consumer_protocol import (
    assignment_partitions,
    assignment_user_data,
    encode_assignment,
    parse_subscription,
)
from logbroker.protocol.errors import ErrorCode as E

from .classic import ClassicGroups
from .consumer import ConsumerGroups, _copy, _minus, _union, new_member_id
from .model import (
    ClassicGroup,
    ClassicMember,
    ClassicProtocol,
    ConsumerGroup,
    ConsumerMember,
    GroupState,
    HeartbeatResult,
    JoinRequest,
    JoinResult,
    LeaveResult,
    MemberLeft,
    SyncResult,
    TopicMap,
)

POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")


class Migration:
    def __init__(self, consumer: ConsumerGroups, classic: ClassicGroups, policy: str, classic_max_size: int) -> None:
        self.consumer = consumer
        self.classic = classic
        self.policy = policy.lower()
        self.classic_max_size = classic_max_size

    # ------------------------------------------------------------------ topic names and ids

    def _ids(self, pairs: list[tuple[str, int]]) -> TopicMap:
        table = self.consumer.topics()
        out: TopicMap = {}
        for name, p in pairs:
            if name in table and 0 <= p < table[name][1]:
                out.setdefault(table[name][0], set()).add(p)
        return out

    def _names(self, tm: TopicMap) -> dict[str, list[int]]:
        by_id = {tid: name for name, (tid, _n) in self.consumer.topics().items()}
        return {by_id[t]: sorted(ps) for t, ps in tm.items() if t in by_id}

    # ------------------------------------------------------------------ upgrade

    def upgrade(self, cg: ClassicGroup) -> ConsumerGroup | HeartbeatResult:
        """The consumer group a live classic group becomes, or the refusal."""

        def refuse(why: str) -> HeartbeatResult:
            message = f"Cannot upgrade classic group {cg.group_id} to consumer group because {why}."
            return HeartbeatResult(E.GROUP_ID_NOT_FOUND, message=message)

        if self.policy not in ("upgrade", "bidirectional"):
            return refuse("online upgrade is disabled")
        if cg.protocol_type != "consumer":
            return refuse("the group does not use the consumer embedded protocol")
        if len(cg.members) > self.consumer.max_group_size:
            return refuse("the group size exceeds the consumer group maximum size")
        g = ConsumerGroup(cg.group_id, offsets=cg.offsets, txn_offsets=cg.txn_offsets, persisted=cg.persisted)
        g.epoch = g.assignment_epoch = cg.generation
        now = time.monotonic()
        for cm in cg.members.values():
            try:
                sub = parse_subscription(cm.metadata_for(cg.protocol))
                if cm.assignment and assignment_user_data(cm.assignment):
                    return refuse("an unsupported custom assignor is in use. Please refer to the documentation or "
                                  "switch to a default assignor before re-attempting the upgrade")  # fmt: skip
                assigned = self._ids(assignment_partitions(cm.assignment)) if cm.assignment else {}
            except ValueError:
                return refuse("the embedded consumer protocol is malformed")
            m = ConsumerMember(cm.member_id, cm.instance_id, sub.rack, cm.client_id, cm.client_host,
                               cm.rebalance_timeout_ms, list(sub.topics))  # fmt: skip
            m.epoch = m.previous_epoch = cg.generation
            m.assigned = assigned
            m.reported = _copy(assigned)
            m.sent = _copy(assigned)
            m.classic = ClassicProtocol(cm.session_timeout_ms, list(cm.protocols))
            m.deadline = now + cm.session_timeout_ms / 1000
            g.members[m.member_id] = m
            g.target[m.member_id] = _copy(assigned)
        for cm in cg.members.values():  # requests parked in the classic group: rejoin the consumer group
            for fut, result in ((cm.join_future, JoinResult(E.REBALANCE_IN_PROGRESS, member_id=cm.member_id)),
                                (cm.sync_future, SyncResult(E.REBALANCE_IN_PROGRESS, b""))):  # fmt: skip
                if fut is not None and not fut.done():
                    fut.set_result(result)  # type: ignore[arg-type]
        self.consumer.refresh(g)  # notes the topics' partition counts: no bump
        return g

    # ------------------------------------------------------------------ downgrade

    def downgrade(self, g: ConsumerGroup) -> ClassicGroup | None:
        """The classic group a consumer group of classic members only becomes (then rebalanced by the caller),
        or None when it stays as it is."""
        members = list(g.members.values())
        if not members or any(m.classic is None for m in members):
            return None
        if self.policy not in ("downgrade", "bidirectional") or len(members) > self.classic_max_size:
            return None
        cg = ClassicGroup(g.group_id, offsets=g.offsets, txn_offsets=g.txn_offsets, persisted=g.persisted)
        cg.generation = g.epoch
        cg.protocol_type = "consumer"
        for m in members:
            assert m.classic is not None
            version = _subscription_version(m.classic)
            target = g.target.get(m.member_id) or m.assigned
            cm = ClassicMember(m.member_id, m.instance_id, m.client_id, m.client_host, m.classic.session_timeout_ms,
                               m.rebalance_timeout_ms, "consumer", list(m.classic.protocols),
                               assignment=encode_assignment(self._names(target), version))  # fmt: skip
            cm.touch()
            cg.members[m.member_id] = cm
            if m.instance_id:
                cg.instances[m.instance_id] = m.member_id
        cg.protocol = cg.choose_protocol()
        cg.leader = members[0].member_id
        cg.state = GroupState.STABLE
        return cg

    # ------------------------------------------------------------------ classic members in a consumer group

    def _protocol_refusal(self, g: ConsumerGroup, req: JoinRequest) -> bool:
        """Kafka's throwIfClassicProtocolIsNotSupported: "consumer" and one protocol every classic member
        (other than this one) supports."""
        if req.protocol_type != "consumer" or not req.protocols:
            return True
        names = {n for n, _ in req.protocols}
        for m in g.members.values():
            if m.classic is not None and m.member_id != req.member_id:
                names &= set(m.classic.names())
        return not names

    def _chosen(self, g: ConsumerGroup, m: ConsumerMember) -> str | None:
        assert m.classic is not None
        for name in m.classic.names():
            if all(o.classic is None or name in o.classic.names() for o in g.members.values()):
                return name
        return None

    def join(self, g: ConsumerGroup, req: JoinRequest) -> JoinResult:
        if len(g.members) >= self.consumer.max_group_size and req.member_id not in g.members:
            return JoinResult(E.GROUP_MAX_SIZE_REACHED, member_id=req.member_id)
        if self._protocol_refusal(g, req):
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id)
        member_id = req.member_id
        m = g.members.get(member_id) if member_id else None
        if not member_id:
            member_id = new_member_id()
            if req.require_known_member_id:
                g.pending[member_id] = time.monotonic() + req.session_timeout_ms / 1000
                return JoinResult(E.MEMBER_ID_REQUIRED, member_id=member_id)
        elif m is None:
            if g.pending.pop(member_id, None) is None:
                return JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member_id)
        elif m.classic is None:
            return JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member_id)  # a consumer-protocol member's id
        try:
            sub = parse_subscription(req.protocols[0][1])
        except ValueError:
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        now = time.monotonic()
        if m is None:
            m = ConsumerMember(member_id, req.instance_id, sub.rack, req.client_id, req.client_host,
                               req.rebalance_timeout_ms)  # fmt: skip
            g.members[member_id] = m
            g.epoch += 1
        if sorted(sub.topics) != sorted(m.subscribed):
            m.subscribed = list(sub.topics)
            g.epoch += 1
        m.classic = ClassicProtocol(req.session_timeout_ms, list(req.protocols))
        m.rebalance_timeout_ms = req.rebalance_timeout_ms
        m.reported = self._ids(sub.owned)  # what it still owns (eager clients give up everything first)
        m.deadline = now + req.session_timeout_ms / 1000
        self.consumer.refresh(g)
        self.consumer.reconcile(g, m, now)
        return JoinResult(E.NONE, m.epoch, "consumer", self._chosen(g, m), "", member_id, [])

    def sync(self, g: ConsumerGroup, member_id: str, generation: int, protocol_type: str | None,
             protocol: str | None) -> SyncResult:  # fmt: skip
        m = g.members.get(member_id)
        if m is None or m.classic is None:
            return SyncResult(E.UNKNOWN_MEMBER_ID, b"")
        if generation != m.epoch:
            return SyncResult(E.ILLEGAL_GENERATION, b"")
        if (protocol_type is not None and protocol_type != "consumer") or (
            protocol is not None and protocol != self._chosen(g, m)
        ):
            return SyncResult(E.INCONSISTENT_GROUP_PROTOCOL, b"")
        m.deadline = time.monotonic() + m.classic.session_timeout_ms / 1000
        self.consumer.refresh(g)
        unrevoked = bool(_minus(m.reported or {}, m.assigned))  # it still holds partitions it must give up
        if g.assignment_epoch > m.epoch and not unrevoked:
            return SyncResult(E.REBALANCE_IN_PROGRESS, b"")
        m.reported = _copy(m.assigned)  # it owns what it is given now
        m.sent = _copy(m.assigned)
        return SyncResult(E.NONE, encode_assignment(self._names(m.assigned), _subscription_version(m.classic)))

    def heartbeat(self, g: ConsumerGroup, member_id: str, generation: int) -> E:
        m = g.members.get(member_id)
        if m is None or m.classic is None:
            return E.UNKNOWN_MEMBER_ID
        if generation != m.epoch:
            return E.ILLEGAL_GENERATION
        m.deadline = time.monotonic() + m.classic.session_timeout_ms / 1000
        self.consumer.refresh(g)
        target = g.target.get(member_id, {})
        if m.epoch < g.assignment_epoch or _minus(m.assigned, target):
            return E.REBALANCE_IN_PROGRESS  # partitions to give up, or a newer assignment
        held: TopicMap = {}
        for other in g.members.values():
            if other is not m:
                held = _union(held, _union(other.assigned, other.reported or {}))
        if _minus(_minus(target, m.assigned), held):
            return E.REBALANCE_IN_PROGRESS  # partitions it was waiting for are free now
        return E.NONE

    def leave(self, g: ConsumerGroup, members: list[tuple[str, str | None]]) -> LeaveResult:
        results = []
        for mid, iid in members:
            m = g.members.get(mid) if mid else None
            if m is None and iid is not None:
                m = next((x for x in g.members.values() if x.instance_id == iid), None)
                if m is not None and mid and m.member_id != mid:
                    results.append(MemberLeft(mid, iid, E.FENCED_INSTANCE_ID))
                    continue
            if m is None:
                results.append(MemberLeft(mid, iid, E.UNKNOWN_MEMBER_ID))
                continue
            self.consumer.remove(g, m)
            results.append(MemberLeft(m.member_id, iid, E.NONE))
        top = E.NONE if len(members) != 1 or results[0].error == E.NONE else results[0].error
        return LeaveResult(top, results)


def _subscription_version(c: ClassicProtocol) -> int:
    try:
        return parse_subscription(c.protocols[0][1]).version if c.protocols else 0
    except ValueError:
        return 0
