"""KIP-848 consumer groups: the broker computes assignments and members reconcile by heartbeat.

Each membership or subscription change bumps the group epoch; the target assignment is recomputed
(uniform or range assignor) and every member is moved towards its target without two members ever
owning a partition at once: partitions a member must give up are revoked first (its epoch stays),
and a partition is handed to its new owner only once the old owner has reported it released.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from logbroker.protocol.errors import ErrorCode as E

from .coordinator import Committed, GroupState

TopicMap = dict[str, set[int]]  # topic id (str) -> partitions
ASSIGNORS = ("uniform", "range")


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed: list[str] = field(default_factory=list)
    regex: str | None = None
    assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = -1
    assigned: TopicMap = field(default_factory=dict)  # what this member was last told it owns
    reported: TopicMap | None = None  # what it last said it owns
    deadline: float = 0.0
    revoking_since: float | None = None
    sent: TopicMap | None = None  # the assignment in the last response

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.member_id,
            "instance": self.instance_id,
            "rack": self.rack_id,
            "client": self.client_id,
            "host": self.client_host,
            "rebalance": self.rebalance_timeout_ms,
            "topics": self.subscribed,
            "regex": self.regex,
            "assignor": self.assignor,
            "epoch": self.epoch,
            "assigned": {t: sorted(p) for t, p in self.assigned.items()},
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ConsumerMember:
        m = cls(
            d["id"],
            d["instance"],
            d["rack"],
            d["client"],
            d["host"],
            d["rebalance"],
            d["topics"],
            d["regex"],
            d["assignor"],
            d["epoch"],
        )
        m.assigned = {t: set(p) for t, p in d["assigned"].items()}
        m.reported = {t: set(p) for t, p in m.assigned.items()}
        return m


@dataclass
class HeartbeatResult:
    error: E
    member_id: str | None = None
    epoch: int = -1
    assignment: TopicMap | None = None
    message: str | None = None


@dataclass
class ConsumerGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = "uniform"
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, TopicMap] = field(default_factory=dict)
    offsets: dict[tuple[str, int], Committed] = field(default_factory=dict)
    metadata_signature: tuple[Any, ...] = ()
    empty_since_ms: int = 0
    protocol_type: str = "consumer"
    protocol: str | None = None

    @property
    def group_type(self) -> str:
        return "consumer"

    @property
    def state(self) -> GroupState:
        if not self.members:
            return GroupState.EMPTY
        if self.assignment_epoch < self.epoch:
            return GroupState.PREPARING  # "Assigning"
        if any(m.epoch != self.assignment_epoch for m in self.members.values()):
            return GroupState.COMPLETING  # "Reconciling"
        return GroupState.STABLE

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}

    @property
    def state_name(self) -> str:
        return {
            GroupState.EMPTY: "Empty",
            GroupState.PREPARING: "Assigning",
            GroupState.COMPLETING: "Reconciling",
            GroupState.STABLE: "Stable",
        }.get(self.state, "Dead")

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "consumer",
            "epoch": self.epoch,
            "assignment_epoch": self.assignment_epoch,
            "assignor": self.assignor,
            "empty_since": self.empty_since_ms,
            "members": [m.to_json() for m in self.members.values()],
            "target": {mid: {t: sorted(p) for t, p in tm.items()} for mid, tm in self.target.items()},
        }

    @classmethod
    def from_json(cls, gid: str, d: dict[str, Any]) -> ConsumerGroup:
        g = cls(gid, d["epoch"], d["assignment_epoch"], d["assignor"], empty_since_ms=d.get("empty_since", 0))
        for md in d["members"]:
            m = ConsumerMember.from_json(md)
            g.members[m.member_id] = m
        g.target = {mid: {t: set(p) for t, p in tm.items()} for mid, tm in d["target"].items()}
        return g


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
    assignor: str, members: dict[str, ConsumerMember], topics: dict[str, tuple[str, int]], previous: dict[str, TopicMap]
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


class ConsumerGroups:
    """KIP-848 logic over the coordinator's group table; `topics()` gives name -> (id, partitions)."""

    def __init__(
        self,
        topics: Callable[[], dict[str, tuple[str, int]]],
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 5_000,
    ) -> None:
        self.topics = topics
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms

    def heartbeat(self, g: ConsumerGroup, req: Any, client_id: str, client_host: str) -> tuple[HeartbeatResult, bool]:
        """Returns the result and whether the group's durable state changed."""
        now = time.monotonic()
        epoch = req.member_epoch
        changed = False
        if req.server_assignor is not None and req.server_assignor not in ASSIGNORS:
            return HeartbeatResult(E.UNSUPPORTED_ASSIGNOR, message=f"assignors: {', '.join(ASSIGNORS)}"), False
        regex = getattr(req, "subscribed_topic_regex", None)
        regex_given = regex is not None
        regex = regex or None  # clients send "" for "no regex"
        if regex is not None:
            try:
                re.compile(regex)
            except re.error as exc:
                return HeartbeatResult(E.INVALID_REGULAR_EXPRESSION, message=str(exc)), False
        m = g.members.get(req.member_id)
        if epoch == 0:
            if m is None and req.instance_id is not None:
                static = next((x for x in g.members.values() if x.instance_id == req.instance_id), None)
                if static is not None:
                    if static.epoch != -2:
                        return HeartbeatResult(
                            E.UNRELEASED_INSTANCE_ID, message=f"instance {req.instance_id} is in use"
                        ), False
                    # The static member is back: it takes over the old member's place and assignment.
                    del g.members[static.member_id]
                    old_id = static.member_id
                    static.member_id = req.member_id or str(uuid.uuid4())
                    static.epoch = g.assignment_epoch
                    static.reported = {}
                    g.members[static.member_id] = static
                    g.target[static.member_id] = g.target.pop(old_id, {})
                    m = static
            if m is None:
                mid = req.member_id or str(uuid.uuid4())
                m = ConsumerMember(
                    mid,
                    req.instance_id,
                    req.rack_id,
                    client_id,
                    client_host,
                    req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else 300_000,
                )
                g.members[mid] = m
                g.epoch += 1
                changed = True
            else:
                m.reported = {}
        elif m is None:
            return HeartbeatResult(E.UNKNOWN_MEMBER_ID, message=f"member {req.member_id} is not in the group"), False
        elif epoch == -1:
            self.remove(g, m)
            return HeartbeatResult(E.NONE, m.member_id, -1), True
        elif epoch == -2:
            m.epoch = -2  # a static member leaving for a restart keeps its assignment
            return HeartbeatResult(E.NONE, m.member_id, -2), True
        elif epoch not in (m.epoch, m.previous_epoch):
            return HeartbeatResult(
                E.FENCED_MEMBER_EPOCH, message=f"epoch {epoch} is not the member's epoch {m.epoch}"
            ), False
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
        if req.topic_partitions is not None:
            m.reported = {str(tp.topic_id): set(tp.partitions) for tp in req.topic_partitions if tp.partitions}
        if req.rebalance_timeout_ms > 0:
            m.rebalance_timeout_ms = req.rebalance_timeout_ms
        changed |= self._refresh_target(g)
        changed |= self._reconcile(g, m, now)
        result = HeartbeatResult(E.NONE, m.member_id, m.epoch)
        if m.sent != m.assigned or epoch == 0 or (m.reported is not None and m.reported != m.assigned):
            result.assignment = _copy(m.assigned)
            m.sent = _copy(m.assigned)
        return result, changed

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
            g.empty_since_ms = int(time.time() * 1000)

    def expire(self, g: ConsumerGroup, now: float) -> bool:
        gone = [m for m in g.members.values() if m.deadline and m.deadline < now]
        for m in gone:
            self.remove(g, m)
        return bool(gone)

    def check_commit(self, g: ConsumerGroup, member_id: str, epoch: int) -> E:
        m = g.members.get(member_id)
        if m is None:
            return E.UNKNOWN_MEMBER_ID
        if epoch != m.epoch:
            return E.STALE_MEMBER_EPOCH
        return E.NONE
