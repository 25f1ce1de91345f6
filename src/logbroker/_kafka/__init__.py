"""The one Kafka layer under the user-facing faces (mq, notify, streams, spark replay).

- `KafkaSettings` + `librdkafka_config`: connection and security settings -> librdkafka properties;
- `ensure_topics` / `ensure_topic`: create if missing, then wait until every partition is led and serving;
- `classify` / `ErrorMap`: confluent-kafka errors -> a `Kind` -> each face's own exception types;
- `producer` / `consumer` / `share_consumer` / `admin` from one `KafkaSettings` (the only place a client
  is built), and `produce` / `produce_async`: the one send-with-back-pressure (a full local queue serves
  deliveries and retries);
- the embedded-broker registry lives with the broker, in `logbroker.embedded` (`acquire_embedded`).

Faces import from here, never from each other, and never copy these policies.
"""

from logbroker._kafka.clients import Refused, admin, consumer, produce, produce_async, producer, share_consumer
from logbroker._kafka.errors import (
    BrokerUnreachable,
    Classified,
    ErrorMap,
    KafkaLayerError,
    Kind,
    TopicMissing,
    TopicNotReady,
    TopicRefused,
    classify,
    kafka_error_of,
    new_client,
)
from logbroker._kafka.settings import (
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    KafkaSettings,
    SaslMechanism,
    SecurityProtocol,
    as_config,
    implied_protocol,
    librdkafka_config,
)
from logbroker._kafka.topics import CreateMode, TopicSpec, ensure_topic, ensure_topics

__all__ = [
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "BrokerUnreachable",
    "Classified",
    "CreateMode",
    "ErrorMap",
    "KafkaLayerError",
    "KafkaSettings",
    "Kind",
    "Refused",
    "SaslMechanism",
    "SecurityProtocol",
    "TopicMissing",
    "TopicNotReady",
    "TopicRefused",
    "TopicSpec",
    "admin",
    "as_config",
    "classify",
    "consumer",
    "ensure_topic",
    "ensure_topics",
    "implied_protocol",
    "kafka_error_of",
    "librdkafka_config",
    "new_client",
    "produce",
    "produce_async",
    "producer",
    "share_consumer",
]
