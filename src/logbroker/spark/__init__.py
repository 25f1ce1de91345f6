"""PySpark pipelines over Kafka-compatible brokers (logbroker or Apache Kafka).

Spark's own Kafka connector (``format("kafka")``) does the reading and writing; this package
only wires a SparkSession to it, so a pipeline tested on the embedded broker runs unchanged on a
Kafka cluster.
"""

from logbroker.spark.session import (
    CONNECTOR_ARTIFACT,
    SparkSetupError,
    connector_jars,
    connector_package,
    session,
)

__all__ = ["CONNECTOR_ARTIFACT", "SparkSetupError", "connector_jars", "connector_package", "session"]
