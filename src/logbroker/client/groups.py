"""Consumer-group administration over the Kafka protocol: find a group's coordinator, then list,
describe, delete, and commit offsets for an inactive group.

Only protocol requests are used (FindCoordinator, ListGroups, DescribeGroups, OffsetFetch, OffsetCommit,
DeleteGroups, ListOffsets), so this works against any Kafka-compatible broker, logbroker or not. Errors
that mean "the coordinator is moving or still loading" are retried after a fresh FindCoordinator.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from logbroker.protocol import ApiKey, api
from logbroker.protocol.consumer_protocol import assignment_partitions
from logbroker.protocol.errors import ErrorCode
from logbroker.protocol.kip848 import ConsumerGroupDescribeRequest

from .connection import BrokerError, Connection, KafkaClient, check

TP = tuple[str, int]
DeleteGroupsRequest = api(ApiKey.DeleteGroups).request
DescribeGroupsRequest = api(ApiKey.DescribeGroups).request
ListGroupsRequest = api(ApiKey.ListGroups).request
OffsetCommitRequest = api(ApiKey.OffsetCommit).request
OffsetFetchRequest = api(ApiKey.OffsetFetch).request
FindCoordinatorRequest = api(ApiKey.FindCoordinator).request
T = TypeVar("T")

RETRIABLE = frozenset(
    {
        int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
        int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
        int(ErrorCode.NOT_COORDINATOR),
    }
)
# States in which no member holds partitions, so committed offsets may be rewritten (as Kafka's tool).
INACTIVE_STATES = frozenset({"Empty", "Dead"})
LATEST, EARLIEST = -1, -2


class GroupNotFound(BrokerError):
    def __init__(self, group: str) -> None:
        super().__init__(int(ErrorCode.GROUP_ID_NOT_FOUND), context=f"group {group}")
        self.group = group


# ---------------------------------------------------------------------------------- results


@dataclass
class GroupListing:
    group_id: str
    state: str | None
    protocol_type: str
    group_type: str | None  # None when the broker's ListGroups version does not report it (< v5)


@dataclass
class GroupMember:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: list[TP] = field(default_factory=list)
    assignment_error: str | None = None  # the assignment bytes were not consumer-protocol data

    def assignment_text(self) -> str:
        by_topic: dict[str, list[int]] = {}
        for t, p in self.assignment:
            by_topic.setdefault(t, []).append(p)
        return " ".join(f"{t}:{','.join(map(str, ps))}" for t, ps in by_topic.items())


@dataclass
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[GroupMember]
    coordinator: tuple[int, str, int]
    group_type: str | None = None  # classic or consumer (KIP-848); None when unknown
    note: str | None = None

    @property
    def inactive(self) -> bool:
        return self.state in INACTIVE_STATES and not self.members

    def owners(self) -> dict[TP, GroupMember]:
        return {tp: m for m in self.members for tp in m.assignment}


@dataclass
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    member: GroupMember | None = None

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.log_end is None:
            return None
        return self.log_end - self.committed


@dataclass
class ResetEntry:
    topic: str
    partition: int
    current: int | None
    target: int
    requested: int  # before clamping to [log start, log end]
    error: str | None = None  # set by execute_reset when the commit of this partition failed

    @property
    def clamped(self) -> bool:
        return self.requested != self.target


@dataclass(frozen=True)
class ResetStrategy:
    """One of Kafka's reset scenarios: earliest, latest, datetime (value: ms), offset, shift."""

    kind: str
    value: int = 0

    KINDS = ("earliest", "latest", "datetime", "offset", "shift")

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise ValueError(f"unknown reset strategy {self.kind!r}")

    def describe(self) -> str:
        if self.kind == "datetime":
            return f"to-datetime {datetime.fromtimestamp(self.value / 1000).astimezone().isoformat()}"
        if self.kind == "offset":
            return f"to-offset {self.value}"
        if self.kind == "shift":
            return f"shift-by {self.value:+d}"
        return f"to-{self.kind}"


def decode_assignment(data: bytes | Any) -> tuple[list[TP], str | None]:
    """Partitions of a consumer-protocol assignment (the bytes members send in SyncGroup)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        data = data.encode()  # an already-decoded ApiData
    if not data:
        return [], None
    try:
        return sorted(assignment_partitions(bytes(data))), None
    except ValueError as exc:  # not consumer-protocol bytes (another protocol type, or garbage)
        return [], f"undecodable assignment ({len(data)} bytes): {exc}"


# ---------------------------------------------------------------------------------- admin


class GroupAdmin:
    """Group operations over a `KafkaClient`; coordinator connections are cached per group."""

    def __init__(self, client: KafkaClient, retry_timeout: float = 20.0) -> None:
        self.client = client
        self.retry_timeout = retry_timeout
        self._coordinators: dict[str, tuple[int, str, int]] = {}

    # -- coordinator

    def find_coordinator(self, group: str) -> tuple[int, str, int]:
        """(node id, host, port) of the group's coordinator; retries while the broker has none yet."""
        cached = self._coordinators.get(group)
        if cached is not None:
            return cached
        conn = self.client.conn
        v = conn.version_for(FindCoordinatorRequest)

        def ask() -> tuple[int, str, int]:
            if v >= 4:
                resp = conn.do(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), v)
                c = resp.coordinators[0]
                check(c.error_code, c.error_message, f"find coordinator of group {group}")
                return c.node_id, c.host, c.port
            resp = conn.do(FindCoordinatorRequest(key=group, key_type=0), v)
            check(resp.error_code, getattr(resp, "error_message", None), f"find coordinator of group {group}")
            return resp.node_id, resp.host, resp.port

        found = self._retrying(ask)
        self._coordinators[group] = found
        return found

    def coordinator(self, group: str) -> Connection:
        _node, host, port = self.find_coordinator(group)
        return self.client.node_connection(host, port)

    def _retrying(self, fn: Callable[[], T], group: str | None = None) -> T:
        deadline = time.monotonic() + self.retry_timeout
        delay = 0.05
        while True:
            try:
                return fn()
            except BrokerError as exc:
                if exc.code not in RETRIABLE or time.monotonic() > deadline:
                    raise
                if group is not None:
                    self._coordinators.pop(group, None)
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _on_coordinator(self, group: str, fn: Callable[[Connection], T]) -> T:
        return self._retrying(lambda: fn(self.coordinator(group)), group)

    # -- listing

    def list_groups(self) -> list[GroupListing]:
        """Every group of every broker (ListGroups answers only for the groups a broker coordinates)."""
        md = self.client.metadata([])
        nodes = sorted({(b.host, b.port) for b in md.brokers}) or [(self.client.conn.host, self.client.conn.port)]
        out: dict[str, GroupListing] = {}
        for host, port in nodes:
            conn = self.client.node_connection(host, port)
            v = conn.version_for(ListGroupsRequest)

            def ask(conn: Connection = conn, v: int = v) -> Any:
                resp = conn.do(ListGroupsRequest(states_filter=[], types_filter=[]), v)
                check(resp.error_code, context=f"list groups on {conn.host}:{conn.port}")
                return resp

            resp = self._retrying(ask)
            for g in resp.groups:
                out[g.group_id] = GroupListing(
                    g.group_id,
                    g.group_state if v >= 4 else None,
                    g.protocol_type,
                    g.group_type if v >= 5 else None,
                )
        return sorted(out.values(), key=lambda g: g.group_id)

    # -- describing

    def describe_group(self, group: str) -> GroupDescription:
        """The group's state and members, from its coordinator.

        Groups of the KIP-848 consumer protocol are described with ConsumerGroupDescribe where the
        coordinator offers it (answering GROUP_ID_NOT_FOUND for classic groups, as Kafka does); classic
        groups with DescribeGroups. An unknown group comes back as state "Dead"."""
        coord = self.find_coordinator(group)
        g = self._on_coordinator(group, self._consumer_group_describe(group))
        if g is not None:
            members = [
                GroupMember(
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.client_host,
                    sorted((t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions),
                )
                for m in g.members
            ]
            members.sort(key=lambda m: (m.assignment[:1] or [("~", 0)], m.member_id))
            return GroupDescription(group, g.group_state, "consumer", g.assignor_name, members, coord, "consumer")

        def ask(conn: Connection) -> Any:
            resp = conn.do(DescribeGroupsRequest(groups=[group], include_authorized_operations=False))
            g = resp.groups[0]
            if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                return None
            check(g.error_code, getattr(g, "error_message", None), f"describe group {group}")
            return g

        g = self._on_coordinator(group, ask)
        if g is None or (g.group_state == "Dead" and not g.members):
            # Unknown to DescribeGroups, and not a KIP-848 group either as far as ConsumerGroupDescribe (if
            # offered) knows. ListGroups may still know it as a group of another type.
            listed = next((x for x in self.list_groups() if x.group_id == group), None)
            if listed is not None and listed.group_type not in (None, "classic"):
                note = f"group type {listed.group_type!r}: this broker cannot describe its members"
                return GroupDescription(
                    group, listed.state or "Unknown", listed.protocol_type, "", [], coord, listed.group_type, note
                )
            return GroupDescription(group, "Dead", "", "", [], coord)
        members = []
        for m in g.members:
            if g.protocol_type == "consumer":
                assignment, err = decode_assignment(m.member_assignment)
            else:
                assignment, err = [], None
            members.append(GroupMember(m.member_id, m.group_instance_id, m.client_id, m.client_host, assignment, err))
        members.sort(key=lambda m: (m.assignment[:1] or [("~", 0)], m.member_id))
        return GroupDescription(
            group, g.group_state, g.protocol_type or "", g.protocol_data or "", members, coord, "classic"
        )

    @staticmethod
    def _consumer_group_describe(group: str) -> Callable[[Connection], Any]:
        """ConsumerGroupDescribe (KIP-848) as a coordinator call: the described group, or None when the
        coordinator does not offer the API or does not know `group` as a consumer-protocol group."""

        def ask(conn: Connection) -> Any:
            if conn.versions.get(ConsumerGroupDescribeRequest.API_KEY, (0, -1))[1] < 0:
                return None
            resp = conn.do(ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False), 0)
            g = resp.groups[0]
            if g.error_code in (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNSUPPORTED_VERSION):
                return None
            check(g.error_code, g.error_message, f"describe consumer group {group}")
            return g

        return ask

    def committed_offsets(self, group: str, partitions: Iterable[TP] | None = None) -> dict[TP, int]:
        """The group's committed offsets (all of them, or of `partitions`); partitions without one are
        left out."""
        wanted = None if partitions is None else sorted(set(partitions))

        def ask(conn: Connection) -> dict[TP, int]:
            v = conn.version_for(OffsetFetchRequest)
            by_topic: dict[str, list[int]] = {}
            for t, p in wanted or []:
                by_topic.setdefault(t, []).append(p)
            if v >= 8:
                G = OffsetFetchRequest.OffsetFetchRequestGroup
                topics = (
                    None
                    if wanted is None
                    else [G.OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
                )
                req = OffsetFetchRequest(
                    groups=[G(group_id=group, member_id=None, member_epoch=-1, topics=topics)], require_stable=False
                )
                resp = conn.do(req, v)
                check(resp.groups[0].error_code, context=f"fetch offsets of group {group}")
                result_topics = resp.groups[0].topics
            else:
                if wanted is None and v < 2:
                    raise BrokerError(int(ErrorCode.UNSUPPORTED_VERSION), "broker cannot list all offsets")
                topics = (
                    None
                    if wanted is None
                    else [
                        OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                        for t, ps in by_topic.items()
                    ]
                )
                resp = conn.do(OffsetFetchRequest(group_id=group, topics=topics, require_stable=False), v)
                if v >= 2:
                    check(resp.error_code, context=f"fetch offsets of group {group}")
                result_topics = resp.topics
            out = {}
            for t in result_topics:
                for p in t.partitions:
                    if p.error_code in RETRIABLE:
                        check(p.error_code, context=f"fetch offsets of group {group}")
                    if p.error_code == 0 and p.committed_offset >= 0:
                        out[(t.name, p.partition_index)] = p.committed_offset
            return out

        return self._on_coordinator(group, ask)

    def lag(self, desc: GroupDescription) -> list[PartitionLag]:
        """Per partition with a committed offset or an owner: committed offset, log end offset, lag."""
        committed = self.committed_offsets(desc.group_id)
        owners = desc.owners()
        tps = sorted(set(committed) | set(owners))
        ends = self.client.list_offsets(tps, LATEST, strict=False)
        return [PartitionLag(t, p, committed.get((t, p)), ends.get((t, p)), owners.get((t, p))) for t, p in tps]

    # -- deleting

    def delete_groups(self, groups: Sequence[str]) -> dict[str, int]:
        """DeleteGroups on each group's coordinator; the error code per group (0: deleted)."""
        by_coord: dict[tuple[int, str, int], list[str]] = {}
        for g in dict.fromkeys(groups):
            by_coord.setdefault(self.find_coordinator(g), []).append(g)
        out: dict[str, int] = {}
        for names in by_coord.values():

            def ask(conn: Connection, names: list[str] = names) -> dict[str, int]:
                resp = conn.do(DeleteGroupsRequest(groups_names=names))
                codes = {r.group_id: r.error_code for r in resp.results}
                for code in codes.values():
                    if code in RETRIABLE:
                        check(code, context="delete groups")
                return codes

            out.update(self._on_coordinator(names[0], ask))
        return out

    # -- committing

    def commit_offsets(self, group: str, offsets: dict[TP, int]) -> dict[TP, int]:
        """Commit offsets as an admin (generation -1, no member id): the coordinator accepts this only
        for groups without members. The error code per partition (0: committed)."""
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (t, p), off in sorted(offsets.items()):
            by_topic.setdefault(t, []).append((p, off))
        R = OffsetCommitRequest
        P = R.OffsetCommitRequestTopic.OffsetCommitRequestPartition

        def ask(conn: Connection) -> dict[TP, int]:
            req = R(
                group_id=group,
                generation_id_or_member_epoch=-1,
                member_id="",
                group_instance_id=None,
                retention_time_ms=-1,
                topics=[
                    R.OffsetCommitRequestTopic(
                        name=t,
                        partitions=[
                            P(
                                partition_index=p,
                                committed_offset=off,
                                committed_leader_epoch=-1,
                                commit_timestamp=-1,
                                committed_metadata="",
                            )
                            for p, off in parts
                        ],
                    )
                    for t, parts in by_topic.items()
                ],
            )
            resp = conn.do(req)
            codes = {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}
            for code in codes.values():
                if code in RETRIABLE:
                    check(code, context=f"commit offsets of group {group}")
            return codes

        return self._on_coordinator(group, ask)

    # -- resetting

    def reset_partitions(
        self, group: str, topics: Sequence[tuple[str, list[int] | None]], all_topics: bool
    ) -> list[TP]:
        """Partitions a reset applies to: the listed ones (None: every partition of the topic), or with
        `all_topics` every partition the group has a committed offset for (as Kafka's tool)."""
        if all_topics:
            return sorted(self.committed_offsets(group))
        known = self.client.partitions_of(sorted({t for t, _ in topics}))
        out: set[TP] = set()
        for t, parts in topics:
            if parts is None:
                out.update((t, p) for p in known[t])
                continue
            missing = sorted(set(parts) - set(known[t]))
            if missing:
                raise BrokerError(
                    int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                    f"topic {t} has partitions {known[t][0]}..{known[t][-1]}" if known[t] else f"topic {t} is empty",
                    f"{t} partition(s) {','.join(map(str, missing))}",
                )
            out.update((t, p) for p in parts)
        return sorted(out)

    def plan_reset(self, group: str, partitions: Sequence[TP], strategy: ResetStrategy) -> list[ResetEntry]:
        """New offsets for `partitions`, clamped to [log start, log end] as Kafka's tool does."""
        current = self.committed_offsets(group, partitions) if partitions else {}
        starts = self.client.list_offsets(partitions, EARLIEST)
        ends = self.client.list_offsets(partitions, LATEST)
        if strategy.kind == "shift":
            missing = [tp for tp in partitions if tp not in current]
            if missing:
                names = ", ".join(f"{t}-{p}" for t, p in missing[:10]) + (" ..." if len(missing) > 10 else "")
                raise ValueError(f"--shift-by needs a committed offset to shift from; none for {names}")
        if strategy.kind == "datetime":
            found = self.client.list_offsets(partitions, strategy.value)
        plan = []
        for tp in partitions:
            if strategy.kind == "earliest":
                want = starts[tp]
            elif strategy.kind == "latest":
                want = ends[tp]
            elif strategy.kind == "offset":
                want = strategy.value
            elif strategy.kind == "shift":
                want = current[tp] + strategy.value
            else:  # datetime: no record that recent means the end of the log
                want = found[tp] if found[tp] >= 0 else ends[tp]
            target = min(max(want, starts[tp]), ends[tp])
            plan.append(ResetEntry(tp[0], tp[1], current.get(tp), target, want))
        return plan

    def execute_reset(self, group: str, plan: list[ResetEntry]) -> list[ResetEntry]:
        codes = self.commit_offsets(group, {(e.topic, e.partition): e.target for e in plan})
        for e in plan:
            code = codes.get((e.topic, e.partition), int(ErrorCode.UNKNOWN_SERVER_ERROR))
            if code:
                e.error = BrokerError(code).name
        return plan


def lag_report(desc: GroupDescription, rows: list[PartitionLag]) -> dict[str, Any]:
    """JSON-ready description: group, members and per-partition offsets with totals."""
    lags = [r.lag for r in rows if r.lag is not None]
    return {
        "group": desc.group_id,
        "state": desc.state,
        "protocol_type": desc.protocol_type,
        "protocol": desc.protocol,
        "group_type": desc.group_type,
        "coordinator": {"node_id": desc.coordinator[0], "host": desc.coordinator[1], "port": desc.coordinator[2]},
        "members": [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "client_id": m.client_id,
                "host": m.host,
                "assignment": [{"topic": t, "partition": p} for t, p in m.assignment],
                **({"assignment_error": m.assignment_error} if m.assignment_error else {}),
            }
            for m in desc.members
        ],
        "offsets": [
            {
                "topic": r.topic,
                "partition": r.partition,
                "committed": r.committed,
                "log_end": r.log_end,
                "lag": r.lag,
                "member_id": r.member.member_id if r.member else None,
                "client_id": r.member.client_id if r.member else None,
                "host": r.member.host if r.member else None,
            }
            for r in rows
        ],
        "totals": {
            "partitions": len(rows),
            "members": len(desc.members),
            "committed_partitions": sum(1 for r in rows if r.committed is not None),
            "log_end": sum(r.log_end for r in rows if r.log_end is not None),
            "lag": sum(lags) if lags else None,
        },
    }


def reset_report(group: str, strategy: ResetStrategy, plan: list[ResetEntry], executed: bool) -> dict[str, Any]:
    return {
        "group": group,
        "strategy": strategy.describe(),
        "executed": executed,
        "partitions": [{**asdict(e), "clamped": e.clamped} for e in plan],
    }
