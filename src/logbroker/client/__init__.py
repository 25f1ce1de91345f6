"""A thin, blocking, protocol-level Kafka client for admin tools, the CLI and tests."""

from .connection import BrokerError, Connection, KafkaClient
from .groups import GroupAdmin, GroupDescription, GroupListing, GroupMember, PartitionLag, ResetEntry, ResetStrategy

__all__ = [
    "BrokerError",
    "Connection",
    "GroupAdmin",
    "GroupDescription",
    "GroupListing",
    "GroupMember",
    "KafkaClient",
    "PartitionLag",
    "ResetEntry",
    "ResetStrategy",
]
