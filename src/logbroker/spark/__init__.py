"""PySpark pipelines over Kafka-compatible brokers (logbroker or Apache Kafka).

Spark's own Kafka connector (``format("kafka")``) does the reading and writing; this package wires a
SparkSession to it and runs declarative pipelines (a pydantic spec: source, decode, SQL, sinks,
trigger, checkpoint), so a pipeline tested on the embedded broker runs unchanged on a Kafka cluster.
pyspark is imported only when a session or pipeline is used.
"""

from logbroker.spark.builtins import archive, read_archive, rollup
from logbroker.spark.pipeline import PipelineError, RunResult, run
from logbroker.spark.replay import ReplayError, replay
from logbroker.spark.session import (
    CONNECTOR_ARTIFACT,
    SparkSetupError,
    connector_jars,
    connector_package,
    session,
)
from logbroker.spark.spec import PipelineSpec, SpecError, load_spec

__all__ = [
    "CONNECTOR_ARTIFACT",
    "PipelineError",
    "PipelineSpec",
    "ReplayError",
    "RunResult",
    "SparkSetupError",
    "SpecError",
    "archive",
    "connector_jars",
    "connector_package",
    "load_spec",
    "read_archive",
    "replay",
    "rollup",
    "run",
    "session",
]
