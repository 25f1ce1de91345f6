"""A thin, blocking, protocol-level Kafka client for admin tools, the CLI and tests."""

from .connection import BrokerError, Connection, KafkaClient

__all__ = ["BrokerError", "Connection", "KafkaClient"]
