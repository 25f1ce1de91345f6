"""Group and member types shared by the state machines (`classic`, `consumer`), `offsets` and the coordinator.

Two kinds of group live under one id space: classic (JoinGroup/SyncGroup, client-side assignment) and KIP-848
consumer groups (server-side assignment). Both keep committed offsets the same way, which is why they share
`GroupBase`; everything else differs, so a group is the union `Group` and code narrows it with `isinstance`.
Requests and results are plain dataclasses so the state machines never see wire objects.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Literal, NamedTuple, Protocol

from logbroker.protocol.consumer_protocol import subscription_topics
from logbroker.protocol.errors import ErrorCode as E
from logbroker.protocol.primitives import MAX_STRING_BYTES

TopicPartition = tuple[str, int]  # (topic name, partition)
TopicMap = dict[str, set[int]]  # KIP-848 assignments: topic id (str) -> partitions


def now_ms() -> int:
    return int(time.time() * 1000)


JAVA_BLANK = "".join(map(chr, range(0x21)))  # what Java's String.trim() strips: U+0000 to U+0020


def is_blank(value: str | None) -> bool:
    """Kafka's `throwIfEmptyString`: a present value that Java's `trim()` leaves empty."""
    return value is not None and not value.strip(JAVA_BLANK)


def too_long(value: str | None) -> bool:
    """More UTF-8 bytes than a Kafka string may hold: its readers close the connection over such a field and
    its writers cannot send one."""
    if value is None or len(value) * 4 <= MAX_STRING_BYTES:
        return False
    return len(value.encode(errors="replace")) > MAX_STRING_BYTES


def for_log(value: str, limit: int = 200) -> str:
    """A client-chosen name as a log line may show it: control characters escaped (a group id is any string,
    newlines included, in Kafka), and a 32 KiB id cut short."""
    if len(value) > limit:
        value = f"{value[:limit]}...({len(value)} chars)"
    if value.isprintable():
        return value
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in value)


class GroupState(StrEnum):
    """Kafka's classic states; KIP-848 groups map theirs onto these (see `ConsumerGroup.state_name`)."""

    EMPTY = "Empty"
    PREPARING = "PreparingRebalance"
    COMPLETING = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupError(Exception):
    """A request-level failure carrying the Kafka error code the handler answers with."""

    def __init__(self, code: E, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


UNBOUNDED = 2**31 - 1  # Kafka's default group.max.size and group.consumer.max.size


@dataclass
class StreamsSettings:
    """KIP-1071 streams groups' settings (Kafka's group.streams.* names)."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = UNBOUNDED
    num_standby_replicas: int = 0
    initial_rebalance_delay_ms: int = 3_000
    assignment_interval_ms: int = 1_000
    task_offset_interval_ms: int = 60_000
    acceptable_recovery_lag: int = 10_000


@dataclass
class CoordinatorConfig:
    initial_rebalance_delay_ms: int = 100
    min_session_timeout_ms: int = 1000
    max_session_timeout_ms: int = 1_800_000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    # OffsetCommit's durability under fsync=always: "shared" (written before the answer, synced within the
    # delay by a round that would run anyway or one run then) or "own" (answered after its own round)
    offsets_commit_sync: str = "shared"
    offsets_commit_sync_delay_ms: int = 100
    consumer_migration_policy: str = "bidirectional"  # group.consumer.migration.policy
    offset_metadata_max_bytes: int = 4096
    max_group_size: int = UNBOUNDED  # classic groups (group.max.size)
    consumer_max_group_size: int = UNBOUNDED  # KIP-848 groups (group.consumer.max.size)
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000
    streams: StreamsSettings = field(default_factory=lambda: StreamsSettings())  # KIP-1071 groups


@dataclass
class Committed:
    """One committed offset; stored as a JSON list to keep the log small."""

    offset: int
    leader_epoch: int
    metadata: str | None
    commit_ms: int
    expire_ms: int | None = None  # OffsetCommit v2-4 `retention_time_ms`: an explicit expiry, as Kafka keeps it

    def to_json(self) -> list[int | str | None]:
        out: list[int | str | None] = [self.offset, self.leader_epoch, self.metadata, self.commit_ms]
        if self.expire_ms is not None:
            out.append(self.expire_ms)
        return out

    @classmethod
    def from_json(cls, value: list[Any]) -> Committed:
        return cls(*value)


@dataclass
class PendingOffset:
    """A transactional offset (TxnOffsetCommit) waiting for its transaction to end: invisible to OffsetFetch
    until then. Kafka keeps the most recent write when transactional and plain commits of one partition mix
    (it compares record offsets); `seq` orders pending writes and `stale` marks one that a later commit
    (plain, or another transaction's materialized one) has already superseded."""

    committed: Committed
    seq: int
    stale: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"c": self.committed.to_json(), "seq": self.seq, "stale": self.stale}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> PendingOffset:
        return cls(Committed.from_json(value["c"]), value["seq"], value.get("stale", False))


# ---------------------------------------------------------------------------------------------- classic


@dataclass(frozen=True)
class JoinRequest:
    """A JoinGroup request as the state machine needs it (the handler maps wire versions onto these fields)."""

    group_id: str
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool  # JoinGroup v4+ (KIP-394)
    supports_skip_assignment: bool = True  # JoinGroup v9+


@dataclass
class JoinResult:
    error: E
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)  # leader only: id, instance, meta
    skip_assignment: bool = False


class SyncResult(NamedTuple):
    error: E
    assignment: bytes


class MemberLeft(NamedTuple):
    member_id: str
    instance_id: str | None
    error: E


class LeaveResult(NamedTuple):
    error: E  # the top-level code: a single member's own error, else NONE
    members: list[MemberLeft]


@dataclass
class ClassicMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    deadline: float = 0.0  # monotonic end of the session
    join_future: asyncio.Future[JoinResult] | None = None  # parked in JoinGroup
    sync_future: asyncio.Future[SyncResult] | None = None  # parked in SyncGroup

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
    def from_json(cls, d: dict[str, Any], protocol_type: str) -> ClassicMember:
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
        m.touch()  # a restored member gets a full session to show up again
        return m


# ---------------------------------------------------------------------------------------------- KIP-848


class TopicPartitionsBody(Protocol):
    topic_id: Any  # uuid.UUID on the wire
    partitions: Sequence[int]


class ConsumerHeartbeatBody(Protocol):
    """The ConsumerGroupHeartbeat request body as decoded from the wire (`subscribed_topic_regex` is v1+)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_topic_names: Sequence[str] | None
    server_assignor: str | None
    topic_partitions: Sequence[TopicPartitionsBody] | None


@dataclass(frozen=True)
class ConsumerHeartbeat:
    """A ConsumerGroupHeartbeat, typed; None fields were not sent (meaning "unchanged" in KIP-848)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None  # "" means "no regex" (clients clear it that way)
    server_assignor: str | None = None
    owned: TopicMap | None = None  # the request's TopicPartitions: what the member says it owns
    client_id: str = ""
    client_host: str = ""

    @classmethod
    def from_body(cls, body: ConsumerHeartbeatBody, client_id: str, client_host: str) -> ConsumerHeartbeat:
        owned = None
        if body.topic_partitions is not None:
            owned = {str(tp.topic_id): set(tp.partitions) for tp in body.topic_partitions if tp.partitions}
        names = body.subscribed_topic_names
        return cls(
            group_id=body.group_id,
            member_id=body.member_id,
            member_epoch=body.member_epoch,
            instance_id=body.instance_id,
            rack_id=body.rack_id,
            rebalance_timeout_ms=body.rebalance_timeout_ms,
            subscribed_topic_names=None if names is None else list(names),
            subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
            server_assignor=body.server_assignor,
            owned=owned,
            client_id=client_id,
            client_host=client_host,
        )


@dataclass
class HeartbeatResult:
    error: E
    member_id: str | None = None
    epoch: int = -1
    assignment: TopicMap | None = None  # None: unchanged since the last response
    message: str | None = None


@dataclass
class ClassicProtocol:
    """A member of a KIP-848 group that speaks the classic protocol (JoinGroup/SyncGroup/Heartbeat): what
    Kafka keeps as its ClassicMemberMetadata. Its assignment is computed by the broker like any member's and
    handed to it in SyncGroup, in the consumer protocol's format."""

    session_timeout_ms: int
    protocols: list[tuple[str, bytes]]  # the JoinGroup protocols (name, subscription metadata)

    def names(self) -> list[str]:
        return [n for n, _ in self.protocols]

    def to_json(self) -> dict[str, Any]:
        return {"session": self.session_timeout_ms,
                "protocols": [[n, m.hex()] for n, m in self.protocols]}  # fmt: skip

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ClassicProtocol:
        return cls(int(d["session"]), [(str(n), bytes.fromhex(m)) for n, m in d["protocols"]])


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
    epoch: int = 0  # -2: a static member away for a restart
    previous_epoch: int = -1
    assigned: TopicMap = field(default_factory=dict)  # what this member was last told it owns
    reported: TopicMap | None = None  # what it last said it owns
    deadline: float = 0.0
    revoking_since: float | None = None
    sent: TopicMap | None = None  # the assignment in the last response
    classic: ClassicProtocol | None = None  # set for a member that uses the classic protocol

    def to_json(self) -> dict[str, Any]:
        out = self._to_json()
        if self.classic is not None:
            out["classic"] = self.classic.to_json()
        return out

    def _to_json(self) -> dict[str, Any]:
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
        if d.get("classic"):
            m.classic = ClassicProtocol.from_json(d["classic"])
        return m


# ---------------------------------------------------------------------------------------------- groups


ExpiryBase = Literal["commit", "empty"]  # what an offset's retention counts from


@dataclass
class GroupBase:
    """What every group has, whatever its protocol: an id and committed offsets that outlive membership."""

    group_id: str
    offsets: dict[TopicPartition, Committed] = field(default_factory=dict)
    # producer id -> its transaction's pending offsets; a key with no offsets still counts as an open
    # transaction (an OffsetDelete removed them), which keeps an empty group from being expired
    txn_offsets: dict[int, dict[TopicPartition, PendingOffset]] = field(default_factory=dict)
    empty_since_ms: int = 0  # wall clock; offsets retention counts from here
    persisted: bool = False  # a group record is in the store (its deletion needs a tombstone)


@dataclass
class ClassicGroup(GroupBase):
    group_type: ClassVar[Literal["classic"]] = "classic"

    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)  # static instance id -> member id
    pending: dict[str, float] = field(default_factory=dict)  # KIP-394 member ids handed out -> expiry
    rebalance_deadline: float = 0.0
    delay_deadline: float = 0.0

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

    def validate_member(self, member_id: str, instance_id: str | None) -> E:
        """Kafka's member check for SyncGroup, Heartbeat and OffsetCommit: a static member is looked up by its
        instance id first, so an incarnation replaced by a newer one is told FENCED_INSTANCE_ID (fatal for the
        client) rather than UNKNOWN_MEMBER_ID (on which it would rejoin and fence the newer one in turn)."""
        if instance_id is not None:
            known = self.instances.get(instance_id)
            if known is None:
                return E.UNKNOWN_MEMBER_ID
            return E.NONE if known == member_id else E.FENCED_INSTANCE_ID
        return E.NONE if member_id in self.members else E.UNKNOWN_MEMBER_ID

    @property
    def is_empty(self) -> bool:
        return self.state == GroupState.EMPTY

    def subscribed_topics(self, known: Iterable[str] = ()) -> set[str] | None:
        """Topics named in the members' consumer-protocol subscriptions; None when unknown (not the consumer
        protocol, no protocol chosen yet, or metadata that does not parse), as Kafka's ClassicGroup says."""
        if self.protocol_type != "consumer":
            return None
        if not self.members:
            return set()
        if self.protocol is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            try:
                topics.update(subscription_topics(m.metadata_for(self.protocol)))
            except ValueError:
                return None
        return topics

    def expiry_base(self) -> ExpiryBase | None:
        """Kafka's offsetExpirationCondition: an Empty group that had members expires its offsets a retention
        period after it became Empty; a Stable consumer-protocol group with known subscriptions, those of
        topics it does not read a retention period after their commit; a group that never had members
        ("simple", commits only) each offset a retention period after its commit; any other: none."""
        if self.protocol_type is None:
            return "commit"
        if self.state == GroupState.EMPTY:
            return "empty" if self.empty_since_ms else "commit"
        stable = self.state == GroupState.STABLE
        if self.protocol_type == "consumer" and stable and self.subscribed_topics() is not None:
            return "commit"
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "protocol_type": self.protocol_type,
            "protocol": self.protocol,
            "leader": self.leader,
            "empty_since": self.empty_since_ms,
            "members": [m.to_json() for m in self.members.values()],
        }

    def restore(self, d: dict[str, Any]) -> None:
        """Apply a stored group record (offsets may already have been loaded into this group)."""
        self.generation = d["generation"]
        self.protocol_type = d["protocol_type"]
        self.protocol = d["protocol"]
        self.leader = d["leader"]
        self.empty_since_ms = d.get("empty_since", now_ms())
        for md in d["members"]:
            m = ClassicMember.from_json(md, self.protocol_type or "")
            self.members[m.member_id] = m
            if m.instance_id:
                self.instances[m.instance_id] = m.member_id
        # A group caught mid-rebalance resumes as Stable with its last assignment: members that rejoin
        # trigger a fresh rebalance exactly as after a coordinator move in Kafka.
        self.state = GroupState.STABLE if self.members else GroupState.EMPTY


@dataclass
class ConsumerGroup(GroupBase):
    group_type: ClassVar[Literal["consumer"]] = "consumer"

    epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = "uniform"
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, TopicMap] = field(default_factory=dict)  # member id -> target assignment
    metadata_signature: tuple[tuple[str, int], ...] = ()  # subscribed topics' (name, partitions) last assigned
    protocol_type: str = "consumer"
    protocol: str | None = None
    pending: dict[str, float] = field(default_factory=dict)  # KIP-394 ids handed to classic joiners -> expiry

    @property
    def state(self) -> GroupState:
        """Derived, not stored: Assigning and Reconciling map onto the classic states' places."""
        if not self.members:
            return GroupState.EMPTY
        if self.assignment_epoch < self.epoch:
            return GroupState.PREPARING  # "Assigning"
        if any(m.epoch != self.assignment_epoch for m in self.members.values()):
            return GroupState.COMPLETING  # "Reconciling"
        return GroupState.STABLE

    @property
    def state_name(self) -> str:
        return {
            GroupState.EMPTY: "Empty",
            GroupState.PREPARING: "Assigning",
            GroupState.COMPLETING: "Reconciling",
            GroupState.STABLE: "Stable",
        }.get(self.state, "Dead")

    @property
    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topics(self, known: Iterable[str] = ()) -> set[str] | None:
        """Topics the members subscribe to by name, and those of `known` their regular expressions match."""
        topics = {t for m in self.members.values() for t in m.subscribed}
        patterns = [re.compile(m.regex) for m in self.members.values() if m.regex]
        if patterns:
            topics.update(t for t in known if any(p.fullmatch(t) for p in patterns))
        return topics

    def expiry_base(self) -> ExpiryBase | None:
        """KIP-848 groups expire offsets of topics nobody subscribes to a retention period after their commit."""
        return "commit"

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
        g = cls(
            gid,
            epoch=d["epoch"],
            assignment_epoch=d["assignment_epoch"],
            assignor=d["assignor"],
            empty_since_ms=d.get("empty_since", 0),
        )
        for md in d["members"]:
            m = ConsumerMember.from_json(md)
            g.members[m.member_id] = m
        g.target = {mid: {t: set(p) for t, p in tm.items()} for mid, tm in d["target"].items()}
        return g


Group = ClassicGroup | ConsumerGroup  # with streams groups: `kinds.AnyGroup`
