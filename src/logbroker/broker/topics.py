"""Topics and their partition logs, as handlers and coordinators see them: lookups by name and id, Kafka's
auto-creation rules, creation, growth, deletion and config changes, over the storage's LogManager."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

from logbroker.config import BrokerSettings
from logbroker.protocol import ErrorCode, Request
from logbroker.storage import LogManager, PartitionLog
from logbroker.storage.manager import KAFKA_INTERNAL_TOPICS, TopicError, TopicMeta, validate_topic_name

from .groups.model import for_log
from .loggers import config_changes, config_values

log = logging.getLogger("logbroker.broker")

# The coordinators' topics this broker makes on demand, and the setting that gives each its partitions.
INTERNAL_TOPIC_PARTITIONS = {
    "__consumer_offsets": "offsets_topic_num_partitions",
    "__transaction_state": "transaction_state_log_num_partitions",
}


class Topics:
    def __init__(self, storage: LogManager, settings: BrokerSettings) -> None:
        self._storage = storage
        self.settings = settings
        self.on_delete: list[Callable[[TopicMeta], None]] = []  # told of each deleted topic
        self.on_config_change: Callable[[], None] = lambda: None  # a topic's configs changed
        self._table: Mapping[str, tuple[str, int]] = MappingProxyType({})
        self._table_at = -1

    @property
    def storage(self) -> LogManager:
        """The logs themselves, for the broker's own services (cleaner, scrubber, retention)."""
        return self._storage

    @property
    def changes(self) -> int:
        """Topics created, grown or deleted since the broker started (DescribeQuorum's metadata offset)."""
        return self._storage.changes

    def with_open_transactions(self) -> list[tuple[str, int, PartitionLog]]:
        """(topic, partition, log) of every partition with a transaction open in it."""
        return [(t, i, plog) for (t, i), plog in self._storage.logs.items() if plog.producers.ongoing]

    def get(self, name: str) -> TopicMeta | None:
        return self._storage.topics.get(name)

    def all(self, include_internal: bool = True) -> Iterable[TopicMeta]:
        return [m for m in self._storage.topics.values() if include_internal or not m.internal]

    def by_id(self, topic_id: uuid.UUID | str | None) -> TopicMeta | None:
        """The topic of an id; None for an unknown one, and for a null or zero id (which names no topic)."""
        return None if topic_id is None else self._storage.topic_by_id(str(topic_id))

    def unavailable(self, topic: str) -> str | None:
        """Why a topic whose data is on disk cannot be served (damaged metadata), or None."""
        return self._storage.unavailable.get(topic)

    def log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._storage.get(topic, partition)

    def ensure(self, topic: str, allow_auto_create: bool = True, by: Request | None = None) -> ErrorCode:
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
            return self.ensure_internal(topic)
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

    def ensure_internal(self, topic: str) -> ErrorCode:
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
            storage.create_topic(topic, partitions, self.internal_configs(topic), internal=True)
        except TopicError as exc:
            log.warning("internal topic %s could not be created: %s", topic, exc)
            return exc.error
        log.info("internal topic %s created: %d partitions", topic, partitions)
        return ErrorCode.NONE

    def internal_configs(self, topic: str) -> dict[str, str | None]:
        """The overrides Kafka gives a coordinator's topic when it makes it (GroupCoordinator's and
        TransactionStateManager's topic configs), so DescribeConfigs reports them as Kafka does."""
        s = self.settings
        if topic == "__consumer_offsets":
            return {"cleanup.policy": "compact", "compression.type": "producer",
                    "segment.bytes": str(s.offsets_topic_segment_bytes)}  # fmt: skip
        if topic == "__transaction_state":
            return {"unclean.leader.election.enable": "false", "compression.type": "uncompressed",
                    "cleanup.policy": "compact", "min.insync.replicas": str(s.transaction_state_log_min_isr),
                    "segment.bytes": str(s.transaction_state_log_segment_bytes)}  # fmt: skip
        return {}

    def complete_internal_configs(self) -> None:
        """A coordinator's topic made before logbroker set Kafka's overrides on it (it has none of them) gets
        them now; one with any of them is left as an operator may have changed it."""
        for topic in INTERNAL_TOPIC_PARTITIONS:
            meta = self.get(topic)
            wanted = self.internal_configs(topic)
            if meta is None or any(k in meta.configs for k in wanted):
                continue
            try:
                self._storage.alter_topic_configs(topic, {**meta.configs, **wanted}, False)
            except (TopicError, OSError) as exc:
                log.warning("internal topic %s: configs not completed: %s", topic, exc)

    def create(self, name: str, partitions: int, configs: dict[str, str | None] | None = None) -> TopicMeta:
        meta = self._storage.create_topic(name, partitions, configs, internal=name in KAFKA_INTERNAL_TOPICS)
        log.info("topic %s created: %d partitions, configs: %s", for_log(name), partitions, config_values(meta.configs))
        return meta

    def create_partitions(self, name: str, count: int) -> None:
        self._storage.create_partitions(name, count)

    def delete(self, name: str) -> TopicMeta:
        """Delete a topic; `on_delete` wakes its long polls and drops it from groups' offsets and assignments."""
        meta = self._storage.delete_topic(name)
        for forget in self.on_delete:
            forget(meta)
        log.info("topic %s deleted (%d partitions, id %s)", for_log(meta.name), meta.partitions, meta.topic_id)
        return meta

    def table(self) -> Mapping[str, tuple[str, int]]:
        """Name -> (topic id, partitions) of user topics, read by every KIP-848 heartbeat: rebuilt only
        after a topic is created, grown or deleted."""
        logs = self._storage
        if self._table_at != logs.changes:
            self._table = MappingProxyType(
                {n: (m.topic_id, m.partitions) for n, m in logs.topics.items() if not m.internal}
            )
            self._table_at = logs.changes
        return self._table

    def alter_configs(self, name: str, overrides: Mapping[str, str], validate_only: bool) -> None:
        meta = self.get(name)
        before = dict(meta.configs) if meta is not None else {}
        self._storage.alter_topic_configs(name, overrides, validate_only)
        if not validate_only:
            if changed := config_changes(before, overrides):
                log.info("topic %s: configs changed: %s", for_log(name), changed)
            self.on_config_change()


def _requester(req: Request) -> str:
    """Who sent a request, for a log line: principal, client id and address."""
    client = for_log(req.header.client_id or "") or "-"
    return f"{for_log(req.principal)} (client {client}, {req.client_address or '?'})"
