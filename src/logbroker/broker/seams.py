"""The broker's seams, written down: what handlers and coordinators may use of the rest of the broker.

Each seam is a Protocol; `BrokerContext` (the composition root) provides an object for each, and tests can
provide their own. Handlers import the broker's parts through this module and `context`, never storage:
what crosses from storage (partition logs, their errors) is named here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

# What crosses from storage to the handlers: partition logs and the errors and rules they answer with.
from logbroker.storage import LogConfig, PartitionLog
from logbroker.storage.configs import TOPIC_CONFIGS, ConfigError, ConfigType
from logbroker.storage.log import OffsetOutOfRange
from logbroker.storage.manager import (
    KAFKA_INTERNAL_TOPICS,
    MAX_TOPIC_NAME,
    TopicError,
    TopicMeta,
    parse_topic_configs,
    validate_topic_name,
)
from logbroker.storage.producers import SequenceError
from logbroker.storage.segment import FileRange

__all__ = [
    "KAFKA_INTERNAL_TOPICS",
    "MAX_TOPIC_NAME",
    "TOPIC_CONFIGS",
    "ConfigError",
    "ConfigType",
    "Durability",
    "FileRange",
    "GroupDirectory",
    "LogConfig",
    "OffsetOutOfRange",
    "OpenTransactions",
    "PartitionLog",
    "ProducerIds",
    "SequenceError",
    "TopicDirectory",
    "TopicError",
    "TopicMeta",
    "TxnOffsets",
    "parse_topic_configs",
    "validate_topic_name",
]


class Durability(Protocol):
    """The fsync policy: every log tells it of its writes as they are made (PartitionLog.on_append)."""

    async def commit(self) -> None:
        """Return once every write made so far is durable under the policy."""

    def defer(self, delay: float) -> None:
        """Have every write made so far synced within ``delay`` seconds (by a round that would run anyway,
        or by one run for it then), without waiting for it."""


class TopicDirectory(Protocol):
    """Topics and their partition logs, as coordinators look them up (`topics.Topics` provides it)."""

    def table(self) -> Mapping[str, tuple[str, int]]:
        """Name -> (topic id, partitions) of every user topic; the same object until a topic changes."""

    def by_id(self, topic_id: str | None) -> TopicMeta | None:
        """The topic of an id; None for an unknown, null or zero one."""

    def log(self, topic: str, partition: int) -> PartitionLog | None:
        """A partition's log; None when there is no such partition."""


class OpenTransactions(TopicDirectory, Protocol):
    def with_open_transactions(self) -> list[tuple[str, int, PartitionLog]]:
        """(topic, partition, log) of every partition a transaction is open in."""


class ProducerIds(Protocol):
    def next_id(self) -> int:
        """A producer id never handed out before (durably reserved)."""


class TxnOffsets(Protocol):
    """The group coordinator's side of a transaction: offsets committed in it become visible or vanish."""

    async def complete_txn(self, producer_id: int, groups: Iterable[str], commit: bool) -> None: ...


class GroupDirectory(Protocol):
    """Consumer and classic groups, by id (the share coordinator refuses ids they use)."""

    def group(self, group_id: str) -> object | None: ...
