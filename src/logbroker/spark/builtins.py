"""Built-in pipelines: `archive` (topics -> Parquet) and `rollup` (notifications -> per-minute counts),
plus `read_archive`.

Both are ordinary `PipelineSpec`s handed to `run`, so what the CLI's ``pipeline run`` does and what
these do is the same code path. Layouts are fixed (the replay and demo code read them):

* archive: ``key, value, headers, partition, offset, timestamp, timestampType, topic, date``,
  partitioned by ``topic``/``date`` (``date`` is the UTC day of the record timestamp), written by
  Spark's file sink so that each record is listed exactly once in ``_spark_metadata``;
  (or, with ``table_format="delta"``, appended to a Delta table of the same layout);
* rollup: ``window_start, window_end, event_type, priority, count, bytes``, a Delta table merged by
  ``(window_start, event_type, priority)``; undecodable records count under event type
  ``_corrupt`` (priority null) at their Kafka timestamp, so bad traffic stays visible.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from logbroker.spark.decode import ARCHIVE_SCHEMA
from logbroker.spark.pipeline import RunResult, local_path, run
from logbroker.spark.spec import PipelineSpec, Security, load_spec, parse_interval

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["archive", "archive_spec", "is_delta", "read_archive", "rollup", "rollup_spec"]

PathLike = str | os.PathLike[str]
# UTC day from epoch millis: independent of spark.sql.session.timeZone, unlike to_date(timestamp).
ARCHIVE_SQL = (
    "SELECT key, value, headers, partition, offset, timestamp, timestampType, topic, "
    "date_from_unix_date(CAST(floor(unix_millis(timestamp) / 86400000) AS INT)) AS date FROM events"
)
ROLLUP_KEYS = ["window_start", "event_type", "priority"]
# ARCHIVE_SCHEMA's columns, in its order (a Delta archive is read by name).
_ARCHIVE_ORDER = ("key", "value", "headers", "partition", "offset", "timestamp", "timestampType", "topic", "date")


def _source(bootstrap: str, topics: Sequence[str] | str | None, pattern: str | None, **extra: Any) -> dict[str, Any]:
    src: dict[str, Any] = {"bootstrap": bootstrap, **{k: v for k, v in extra.items() if v is not None}}
    if topics is not None:
        src["topics"] = [topics] if isinstance(topics, str) else list(topics)
    if pattern is not None:
        src["pattern"] = pattern
    return src


def _trigger(trigger: str | None) -> dict[str, Any]:
    """None or "available_now" drains and stops; anything else is a processingTime interval."""
    if trigger in (None, "available_now", "availableNow"):
        return {"available_now": True}
    return {"processing_time": trigger}


def archive_spec(
    bootstrap: str,
    out: PathLike,
    *,
    topics: Sequence[str] | str | None = None,
    pattern: str | None = None,
    checkpoint: PathLike | None = None,
    starting_offsets: str | dict[str, dict[str, int]] = "earliest",
    max_offsets_per_trigger: int | None = None,
    trigger: str | None = None,
    fail_on_data_loss: bool = True,
    isolation_level: str | None = None,
    options: dict[str, str] | None = None,
    security: Security = None,
    master: str = "local[*]",
    table_format: Literal["parquet", "delta"] = "parquet",
) -> PipelineSpec:
    """The archive pipeline as a spec (what `archive` runs; also a template for YAML specs)."""
    out = os.fspath(out)
    return load_spec({
        "name": "archive",
        "source": _source(bootstrap, topics, pattern, starting_offsets=starting_offsets,
                          max_offsets_per_trigger=max_offsets_per_trigger, fail_on_data_loss=fail_on_data_loss,
                          isolation_level=isolation_level, options=options, security=security),
        "decode": {"format": "raw"},
        "transform": ARCHIVE_SQL,
        "sinks": [{"type": table_format, "path": out, "partition_by": ["topic", "date"]}],
        "trigger": _trigger(trigger),
        "checkpoint": os.fspath(checkpoint) if checkpoint is not None else out.rstrip("/") + "/_checkpoint",
        "master": master,
    })  # fmt: skip


def archive(
    bootstrap: str,
    out: PathLike,
    *,
    topics: Sequence[str] | str | None = None,
    pattern: str | None = None,
    checkpoint: PathLike | None = None,
    starting_offsets: str | dict[str, dict[str, int]] = "earliest",
    max_offsets_per_trigger: int | None = None,
    trigger: str | None = None,
    spark: SparkSession | None = None,
    progress: bool | Callable[[dict[str, Any]], None] = True,
    timeout: float | None = None,
    fail_on_data_loss: bool = True,
    isolation_level: str | None = None,
    options: dict[str, str] | None = None,
    security: Security = None,
    master: str = "local[*]",
    table_format: Literal["parquet", "delta"] = "parquet",
) -> RunResult:
    """Archive topics (or a pattern) into Parquet (or a Delta table) at `out`, exactly once across restarts.

    The checkpoint (default ``<out>/_checkpoint``) keeps the offsets: a second run appends only
    what arrived since, and a run killed mid-batch leaves files that no reader of the dataset sees.
    `isolation_level` (None: the spec's default, read_committed) is the source's; see `KafkaSource`.
    """
    spec = archive_spec(bootstrap, out, topics=topics, pattern=pattern, checkpoint=checkpoint,
                        starting_offsets=starting_offsets, max_offsets_per_trigger=max_offsets_per_trigger,
                        trigger=trigger, fail_on_data_loss=fail_on_data_loss, isolation_level=isolation_level,
                        options=options, security=security, master=master, table_format=table_format)  # fmt: skip
    return run(spec, spark=spark, progress=progress, timeout=timeout)


def rollup_sql(window: str = "1 minute") -> str:
    parse_interval(window)
    return (
        "SELECT window.start AS window_start, window.end AS window_end, event_type, priority, "
        "count(*) AS count, sum(CAST(value_size AS BIGINT)) AS bytes FROM ("
        "SELECT timestamp, value_size, CASE WHEN _corrupt IS NULL THEN event_type ELSE '_corrupt' END AS event_type, "
        f"priority FROM events) GROUP BY window(timestamp, '{window}'), event_type, priority"
    )


def rollup_spec(
    bootstrap: str,
    out: PathLike,
    *,
    topics: Sequence[str] | str | None = None,
    pattern: str | None = None,
    checkpoint: PathLike | None = None,
    window: str = "1 minute",
    watermark: str = "5 minutes",
    starting_offsets: str | dict[str, dict[str, int]] = "earliest",
    max_offsets_per_trigger: int | None = None,
    trigger: str | None = None,
    fail_on_data_loss: bool = True,
    isolation_level: str | None = None,
    options: dict[str, str] | None = None,
    security: Security = None,
    master: str = "local[*]",
) -> PipelineSpec:
    """The rollup pipeline as a spec (notify decode, watermark on the notification timestamp)."""
    out = os.fspath(out)
    return load_spec({
        "name": "rollup",
        "source": _source(bootstrap, topics, pattern, starting_offsets=starting_offsets,
                          max_offsets_per_trigger=max_offsets_per_trigger, fail_on_data_loss=fail_on_data_loss,
                          isolation_level=isolation_level, options=options, security=security),
        "decode": {"format": "notify"},
        "watermark": {"column": "timestamp", "delay": watermark},
        "transform": rollup_sql(window),
        "sinks": [{"type": "delta", "path": out, "mode": "merge", "keys": ROLLUP_KEYS}],
        "trigger": _trigger(trigger),
        "checkpoint": os.fspath(checkpoint) if checkpoint is not None else out.rstrip("/") + "/_checkpoint",
        "master": master,
    })  # fmt: skip


def rollup(
    bootstrap: str,
    out: PathLike,
    *,
    topics: Sequence[str] | str | None = None,
    pattern: str | None = None,
    checkpoint: PathLike | None = None,
    window: str = "1 minute",
    watermark: str = "5 minutes",
    spark: SparkSession | None = None,
    progress: bool | Callable[[dict[str, Any]], None] = True,
    starting_offsets: str | dict[str, dict[str, int]] = "earliest",
    max_offsets_per_trigger: int | None = None,
    trigger: str | None = None,
    timeout: float | None = None,
    fail_on_data_loss: bool = True,
    isolation_level: str | None = None,
    options: dict[str, str] | None = None,
    security: Security = None,
    master: str = "local[*]",
) -> RunResult:
    """Count notifications and their bytes per (window, event_type, priority) into Parquet at `out`.

    Event time is the notification's own timestamp, so windows reflect when events happened, not
    when they reached the broker. Data later than `watermark` behind the newest event seen is
    dropped; later data within it updates its window's row (the Delta sink merges by key; each batch's
    MERGE is idempotent, so a restart never counts a batch twice).
    """
    spec = rollup_spec(bootstrap, out, topics=topics, pattern=pattern, checkpoint=checkpoint, window=window,
                       watermark=watermark, starting_offsets=starting_offsets,
                       max_offsets_per_trigger=max_offsets_per_trigger, trigger=trigger,
                       fail_on_data_loss=fail_on_data_loss, isolation_level=isolation_level, options=options,
                       security=security, master=master)  # fmt: skip
    return run(spec, spark=spark, progress=progress, timeout=timeout)


def is_delta(path: PathLike, spark: SparkSession) -> bool:
    """Whether `path` holds a Delta table (its ``_delta_log``), on any filesystem Spark reaches."""
    path = os.fspath(path)
    local = local_path(path)
    if local is not None:
        return (local / "_delta_log").is_dir()
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, path))


def read_archive(path: PathLike, spark: SparkSession, version: int | None = None) -> DataFrame:
    """The archive at `path` (Parquet or Delta) as a DataFrame with the fixed schema.

    Spark reads a file-sink directory through its ``_spark_metadata`` log and a Delta table through
    its transaction log, so files of a batch that never committed (a killed run) are not seen either
    way. `version` reads a Delta table as it was then (time travel). The explicit schema keeps `topic`
    a string even for numeric-looking topic names (partition inference would make it an int).
    """
    path = os.fspath(path)
    if "://" not in path and not Path(path).exists():
        return spark.createDataFrame([], ARCHIVE_SCHEMA)
    if is_delta(path, spark):
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return reader.load(path).select(*_ARCHIVE_ORDER)
    if version is not None:
        raise ValueError(f"{path} is a Parquet archive: only a Delta table has versions")
    return spark.read.schema(ARCHIVE_SCHEMA).parquet(path)
