"""What a handler may use of the broker: topics and partition logs, durability, coordinators, settings.

Handlers receive a `BrokerContext` and nothing else: never the server, its connections or its tasks.
The context owns the broker's state on one data directory (storage, flusher, group coordinator,
producer ids) and its life cycle; `server.py` owns sockets only.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

from logbroker.config import BrokerSettings
from logbroker.protocol import ApiSpec
from logbroker.protocol.buffers import POOLED_MIN, BufferPool, anonymous
from logbroker.storage import LogConfig, LogManager, PartitionLog
from logbroker.storage.internal import InternalLog
from logbroker.storage.manager import TopicMeta

from .access import AccessControl
from .append_turns import AppendTurns
from .auth.acls import (
    AclStore,
    Authorizer,
    parse_super_users,
)
from .auth.users import UserStore
from .configs import BrokerConfigs
from .features import Features
from .fetch_sessions import FetchSessionCache
from .flusher import Flusher
from .group_configs import GroupConfigs
from .groups.coordinator import Coordinator, CoordinatorConfig
from .groups.model import StreamsSettings
from .groups.store import GroupStore
from .log_cleaner import LogCleaner
from .loggers import config_changes
from .long_polls import LongPolls
from .metrics import BrokerMetrics
from .producer_ids import ProducerIdAllocator
from .scrubber import Scrubber
from .share import ShareConfig, ShareCoordinator, ShareStore
from .share.coordinator import GroupSettings
from .topics import Topics
from .txn import TxnCoordinator, TxnSettings, TxnStore

log = logging.getLogger("logbroker.broker")

PartitionKey = tuple[str, int]
_Store = TypeVar("_Store", bound=InternalLog)

# Warm memory kept for large request frames (`BrokerContext.request_buffers`).
REQUEST_POOL_BYTES = 128 << 20


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
        self._topics: Topics | None = None
        self._configs: BrokerConfigs | None = None
        self.cleaner: LogCleaner | None = None
        self.scrubber: Scrubber | None = None
        self._groups: Coordinator | None = None
        self._producer_ids: ProducerIdAllocator | None = None
        self._txns: TxnCoordinator | None = None
        self._share: ShareCoordinator | None = None
        self._access: AccessControl | None = None
        self._producer_expiry: asyncio.Task[None] | None = None
        # Each partition's appends take turns in arrival order: a produce yields between large batches, and
        # pipelined produces must still append in the order they came, partition by partition.
        self.append_turns = AppendTurns()
        self.read_buffers = BufferPool()  # fetch reads land here, reused across requests
        self.polls = LongPolls(FetchSessionCache(settings.max_incremental_fetch_session_cache_slots))
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
            self._kick_cleaner()

    @property
    def clean_start(self) -> bool:
        return self._storage.clean_start

    def open(self) -> None:
        """Open the data directory (recovering it if needed) and start the background services."""
        s = self.settings
        data = Path(s.data_dir)
        self._configs = BrokerConfigs(s, data)
        self.group_configs = GroupConfigs(self.settings, data)
        self.features = Features(self.settings, data, self.node_id)
        self._logs = LogManager(
            data, self.log_defaults, self.max_open_files(), s.log_preallocate_bytes, on_append=self._on_append
        )
        topics = self._topics = Topics(self._logs, s)
        topics.complete_internal_configs()
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
                offsets_commit_sync=s.offsets_commit_sync,
                offsets_commit_sync_delay_ms=s.offsets_commit_sync_delay_ms,
                max_group_size=s.group_max_size,
                consumer_max_group_size=s.group_consumer_max_size,
                consumer_session_timeout_ms=s.group_consumer_session_timeout_ms,
                consumer_heartbeat_interval_ms=s.group_consumer_heartbeat_interval_ms,
                consumer_migration_policy=s.group_consumer_migration_policy,
                streams=StreamsSettings(
                    session_timeout_ms=s.group_streams_session_timeout_ms,
                    heartbeat_interval_ms=s.group_streams_heartbeat_interval_ms,
                    max_size=s.group_streams_max_size,
                    num_standby_replicas=s.group_streams_num_standby_replicas,
                    initial_rebalance_delay_ms=s.group_streams_initial_rebalance_delay_ms,
                    assignment_interval_ms=s.group_streams_assignment_interval_ms,
                ),
            ),
            self.flusher,
            topics,
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
            logs=topics,
            durability=self.flusher,
            producer_ids=self._producer_ids,
            offsets=self._groups,
            transaction_version=lambda: self.features.level("transaction.version"),
        )
        self._share = ShareCoordinator(
            self._listened(ShareStore(data, self._logs.clean_start)),
            ShareConfig(max_size=s.group_share_max_size),
            durability=self.flusher,
            topics=topics,
            other_groups=self._groups,
            settings_for=self._share_settings,
        )
        self._share.start()
        self._groups.is_share_group = self._share.is_group
        groups, share = self._groups, self._share
        topics.on_delete += [
            self._wake_partitions,
            lambda meta: groups.forget_topic(meta.name),
            lambda meta: share.forget_topic(meta.topic_id),
        ]
        topics.on_config_change = self._kick_cleaner
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
        self.polls.stop()

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
        return self.polls.stopping

    # ------------------------------------------------------------------ topics

    @property
    def _storage(self) -> LogManager:
        if self._logs is None:
            raise RuntimeError("the broker context is not open")
        return self._logs

    @property
    def topics(self) -> Topics:
        """Topics and their partition logs (`Topics`)."""
        if self._topics is None:
            raise RuntimeError("the broker context is not open")
        return self._topics

    def _wake_partitions(self, meta: TopicMeta) -> None:
        for i in range(meta.partitions):
            self.polls.wake((meta.name, i))

    def _kick_cleaner(self) -> None:
        if self.cleaner is not None:
            self.cleaner.kick()

    def connection_closed(self, connection_id: int) -> None:
        """A client connection went away: the share sessions it carried end, releasing their records."""
        if self._share is not None and not self.polls.stopping:
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

    # ------------------------------------------------------------------ the data path

    def _on_append(self, plog: PartitionLog, nbytes: int) -> None:
        """Every log tells of each write here: it joins the next fsync round, and a topic partition's long
        polls wake."""
        self.flusher.written(plog, nbytes)
        if plog.key is not None:
            self.polls.wake(plog.key)

    async def sync(self) -> None:
        """Return once every write so far is durable under the fsync policy."""
        await self.flusher.commit()


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
