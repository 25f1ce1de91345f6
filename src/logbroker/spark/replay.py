"""Replay a Parquet archive (the ``archive`` pipeline's output) back into a topic.

Spark's Kafka sink cannot set record timestamps (its writer has no timestamp column: every record
gets the producer's clock), and a replay that changes timestamps breaks anything downstream that
windows by event time or seeks by ``startingTimestamp``. So the records are produced here with
confluent-kafka from inside the Spark tasks (``mapInArrow``), one idempotent ``acks=all`` producer
per task, with the archived key, value, headers (order, duplicates and null values kept) and
timestamp (sent as CreateTime).

Order: rows are shuffled so that each source (topic, partition) lies in one task, sorted by offset,
and produced in that order by a single idempotent producer; so records of one source partition keep
their relative order in the target (in one partition with ``keep_partition=True``, per key
otherwise). Records of different source topics or partitions interleave arbitrarily.

Delivery: any delivery error fails the task and so the job (``ReplayError`` on the driver). The
idempotent producer removes duplicates caused by its own retries, but a task that Spark retries
after a failure produces its records again: replay is at-least-once across task retries, unless it
runs with a ``transactional_id``, which makes it exactly-once for read_committed readers across task
retries and re-runs (see `logbroker.spark.produce`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from logbroker.spark.pipeline import local_path
from logbroker.spark.produce import ProduceError, produce_frame
from logbroker.spark.spec import Security, security_settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from logbroker._kafka.settings import KafkaSettings

__all__ = ["ARCHIVE_COLUMNS", "ReplayError", "replay"]

# Columns replay needs from the archive layout (topic, date and timestampType are also there).
ARCHIVE_COLUMNS = ("topic", "partition", "offset", "key", "value", "headers", "timestamp")


class ReplayError(RuntimeError):
    """The archive cannot be replayed into the topic; the message says why (path, topic, partitions)."""


def _read(archive_path: str, spark: SparkSession) -> DataFrame:
    """The archive through Spark, so a file-sink output is read through its ``_spark_metadata`` log
    (files of an uncommitted batch are not part of the archive)."""
    from pyspark.errors import AnalysisException

    from logbroker.spark.builtins import is_delta, read_archive

    local = local_path(archive_path)
    if local is not None and not local.exists():
        raise ReplayError(f"archive {archive_path} does not exist")
    if is_delta(archive_path, spark):
        columns = spark.read.format("delta").load(archive_path).columns
        if missing := [c for c in ARCHIVE_COLUMNS if c not in columns]:
            raise ReplayError(f"{archive_path} is not an archive: column(s) {', '.join(missing)} missing "
                              f"(has {', '.join(columns)})")  # fmt: skip
        return read_archive(archive_path, spark)
    try:
        # Inferred from the files' footers: the archive reader below imposes the archive schema,
        # which would turn any Parquet dataset into rows of nulls instead of an error.
        found = spark.read.parquet(archive_path)
    except AnalysisException as exc:
        text = str(exc)
        if "UNABLE_TO_INFER_SCHEMA" in text or "Unable to infer schema" in text:
            raise ReplayError(f"archive {archive_path} holds no records (no Parquet files)") from exc
        if "PATH_NOT_FOUND" in text or "Path does not exist" in text:
            raise ReplayError(f"archive {archive_path} does not exist") from exc
        raise ReplayError(f"cannot read archive {archive_path}: {text.splitlines()[0]}") from exc
    missing = [c for c in ARCHIVE_COLUMNS if c not in found.columns]
    if missing:
        raise ReplayError(
            f"{archive_path} is not an archive: column(s) {', '.join(missing)} missing (has {', '.join(found.columns)})"
        )
    return read_archive(archive_path, spark)


def _target_partitions(settings: KafkaSettings, topic: str, create: bool, timeout: float = 30.0) -> int:
    """Partition count of the target topic, once every partition is led; asks the broker to auto-create it
    when ``create`` (what producing would do anyway, where the broker allows it), but before any Spark task
    starts, so a missing topic is one clear error rather than a timeout inside a task."""
    from logbroker import _kafka

    bootstrap = settings.bootstrap_servers
    try:
        parts = _kafka.ensure_topic(settings, topic, create="broker" if create else False, timeout=timeout)
    except _kafka.BrokerUnreachable as exc:
        raise ReplayError(f"cannot reach {bootstrap}: {exc.cause.message if exc.cause else exc}") from None
    except _kafka.TopicMissing:
        if not create:
            raise ReplayError(f"topic {topic} does not exist on {bootstrap}") from None
        raise ReplayError(
            f"topic {topic} does not exist on {bootstrap} and the broker did not create it "
            "(auto.create.topics.enable is off?): create the topic first"
        ) from None
    except _kafka.KafkaLayerError as exc:
        raise ReplayError(f"topic {topic} on {bootstrap}: {exc}") from None
    return len(parts)


def replay(
    archive_path: str | os.PathLike[str],
    bootstrap: str,
    topic: str,
    *,
    spark: SparkSession | None = None,
    where: str | None = None,
    keep_partition: bool = False,
    producer_config: dict[str, Any] | None = None,
    security: Security = None,
    transactional_id: str | None = None,
) -> int:
    """Produce every archived record (optionally those matching the SQL filter ``where``, e.g.
    ``"topic = 'a' AND timestamp >= '2026-01-01'"``) to ``topic``; returns the acknowledged count.

    ``keep_partition=True`` sends source partition p to partition p of ``topic`` (which must then
    exist with enough partitions); otherwise the key's murmur2 hash decides (random for null keys)
    and a missing topic is auto-created if the broker allows it. ``producer_config`` overrides the
    confluent-kafka settings (``enable.idempotence`` and ``acks=all`` are the point; change them
    knowingly). ``security``: Kafka client properties (or their file), as a pipeline spec's `security`.

    ``transactional_id`` makes the replay exactly-once for readers at read_committed: each source
    partition goes through transactions that also record how far it got (see
    `logbroker.spark.produce`), so a task Spark retries, or the same replay run again under the same
    id after a crash, produces nothing twice; the count is then of records produced by this call.
    """
    own = False
    if spark is None:
        from logbroker.spark.session import owned_session

        spark, own = owned_session(app_name="logbroker-replay")
    try:
        from logbroker.spark.pipeline import PipelineError, check_shared

        try:
            check_shared("archive", os.fspath(archive_path), spark.sparkContext.master)
        except PipelineError as exc:
            raise ReplayError(str(exc)) from None
        try:
            settings = security_settings(security, bootstrap)
        except ValueError as exc:
            raise ReplayError(f"security: {exc}") from None
        if settings is None:
            from logbroker._kafka.settings import KafkaSettings as Plain

            settings = Plain(bootstrap)
        return _replay(spark, os.fspath(archive_path), settings, topic, where, keep_partition, producer_config,
                       transactional_id)  # fmt: skip
    finally:
        if own:
            spark.stop()


def _replay(spark: SparkSession, path: str, settings: KafkaSettings, topic: str, where: str | None,
            keep_partition: bool, producer_config: dict[str, Any] | None,
            transactional_id: str | None = None) -> int:  # fmt: skip
    df = _read(path, spark)
    if where:
        from pyspark.errors import AnalysisException, ParseException

        try:
            df = df.where(where)
        except (AnalysisException, ParseException) as exc:
            raise ReplayError(f"where {where!r} is not a valid filter on the archive: {str(exc).splitlines()[0]}") \
                from exc  # fmt: skip

    # One small scan of two columns: which source partitions there are (each becomes one ordered
    # stream in one task) and the highest partition number, before touching the broker.
    sources = df.groupBy("topic", "partition").count().collect()
    if not sources:
        if where:
            return 0
        raise ReplayError(f"archive {path} holds no records")
    highest = max(int(r["partition"]) for r in sources)
    try:
        partitions = _target_partitions(settings, topic, create=not keep_partition)
    except ReplayError as exc:
        if keep_partition and "does not exist" in str(exc):
            raise ReplayError(f"{exc}; keep_partition=True needs it with at least {highest + 1} partition(s)") from None
        raise
    if keep_partition and highest >= partitions:
        raise ReplayError(
            f"topic {topic} has {partitions} partition(s) but the archive has records of partition {highest}; "
            f"keep_partition=True needs at least {highest + 1} (add partitions or use keep_partition=False)"
        )

    tasks = max(1, min(len(sources), spark.sparkContext.defaultParallelism * 2))
    target = "partition" if keep_partition else "NULL"
    columns = ["CAST(NULL AS STRING) AS _target", f"CAST({target} AS INT) AS _partition",
               "concat(topic, '/', partition, '@', offset) AS _source", "key", "value", "headers",
               "unix_millis(timestamp) AS _ts", "topic AS _t", "partition AS _p", "offset AS _o"]  # fmt: skip
    ordered = df.selectExpr(*columns).repartition(tasks, "_t", "_p").sortWithinPartitions("_t", "_p", "_o")
    try:
        return produce_frame(ordered, settings, topic, producer_config, transactional_id)
    except ProduceError as exc:
        raise ReplayError(f"replay {exc}") from exc
