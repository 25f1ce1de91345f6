"""Durable partition logs: segments, sparse offset/time indexes, recovery, retention, producer state."""

from .log import LogConfig, PartitionLog
from .manager import LogManager, TopicMeta

__all__ = ["LogConfig", "LogManager", "PartitionLog", "TopicMeta"]
