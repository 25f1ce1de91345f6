"""The console's view of one cluster as one principal: admin calls over the wire, in Kafka's vocabulary.

Every call here blocks (the web layer runs it on a worker thread) and either returns plain data for a
template or raises `ConsoleError` with the broker's own error name and message, never a traceback. The
confluent-kafka admin client does most of it (through the command line's `Admin`, so its errors read the
same as `logbroker topics ...`); kafka-python's does what librdkafka has no call for: log-dir sizes,
transactions, producers' states and the share-group APIs (with the broker's own message schemas).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import click

from logbroker.console.errors import ConsoleError

if TYPE_CHECKING:
    from kafka.admin import KafkaAdminClient

    from logbroker._kafka.settings import KafkaSettings
    from logbroker.cli.common import Admin

T = TypeVar("T")
TP = tuple[str, int]

# Topic configs shown in the topic list (the rest are on each topic's page).
LISTED_CONFIGS = ("cleanup.policy", "retention.ms", "retention.bytes")


def _status(text: str, bad_input: bool) -> int:
    if "AUTHORIZATION_FAILED" in text or "SASL_AUTHENTICATION_FAILED" in text:
        return 403
    if bad_input:
        return 400
    if text.startswith(("cannot reach", "timed out", "TLS with")) or "closed the connection" in text:
        return 502
    return 400


@contextlib.contextmanager
def refusals() -> Iterator[None]:
    """The command line's one-line failures (click exceptions) and kafka-python's errors as `ConsoleError`."""
    from kafka.errors import KafkaError

    from logbroker.cli.common import BadInput

    try:
        yield
    except ConsoleError:
        raise
    except click.ClickException as exc:
        text = exc.format_message()
        raise ConsoleError(text, _status(text, isinstance(exc, BadInput))) from None
    except KafkaError as exc:
        text = kafka_python_error(exc)
        raise ConsoleError(text, _status(text, False)) from None


def kafka_python_error(exc: BaseException) -> str:
    """kafka-python's exception as Kafka's error name (and its message when it says more)."""
    from logbroker.protocol.errors import ErrorCode

    code = getattr(exc, "errno", None)
    known = isinstance(code, int) and code in ErrorCode._value2member_map_
    name = ErrorCode(code).name if known else type(exc).__name__
    detail = str(exc).strip()
    if not detail or detail == type(exc).__name__ or detail.startswith("[Error"):
        return name
    return f"{name} ({detail.split(': ', 1)[-1]})" if ": " in detail else f"{name} ({detail})"


# --------------------------------------------------------------------------------------------- results


@dataclass
class TopicRow:
    name: str
    partitions: int
    internal: bool
    size: int | None
    configs: dict[str, str] = field(default_factory=dict)
    error: str | None = None


@dataclass
class PartitionRow:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    start: int | None
    end: int | None
    size: int | None

    @property
    def records(self) -> int | None:
        return None if self.start is None or self.end is None else self.end - self.start


@dataclass
class ConfigRow:
    name: str
    value: str | None
    source: str
    default: bool
    read_only: bool
    sensitive: bool


@dataclass
class GroupRow:
    group_id: str
    type: str
    state: str
    members: int | None = None
    lag: int | None = None


@dataclass
class OffsetRow:
    topic: str
    partition: int
    committed: int | None
    end: int | None
    member: str | None

    @property
    def lag(self) -> int | None:
        if self.end is None:
            return None
        return self.end - self.committed if self.committed is not None else None


@dataclass
class TxnRow:
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int | None = None
    timeout_ms: int | None = None
    start_ms: int | None = None
    partitions: list[TP] = field(default_factory=list)
    coordinator: int | None = None

    @property
    def age_s(self) -> float | None:
        return None if not self.start_ms or self.start_ms < 0 else max(0.0, time.time() - self.start_ms / 1000)

    @property
    def overdue(self) -> bool:
        age = self.age_s
        return age is not None and self.timeout_ms is not None and age * 1000 > self.timeout_ms


@dataclass
class OpenTxnRow:
    """A producer's open transaction on one partition (DescribeProducers), what `abort` acts on."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp: int
    known_to_coordinator: bool


# --------------------------------------------------------------------------------------------- cluster


class Cluster:
    """Admin clients for one principal, made once per login and shared by its requests (both clients are
    thread-safe; the kafka-python one is asked one call at a time)."""

    def __init__(self, bootstrap: str, security: KafkaSettings | None, timeout: float = 10.0) -> None:
        from logbroker.cli.common import Admin

        self.bootstrap, self.security, self.timeout = bootstrap, security, timeout
        with refusals():
            self.admin: Admin = Admin(bootstrap, security, timeout)
            try:
                self.cluster_info = self.admin.cluster()  # the login and the connection, proven
            except BaseException:
                self.admin.close()
                raise
        self._wire: KafkaAdminClient | None = None
        self._wire_lock = threading.Lock()

    @property
    def principal(self) -> str | None:
        s = self.security
        return f"User:{s.sasl_username}" if s is not None and s.uses_sasl and s.sasl_username else None

    def close(self) -> None:
        self.admin.close()
        if self._wire is not None:
            with contextlib.suppress(Exception):
                self._wire.close()

    def wire(self, fn: Callable[[KafkaAdminClient], T]) -> T:
        """Call kafka-python's admin client (made on first use), its errors as `ConsoleError`."""
        from kafka.admin import KafkaAdminClient
        from kafka.errors import KafkaError

        from logbroker.cli.wire_admin import kafka_python_config

        with self._wire_lock, refusals():
            if self._wire is None:
                conf = kafka_python_config(self.bootstrap, self.security)
                conf["client_id"] = "logbroker-console"
                try:
                    self._wire = KafkaAdminClient(**conf, request_timeout_ms=int(self.timeout * 1000))
                except (KafkaError, OSError) as exc:
                    raise ConsoleError(f"cannot reach {self.bootstrap}: {exc}", 502) from None
            return fn(self._wire)

    # ---------------------------------------------------------------------------------- overview

    def describe(self) -> dict[str, Any]:
        with refusals():
            c = self.admin.cluster()
            md = self.admin.metadata()
        topics = [t for t in md.topics.values() if not t.error]
        return {
            "cluster_id": c.cluster_id,
            "controller": c.controller.id if c.controller is not None else None,
            "brokers": sorted(((n.id, n.host, n.port, n.rack) for n in c.nodes), key=lambda b: b[0]),
            "topics": sum(1 for t in topics if not t.topic.startswith("__")),
            "internal_topics": sum(1 for t in topics if t.topic.startswith("__")),
            "partitions": sum(len(t.partitions) for t in topics),
        }

    def api_versions(self) -> dict[str, Any]:
        """The broker's advertised API ranges (ApiVersions) and the Kafka release kafka-python infers."""
        from logbroker.protocol import ApiKey

        def read(w: KafkaAdminClient) -> dict[str, Any]:
            data = w._manager.broker_version_data
            ranges = {}
            for key, (lo, hi) in sorted(data.api_versions.items()):
                try:
                    ranges[ApiKey(key).name] = (lo, hi)
                except ValueError:
                    ranges[str(key)] = (lo, hi)
            return {"release": ".".join(map(str, w._manager.broker_version)), "apis": ranges}

        return self.wire(read)

    # ---------------------------------------------------------------------------------- topics

    def topics(self, with_internal: bool = True) -> list[TopicRow]:
        from confluent_kafka.admin import ConfigResource, ResourceType

        with refusals():
            md = self.admin.metadata()
            rows = {
                name: TopicRow(name, len(t.partitions), name.startswith("__"), None,
                               error=str(t.error) if t.error else None)
                for name, t in md.topics.items() if with_internal or not name.startswith("__")
            }  # fmt: skip
            if rows:
                resources = [ConfigResource(ResourceType.TOPIC, n) for n in rows]
                futures = self.admin.call(self.admin.client.describe_configs, resources, what="describe configs")
                for res, outcome in self.admin.results(futures, "describe configs").items():
                    if not isinstance(outcome, BaseException) and res.name in rows:
                        rows[res.name].configs = {k: outcome[k].value for k in LISTED_CONFIGS if k in outcome}
        for (topic, _p), size in self.sizes().items():
            if topic in rows:
                rows[topic].size = (rows[topic].size or 0) + size
        return sorted(rows.values(), key=lambda r: (r.internal, r.name))

    def sizes(self, topic: str | None = None) -> dict[TP, int]:
        """Bytes on disk of each partition's leader replica (DescribeLogDirs); empty when not allowed."""
        leaders: dict[TP, int] = {}
        with refusals():
            md = self.admin.metadata(topic)
        for t in md.topics.values():
            for p in t.partitions.values():
                leaders[(t.topic, p.id)] = p.leader

        def read(w: KafkaAdminClient) -> dict[TP, int]:
            out: dict[TP, int] = {}
            asked = {topic: sorted(p for t, p in leaders if t == topic)} if topic else None
            for broker in w.describe_log_dirs(asked):
                for d in broker["log_dirs"]:
                    for t in d["topics"] if not d["error_code"] else ():
                        for p in t["partitions"]:
                            if leaders.get((t["name"], p["partition_index"])) == broker["broker"]:
                                out[(t["name"], p["partition_index"])] = p["partition_size"]
            return out

        try:
            return self.wire(read)
        except ConsoleError:
            return {}  # DescribeLogDirs needs DESCRIBE on the cluster: the sizes are left blank

    def partitions(self, name: str) -> list[int]:
        with refusals():
            t = self.admin.metadata(name).topics.get(name)
        return sorted(t.partitions) if t is not None and not t.error else []

    def topic(self, name: str) -> dict[str, Any]:
        from confluent_kafka import TopicCollection
        from confluent_kafka.admin import ConfigResource, OffsetSpec, ResourceType

        from logbroker.cli.groups import _offsets

        with refusals():
            futures = self.admin.call(self.admin.client.describe_topics, TopicCollection([name]),
                                      what=f"describe topic {name}")  # fmt: skip
            try:
                desc = self.admin.result(futures[name], f"topic {name}")
            except click.ClickException as exc:
                text = exc.format_message()
                if "UNKNOWN_TOPIC" in text:
                    raise ConsoleError(text, 404) from None
                raise
            tps = [(name, p.id) for p in desc.partitions]
            starts = _offsets(self.admin, tps, OffsetSpec.earliest(), strict=False)
            ends = _offsets(self.admin, tps, OffsetSpec.latest(), strict=False)
            res = ConfigResource(ResourceType.TOPIC, name)
            fut = self.admin.call(self.admin.client.describe_configs, [res], what="describe configs")[res]
            entries = self.admin.result(fut, f"configs of {name}")
        sizes = self.sizes(name)
        partitions = [
            PartitionRow(p.id, p.leader.id if p.leader is not None else -1, [r.id for r in p.replicas],
                         [r.id for r in p.isr], starts.get((name, p.id)), ends.get((name, p.id)),
                         sizes.get((name, p.id)))
            for p in sorted(desc.partitions, key=lambda p: p.id)
        ]  # fmt: skip
        configs = [
            ConfigRow(e.name, e.value, e.source.name if hasattr(e.source, "name") else str(e.source),
                      bool(e.is_default), bool(e.is_read_only), bool(e.is_sensitive))
            for e in sorted(entries.values(), key=lambda e: e.name)
        ]  # fmt: skip
        return {"name": name, "topic_id": str(desc.topic_id), "internal": desc.is_internal,
                "partitions": partitions, "configs": configs}  # fmt: skip

    def create_topic(self, name: str, partitions: int, replication: int, configs: dict[str, str]) -> None:
        from confluent_kafka.admin import NewTopic

        with refusals():
            nt = NewTopic(name, num_partitions=partitions, replication_factor=replication, config=configs)
            self.admin.result(self.admin.call(self.admin.client.create_topics, [nt], what="create topic")[name],
                              f"create topic {name}")  # fmt: skip

    def delete_topic(self, name: str) -> None:
        with refusals():
            fut = self.admin.call(self.admin.client.delete_topics, [name], what="delete topic")[name]
            self.admin.result(fut, f"delete topic {name}")

    def add_partitions(self, name: str, total: int) -> None:
        from confluent_kafka.admin import NewPartitions

        with refusals():
            fut = self.admin.call(self.admin.client.create_partitions, [NewPartitions(name, total)],
                                  what="add partitions")[name]  # fmt: skip
            self.admin.result(fut, f"add partitions to {name}")

    def alter_config(self, name: str, key: str, value: str | None) -> None:
        """Set one topic config (None: back to its default), as `kafka-configs --alter` does."""
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

        op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
        res = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=op)])  # fmt: skip
        with refusals():
            fut = self.admin.call(self.admin.client.incremental_alter_configs, [res], what="alter configs")[res]
            self.admin.result(fut, f"set {key} of {name}")

    # ---------------------------------------------------------------------------------- groups

    def listed_groups(self) -> list[GroupRow]:
        """ListGroups of every type (kafka-python's asks for all; librdkafka's leaves share and streams out)."""
        rows = []
        for g in self.wire(lambda w: w.list_groups()):
            kind = (g.get("group_type") or "").lower() or ("classic" if g.get("protocol_type") != "share" else "share")
            rows.append(GroupRow(g["group_id"], kind, g.get("group_state") or ""))
        return rows

    def groups(self) -> list[GroupRow]:
        """Every group with its type, state and member count; consumer groups' lag from one OffsetFetch."""
        rows = {g.group_id: g for g in self.listed_groups()}
        consumer = [g for g, r in rows.items() if r.type in ("classic", "consumer")]
        if consumer:
            # kafka-python's DescribeGroups: one request per coordinator (librdkafka's took 150-190 ms for 100
            # groups on Kafka 4.4, this 5-30 ms)
            with contextlib.suppress(ConsoleError):
                for gid, d in self.wire(lambda w: w.describe_groups(consumer)).items():
                    if gid in rows and not d.get("error_code"):
                        rows[gid].members = len(d.get("members") or ())
            for gid, lag in self.lags(consumer).items():
                rows[gid].lag = lag
        return sorted(rows.values(), key=lambda r: r.group_id)

    def lags(self, groups: list[str]) -> dict[str, int]:
        """Total lag of each group (committed offsets of all groups in one OffsetFetch, end offsets in one
        ListOffsets): what the overview and the lag charts sample."""
        from confluent_kafka.admin import OffsetSpec

        from logbroker.cli.groups import _offsets

        if not groups:
            return {}
        try:
            committed = self.wire(lambda w: w.list_group_offsets(list(groups)))
        except ConsoleError:
            return {}
        tps = sorted({(tp.topic, tp.partition) for offsets in committed.values() for tp in offsets})
        with refusals():
            ends = _offsets(self.admin, tps, OffsetSpec.latest(), strict=False)
        out = {}
        for gid, offsets in committed.items():
            out[gid] = sum(max(0, ends[(tp.topic, tp.partition)] - om.offset) for tp, om in offsets.items()
                           if om.offset >= 0 and (tp.topic, tp.partition) in ends)  # fmt: skip
        return out

    def group(self, group_id: str) -> dict[str, Any]:
        from confluent_kafka.admin import OffsetSpec

        from logbroker.cli.groups import _committed, _group, _offsets

        with refusals():
            desc = _group(self.admin, group_id)
            committed = _committed(self.admin, group_id)
            owners = {tp: m for m in desc.members for tp in m.assignment}
            tps = sorted(set(committed) | set(owners))
            ends = _offsets(self.admin, tps, OffsetSpec.latest(), strict=False)
        rows = [OffsetRow(t, p, committed.get((t, p)), ends.get((t, p)),
                          owners[(t, p)].client_id if (t, p) in owners else None) for t, p in tps]  # fmt: skip
        return {"group": desc, "offsets": rows, "lag": sum(r.lag or 0 for r in rows)}

    def reset_plan(self, group_id: str, topic: str | None, kind: str, value: int, execute: bool) -> list[Any]:
        """Kafka's reset scenarios (earliest, latest, datetime, offset, shift) for the group's committed
        partitions (or one topic's): the plan, committed only when ``execute``; an active group is refused
        as Kafka's tool refuses it."""
        from logbroker.cli.groups import Strategy, _committed, _execute, _group, _partitions, _plan

        with refusals():
            desc = _group(self.admin, group_id)
            if execute and not desc.inactive:
                raise ConsoleError(
                    f"cannot reset offsets of group {group_id!r}: it is {desc.state} with {len(desc.members)} "
                    "member(s). Offsets can only be reset while the group is inactive (Empty); stop its consumers."
                )
            parts = _partitions(self.admin, [(topic, None)]) if topic else sorted(_committed(self.admin, group_id))
            plan = _plan(self.admin, group_id, parts, Strategy(kind, value))
            if execute and plan:
                _execute(self.admin, group_id, plan)
        return plan

    def delete_group(self, group_id: str) -> None:
        with refusals():
            fut = self.admin.call(self.admin.client.delete_consumer_groups, [group_id], what="delete group")[group_id]
            self.admin.result(fut, f"delete group {group_id}")

    # ---------------------------------------------------------------------------------- share groups

    def share_group(self, group_id: str) -> dict[str, Any]:
        """ShareGroupDescribe and DescribeShareGroupOffsets (KIP-932), which confluent-kafka has no call for,
        sent by kafka-python with the broker's own schemas."""
        from logbroker.console import share_wire

        return self.wire(lambda w: share_wire.describe(w, group_id))

    # ---------------------------------------------------------------------------------- transactions

    def transactions(self) -> list[TxnRow]:
        def read(w: KafkaAdminClient) -> list[TxnRow]:
            listed = w.list_transactions()
            ids = sorted({t.transactional_id for txns in listed.values() for t in txns})
            described = w.describe_transactions(ids) if ids else {}
            rows = []
            for tid in ids:
                d = described.get(tid)
                if d is None:
                    continue
                rows.append(
                    TxnRow(
                        tid,
                        d.state.name if hasattr(d.state, "name") else str(d.state),
                        d.producer_id,
                        d.producer_epoch,
                        d.transaction_timeout_ms,
                        d.transaction_start_time_ms,
                        sorted((tp.topic, tp.partition) for tp in d.topic_partitions),
                        d.coordinator_id,
                    )
                )
            return rows

        return self.wire(read)

    def open_transactions(self, coordinator_open: set[int]) -> list[OpenTxnRow]:
        """Every partition's open transactions (DescribeProducers, as `kafka-transactions find-hanging`):
        one whose producer the coordinator has no ongoing transaction for is hanging."""
        from kafka import TopicPartition

        with refusals():
            md = self.admin.metadata()
        tps = [TopicPartition(t.topic, p) for t in md.topics.values() for p in t.partitions]

        def read(w: KafkaAdminClient) -> list[OpenTxnRow]:
            rows = []
            for tp, state in w.describe_producers(tps).items():
                for ps in state.active_producers:
                    if ps.current_transaction_start_offset >= 0:
                        rows.append(OpenTxnRow(tp.topic, tp.partition, ps.producer_id, ps.producer_epoch,
                                               ps.coordinator_epoch, ps.current_transaction_start_offset,
                                               ps.last_timestamp, ps.producer_id in coordinator_open))  # fmt: skip
            return sorted(rows, key=lambda r: (r.topic, r.partition, r.producer_id))

        return self.wire(read) if tps else []

    def abort(self, topic: str, partition: int, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """WriteTxnMarkers (abort) on one partition, as `kafka-transactions abort` does."""
        from kafka import TopicPartition
        from kafka.admin import AbortTransactionSpec

        spec = AbortTransactionSpec(TopicPartition(topic, partition), producer_id, producer_epoch, coordinator_epoch)
        self.wire(lambda w: w.abort_transaction(spec))

    # ---------------------------------------------------------------------------------- ACLs, users

    def acls(self) -> list[dict[str, str]] | None:
        """Every ACL; None when the cluster has no authorizer (SECURITY_DISABLED)."""
        try:
            rows = self._acls()
        except ConsoleError as exc:
            if "SECURITY_DISABLED" in exc.message:
                return None
            raise
        if not rows and self._security_disabled():
            return None  # librdkafka answers SECURITY_DISABLED with an empty list
        return rows

    def _security_disabled(self) -> bool:
        from kafka.admin import (
            ACLFilter,
            ACLOperation,
            ACLPermissionType,
            ACLResourcePatternType,
            ResourcePatternFilter,  # fmt: skip
            ResourceType,
        )
        from kafka.errors import SecurityDisabledError

        f = ACLFilter(
            principal=None,
            host=None,
            operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
        )
        try:
            self.wire(lambda w: w.describe_acls(f))
        except ConsoleError as exc:
            return "SECURITY_DISABLED" in exc.message
        except SecurityDisabledError:
            return True
        return False

    def _acls(self) -> list[dict[str, str]]:
        from confluent_kafka.admin import (
            AclBindingFilter,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,  # fmt: skip
        )

        from logbroker.cli.acls import _row

        f = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)  # fmt: skip
        with refusals():
            found = self.admin.result(self.admin.call(self.admin.client.describe_acls, f, what="describe ACLs"),
                                      "describe ACLs")  # fmt: skip
        return sorted((_row(b) for b in found), key=lambda r: tuple(r.values()))

    def add_acl(self, row: dict[str, str]) -> None:
        from logbroker.cli.acls import _binding

        with refusals():
            try:
                b = _binding(row["resource_type"], row["name"], row["pattern_type"] == "PREFIXED", row["principal"],
                             row["host"] or "*", row["operation"], row["permission"] == "ALLOW")  # fmt: skip
            except (AttributeError, KeyError, ValueError, TypeError) as exc:
                raise ConsoleError(f"not an ACL: {exc}") from None
            futures = self.admin.call(self.admin.client.create_acls, [b], what="create ACL")
            for fut in futures.values():
                self.admin.result(fut, "create ACL")

    def delete_acl(self, row: dict[str, str]) -> int:
        from confluent_kafka.admin import AclBindingFilter

        from logbroker.cli.acls import _enum

        with refusals():
            restype = "BROKER" if row["resource_type"] == "CLUSTER" else row["resource_type"]
            f = AclBindingFilter(_enum("ResourceType", restype), row["name"],
                                 _enum("ResourcePatternType", row["pattern_type"]), row["principal"], row["host"],
                                 _enum("AclOperation", row["operation"]),
                                 _enum("AclPermissionType", row["permission"]))  # fmt: skip
            futures = self.admin.call(self.admin.client.delete_acls, [f], what="delete ACL")
            return sum(len(self.admin.result(fut, "delete ACL")) for fut in futures.values())

    def users(self) -> list[dict[str, Any]]:
        """Every SCRAM user (`cli.wire_admin.scram_users`: not through librdkafka, which aborts on a refusal)."""
        from logbroker.cli.wire_admin import scram_users

        found = self.wire(lambda w: scram_users(w, None))
        return [{"user": user, "mechanism": mechanism, "iterations": iterations}
                for user in sorted(found) for mechanism, iterations in found[user][1]]  # fmt: skip

    def add_user(self, name: str, password: str, mechanism: str, iterations: int) -> None:
        from confluent_kafka.admin import ScramCredentialInfo, UserScramCredentialUpsertion

        from logbroker.cli.users import _mechanism

        with refusals():
            up = UserScramCredentialUpsertion(name, ScramCredentialInfo(_mechanism(mechanism), iterations),
                                              password.encode())  # fmt: skip
            futures = self.admin.call(self.admin.client.alter_user_scram_credentials, [up], what="add user")
            self.admin.result(futures[name], f"add {mechanism} credentials of user {name}")

    def delete_user(self, name: str, mechanism: str) -> None:
        from confluent_kafka.admin import UserScramCredentialDeletion

        from logbroker.cli.users import _mechanism

        with refusals():
            gone = UserScramCredentialDeletion(name, _mechanism(mechanism))
            futures = self.admin.call(self.admin.client.alter_user_scram_credentials, [gone], what="delete user")
            self.admin.result(futures[name], f"delete {mechanism} credentials of user {name}")
