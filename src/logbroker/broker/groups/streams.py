"""KIP-1071 streams groups: Kafka Streams applications whose tasks the broker assigns (`group.protocol=streams`).

A member joins with its application's topology (subtopologies, their source, repartition and changelog topics).
The broker works out how many partitions each internal topic needs and how many tasks each subtopology has
(`configure`), asks for the missing internal topics to be created (the heartbeat's MISSING_INTERNAL_TOPICS
status until they exist), assigns tasks with a sticky assignor balanced by process (`assign`), and moves every
member towards its target the way consumer groups move partitions: a task is taken from its owner first (the
member keeps its epoch until it reports the task gone), and only then given to its next owner, so no task ever
runs twice. Standby replicas go to other processes than the active task's.

As Kafka 4.4: no warm-up tasks (its refiner hands none out), no topology updates and no regular-expression
source topics (both INVALID_REQUEST with Kafka's messages), the first assignment of a new group waits for
`initial.rebalance.delay.ms` and later ones are computed at most once per `assignment.interval.ms`
(ASSIGNMENT_DELAYED meanwhile). The group (topology, members, their assignments, the target) is durable; task
offsets, the endpoint epoch and a requested shutdown are kept in memory, as Kafka keeps them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from logbroker.protocol.errors import ErrorCode as E

from .model import GroupBase, GroupState, StreamsSettings, is_blank, now_ms

Task = tuple[str, int]  # (subtopology id, partition)
TopicSizes = Mapping[str, int]  # topic name -> partition count (existing topics only)
TopicTable = Mapping[str, tuple[str, int]]  # what `StreamsGroups.topics()` gives: name -> (topic id, partitions)

# Heartbeat status codes (StreamsGroupHeartbeatResponse.Status).
STALE_TOPOLOGY, MISSING_SOURCE_TOPICS, INCORRECTLY_PARTITIONED_TOPICS, MISSING_INTERNAL_TOPICS = 0, 1, 2, 3
SHUTDOWN_APPLICATION, ASSIGNMENT_DELAYED, MISSING_CLIENT_TAGS = 4, 5, 6

STABLE, UNREVOKED, UNRELEASED = "stable", "unrevoked", "unreleased"  # a member's reconciliation state


class TopologyError(Exception):
    """STREAMS_INVALID_TOPOLOGY: the topology cannot be configured at all."""


# ---------------------------------------------------------------------------------------------- topology


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int = 0  # 0: not fixed by the application
    replication_factor: int = 0  # 0 or -1: the broker's default
    configs: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> list[Any]:
        return [self.name, self.partitions, self.replication_factor, [list(kv) for kv in self.configs]]

    @classmethod
    def from_json(cls, v: list[Any]) -> TopicInfo:
        return cls(v[0], v[1], v[2], tuple((k, val) for k, val in v[3]))

    @classmethod
    def from_body(cls, t: Any) -> TopicInfo:
        return cls(t.name, t.partitions, t.replication_factor, tuple((kv.key, kv.value) for kv in t.topic_configs))


@dataclass(frozen=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...]
    changelogs: tuple[TopicInfo, ...]
    repartition_sinks: tuple[str, ...]
    repartition_sources: tuple[TopicInfo, ...]
    copartition_groups: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]  # (source indexes, repartition ones)

    @property
    def stateful(self) -> bool:
        return bool(self.changelogs)

    def input_topics(self) -> list[str]:
        """The topics a task of this subtopology reads: partition p of each is task p's."""
        return [*self.source_topics, *(t.name for t in self.repartition_sources)]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.subtopology_id,
            "sources": list(self.source_topics),
            "changelogs": [t.to_json() for t in self.changelogs],
            "sinks": list(self.repartition_sinks),
            "repartition": [t.to_json() for t in self.repartition_sources],
            "copartition": [[list(a), list(b)] for a, b in self.copartition_groups],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Subtopology:
        return cls(
            d["id"],
            tuple(d["sources"]),
            tuple(TopicInfo.from_json(t) for t in d["changelogs"]),
            tuple(d["sinks"]),
            tuple(TopicInfo.from_json(t) for t in d["repartition"]),
            tuple((tuple(a), tuple(b)) for a, b in d["copartition"]),
        )


@dataclass(frozen=True)
class Topology:
    epoch: int
    subtopologies: tuple[Subtopology, ...]

    def by_id(self) -> dict[str, Subtopology]:
        return {s.subtopology_id: s for s in self.subtopologies}

    def topic_names(self) -> set[str]:
        names: set[str] = set()
        for s in self.subtopologies:
            names.update(s.source_topics, s.repartition_sinks)
            names.update(t.name for t in (*s.changelogs, *s.repartition_sources))
        return names

    def input_topics(self) -> set[str]:
        return {t for s in self.subtopologies for t in s.input_topics()}

    def to_json(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "subtopologies": [s.to_json() for s in self.subtopologies]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Topology:
        return cls(d["epoch"], tuple(Subtopology.from_json(s) for s in d["subtopologies"]))

    @classmethod
    def from_body(cls, t: Any) -> Topology:
        return cls(
            t.epoch,
            tuple(
                Subtopology(
                    s.subtopology_id,
                    tuple(s.source_topics),
                    tuple(TopicInfo.from_body(c) for c in s.state_changelog_topics),
                    tuple(s.repartition_sink_topics),
                    tuple(TopicInfo.from_body(r) for r in s.repartition_source_topics),
                    tuple((tuple(g.source_topics), tuple(g.repartition_source_topics)) for g in s.copartition_groups),
                )
                for s in t.subtopologies
            ),
        )


@dataclass
class Configured:
    """A topology worked out against the topics that exist (not durable: recomputed when they change)."""

    tasks: dict[str, int] = field(default_factory=dict)  # subtopology id -> number of tasks
    partitions: dict[str, int] = field(default_factory=dict)  # every topology topic -> its partition count
    to_create: list[TopicInfo] = field(default_factory=list)  # internal topics missing, with their counts
    status: tuple[int, str] | None = None  # what keeps it from being ready

    @property
    def ready(self) -> bool:
        return self.status is None


def _listed(names: Iterable[str]) -> str:
    names = sorted(names)
    shown = ", ".join(names[:3])
    return shown + (f" and {len(names) - 3} additional topics" if len(names) > 3 else "")


def configure(topology: Topology, sizes: TopicSizes) -> Configured:
    """Kafka's InternalTopicManager: partition counts of repartition topics (from what feeds them, then the
    copartition groups), changelogs as their subtopology's widest input, the number of tasks per subtopology,
    and which internal topics are missing. Raises TopologyError for a topology no counts can satisfy."""
    missing = {t for s in topology.subtopologies for t in s.source_topics if t not in sizes}
    if missing:
        return Configured(status=(MISSING_SOURCE_TOPICS, f"Source topics {_listed(missing)} are missing."))
    counts: dict[str, int] = {}
    for s in topology.subtopologies:
        for t in s.source_topics:
            counts[t] = sizes[t]
        for r in s.repartition_sources:
            if r.name in sizes:
                counts[r.name] = sizes[r.name]
            elif r.partitions:
                counts[r.name] = r.partitions
    sinks = {t for s in topology.subtopologies for t in s.repartition_sinks}
    repartition = {r.name for s in topology.subtopologies for r in s.repartition_sources}
    # A repartition topic is as wide as the widest input of the subtopology writing it; iterate to a fixpoint.
    while True:
        progress, left = False, False
        for s in topology.subtopologies:
            for sink in s.repartition_sinks:
                if sink in counts or sink not in repartition:
                    continue
                known = [counts.get(t) for t in s.input_topics()]
                if known and all(n is not None for n in known):
                    counts[sink] = max(n for n in known if n is not None)
                    progress = True
                else:
                    left = True
        if not left:
            break
        if not progress:
            raise TopologyError(
                "Failed to compute number of partitions for all repartition topics. There may be loops in "
                "the topology that cannot be resolved."
            )
    for name in repartition - counts.keys():
        if name not in sinks:
            raise TopologyError(
                f"Failed to compute number of partitions for all repartition topics, because a repartition "
                f"source topic {name} is never used as a sink topic."
            )
    fixed = {r.name: r.partitions for s in topology.subtopologies for r in s.repartition_sources if r.partitions}
    for s in topology.subtopologies:
        repart_names = [r.name for r in s.repartition_sources]
        for src_idx, rep_idx in s.copartition_groups:
            external = [s.source_topics[i] for i in src_idx if i < len(s.source_topics)]
            internal = [repart_names[i] for i in rep_idx if i < len(repart_names)]
            if external:
                widths = {t: counts[t] for t in external}
                if len(set(widths.values())) > 1:
                    shown = ", ".join(f"{t}={n}" for t, n in sorted(widths.items()))
                    return Configured(status=(INCORRECTLY_PARTITIONED_TOPICS,
                                              f"Following topics do not have the same number of partitions: "
                                              f"[{{{shown}}}]"))  # fmt: skip
                width = next(iter(widths.values()))
            elif fixed:
                widths = {fixed[t] for t in internal if t in fixed} or set(fixed.values())
                if len(widths) > 1:
                    shown = ", ".join(f"{t}={n}" for t, n in sorted(fixed.items()))
                    return Configured(status=(INCORRECTLY_PARTITIONED_TOPICS,
                                              f"Following topics do not have the same number of partitions: "
                                              f"[{{{shown}}}]"))  # fmt: skip
                width = next(iter(widths))
            else:
                width = max((counts.get(t, 0) for t in internal), default=0)
                if width <= 0:
                    raise TopologyError("Copartitioned repartition topics have no partition count.")
            for t in internal:
                if t in fixed and fixed[t] != width:
                    return Configured(status=(INCORRECTLY_PARTITIONED_TOPICS,
                                              f"Number of partitions [{fixed[t]}] of repartition topic [{t}] "
                                              f"doesn't match number of partitions [{width}] of the source "
                                              f"topic."))  # fmt: skip
                counts[t] = width
    tasks: dict[str, int] = {}
    for s in topology.subtopologies:
        widest = max((counts.get(t, 0) for t in s.input_topics()), default=0)
        tasks[s.subtopology_id] = widest
        for c in s.changelogs:
            counts[c.name] = widest
    out = Configured(tasks=tasks, partitions=counts)
    internal_topics = [(r, counts[r.name]) for s in topology.subtopologies for r in s.repartition_sources]
    internal_topics += [(c, counts[c.name]) for s in topology.subtopologies for c in s.changelogs]
    seen: set[str] = set()
    for info, width in internal_topics:
        if info.name in seen:
            continue
        seen.add(info.name)
        have = sizes.get(info.name)
        if have is None:
            out.to_create.append(TopicInfo(info.name, width, info.replication_factor, info.configs))
        elif have != width:
            out.status = (INCORRECTLY_PARTITIONED_TOPICS,
                          f"Existing topic {info.name} has different number of partitions: expected {width}, "
                          f"found {have}")  # fmt: skip
            out.to_create = []
            return out
    if out.to_create:
        out.status = (MISSING_INTERNAL_TOPICS, f"Internal topics are missing: {_listed(t.name for t in out.to_create)}")
    return out


# ---------------------------------------------------------------------------------------------- assignor


@dataclass
class Assignment:
    active: set[Task] = field(default_factory=set)
    standby: set[Task] = field(default_factory=set)

    def to_json(self) -> dict[str, Any]:
        return {"a": sorted(map(list, self.active)), "s": sorted(map(list, self.standby))}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Assignment:
        return cls({(s, p) for s, p in d["a"]}, {(s, p) for s, p in d["s"]})


def assign(
    members: Mapping[str, StreamsMember],
    topology: Topology,
    configured: Configured,
    num_standby: int,
) -> dict[str, Assignment]:
    """Kafka's sticky task assignor, in its essentials: active tasks stay with their current owner while it is
    under its share, then go to members holding their state (a standby, or offsets reported for it), then to
    the least-loaded process (load = tasks per member of the process) and its least-loaded member; standbys of
    stateful tasks go to other processes than the task's active owner, preferring their previous holders."""
    out = {mid: Assignment() for mid in members}
    if not members or not configured.ready:
        return out
    stateful = {s.subtopology_id for s in topology.subtopologies if s.stateful}
    tasks = sorted(((sid, p) for sid, n in configured.tasks.items() for p in range(n)), key=lambda t: (t[1], t[0]))
    n_members = len(members)
    processes: dict[str, list[str]] = {}
    for mid in sorted(members):
        processes.setdefault(members[mid].process_id, []).append(mid)
    load = dict.fromkeys(members, 0)
    on_process: dict[str, set[Task]] = {p: set() for p in processes}

    def process_load(pid: str) -> float:
        return sum(load[m] for m in processes[pid]) / len(processes[pid])

    def give(mid: str, task: Task, standby: bool = False) -> None:
        (out[mid].standby if standby else out[mid].active).add(task)
        load[mid] += 1
        on_process[members[mid].process_id].add(task)

    active_quota = math.ceil(len(tasks) / n_members)
    prev_owner = {t: mid for mid, m in members.items() for t in m.active}
    holders: dict[Task, list[str]] = {}
    for mid, m in sorted(members.items()):
        for t in m.standby:
            holders.setdefault(t, []).append(mid)
    for mid, m in sorted(members.items(), key=lambda kv: -sum(kv[1].task_offsets.values())):
        for t in m.task_offsets:
            if mid not in holders.get(t, []):
                holders.setdefault(t, []).append(mid)
    left = []
    for t in tasks:
        mid = prev_owner.get(t)
        if mid is not None and len(out[mid].active) < active_quota:
            give(mid, t)
        else:
            left.append(t)
    rest = []
    for t in left:
        candidates = [m for m in holders.get(t, []) if len(out[m].active) < active_quota]
        if candidates:
            give(min(candidates, key=lambda m: (process_load(members[m].process_id), load[m])), t)
        else:
            rest.append(t)
    for t in sorted(rest):
        pid = min(processes, key=lambda p: (process_load(p), p))
        give(min(processes[pid], key=lambda m: (load[m], m)), t)
    if num_standby <= 0:
        return out
    for t in sorted((t for t in tasks if t[0] in stateful), reverse=True):
        for _ in range(num_standby):
            free = [p for p in processes if t not in on_process[p]]
            if not free:
                break  # fewer processes than replicas: Kafka logs it and places what fits
            preferred = [m for m in holders.get(t, []) if members[m].process_id in free]
            owner_before = prev_owner.get(t)
            if owner_before is not None and members[owner_before].process_id in free:
                preferred.insert(0, owner_before)
            if preferred:
                give(min(preferred, key=lambda m: (process_load(members[m].process_id), load[m])), t, standby=True)
            else:
                pid = min(free, key=lambda p: (process_load(p), p))
                give(min(processes[pid], key=lambda m: (load[m], m)), t, standby=True)
    return out


# ---------------------------------------------------------------------------------------------- members, group


@dataclass
class StreamsMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300_000
    topology_epoch: int = -1
    process_id: str = ""
    endpoint: tuple[str, int] | None = None
    client_tags: dict[str, str] = field(default_factory=dict)
    epoch: int = 0
    previous_epoch: int = 0
    state: str = STABLE
    active: dict[Task, int] = field(default_factory=dict)  # assigned active task -> the epoch it came with
    standby: set[Task] = field(default_factory=set)
    pending_active: dict[Task, int] = field(default_factory=dict)  # revoked, not yet reported released
    pending_standby: set[Task] = field(default_factory=set)
    # In memory only (as in Kafka): what the member last reported.
    task_offsets: dict[Task, int] = field(default_factory=dict)
    task_end_offsets: dict[Task, int] = field(default_factory=dict)
    reported: Assignment | None = None
    deadline: float = 0.0
    revoking_since: float | None = None

    def owns(self) -> Assignment:
        return Assignment(set(self.active), set(self.standby))

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.member_id,
            "instance": self.instance_id,
            "rack": self.rack_id,
            "client_id": self.client_id,
            "client_host": self.client_host,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "topology_epoch": self.topology_epoch,
            "process": self.process_id,
            "endpoint": list(self.endpoint) if self.endpoint else None,
            "tags": self.client_tags,
            "epoch": self.epoch,
            "previous_epoch": self.previous_epoch,
            "state": self.state,
            "active": [[s, p, e] for (s, p), e in sorted(self.active.items())],
            "standby": sorted(map(list, self.standby)),
            "pending_active": [[s, p, e] for (s, p), e in sorted(self.pending_active.items())],
            "pending_standby": sorted(map(list, self.pending_standby)),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StreamsMember:
        return cls(
            d["id"], d["instance"], d["rack"], d["client_id"], d["client_host"], d["rebalance_timeout_ms"],
            d["topology_epoch"], d["process"], tuple(d["endpoint"]) if d["endpoint"] else None, dict(d["tags"]),
            d["epoch"], d["previous_epoch"], d["state"],
            {(s, p): e for s, p, e in d["active"]}, {(s, p) for s, p in d["standby"]},
            {(s, p): e for s, p, e in d["pending_active"]}, {(s, p) for s, p in d["pending_standby"]},
        )  # fmt: skip


@dataclass
class StreamsGroup(GroupBase):
    group_type: ClassVar[Literal["streams"]] = "streams"

    epoch: int = 1  # Kafka starts a group at 1, so the first join makes it 2
    assignment_epoch: int = 1
    assignment_ms: int = 0
    topology: Topology | None = None
    validated_epoch: int = -1  # the topology epoch last configured ready
    members: dict[str, StreamsMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    sizes_signature: tuple[tuple[str, int], ...] | None = None
    num_standby: int = 0  # the replica count the target was computed with
    protocol_type: str = "streams"
    protocol: str | None = None
    # In memory only (as in Kafka)
    configured: Configured | None = None
    endpoint_epoch: int = 0
    shutdown_by: str | None = None
    delay_until: float = 0.0  # monotonic: the first assignment waits for initial.rebalance.delay.ms

    @property
    def state(self) -> GroupState:
        return GroupState.EMPTY if not self.members else GroupState.STABLE

    @property
    def state_name(self) -> str:
        """Kafka's StreamsGroupState names (ListGroups, StreamsGroupDescribe)."""
        if not self.members:
            return "Empty"
        if self.topology is None or self.topology.epoch != self.validated_epoch:
            return "NotReady"
        if self.assignment_epoch < self.epoch:
            return "Assigning"
        if any(m.epoch != self.assignment_epoch or m.state != STABLE for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    @property
    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topics(self, known: Iterable[str] = ()) -> set[str] | None:
        """The topics the application reads (its offsets there are not expired or deleted while it runs)."""
        return self.topology.input_topics() if self.topology is not None and self.members else set()

    def expiry_base(self) -> Literal["commit"]:
        return "commit"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "streams",
            "epoch": self.epoch,
            "assignment_epoch": self.assignment_epoch,
            "assignment_ms": self.assignment_ms,
            "topology": self.topology.to_json() if self.topology else None,
            "validated_epoch": self.validated_epoch,
            "num_standby": self.num_standby,
            "empty_since": self.empty_since_ms,
            "members": [m.to_json() for m in self.members.values()],
            "target": {mid: a.to_json() for mid, a in self.target.items()},
        }

    @classmethod
    def from_json(cls, gid: str, d: dict[str, Any]) -> StreamsGroup:
        g = cls(
            gid,
            epoch=d["epoch"],
            assignment_epoch=d["assignment_epoch"],
            assignment_ms=d.get("assignment_ms", 0),
            topology=Topology.from_json(d["topology"]) if d["topology"] else None,
            validated_epoch=d["validated_epoch"],
            num_standby=d.get("num_standby", 0),
            empty_since_ms=d.get("empty_since", 0),
        )
        for md in d["members"]:
            m = StreamsMember.from_json(md)
            g.members[m.member_id] = m
        g.target = {mid: Assignment.from_json(a) for mid, a in d["target"].items()}
        return g


# ---------------------------------------------------------------------------------------------- heartbeat


@dataclass
class StreamsResult:
    error: E = E.NONE
    message: str | None = None
    member_id: str = ""
    epoch: int = 0
    status: list[tuple[int, str]] = field(default_factory=list)
    assignment: Assignment | None = None  # sent only when it changed (or on a join)
    endpoint_epoch: int = 0
    endpoints: list[tuple[tuple[str, int], dict[str, set[int]], dict[str, set[int]]]] | None = None
    to_create: list[TopicInfo] = field(default_factory=list)  # internal topics the handler should create


def _tasks(body_tasks: Any) -> set[Task]:
    return {(t.subtopology_id, p) for t in body_tasks for p in t.partitions}


def validate(body: Any) -> StreamsResult | None:
    """Kafka's request checks (GroupCoordinatorService), in its order; None when the request is well formed."""

    def bad(message: str, code: E = E.INVALID_REQUEST) -> StreamsResult:
        return StreamsResult(code, message)

    if body.topology is not None and any(s.source_topic_regex for s in body.topology.subtopologies):
        return bad("Regular expressions for source topics are not supported yet.")
    if is_blank(body.member_id):
        return bad("MemberId can't be empty.")
    if is_blank(body.group_id):
        return bad("GroupId can't be empty.")
    if is_blank(body.instance_id):
        return bad("InstanceId can't be empty.")
    if is_blank(body.rack_id):
        return bad("RackId can't be empty.")
    epoch = body.member_epoch
    if epoch == 0:
        if body.rebalance_timeout_ms == -1:
            return bad("RebalanceTimeoutMs must be provided in first request.")
        for name, tasks in (("ActiveTasks", body.active_tasks), ("StandbyTasks", body.standby_tasks),
                            ("WarmupTasks", body.warmup_tasks)):  # fmt: skip
            if tasks is None or tasks:
                return bad(f"{name} must be empty when (re-)joining.")
        if body.topology is None:
            return bad("Topology must be non-null when (re-)joining.")
        for s in body.topology.subtopologies:
            for c in s.state_changelog_topics:
                if c.partitions != 0:
                    return bad(f"Changelog topic {c.name} must have an undefined partition count, but it is set to "
                               f"{c.partitions}.", E.STREAMS_INVALID_TOPOLOGY)  # fmt: skip
    elif epoch == -2:
        if body.instance_id is None:
            return bad("InstanceId can't be null.")
    elif epoch < -2:
        return bad(f"MemberEpoch is {epoch}, but must be greater than or equal to -2.")
    lists = (body.active_tasks, body.standby_tasks, body.warmup_tasks)
    if any(x is not None for x in lists) and any(x is None for x in lists):
        return bad("If one task-type is non-null, all must be non-null.")
    if epoch != 0 and body.topology is not None:
        return bad("Topology can only be provided when (re-)joining.")
    return None


class StreamsGroups:
    """KIP-1071 transitions; `topics()` gives the broker's topic table (name -> (id, partitions))."""

    def __init__(self, topics: Callable[[], TopicTable], settings: StreamsSettings | None = None) -> None:
        self.topics = topics  # the broker's (cached) topic table: only the topology's topics are looked up
        self.settings = settings or StreamsSettings()

    # -------------------------------------------------------------- heartbeat

    def heartbeat(
        self, g: StreamsGroup, body: Any, client_id: str, client_host: str, version: int
    ) -> tuple[StreamsResult, bool]:
        """One heartbeat; returns the result and whether the group's durable state changed. Everything that
        can refuse the request is checked before anything changes, so a refused join leaves no trace."""
        now = time.monotonic()
        epoch = body.member_epoch
        if epoch in (-1, -2):
            return self._leave(g, body)
        s = self.settings
        m = g.members.get(body.member_id)
        takeover: StreamsMember | None = None  # a static member's previous incarnation, replaced by this join
        if body.instance_id is not None:
            holder = next((x for x in g.members.values() if x.instance_id == body.instance_id), None)
            if epoch == 0 and holder is not None and holder.member_id != body.member_id:
                if holder.epoch != -2:
                    return StreamsResult(E.UNRELEASED_INSTANCE_ID,
                                         f"Static member {body.member_id} with instance id {body.instance_id} "
                                         f"cannot join the group because the instance id is owned by "
                                         f"{holder.member_id} member."), False  # fmt: skip
                takeover = holder
            elif epoch != 0:
                if holder is None:
                    return StreamsResult(E.UNKNOWN_MEMBER_ID, f"Instance id {body.instance_id} is unknown."), False
                if holder.member_id != body.member_id:
                    return StreamsResult(E.FENCED_INSTANCE_ID,
                                         f"Static member {body.member_id} with instance id {body.instance_id} is "
                                         f"fenced."), False  # fmt: skip
        joining = epoch == 0 and m is None and takeover is None
        if joining and len(g.members) >= s.max_size:
            return StreamsResult(E.GROUP_MAX_SIZE_REACHED, f"The streams group has reached its maximum capacity "
                                 f"of {s.max_size} members."), False  # fmt: skip
        if epoch != 0 and m is None:
            return StreamsResult(E.UNKNOWN_MEMBER_ID,
                                 f"Member {body.member_id} is not a member of group {g.group_id}."), False  # fmt: skip
        reported = None
        if body.active_tasks is not None:
            reported = Assignment(_tasks(body.active_tasks), _tasks(body.standby_tasks) | _tasks(body.warmup_tasks))
        if m is not None and epoch > 0 and epoch != m.epoch:
            owned = m.owns()
            tolerated = (epoch == m.previous_epoch and reported is not None
                         and reported.active <= owned.active and reported.standby <= owned.standby)  # fmt: skip
            if not tolerated:
                which = "greater" if epoch > m.epoch else "smaller"
                message = (
                    f"The streams group member has a {which} member epoch ({epoch}) than the one known by "
                    f"the group coordinator ({m.epoch}). The member must abandon all its tasks and rejoin."
                )
                return StreamsResult(E.FENCED_MEMBER_EPOCH, message), False
        # The topology: stored once; a different one is an update Kafka does not support yet.
        topology = g.topology
        if body.topology is not None:
            offered = Topology.from_body(body.topology)
            if topology is None:
                topology = offered
            elif topology.epoch <= offered.epoch and topology != offered:
                return StreamsResult(E.INVALID_REQUEST, "Topology updates are not supported yet."), False
        if topology is None:  # a group emptied and restored without its topology: the member must rejoin
            return StreamsResult(
                E.UNKNOWN_MEMBER_ID, f"Member {body.member_id} is not a member of group {g.group_id}."
            ), False
        table = self.topics()
        names = sorted(topology.topic_names())
        sizes = {n: table[n][1] for n in names if n in table}
        signature = tuple((n, sizes.get(n, -1)) for n in names)
        configured = g.configured
        if configured is None or signature != g.sizes_signature or topology is not g.topology:
            try:
                configured = configure(topology, sizes)
            except TopologyError as exc:
                return StreamsResult(E.STREAMS_INVALID_TOPOLOGY, str(exc)), False
        if configured.ready and reported is not None:
            for sid, p in sorted(reported.active | reported.standby):
                if sid not in configured.tasks:
                    return StreamsResult(E.INVALID_REQUEST, f"Subtopology {sid} does not exist in the topology."), False
                if not 0 <= p < configured.tasks[sid]:
                    return StreamsResult(E.INVALID_REQUEST,
                                         f"Task {p} for subtopology {sid} is invalid. Number of tasks for this "
                                         f"subtopology: {configured.tasks[sid]}"), False  # fmt: skip

        # Accepted: apply it.
        changed = False
        if takeover is not None:
            del g.members[takeover.member_id]
            g.target[body.member_id] = g.target.pop(takeover.member_id, Assignment())
            takeover.member_id = body.member_id
            takeover.epoch = takeover.previous_epoch = 0
            g.members[body.member_id] = m = takeover
            changed = True
        elif joining:
            m = StreamsMember(body.member_id)
            if not g.members:
                g.delay_until = now + s.initial_rebalance_delay_ms / 1000
            g.members[m.member_id] = m
            g.epoch += 1
            changed = True
        assert m is not None
        if epoch == 0 and not joining:
            reported = Assignment()  # a rejoining member has given up whatever it ran
        before = (m.instance_id, m.rack_id, m.process_id, m.topology_epoch, dict(m.client_tags), m.endpoint)
        for attr, value in (("instance_id", body.instance_id), ("rack_id", body.rack_id),
                            ("process_id", body.process_id)):  # fmt: skip
            if value is not None:
                setattr(m, attr, value)
        if body.rebalance_timeout_ms != -1:
            m.rebalance_timeout_ms = body.rebalance_timeout_ms
        if body.topology is not None:
            m.topology_epoch = body.topology.epoch
        if body.client_tags is not None:
            m.client_tags = {kv.key: kv.value for kv in body.client_tags}
        if epoch == 0 or body.user_endpoint is not None:
            m.endpoint = _endpoint(body.user_endpoint)
        m.client_id, m.client_host = client_id, client_host
        after = (m.instance_id, m.rack_id, m.process_id, m.topology_epoch, dict(m.client_tags), m.endpoint)
        if before != after:
            changed = True
            if before[1:5] != after[1:5] and not joining:
                g.epoch += 1  # what the assignor looks at changed
        endpoint_moved = before[5] != after[5]
        if topology is not g.topology:
            g.topology = topology
            changed = True
        if configured is not g.configured:
            if g.sizes_signature is not None and signature != g.sizes_signature:
                g.epoch += 1  # topics created, grown or deleted: the tasks may differ
                changed = True
            g.configured, g.sizes_signature = configured, signature
        if configured.ready and g.validated_epoch != topology.epoch:
            g.validated_epoch = topology.epoch
            g.epoch += 1
            changed = True
        if body.task_offsets is not None:
            m.task_offsets = {(o.subtopology_id, o.partition): o.offset for o in body.task_offsets}
        if body.task_end_offsets is not None:
            m.task_end_offsets = {(o.subtopology_id, o.partition): o.offset for o in body.task_end_offsets}
        if s.num_standby_replicas != g.num_standby:
            g.num_standby = s.num_standby_replicas
            g.epoch += 1
            changed = True
        m.reported = reported
        m.deadline = now + s.session_timeout_ms / 1000
        status: list[tuple[int, str]] = []
        changed |= self._refresh_target(g, now, status)
        before_member = (dict(m.active), set(m.standby), m.epoch, m.state, dict(m.pending_active),
                         set(m.pending_standby))  # fmt: skip
        fenced = self._reconcile(g, m, now)
        if fenced is not None:
            return fenced, True
        tasks_moved = before_member[:2] != (m.active, m.standby)
        changed |= before_member != (m.active, m.standby, m.epoch, m.state, m.pending_active, m.pending_standby)
        if body.shutdown_application and g.shutdown_by is None:
            g.shutdown_by = m.member_id
        if configured.status is not None:
            status.append(configured.status)
        if g.shutdown_by is not None:
            status.append((SHUTDOWN_APPLICATION, f"Streams group member {g.shutdown_by} encountered a fatal error "
                           f"and requested a shutdown for the entire application."))  # fmt: skip
        if m.endpoint is not None and (endpoint_moved or tasks_moved):
            g.endpoint_epoch += 1
        result = StreamsResult(E.NONE, None, m.member_id, m.epoch, status, to_create=list(configured.to_create))
        if epoch == 0 or tasks_moved:
            result.assignment = m.owns()
        result.endpoint_epoch = g.endpoint_epoch
        if body.endpoint_information_epoch != g.endpoint_epoch:
            result.endpoints = self._endpoints(g, m)
        return result, changed

    def _refresh_target(self, g: StreamsGroup, now: float, status: list[tuple[int, str]]) -> bool:
        if now < g.delay_until:
            status.append((ASSIGNMENT_DELAYED, "Assignment delayed due to the configured initial rebalance delay."))
            return False
        if g.assignment_epoch >= g.epoch:
            return False
        interval = self.settings.assignment_interval_ms
        if interval and g.assignment_ms and now_ms() < g.assignment_ms + interval:
            status.append((ASSIGNMENT_DELAYED, "Assignment delayed due to the configured assignment interval."))
            return False
        assert g.topology is not None and g.configured is not None
        g.target = assign(g.members, g.topology, g.configured, g.num_standby)
        g.assignment_epoch = g.epoch
        g.assignment_ms = now_ms()
        return True

    def _reconcile(self, g: StreamsGroup, m: StreamsMember, now: float) -> StreamsResult | None:
        """Move the member towards its target (Kafka's CurrentAssignmentBuilder); a result if it is fenced."""
        if m.epoch == -2:
            return None
        target = g.target.get(m.member_id, Assignment())
        if m.state == UNREVOKED:
            r = m.reported
            released = (
                r is not None and not (r.active & m.pending_active.keys()) and not (r.standby & m.pending_standby)
            )
            if not released:
                if m.revoking_since is not None and now - m.revoking_since > m.rebalance_timeout_ms / 1000:
                    self.remove(g, m)
                    return StreamsResult(E.FENCED_MEMBER_EPOCH, "The member did not revoke its tasks in time.")
                return None
            m.pending_active, m.pending_standby = {}, set()
            m.revoking_since = None
        elif m.state == STABLE and m.epoch == g.assignment_epoch and m.owns().active == target.active \
                and m.owns().standby == target.standby:  # fmt: skip
            return None
        keep_a = {t: e for t, e in m.active.items() if t in target.active}
        revoke_a = {t: e for t, e in m.active.items() if t not in target.active}
        keep_s = m.standby & target.standby
        revoke_s = m.standby - target.standby
        if revoke_a or revoke_s:
            m.active, m.standby = keep_a, keep_s
            m.pending_active, m.pending_standby = revoke_a, revoke_s
            m.state = UNREVOKED
            m.revoking_since = now
            return None
        held_active: set[Task] = set()  # owned as active by another member (assigned or still being revoked)
        held_here: set[Task] = set()  # held by another member of this member's process, any role
        for other in g.members.values():
            if other is m:
                continue
            held_active |= other.active.keys() | other.pending_active.keys()
            if other.process_id == m.process_id:
                held_here |= other.active.keys() | other.pending_active.keys() | other.standby | other.pending_standby
        add_a = {t for t in target.active - keep_a.keys() if t not in held_active and t not in held_here}
        add_s = {t for t in target.standby - keep_s if t not in held_here}
        unreleased = (target.active - keep_a.keys() - add_a) or (target.standby - keep_s - add_s)
        if m.epoch != g.assignment_epoch:
            m.previous_epoch, m.epoch = m.epoch, g.assignment_epoch
        m.active = {**keep_a, **dict.fromkeys(add_a, g.assignment_epoch)}
        m.standby = keep_s | add_s
        m.state = UNRELEASED if unreleased else STABLE
        return None

    def _endpoints(
        self, g: StreamsGroup, me: StreamsMember
    ) -> list[tuple[tuple[str, int], dict[str, set[int]], dict[str, set[int]]]]:
        """Which partitions each member with an endpoint serves (Interactive Queries), the asking member last."""
        if g.topology is None or g.configured is None:
            return []
        subs = g.topology.by_id()
        sizes = g.configured.partitions

        def partitions(tasks: Iterable[Task]) -> dict[str, set[int]]:
            out: dict[str, set[int]] = {}
            for sid, p in tasks:
                s = subs.get(sid)
                for topic in s.input_topics() if s else ():
                    if p < sizes.get(topic, 0):
                        out.setdefault(topic, set()).add(p)
            return out

        members = [m for m in g.members.values() if m is not me] + [me]
        return [(m.endpoint, partitions(m.active), partitions(m.standby)) for m in members if m.endpoint]

    def _leave(self, g: StreamsGroup, body: Any) -> tuple[StreamsResult, bool]:
        if body.instance_id is not None:
            m = next((x for x in g.members.values() if x.instance_id == body.instance_id), None)
            if m is None:
                return StreamsResult(E.UNKNOWN_MEMBER_ID, f"Instance id {body.instance_id} is unknown."), False
            if m.member_id != body.member_id:
                return StreamsResult(E.FENCED_INSTANCE_ID, f"Static member {body.member_id} with instance id "
                                     f"{body.instance_id} is fenced."), False  # fmt: skip
        else:
            m = g.members.get(body.member_id)
            if m is None:
                return StreamsResult(
                    E.UNKNOWN_MEMBER_ID, f"Member {body.member_id} is not a member of group {g.group_id}."
                ), False
        if body.shutdown_application and g.shutdown_by is None:
            g.shutdown_by = m.member_id
        if body.member_epoch == -2:
            # A static member leaving for a restart keeps its tasks for its next incarnation.
            m.epoch = -2
            m.pending_active, m.pending_standby = {}, set()
            m.active = dict.fromkeys(m.active, 0)
            return StreamsResult(E.NONE, None, m.member_id, -2), True
        self.remove(g, m)
        return StreamsResult(E.NONE, None, m.member_id, -1), True

    def remove(self, g: StreamsGroup, m: StreamsMember) -> None:
        g.members.pop(m.member_id, None)
        g.target.pop(m.member_id, None)
        g.epoch += 1
        if not g.members:
            g.assignment_epoch = g.epoch
            g.assignment_ms = 0
            g.shutdown_by = None
            g.empty_since_ms = now_ms()

    def expire(self, g: StreamsGroup, now: float) -> bool:
        """Session timeouts, and members that did not revoke their tasks within their rebalance timeout."""
        gone = [m for m in g.members.values() if (m.deadline and m.deadline < now) or (
            m.state == UNREVOKED and m.revoking_since is not None
            and now - m.revoking_since > m.rebalance_timeout_ms / 1000)]  # fmt: skip
        for m in gone:
            self.remove(g, m)
        return bool(gone)

    def resume(self, g: StreamsGroup) -> None:
        """Members restored from the log get a full session to heartbeat again."""
        deadline = time.monotonic() + self.settings.session_timeout_ms / 1000
        for m in g.members.values():
            m.deadline = deadline


def _endpoint(e: Any) -> tuple[str, int] | None:
    return (e.host, e.port) if e is not None else None


def check_offset_commit(g: StreamsGroup, member_id: str, epoch: int, topics: Iterable[tuple[str, int]] = (),
                        transactional: bool = False, version: int = 9) -> E:  # fmt: skip
    """Kafka's StreamsGroup.validateOffsetCommit: an admin commit (no epoch) only while the group is empty; a
    member's at its epoch, or at an older one for the partitions of tasks it still owns from that epoch."""
    if epoch < 0 and not g.members:
        return E.NONE
    if transactional and not member_id and epoch < 0:
        return E.NONE
    m = g.members.get(member_id)
    if m is None:
        return E.UNKNOWN_MEMBER_ID
    if not transactional and version < 9:
        return E.UNSUPPORTED_VERSION
    if epoch == m.epoch:
        return E.NONE
    if epoch > m.epoch or g.topology is None:
        return E.STALE_MEMBER_EPOCH
    owned = {**m.pending_active, **m.active}
    for topic, p in topics:
        ok = any(topic in s.input_topics() and owned.get((s.subtopology_id, p), epoch + 1) <= epoch
                 for s in g.topology.subtopologies)  # fmt: skip
        if not ok:
            return E.STALE_MEMBER_EPOCH
    return E.NONE
