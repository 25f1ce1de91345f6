"""A thin, blocking, protocol-level Kafka client for tests of the broker itself (raw requests and the codes
that admin clients hide). The `logbroker` admin commands use confluent-kafka's AdminClient instead."""

from .connection import BrokerError, Connection, KafkaClient

__all__ = ["BrokerError", "Connection", "KafkaClient"]
