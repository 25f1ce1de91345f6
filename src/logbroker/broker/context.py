"""What a handler may use of the broker: topics and partition logs, durability, coordinators, settings.

Handlers receive a `BrokerContext` and nothing else: never the server, its connections or its tasks.
The context owns the broker's state on one data directory (storage, flusher, group coordinator,
producer ids) and its life cycle; `server.py` owns sockets only.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import resource
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TypeVar

from logbroker.config import BrokerSettings
from logbroker.protocol import ApiSpec, ErrorCode, Request
from logbroker.protocol.buffers import POOLED_MIN, BufferPool, anonymous
from logbroker.storage import LogConfig, LogManager, PartitionLog
from logbroker.storage.internal import InternalLog
from logbroker.storage.manager import KAFKA_INTERNAL_TOPICS, TopicError, TopicMeta, validate_topic_name

from .access import AccessControl
from .append_turns import AppendTurns
from .auth.acls import (
    AclStore,
    Authorizer,
    parse_super_users,
)
from .auth.users import UserStore
from .configs import BrokerConfigs
from .fetch_sessions import FetchSession, FetchSessionCache
from .flusher import Flusher
from .group_configs import GroupConfigs
from .groups.coordinator import Coordinator, CoordinatorConfig
from .groups.model import for_log
from .groups.store import GroupStore
from .log_cleaner import LogCleaner
from .loggers import config_changes, config_values
from .metrics import BrokerMetrics
from .producer_ids import ProducerIdAllocator
from .scrubber import Scrubber
from .share import ShareConfig, ShareCoordinator, ShareStore
from .share.coordinator import GroupSettings
from .txn import TxnCoordinator, TxnSettings, TxnStore

log = logging.getLogger("logbroker.broker")

PartitionKey = tuple[str, int]
_Store = TypeVar("_Store", bound=InternalLog)

# Warm memory kept for large request frames (`BrokerContext.request_buffers`).
REQUEST_POOL_BYTES = 128 << 20


# The coordinators' topics this broker makes on demand, and the setting that gives each its partitions.
INTERNAL_TOPIC_PARTITIONS = {
    "__consumer_offsets": "offsets_topic_num_partitions",
    "__transaction_state": "transaction_state_log_num_partitions",
}


def _offset_at(plog: PartitionLog, timestamp_ms: int) -> int:
    """The first offset whose record is at or after `timestamp_ms`, else the log end."""
    found = plog.offset_for_timestamp(timestamp_ms)
    return found[0] if found is not None and found[0] >= 0 else plog.next_offset


class NoResponse:
    """A handler result meaning: send nothing (acks=0), optionally closing the connection after."""

    __slots__ = ("close",)

    def __init__(self, close: bool = False) -> None:
        self.close = close


NO_RESPONSE = NoResponse()
NO_RESPONSE_CLOSE = NoResponse(close=True)


class BrokerContext:
    """The broker's state on one data directory, as handlers see it."""

    def __init__(self, settings: BrokerSettings, apis: Mapping[int, ApiSpec]) -> None:
        self.settings = settings
        self.apis = apis  # what this broker serves, from the handlers' declarations (ApiVersions answers it)
        self.node_id = settings.node_id
        self.listeners = settings.listener_list()
        # Where each listener is advertised (Metadata answers a client with the listener it came in on).
        # A port of 0 is filled in by the server once bound.
        self.endpoints: dict[str, tuple[str, int]] = {
            lst.name: (lst.advertised_host, lst.advertised_port) for lst in self.listeners
        }
        self.metrics = BrokerMetrics()  # counted by the server and the data path; state is read at scrape time
        self.metrics.context = self
        # Requests being handled, long-polling fetches aside (the server counts them): a commit by the only
        # one syncs inline (the flusher's `solo`); several share a round on the fsync thread.
        self.busy_requests = 0
        self.flusher = Flusher(
            settings.fsync, settings.fsync_interval_ms, self.metrics.flush, solo=lambda: self.busy_requests <= 1
        )
        self.cluster_id = ""
        self._logs: LogManager | None = None
        self._configs: BrokerConfigs | None = None
        self.cleaner: LogCleaner | None = None
        self.scrubber: Scrubber | None = None
        self._groups: Coordinator | None = None
        self._producer_ids: ProducerIdAllocator | None = None
        self._txns: TxnCoordinator | None = None
        self._share: ShareCoordinator | None = None
        self._access: AccessControl | None = None
        self._append_waiters: dict[PartitionKey, set[asyncio.Future[None]]] = {}
        self._stopping = False
        self._producer_expiry: asyncio.Task[None] | None = None
        self._table: Mapping[str, tuple[str, int]] = MappingProxyType({})
        self._table_at = -1
        # Each partition's appends take turns in arrival order: a produce yields between large batches, and
        # pipelined produces must still append in the order they came, partition by partition.
        self.append_turns = AppendTurns()
        self.read_buffers = BufferPool()  # fetch reads land here, reused across requests
        # Incremental fetch sessions (KIP-227): broker-wide, in memory only, as Kafka keeps them.
        self.fetch_sessions = FetchSessionCache(settings.max_incremental_fetch_session_cache_slots)
        self.frame_buffers = BufferPool()  # large response frames (the server's connections use it)
        # Large request frames (Produce batches) are received into these: warm memory, not fresh pages.
        # Bounded by bytes, not count: with 16 at most, 2,500 clients sending ~400 KB each at once had all
        # but 16 frames land in fresh mappings, page-faulted as they filled (design.md, "5,000
        # connections"). The housekeeping trims what a burst left idle.
        self.request_buffers = BufferPool(
            max_bytes=REQUEST_POOL_BYTES, max_buffers=REQUEST_POOL_BYTES // POOLED_MIN, allocate=anonymous
        )

    def trim_buffers(self) -> int:
        """Release pooled buffers that stayed unused since the last call (see `BufferPool.trim`)."""
        return sum(p.trim() for p in (self.read_buffers, self.frame_buffers, self.request_buffers))

    @property
    def host(self) -> str:
        """The first listener's advertised host (what logs and tools print)."""
        return self.endpoints[self.listeners[0].name][0]

    @property
    def port(self) -> int:
        return self.endpoints[self.listeners[0].name][1]

    def endpoint(self, listener: str) -> tuple[str, int]:
        """The advertised host and port of `listener` (the first listener's for a request of no listener)."""
        return self.endpoints.get(listener) or self.endpoints[self.listeners[0].name]

    # ------------------------------------------------------------------ life cycle (the server's)

    @property
    def log_defaults(self) -> LogConfig:
        """What a topic without overrides gets: the broker's configs, dynamic layers included."""
        return self.configs.log_defaults()

    @property
    def configs(self) -> BrokerConfigs:
        if self._configs is None:
            raise RuntimeError("the broker context is not open")
        return self._configs

    def alter_broker_configs(self, scope: str, values: Mapping[str, str], validate_only: bool) -> None:
        """Replace one dynamic layer (durably) and apply it: topics without overrides follow at once."""
        before = dict(self.configs.dynamic.get(scope, {}))
        self.configs.alter(scope, values, validate_only)
        if not validate_only:
            if changed := config_changes(before, values):
                which = f"broker {scope}" if scope else "cluster-wide default"
                log.info("broker configs changed (%s): %s", which, changed)
            self._storage.set_defaults(self.configs.log_defaults())
            if self.cleaner is not None:
                self.cleaner.kick()

    def alter_topic_configs(self, name: str, overrides: Mapping[str, str], validate_only: bool) -> None:
        meta = self.topic(name)
        before = dict(meta.configs) if meta is not None else {}
        self._storage.alter_topic_configs(name, overrides, validate_only)
        if not validate_only:
            if changed := config_changes(before, overrides):
                log.info("topic %s: configs changed: %s", for_log(name), changed)
            if self.cleaner is not None:
                self.cleaner.kick()

    @property
    def clean_start(self) -> bool:
        return self._storage.clean_start

    def open(self) -> None:
        """Open the data directory (recovering it if needed) and start the background services."""
        s = self.settings
        data = Path(s.data_dir)
        self._configs = BrokerConfigs(s, data)
        self.group_configs = GroupConfigs(self.settings, data)
        self._logs = LogManager(
            data, self.log_defaults, self.max_open_files(), s.log_preallocate_bytes, on_append=self._on_append
        )
        self.cluster_id = _cluster_id(data)
        self._producer_ids = ProducerIdAllocator(data / "__producer_ids")
        users = self._listened(UserStore(data, self._logs.clean_start, parse_super_users(s.super_users)))
        acl_store, authorizer = None, None
        if s.authorizer_class_name.strip():
            acl_store = self._listened(AclStore(data, self._logs.clean_start))
            authorizer = Authorizer(
                parse_super_users(s.super_users), s.allow_everyone_if_no_acl_found, acl_store.load_bindings()
            )
            authorizer.untrusted = acl_store.untrusted
        self._access = AccessControl(authorizer, acl_store, users, self.flusher)
        self._groups = Coordinator(
            self._listened(GroupStore(data, self._logs.clean_start)),
            CoordinatorConfig(
                initial_rebalance_delay_ms=s.group_initial_rebalance_delay_ms,
                min_session_timeout_ms=s.group_min_session_timeout_ms,
                max_session_timeout_ms=s.group_max_session_timeout_ms,
                offsets_retention_ms=s.offsets_retention_ms or s.offsets_retention_minutes * 60_000,
                offsets_retention_check_interval_ms=s.offsets_retention_check_interval_ms,
                max_group_size=s.group_max_size,
                consumer_max_group_size=s.group_consumer_max_size,
                consumer_session_timeout_ms=s.group_consumer_session_timeout_ms,
                consumer_heartbeat_interval_ms=s.group_consumer_heartbeat_interval_ms,
                consumer_migration_policy=s.group_consumer_migration_policy,
            ),
            self._persist_internal,
            self._topic_table,
        )
        self._groups.start()
        self._txns = TxnCoordinator(
            self._listened(TxnStore(data, self._logs.clean_start)),
            TxnSettings(
                max_timeout_ms=s.transaction_max_timeout_ms,
                id_expiration_ms=s.transactional_id_expiration_ms,
                abort_interval_ms=s.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                expire_interval_ms=s.transaction_remove_expired_transaction_cleanup_interval_ms,
            ),
            get_log=self.get_log,
            sync=self.sync,
            persist=self._persist_internal,
            next_producer_id=self._producer_ids.next_id,
            open_logs=self._logs_with_open_transactions,
            complete_offsets=self._groups.complete_txn,
        )
        self._share = ShareCoordinator(
            self._listened(ShareStore(data, self._logs.clean_start)),
            ShareConfig(max_size=s.group_share_max_size),
            persist=self._persist_internal,
            topic_table=self._topic_table,
            get_log=self.get_log,
            topic_name=lambda tid: m.name if (m := self.topic_by_id(tid)) is not None else None,
            other_group=lambda gid: None if self._groups is None or self._groups.group(gid) is None else "consumer",
            settings_for=self._share_settings,
            offset_for_timestamp=_offset_at,
        )
        self._share.start()
        self._groups.is_share_group = self._share.is_group
        self.flusher.start()
        self._txns.start()
        self.cleaner = LogCleaner(lambda: self._storage, s)
        self.cleaner.start()
        self.scrubber = Scrubber(lambda: self._storage, s)
        self.scrubber.start()
        self._producer_expiry = asyncio.create_task(self._expire_producers_loop(), name="producer-id-expiry")

    def _listened(self, store: _Store) -> _Store:
        """A coordinator's store whose appends join the fsync rounds as the partitions' do."""
        store.on_append = self._on_append
        return store

    def _share_settings(self, group_id: str) -> GroupSettings:
        """A share group's settings: its group configs over the broker's group.share.* ones."""
        v = self.group_configs.value
        return GroupSettings(
            session_timeout_ms=int(v(group_id, "share.session.timeout.ms")),
            heartbeat_interval_ms=int(v(group_id, "share.heartbeat.interval.ms")),
            record_lock_duration_ms=int(v(group_id, "share.record.lock.duration.ms")),
            delivery_count_limit=int(v(group_id, "share.delivery.count.limit")),
            partition_max_record_locks=int(v(group_id, "share.partition.max.record.locks")),
            auto_offset_reset=v(group_id, "share.auto.offset.reset"),
            read_committed=v(group_id, "share.isolation.level") == "read_committed",
        )

    def max_open_files(self) -> int:
        """Descriptors segment files may hold: `log_max_open_files`, or their share of the open-file limit."""
        if self.settings.log_max_open_files:
            return max(self.settings.log_max_open_files, 3)
        return descriptor_shares(open_file_limit())[1]

    def begin_stopping(self) -> None:
        """No new waits: long polls answer at once so connections can drain."""
        self._stopping = True
        for fut in itertools.chain.from_iterable(self._append_waiters.values()):
            if not fut.done():
                fut.set_result(None)
        self.fetch_sessions.wake_all()

    async def close(self) -> None:
        """Stop the coordinators, sync everything outstanding, release the data directory."""
        self.begin_stopping()
        if self._producer_expiry is not None:
            self._producer_expiry.cancel()
        if self.cleaner is not None:
            await self.cleaner.stop()
        if self.scrubber is not None:
            await self.scrubber.stop()
        if self._txns is not None:
            await self._txns.stop()
        if self._groups is not None:
            await self._groups.stop()
        if self._share is not None:
            await self._share.stop_tasks()
        await self.flusher.close()
        if self._share is not None:
            self._share.store.close()
        if self._groups is not None:
            self._groups.store.close()
        if self._txns is not None:
            self._txns.close()
        if self._access is not None:
            self._access.close()
        if self._logs is not None:
            self._logs.close()

    def enforce_retention(self) -> int:
        return self._storage.enforce_retention() if self._logs is not None else 0

    def expire_producers(self, now_ms: int | None = None) -> int:
        """Forget idempotent producers whose last batch is producer.id.expiration.ms old (Kafka's check)."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        ms = self.settings.producer_id_expiration_ms
        return sum(plog.producers.remove_expired(now, ms) for plog in self._storage.logs.values())

    async def _expire_producers_loop(self) -> None:
        interval = self.settings.producer_id_expiration_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            if n := self.expire_producers():
                ms = self.settings.producer_id_expiration_ms
                log.info("expired %d producer ids (producer.id.expiration.ms=%d)", n, ms)

    @property
    def stopping(self) -> bool:
        return self._stopping

    # ------------------------------------------------------------------ topics

    @property
    def _storage(self) -> LogManager:
        if self._logs is None:
            raise RuntimeError("the broker context is not open")
        return self._logs

    def connection_closed(self, connection_id: int) -> None:
        """A client connection went away: the share sessions it carried end, releasing their records."""
        if self._share is not None and not self._stopping:
            self._share.connection_closed(connection_id)

    @property
    def share(self) -> ShareCoordinator:
        if self._share is None:
            raise RuntimeError("the broker context is not open")
        return self._share

    @property
    def groups(self) -> Coordinator:
        if self._groups is None:
            raise RuntimeError("the broker context is not open")
        return self._groups

    @property
    def txns(self) -> TxnCoordinator:
        if self._txns is None:
            raise RuntimeError("the broker context is not open")
        return self._txns

    def _logs_with_open_transactions(self) -> list[tuple[str, int, PartitionLog]]:
        if self._logs is None:
            return []
        return [(t, i, plog) for (t, i), plog in self._logs.logs.items() if plog.producers.ongoing]

    @property
    def opened(self) -> bool:
        """Whether `open()` has made the broker's state (and not `close()` yet)."""
        return self._access is not None

    @property
    def access(self) -> AccessControl:
        """ACLs and SCRAM users (`AccessControl`)."""
        if self._access is None:
            raise RuntimeError("the broker context is not open")
        return self._access

    @property
    def producer_ids(self) -> ProducerIdAllocator:
        if self._producer_ids is None:
            raise RuntimeError("the broker context is not open")
        return self._producer_ids

    def topic(self, name: str) -> TopicMeta | None:
        return self._storage.topics.get(name)

    def topics(self, include_internal: bool = True) -> Iterable[TopicMeta]:
        return [m for m in self._storage.topics.values() if include_internal or not m.internal]

    def topic_by_id(self, topic_id: uuid.UUID | str | None) -> TopicMeta | None:
        """The topic of an id; None for an unknown one, and for a null or zero id (which names no topic)."""
        return None if topic_id is None else self._storage.topic_by_id(str(topic_id))

    def unavailable(self, topic: str) -> str | None:
        """Why a topic whose data is on disk cannot be served (damaged metadata), or None."""
        return self._storage.unavailable.get(topic)

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._storage.get(topic, partition)

    def ensure_topic(self, topic: str, allow_auto_create: bool = True, by: Request | None = None) -> ErrorCode:
        """NONE when `topic` exists or was just auto-created (Kafka's auto.create.topics.enable); `by`: the
        request that asked, named in the log line of an auto-creation.

        A topic whose data is on disk but cannot be served (damaged metadata) answers KAFKA_STORAGE_ERROR
        and is never auto-created anew; so does an auto-create that fails for lack of space or descriptors.
        """
        storage = self._storage
        if topic in storage.topics:
            return ErrorCode.NONE
        if topic in storage.unavailable:
            return ErrorCode.KAFKA_STORAGE_ERROR
        if topic in INTERNAL_TOPIC_PARTITIONS:
            if not (allow_auto_create and self.settings.auto_create_topics):
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return self.ensure_internal_topic(topic)
        try:
            validate_topic_name(topic)
            if not (allow_auto_create and self.settings.auto_create_topics):
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            meta = storage.create_topic(topic, self.settings.num_partitions)
        except TopicError as exc:
            return exc.error
        who = f" by {_requester(by)}" if by is not None else ""
        log.info("topic %s auto-created%s: %d partitions", for_log(topic), who, meta.partitions)
        return ErrorCode.NONE

    def ensure_internal_topic(self, topic: str) -> ErrorCode:
        """Kafka makes a coordinator's topic (`__consumer_offsets`, `__transaction_state`) on the first
        FindCoordinator for it, or a Metadata request naming it. Here the coordinators keep their state in
        their own logs, so the topic is what clients see of it: listed as internal, readable, and closed to
        their produces. NONE once it exists; KAFKA_STORAGE_ERROR when it cannot be made."""
        storage = self._storage
        if topic in storage.topics:
            return ErrorCode.NONE
        if topic in storage.unavailable:
            return ErrorCode.KAFKA_STORAGE_ERROR
        partitions = getattr(self.settings, INTERNAL_TOPIC_PARTITIONS[topic])
        try:
            storage.create_topic(topic, partitions, internal=True)
        except TopicError as exc:
            log.warning("internal topic %s could not be created: %s", topic, exc)
            return exc.error
        log.info("internal topic %s created: %d partitions", topic, partitions)
        return ErrorCode.NONE

    def create_topic(self, name: str, partitions: int, configs: dict[str, str | None] | None = None) -> TopicMeta:
        meta = self._storage.create_topic(name, partitions, configs, internal=name in KAFKA_INTERNAL_TOPICS)
        log.info("topic %s created: %d partitions, configs: %s", for_log(name), partitions, config_values(meta.configs))
        return meta

    def create_partitions(self, name: str, count: int) -> None:
        self._storage.create_partitions(name, count)

    def delete_topic(self, name: str) -> TopicMeta:
        """Delete a topic, wake its long polls and drop it from groups' offsets and assignments."""
        meta = self._storage.delete_topic(name)
        for i in range(meta.partitions):
            self._wake((meta.name, i))
        self.groups.forget_topic(meta.name)
        self.share.forget_topic(meta.topic_id)
        log.info("topic %s deleted (%d partitions, id %s)", for_log(meta.name), meta.partitions, meta.topic_id)
        return meta

    def _topic_table(self) -> Mapping[str, tuple[str, int]]:
        """Name -> (topic id, partitions) of user topics, read by every KIP-848 heartbeat: rebuilt only
        after a topic is created, grown or deleted."""
        logs = self._storage
        if self._table_at != logs.changes:
            self._table = MappingProxyType(
                {n: (m.topic_id, m.partitions) for n, m in logs.topics.items() if not m.internal}
            )
            self._table_at = logs.changes
        return self._table

    # ------------------------------------------------------------------ the data path

    def _on_append(self, plog: PartitionLog, nbytes: int) -> None:
        """Every log tells of each write here: it joins the next fsync round, and a topic partition's long
        polls wake."""
        self.flusher.written(plog, nbytes)
        if plog.key is not None:
            self._wake(plog.key)

    async def sync(self) -> None:
        """Return once every write so far is durable under the fsync policy."""
        await self.flusher.commit()

    async def _persist_internal(self, plog: PartitionLog) -> None:
        """Internal records (group state, offsets) are durable under the same policy as data (their log told
        the flusher of the write as it was made)."""
        await self.flusher.commit()

    def _wake(self, key: PartitionKey) -> None:
        waiters = self._append_waiters.pop(key, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
        if self.fetch_sessions.watchers:
            self.fetch_sessions.wake(key)

    async def wait_for_session_data(self, session: FetchSession, keys: list[PartitionKey], timeout: float) -> None:
        """Long poll of an incremental fetch: wake when any partition of its session gets data (or the session
        goes), or after `timeout` seconds. A session gone meanwhile waits on `keys`, as a sessionless fetch."""
        if timeout <= 0 or self._stopping:
            return
        fut = self.fetch_sessions.watch(session)
        if fut is None:
            await self.wait_for_data(keys, timeout)
            return
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            self.fetch_sessions.unwait(session, fut)

    async def wait_for_data(self, keys: list[PartitionKey], timeout: float) -> None:
        """Long poll: wake when any of these partitions gets data, or after `timeout` seconds."""
        if timeout <= 0 or not keys or self._stopping:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for k in keys:
            self._append_waiters.setdefault(k, set()).add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            for k in keys:
                s = self._append_waiters.get(k)
                if s is not None:
                    s.discard(fut)
                    if not s:
                        del self._append_waiters[k]


def _requester(req: Request) -> str:
    """Who sent a request, for a log line: principal, client id and address."""
    client = for_log(req.header.client_id or "") or "-"
    return f"{for_log(req.principal)} (client {client}, {req.client_address or '?'})"


def open_file_limit() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


def descriptor_shares(limit: int) -> tuple[int, int]:
    """How `limit` open files are shared: (client connections, segment files), with the rest kept for the
    broker's own (its lock, internal logs, epoll, the fsync thread...). Segment files get a quarter, or half
    of a small limit, at most 1,024 ahead of a quarter: enough for thousands of partitions' active
    segments, while accept() never fails for want of a descriptor."""
    margin = min(128, max(limit // 8, 8))
    files = max(limit // 4, min(1024, limit // 2), 3)
    return max(limit - files - margin, 1), files


def _cluster_id(data: Path) -> str:
    """A stable cluster id per data directory (Kafka's meta.properties role)."""
    p = data / "cluster-id"
    try:
        return p.read_text().strip()
    except FileNotFoundError:
        cid = uuid.uuid4().hex[:22]
        tmp = p.with_suffix(".tmp")
        tmp.write_text(cid)
        os.replace(tmp, p)
        return cid
