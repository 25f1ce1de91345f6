"""logbroker: a Kafka-wire-compatible log broker toolkit."""

__version__ = "0.1.0"
