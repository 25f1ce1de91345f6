"""KIP-848 consumer groups: the broker computes assignments and members reconcile by heartbeat.

Each membership or subscription change bumps the group epoch; the target assignment is recomputed
(uniform or range assignor) and every member is moved towards its target without two members ever
owning a partition at once: partitions a member must give up are revoked first (its epoch stays),
and a partition is handed to its new owner only once the old owner has reported it released.
The coordinator owns the group table and persistence; this module gets a group already routed here.
"""

from __future__ import annotations

import base64
import re
import time
import uuid
from collections.abc import Callable, Mapping

from logbroker.protocol.errors import ErrorCode as E

from .model import (
    UNBOUNDED,
    ConsumerGroup,
    ConsumerHeartbeat,
    ConsumerHeartbeatBody,
    ConsumerMember,
    HeartbeatResult,
    TopicMap,
    is_blank,
    now_ms,
)

ASSIGNORS = ("uniform", "range")
TopicTable = Mapping[str, tuple[str, int]]  # topic name -> (topic id, partition count); internal topics left out


def _copy(tm: TopicMap) -> TopicMap:
    return {t: set(p) for t, p in tm.items() if p}


def _minus(a: TopicMap, b: TopicMap) -> TopicMap:
    return {t: p - b.get(t, set()) for t, p in a.items() if p - b.get(t, set())}


def _intersect(a: TopicMap, b: TopicMap) -> TopicMap:
    return {t: p & b[t] for t, p in a.items() if t in b and p & b[t]}


def _union(a: TopicMap, b: TopicMap) -> TopicMap:
    out = _copy(a)
    for t, p in b.items():
        out.setdefault(t, set()).update(p)
    return out


def assign(
    assignor: str, members: dict[str, ConsumerMember], topics: TopicTable, previous: dict[str, TopicMap]
) -> dict[str, TopicMap]:
    """Target assignment: `topics` maps subscribed topic names to (topic id, partition count)."""
    subs: dict[str, list[str]] = {}  # topic name -> member ids subscribed
    for mid in sorted(members):
        m = members[mid]
        names = set(m.subscribed)
        if m.regex:
            pattern = re.compile(m.regex)
            names |= {t for t in topics if pattern.fullmatch(t)}
        for t in names:
            if t in topics:
                subs.setdefault(t, []).append(mid)
    target: dict[str, TopicMap] = {mid: {} for mid in members}
    if assignor == "range":
        for name in sorted(subs):
            tid, n = topics[name]
            mids = subs[name]
            per, extra = divmod(n, len(mids))
            start = 0
            for i, mid in enumerate(mids):
                count = per + (1 if i < extra else 0)
                if count:
                    target[mid][tid] = set(range(start, start + count))
                start += count
        return target
    # uniform: balanced counts, keeping each partition where it was when that stays balanced (sticky)
    all_parts = [(topics[name][0], p, name) for name in sorted(subs) for p in range(topics[name][1])]
    if not all_parts:
        return target
    active = sorted({mid for mids in subs.values() for mid in mids})
    quota = -(-len(all_parts) // len(active))
    load = dict.fromkeys(active, 0)
    owner_of = {(t, p): mid for mid, tm in previous.items() for t, ps in tm.items() for p in ps}
    pending = []
    for tid, p, name in all_parts:
        prev = owner_of.get((tid, p))
        if prev in load and prev in subs[name] and load[prev] < quota:
            target[prev].setdefault(tid, set()).add(p)
            load[prev] += 1
        else:
            pending.append((tid, p, name))
    for tid, p, name in pending:
        mid = min(subs[name], key=lambda m: (load[m], m))
        target[mid].setdefault(tid, set()).add(p)
        load[mid] += 1
    return target


def new_member_id() -> str:
    """A member id as Kafka makes one (its `Uuid.toString()`: URL-safe base64 of 16 random bytes, unpadded,
    never starting with '-')."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


def validate(body: ConsumerHeartbeatBody, version: int) -> HeartbeatResult | None:
    """Kafka's request checks (GroupCoordinatorService), in its order; None when the request is well formed.
    They come before any group is looked up, so a refused request creates nothing."""

    def bad(message: str) -> HeartbeatResult:
        return HeartbeatResult(E.INVALID_REQUEST, message=message)

    epoch = body.member_epoch
    if (version >= 1 or epoch > 0 or epoch == -1) and is_blank(body.member_id):
        return bad("MemberId can't be empty.")  # v1+ clients make their own member ids (KIP-1082)
    if is_blank(body.group_id):
        return bad("GroupId can't be empty.")
    if is_blank(body.instance_id):
        return bad("InstanceId can't be empty.")
    if is_blank(body.rack_id):
        return bad("RackId can't be empty.")
    if epoch == 0:
        if body.rebalance_timeout_ms == -1:
            return bad("RebalanceTimeoutMs must be provided in first request.")
        if body.topic_partitions:
            return bad("TopicPartitions must be empty when (re-)joining.")
        if body.subscribed_topic_names is None and getattr(body, "subscribed_topic_regex", None) is None:
            return bad("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
    elif epoch == -2:
        if body.instance_id is None:
            return bad("InstanceId can't be null.")
    elif epoch < -2:
        return bad("MemberEpoch is invalid.")
    if body.server_assignor is not None and body.server_assignor not in ASSIGNORS:
        return HeartbeatResult(
            E.UNSUPPORTED_ASSIGNOR,
            message=f"ServerAssignor {body.server_assignor} is not supported. "
            f"Supported assignors: {', '.join(ASSIGNORS)}.",
        )
    return None


class ConsumerGroups:
    """KIP-848 transitions; `topics()` gives the current topic table (read on every heartbeat)."""

    def __init__(
        self,
        topics: Callable[[], TopicTable],
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 5_000,
        max_group_size: int = UNBOUNDED,
    ) -> None:
        self.topics = topics
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_group_size = max_group_size

    def heartbeat(self, g: ConsumerGroup, req: ConsumerHeartbeat) -> tuple[HeartbeatResult, bool]:
        """Returns the result and whether the group's durable state changed."""
        now = time.monotonic()
        epoch = req.member_epoch
        changed = False
        if epoch in (-1, -2):
            return self._leave(g, req)
        if len(g.members) >= self.max_group_size and req.member_id not in g.members:
            message = f"The consumer group has reached its maximum capacity of {self.max_group_size} members."
            return HeartbeatResult(E.GROUP_MAX_SIZE_REACHED, message=message), False
        regex_given = req.subscribed_topic_regex is not None
        regex = req.subscribed_topic_regex or None  # clients send "" for "no regex"
        if regex is not None:
            try:
                re.compile(regex)
            except re.error as exc:
                message = f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}."
                return HeartbeatResult(E.INVALID_REGULAR_EXPRESSION, message=message), False
        m = g.members.get(req.member_id)
        if epoch == 0:
            if m is None and req.instance_id is not None:
                static = next((x for x in g.members.values() if x.instance_id == req.instance_id), None)
                if static is not None:
                    if static.epoch != -2:
                        message = (
                            f"Static member {req.member_id} with instance id {req.instance_id} cannot join the "
                            f"group because the instance id is owned by {static.member_id} member."
                        )
                        return HeartbeatResult(E.UNRELEASED_INSTANCE_ID, message=message), False
                    # The static member is back: it takes over the old member's place and assignment.
                    del g.members[static.member_id]
                    old_id = static.member_id
                    static.member_id = req.member_id or new_member_id()
                    static.epoch = g.assignment_epoch
                    static.reported = {}
                    g.members[static.member_id] = static
                    g.target[static.member_id] = g.target.pop(old_id, {})
                    m = static
            if m is None:
                mid = req.member_id or new_member_id()
                m = ConsumerMember(
                    mid,
                    req.instance_id,
                    req.rack_id,
                    req.client_id,
                    req.client_host,
                    req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else 300_000,
                )
                g.members[mid] = m
                g.epoch += 1
                changed = True
            else:
                m.reported = {}
        elif m is None:
            return _unknown_member(g, req.member_id), False
        elif epoch not in (m.epoch, m.previous_epoch):
            which = "greater" if epoch > m.epoch else "smaller"
            message = (
                f"The consumer group member has a {which} member epoch ({epoch}) than the one known by the "
                f"group coordinator ({m.epoch}). The member must abandon all its partitions and rejoin."
            )
            return HeartbeatResult(E.FENCED_MEMBER_EPOCH, message=message), False
        m.deadline = now + self.session_timeout_ms / 1000
        if req.subscribed_topic_names is not None and sorted(req.subscribed_topic_names) != sorted(m.subscribed):
            m.subscribed = list(req.subscribed_topic_names)
            g.epoch += 1
            changed = True
        if regex_given and regex != m.regex:
            m.regex = regex
            g.epoch += 1
            changed = True
        if req.server_assignor is not None and req.server_assignor != m.assignor:
            m.assignor = req.server_assignor
            g.epoch += 1
            changed = True
        if req.owned is not None:
            m.reported = _copy(req.owned)
        if req.rebalance_timeout_ms > 0:
            m.rebalance_timeout_ms = req.rebalance_timeout_ms
        changed |= self._refresh_target(g)
        changed |= self._reconcile(g, m, now)
        result = HeartbeatResult(E.NONE, m.member_id, m.epoch)
        if m.sent != m.assigned or epoch == 0 or (m.reported is not None and m.reported != m.assigned):
            result.assignment = _copy(m.assigned)
            m.sent = _copy(m.assigned)
        return result, changed

    def _leave(self, g: ConsumerGroup, req: ConsumerHeartbeat) -> tuple[HeartbeatResult, bool]:
        """Epoch -1 leaves the group; -2 is a static member leaving for a restart (it keeps its assignment)."""
        if req.member_epoch == -2:
            m = next((x for x in g.members.values() if x.instance_id == req.instance_id), None)
            if m is None:
                return HeartbeatResult(E.UNKNOWN_MEMBER_ID, message=f"Instance id {req.instance_id} is unknown."), False
            if m.member_id != req.member_id:
                message = f"Static member {req.member_id} with instance id {req.instance_id} is fenced."
                return HeartbeatResult(E.FENCED_INSTANCE_ID, message=message), False
            m.epoch = -2
            return HeartbeatResult(E.NONE, m.member_id, -2), True
        m = g.members.get(req.member_id)
        if m is None:
            return _unknown_member(g, req.member_id), False
        self.remove(g, m)
        return HeartbeatResult(E.NONE, m.member_id, -1), True

    def refresh(self, g: ConsumerGroup) -> bool:
        return self._refresh_target(g)

    def reconcile(self, g: ConsumerGroup, m: ConsumerMember, now: float) -> bool:
        return self._reconcile(g, m, now)

    def _refresh_target(self, g: ConsumerGroup) -> bool:
        topics = self.topics()
        wanted = {t for m in g.members.values() for t in m.subscribed}
        patterns = [re.compile(m.regex) for m in g.members.values() if m.regex]
        relevant = {n: v for n, v in topics.items() if n in wanted or any(p.fullmatch(n) for p in patterns)}
        signature = tuple(sorted((n, v[1]) for n, v in relevant.items()))
        if signature != g.metadata_signature:
            if g.metadata_signature:
                g.epoch += 1  # partitions added or topics created/deleted
            g.metadata_signature = signature
        if g.assignment_epoch >= g.epoch:
            return False
        preferred = [m.assignor for m in g.members.values() if m.assignor]
        g.assignor = max(set(preferred), key=preferred.count) if preferred else "uniform"
        active = {mid: m for mid, m in g.members.items()}
        g.target = assign(g.assignor, active, topics, g.target)
        g.assignment_epoch = g.epoch
        return True

    def _reconcile(self, g: ConsumerGroup, m: ConsumerMember, now: float) -> bool:
        if m.epoch == -2:
            return False
        target = g.target.get(m.member_id, {})
        owned = m.assigned
        revoke = _minus(owned, target)
        if revoke:
            # Step 1: take partitions away; the member keeps its epoch until it reports them released.
            m.assigned = _intersect(owned, target)
            if m.revoking_since is None:
                m.revoking_since = now
            return True
        if m.reported is not None and _minus(m.reported, m.assigned) and m.epoch != g.assignment_epoch:
            if m.revoking_since is not None and now - m.revoking_since > m.rebalance_timeout_ms / 1000:
                self.remove(g, m)  # never released its partitions: fenced, as Kafka does
                return True
            return False  # still releasing
        m.revoking_since = None
        # Step 2: hand over the new partitions nobody else still holds.
        held: TopicMap = {}
        for other in g.members.values():
            if other is not m:
                held = _union(held, other.assigned)
                if other.reported:
                    held = _union(held, other.reported)
        grant = _minus(_minus(target, owned), held)
        before = (m.epoch, {t: set(p) for t, p in m.assigned.items()})
        m.assigned = _union(owned, grant)
        if m.epoch != g.assignment_epoch:
            m.previous_epoch = m.epoch
            m.epoch = g.assignment_epoch
        return before != (m.epoch, m.assigned)

    def remove(self, g: ConsumerGroup, m: ConsumerMember) -> None:
        g.members.pop(m.member_id, None)
        g.target.pop(m.member_id, None)
        g.epoch += 1
        if not g.members:
            g.empty_since_ms = now_ms()

    def expire(self, g: ConsumerGroup, now: float) -> bool:
        gone = [m for m in g.members.values() if m.deadline and m.deadline < now]
        for m in gone:
            self.remove(g, m)
        return bool(gone)

    def resume(self, g: ConsumerGroup) -> None:
        """Members restored from the log get a full session to heartbeat again."""
        deadline = time.monotonic() + self.session_timeout_ms / 1000
        for m in g.members.values():
            m.deadline = deadline


def _unknown_member(g: ConsumerGroup, member_id: str) -> HeartbeatResult:
    return HeartbeatResult(E.UNKNOWN_MEMBER_ID, message=f"Member {member_id} is not a member of group {g.group_id}.")
