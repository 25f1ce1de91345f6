"""Run a `PipelineSpec`: source -> decode -> watermark -> SQL transform -> one query per sink.

Each sink is its own streaming query with its own checkpoint (``<checkpoint>/<sink-index>``), so the
sinks' progress is independent: a failing topic sink does not hold back the archive. Delivery per
sink: Parquet append uses Spark's file sink (exactly-once: a batch's files are listed in
``_spark_metadata`` only when the batch commits, and readers honour that log); Delta append and
merge are exactly-once through Delta's transaction log (see `DeltaSink`); topic and console sinks
are at-least-once.

A parquet source without a checkpoint is read once as a batch and written the same way; with one
it is a file stream (new files only, across runs).
"""

from __future__ import annotations

import functools
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from logbroker.spark import delta_rs
from logbroker.spark.decode import ARCHIVE_SCHEMA, decode
from logbroker.spark.produce import ProduceError, produce_frame
from logbroker.spark.spec import (
    ConsoleSink,
    DeltaSink,
    KafkaSource,
    ParquetSink,
    ParquetSource,
    PipelineSpec,
    TopicSink,
    connector_security,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from logbroker._kafka.settings import KafkaSettings

__all__ = ["PipelineError", "RunResult", "check_shared", "run"]

ProgressCallback = Callable[[dict[str, Any]], None]
StopCondition = Callable[[dict[str, Any]], bool]
_POLL = 0.5  # progress, `until` and failures are looked at this often
_TICK = 0.02  # ...and whether a query has ended this often: run() returns this soon after the last one ends


class PipelineError(RuntimeError):
    """A sink's query failed; the message names the sink and carries Spark's reason."""


@dataclass
class RunResult:
    """What a run did. `rows_in`/`batches` count the first sink's query (every sink reads the same
    input); `lag` is the records left behind at the end (None for non-Kafka sources)."""

    name: str
    rows_in: int
    batches: int
    seconds: float
    sinks: list[str]
    lag: int | None
    stopped: str = "finished"  # finished | timeout | until | interrupted
    rows_per_sink: list[int] = field(default_factory=list)


# ------------------------------------------------------------------------------------------ helpers


def local_path(path: str) -> Path | None:
    """A local filesystem path for `path` (plain or file:// URL); None for remote filesystems."""
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        return Path(parsed.path if parsed.scheme else path)
    return None


SHARED_HINT = (
    "give a URL every worker reaches (hdfs://, s3a://, abfss://, gs://, or file:///... on a filesystem "
    "mounted at the same place on every worker)"
)


def check_shared(field: str, path: str, master: str) -> None:
    """On a cluster a plain path names a directory on each machine's own disk: the driver's checkpoint and
    the executors' files would land in different places. Only an explicit URL says the path is shared."""
    from logbroker.spark.session import is_local

    if is_local(master):
        return
    scheme = urlparse(path).scheme
    if len(scheme) < 2:  # none, or a Windows drive letter
        raise PipelineError(f"{field}: {path} is a path on this machine, but the pipeline runs on {master}, "
                            f"where each worker sees its own disk: {SHARED_HINT}")  # fmt: skip


def _check_paths(spec: PipelineSpec, master: str) -> None:
    if spec.checkpoint:
        check_shared("checkpoint", spec.checkpoint, master)
    if isinstance(spec.source, ParquetSource):
        check_shared("source.path", spec.source.path, master)
    for i, sink in enumerate(spec.sinks):
        if isinstance(sink, ParquetSink | DeltaSink):
            check_shared(f"sinks.{i}.path", sink.path, master)


def lag_of(progress: dict[str, Any]) -> int | None:
    """Sum over Kafka partitions of latestOffset - endOffset, from one StreamingQueryProgress."""
    total: int | None = None
    for source in progress.get("sources") or ():
        latest, end = source.get("latestOffset"), source.get("endOffset")
        try:
            latest_d = json.loads(latest) if isinstance(latest, str) else latest
            end_d = json.loads(end) if isinstance(end, str) else end
        except (TypeError, ValueError):
            continue
        if not isinstance(latest_d, dict) or not isinstance(end_d, dict):
            continue
        for topic, parts in latest_d.items():
            if not isinstance(parts, dict):
                continue
            done = end_d.get(topic) or {}
            for p, off in parts.items():
                if isinstance(off, int) and isinstance(done.get(p, 0), int):
                    total = (total or 0) + max(0, off - int(done.get(p, 0)))
    return total


def _source_frame(spark: SparkSession, spec: PipelineSpec) -> DataFrame:
    src = spec.source
    if isinstance(src, KafkaSource):
        reader = spark.readStream.format("kafka")
        for k, v in src.connector_options().items():
            reader = reader.option(k, v)
        return reader.load()
    assert isinstance(src, ParquetSource)
    local = local_path(src.path)
    if local is not None and not local.exists():
        raise PipelineError(f"source.path: {src.path} does not exist")
    if not spec.streaming:
        return spark.read.parquet(src.path)
    # A file stream needs its schema up front: the dataset's own, or the archive layout while empty.
    schema: Any = ARCHIVE_SCHEMA
    try:
        schema = spark.read.parquet(src.path).schema
    except Exception:  # no data file yet: Spark cannot infer a schema
        pass
    return spark.readStream.schema(schema).parquet(src.path)


class _QueryId:
    """The streaming query's id, known only once it has started; a merge waits for it. The id lives in
    the checkpoint, so it is the same after a restart and new with a new checkpoint: the right key for
    Delta's idempotent writes (a new checkpoint starts batch numbers over)."""

    def __init__(self) -> None:
        self.value: str | None = None
        self.ready = threading.Event()

    def set(self, value: str) -> None:
        self.value = value
        self.ready.set()

    def get(self) -> str:
        if not self.ready.wait(120):
            raise PipelineError("the streaming query never reported its id")
        assert self.value is not None
        return self.value


def _order_columns(sink: DeltaSink, columns: list[str]) -> list[str]:
    if sink.order_by:
        return sink.order_by
    return [c for c in ("timestamp", "offset") if c in columns]


def merge_batch(sink: DeltaSink, query: _QueryId | None) -> Callable[[DataFrame, int], None]:
    """foreachBatch body of a Delta merge sink (see `DeltaSink`); with ``query`` None (a batch run)
    the write is not tagged, so running it again applies it again."""

    def merge(batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        order = _order_columns(sink, batch.columns)
        rows = batch
        if order:
            keys = [F.col(f"`{k}`") for k in sink.keys]
            newest = Window.partitionBy(*keys).orderBy(*[F.col(f"`{c}`").desc_nulls_last() for c in order])
            rows = batch.withColumn("_rn", F.row_number().over(newest)).where("_rn = 1").drop("_rn")
        # Kept: the statistics (or the count) and the MERGE both read it, and its plan (an aggregation's, say)
        # runs once.
        rows = rows.persist()
        try:
            spark = batch.sparkSession
            local = _local_table(spark, sink, rows)
            if local is not None and (sink.engine == "delta-rs" or rows.count() <= delta_rs.LOCAL_ROWS):
                table = rows.toArrow()
                if not order:
                    _refuse_duplicates(sink, batch_id, delta_rs.duplicate(table, sink.keys))
                if table.num_rows:  # an empty batch makes no commit
                    app = query.get() if query is not None else None
                    delta_rs.merge(local, table, sink.keys, order, sink.prune, app, batch_id, _compacts(sink, batch_id))
                return
            ranged = _ranged_keys(sink, rows)
            stats = _batch_stats(sink, rows, ranged, check_keys=not order)
            if stats["_dup"] is not None and stats["_dup"] > 1:
                _refuse_duplicates(sink, batch_id, stats["_dupkey"].asDict())
            _write_merge(spark, sink, rows, batch_id, query, order, ranged, stats)
        finally:
            rows.unpersist()

    return merge


def _compacts(sink: DeltaSink, batch_id: int) -> bool:
    """Whether this batch's merge is followed by a compaction (every `compact_every`-th batch)."""
    return bool(sink.compact_every and batch_id > 0 and batch_id % sink.compact_every == 0)


def _refuse_duplicates(sink: DeltaSink, batch_id: int, key: dict[str, Any] | None) -> None:
    """Checked, not assumed: a MERGE would insert both rows of a new key."""
    if key is not None:
        raise PipelineError(f"delta:{sink.path}: batch {batch_id} holds key {key} more than once; "
                            "give the sink order_by (which of a key's rows is the newest)")  # fmt: skip


def _ranged_keys(sink: DeltaSink, rows: DataFrame) -> list[str]:
    """The keys whose batch range can prune files. Floats are left out: NaN sorts above every number."""
    from pyspark.sql.types import DateType, DecimalType, IntegralType, StringType, TimestampNTZType, TimestampType

    if not sink.prune:
        return []
    fields = {f.name: f.dataType for f in rows.schema.fields}
    kinds = IntegralType | StringType | DateType | TimestampType | TimestampNTZType | DecimalType
    return [k for k in sink.keys if isinstance(fields.get(k), kinds)]


def _batch_stats(sink: DeltaSink, rows: DataFrame, ranged: list[str], check_keys: bool) -> Any:
    """One job for what the merge needs to know of a batch: its row count, the most rows any key has (with
    ``check_keys``) and each ranged key's min, max and non-null count."""
    from pyspark.sql import functions as F

    frame, aggs = rows, [F.count(F.lit(1)).alias("_n")]
    if check_keys:
        keys = [F.col(f"`{k}`") for k in sink.keys]
        frame = rows.groupBy(*keys).agg(F.count(F.lit(1)).alias("_rows"))
        aggs += [F.max("_rows").alias("_dup"), F.max_by(F.struct(*keys), F.col("_rows")).alias("_dupkey")]
    else:
        aggs += [F.lit(None).alias("_dup")]
    for i, k in enumerate(ranged):
        col = F.col(f"`{k}`")
        aggs += [F.min(col).alias(f"_lo{i}"), F.max(col).alias(f"_hi{i}"), F.count(col).alias(f"_c{i}")]
    return frame.agg(*aggs).collect()[0]


def _merge_condition(sink: DeltaSink, ranged: list[str], stats: Any) -> Column:
    """Null-safe equality on the keys and, with ``prune``, each ranged key's range in this batch as a
    target-only conjunct: Delta prunes files with target-only predicates (partition values, min/max
    statistics), never with the join itself."""
    from pyspark.sql import functions as F

    on = functools.reduce(lambda a, b: a & b, [F.col(f"t.`{k}`").eqNullSafe(F.col(f"s.`{k}`")) for k in sink.keys])
    for i, k in enumerate(ranged):
        target, present = F.col(f"t.`{k}`"), stats[f"_c{i}"]
        within = target.between(F.lit(stats[f"_lo{i}"]), F.lit(stats[f"_hi{i}"])) if present else None
        if present < stats["_n"]:  # the batch has null keys: they match the table's nulls
            within = target.isNull() if within is None else (within | target.isNull())
        on = on & within
    return on


def _write_merge(spark: SparkSession, sink: DeltaSink, rows: DataFrame, batch_id: int, query: _QueryId | None,
                 order: list[str], ranged: list[str], stats: Any) -> None:  # fmt: skip
    """One batch's rows (one per key) into the table by Spark: created by the first, merged into after. With an
    order, a row replaces the table's only if it is not older (a late record does not undo a newer one)."""
    from delta.tables import DeltaTable

    app = query.get() if query is not None else None
    if not DeltaTable.isDeltaTable(spark, sink.path):
        writer = rows.write.format("delta").mode("append")
        if app is not None:
            writer = writer.option("txnAppId", app).option("txnVersion", str(batch_id))
        if sink.partition_by:
            writer = writer.partitionBy(*sink.partition_by)
        if sink.deletion_vectors:  # a "delta." option on the write that creates a table is a table property
            writer = writer.option("delta.enableDeletionVectors", "true")
        writer.save(sink.path)
        return
    if not stats["_n"]:  # nothing to merge, and no commit to make
        return
    if app is not None:  # this query's own session (a clone per query): no other writer sees these
        spark.conf.set("spark.databricks.delta.write.txnAppId", app)
        spark.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))

    def struct(side: str) -> str:
        return "struct(" + ", ".join(f"{side}.`{c}`" for c in order) + ")"

    newer = f"{struct('s')} >= {struct('t')}" if order else None
    try:
        (DeltaTable.forPath(spark, sink.path).alias("t").merge(rows.alias("s"), _merge_condition(sink, ranged, stats))
         .whenMatchedUpdateAll(condition=newer).whenNotMatchedInsertAll().execute())  # fmt: skip
    finally:
        if app is not None:
            spark.conf.unset("spark.databricks.delta.write.txnAppId")
            spark.conf.unset("spark.databricks.delta.write.txnVersion")
    if _compacts(sink, batch_id):
        # Not tagged: compaction changes no data, so a replayed batch compacting again loses nothing.
        DeltaTable.forPath(spark, sink.path).optimize().executeCompaction()


def _local_table(spark: SparkSession, sink: DeltaSink, rows: DataFrame) -> Any:
    """The existing table as delta-rs opens it when batches may merge there (`logbroker.spark.delta_rs`), else
    None (Spark merges, or creates the table). ``engine: auto`` picks delta-rs for a local master and path, keys
    of atomic types (pyarrow groups them for the duplicate check) and a protocol it writes (and batches of at
    most delta_rs.LOCAL_ROWS rows); ``delta-rs`` insists on it."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if sink.engine == "spark":
        return None
    path = delta_rs.local_path(sink.path)
    types = {f.name: f.dataType for f in rows.schema.fields}
    nested = any(isinstance(types.get(k), ArrayType | MapType | StructType) for k in sink.keys)
    if sink.engine == "auto" and (path is None or nested or not delta_rs.available()
                                  or not spark.sparkContext.master.startswith("local")):  # fmt: skip
        return None
    if path is None or not delta_rs.available():
        raise PipelineError(f"delta:{sink.path}: engine delta-rs needs a local path and the deltalake package "
                            "(pip install 'logbroker[spark]')")  # fmt: skip
    try:
        return delta_rs.open_writable(path)
    except delta_rs.NotWritable as exc:
        if sink.engine == "auto":
            return None
        raise PipelineError(
            f"delta:{sink.path}: delta-rs does not write this table ({exc}); use engine spark"
        ) from None


def _check_delta(spark: SparkSession, spec: PipelineSpec, df: DataFrame) -> None:
    """Before any query starts: Delta must be loadable, and an existing table must take the rows' columns
    (Delta would refuse at the first batch, minutes later, in a forty-line trace)."""
    sinks = [(i, s) for i, s in enumerate(spec.sinks) if isinstance(s, DeltaSink)]
    if not sinks:
        return
    from logbroker.spark.session import delta_loaded

    i0, first = sinks[0]
    if not delta_loaded(spark):
        raise PipelineError(f"sinks.{i0} (delta:{first.path}): Delta Lake is not on this session's classpath; "
                            "build it with logbroker.spark.session() or add io.delta:delta-spark_2.13")  # fmt: skip
    try:
        from delta.tables import DeltaTable
    except ImportError as exc:
        raise PipelineError(f"sinks.{i0} (delta:{first.path}): the delta-spark package is missing "
                            "(pip install 'logbroker[spark]')") from exc  # fmt: skip
    # Types without nullability: Delta keeps every column nullable, while rows may say "never null".
    mine = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    for i, sink in sinks:
        for what, name in [("keys", k) for k in sink.keys] + [("order_by", c) for c in sink.order_by]:
            if name not in mine:
                raise PipelineError(f"sinks.{i}.{what}: {name} is not a column of the rows ({', '.join(mine)})")
        if not DeltaTable.isDeltaTable(spark, sink.path):
            continue
        table = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(sink.path).schema.fields}
        if table != mine:
            show = lambda cols: ", ".join(f"{n} {t}" for n, t in cols.items())  # noqa: E731
            raise PipelineError(f"sinks.{i} (delta:{sink.path}): the table's columns ({show(table)}) differ "
                                f"from the rows' ({show(mine)}); write to a new table or migrate this one")  # fmt: skip


def _produce_keeping_timestamps(df: DataFrame, settings: KafkaSettings, topic: str | None) -> None:
    """A topic sink with keep_timestamp: Spark's Kafka writer has no timestamp column, so the rows go
    through the same confluent-kafka path as replay (key/value as binary, headers, CreateTime from
    `timestamp`, a `partition` column honoured, a `topic` column when no topic option)."""
    cols = set(df.columns)
    if topic is None and "topic" not in cols:
        raise PipelineError("topic sink: no topic option and no topic column")

    def pick(name: str, expr: str, fallback: str) -> str:
        return expr if name in cols else fallback

    frame = df.selectExpr(
        pick("topic", "CAST(topic AS STRING) AS _target", "CAST(NULL AS STRING) AS _target"),
        pick("partition", "CAST(partition AS INT) AS _partition", "CAST(NULL AS INT) AS _partition"),
        pick("offset", "CAST(offset AS STRING) AS _source", "CAST(NULL AS STRING) AS _source"),
        pick("key", "CAST(key AS BINARY) AS key", "CAST(NULL AS BINARY) AS key"),
        "CAST(value AS BINARY) AS value",
        pick("headers", "headers", "CAST(NULL AS ARRAY<STRUCT<key: STRING, value: BINARY>>) AS headers"),
        pick("timestamp", "unix_millis(timestamp) AS _ts", "CAST(NULL AS BIGINT) AS _ts"),
    )
    try:
        produce_frame(frame, settings, topic)
    except ProduceError as exc:
        raise PipelineError(f"topic sink: producing {exc}") from exc


_SINK_MARK = "logbroker-sink.txt"


def _claim_checkpoint(location: str, sink: Any) -> None:
    """Checkpoints are per sink position; a spec whose sinks were reordered or replaced would hand
    one sink another's offsets and silently skip or repeat data. Each checkpoint remembers its sink
    (local paths; remote ones are not checked) and refuses a different one."""
    local = local_path(location)
    if local is None:
        return
    mark, me = local / _SINK_MARK, _describe(sink)
    if mark.exists():
        owner = mark.read_text().strip()
        if owner != me:
            raise PipelineError(
                f"checkpoint {location} belongs to sink {owner!r}, not {me!r}: the sinks changed; "
                "keep their order or give the pipeline a new checkpoint"
            )
        return
    local.mkdir(parents=True, exist_ok=True)
    mark.write_text(me + "\n")


def _start(spec: PipelineSpec, index: int, sink: Any, df: DataFrame) -> StreamingQuery:
    query = _QueryId()
    writer = df.writeStream.queryName(f"{spec.name}-{index}-{uuid.uuid4().hex[:6]}")
    if spec.checkpoint:
        writer = writer.option("checkpointLocation", f"{spec.checkpoint.rstrip('/')}/{index}")
    if spec.trigger.processing_time is not None:
        writer = writer.trigger(processingTime=spec.trigger.processing_time)
    else:
        writer = writer.trigger(availableNow=True)
    if isinstance(sink, ParquetSink) and sink.mode == "append":
        writer = writer.format("parquet").option("path", sink.path).outputMode("append")
        if sink.partition_by:
            writer = writer.partitionBy(*sink.partition_by)
    elif isinstance(sink, DeltaSink) and sink.mode == "append":
        writer = writer.format("delta").option("path", sink.path).outputMode("append")
        if sink.partition_by:
            writer = writer.partitionBy(*sink.partition_by)
    elif isinstance(sink, DeltaSink):
        writer = writer.outputMode("update").foreachBatch(merge_batch(sink, query))
    elif isinstance(sink, TopicSink) and sink.keep_timestamp:
        settings, topic = spec.sink_client_settings(sink), sink.topic
        writer = writer.outputMode("update").foreachBatch(lambda b, _i: _produce_keeping_timestamps(b, settings, topic))
    elif isinstance(sink, TopicSink):
        writer = writer.format("kafka").option("kafka.bootstrap.servers", spec.sink_bootstrap(sink))
        for k, v in connector_security(spec.sink_settings(sink)).items():
            writer = writer.option(k, v)
        if sink.topic:
            writer = writer.option("topic", sink.topic)
        writer = writer.outputMode("update")  # = append without aggregation; changed rows with one
    else:
        assert isinstance(sink, ConsoleSink)
        writer = writer.format("console").option("numRows", sink.num_rows).option("truncate", "false")
        writer = writer.outputMode("update")
    started = writer.start()
    query.set(str(started.id))
    return started


def _write_batch(spec: PipelineSpec, sink: Any, df: DataFrame) -> None:
    """The batch path (parquet source without checkpoint): the same sinks, written once."""
    if isinstance(sink, ParquetSink) and sink.mode == "append":
        writer = df.write.mode("append")
        if sink.partition_by:
            writer = writer.partitionBy(*sink.partition_by)
        writer.parquet(sink.path)
    elif isinstance(sink, DeltaSink) and sink.mode == "append":
        writer = df.write.format("delta").mode("append")
        if sink.partition_by:
            writer = writer.partitionBy(*sink.partition_by)
        writer.save(sink.path)
    elif isinstance(sink, DeltaSink):
        merge_batch(sink, None)(df, 0)
    elif isinstance(sink, TopicSink) and sink.keep_timestamp:
        _produce_keeping_timestamps(df, spec.sink_client_settings(sink), sink.topic)
    elif isinstance(sink, TopicSink):
        writer = df.write.format("kafka").option("kafka.bootstrap.servers", spec.sink_bootstrap(sink))
        for k, v in connector_security(spec.sink_settings(sink)).items():
            writer = writer.option(k, v)
        if sink.topic:
            writer = writer.option("topic", sink.topic)
        writer.save()
    else:
        df.show(sink.num_rows, truncate=False)


def _describe(sink: Any) -> str:
    if isinstance(sink, ParquetSink):
        return f"parquet:{sink.path}"
    if isinstance(sink, DeltaSink):
        return f"delta:{sink.path}" + (" (merge)" if sink.mode == "merge" else "")
    if isinstance(sink, TopicSink):
        return f"topic:{sink.topic or '<topic column>'}"
    return "console"


class _Progress:
    """Collects StreamingQueryProgress per query (by batchId, so polling never double counts) and
    shows rows, rows/s and lag on stderr with rich, or hands them to a callback."""

    def __init__(self, name: str, queries: list[StreamingQuery], show: bool | ProgressCallback) -> None:
        self.name, self.queries, self.show = name, queries, show
        self.seen: list[dict[int, int]] = [{} for _ in queries]
        self.lag: int | None = None
        self.started = time.monotonic()
        self.live: Any = None
        if show is True:
            from rich.console import Console
            from rich.live import Live

            self.live = Live(console=Console(stderr=True), transient=True, refresh_per_second=2)
            self.live.start()

    def rows(self, i: int = 0) -> int:
        return sum(self.seen[i].values()) if self.seen else 0

    def info(self) -> dict[str, Any]:
        elapsed = max(time.monotonic() - self.started, 1e-6)
        return {"name": self.name, "rows": self.rows(), "rows_per_second": self.rows() / elapsed,
                "lag": self.lag, "batches": len(self.seen[0]) if self.seen else 0, "elapsed": elapsed}  # fmt: skip

    def poll(self) -> None:
        fresh: list[dict[str, Any]] = []
        for i, q in enumerate(self.queries):
            for p in q.recentProgress:
                bid = int(p["batchId"])
                if bid not in self.seen[i]:
                    self.seen[i][bid] = int(p["numInputRows"] or 0)
                    if i == 0:
                        fresh.append(p)
        for p in fresh:
            lag = lag_of(p)
            if lag is not None:
                self.lag = lag
        info = self.info()
        elapsed = info["elapsed"]
        if callable(self.show) and fresh:
            self.show(info)
        elif self.live is not None:
            lag = "?" if self.lag is None else f"{self.lag:,}"
            from rich.text import Text

            self.live.update(Text(f"{self.name}: {info['rows']:,} rows, {info['rows_per_second']:,.0f} rows/s, "
                                  f"lag {lag}, {info['batches']} batches, {elapsed:.0f}s"))  # fmt: skip

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()


def _wait(
    queries: list[StreamingQuery], progress: _Progress, timeout: float | None, until: StopCondition | None
) -> str:
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            progress.poll()
            if until is not None and until(progress.info()):
                return "until"
            for i, q in enumerate(queries):
                exc = q.exception()
                if exc is not None:
                    raise PipelineError(f"sink {i} failed: {_short(exc)}") from exc
            if not any(q.isActive for q in queries):
                return "finished"
            if deadline is not None and time.monotonic() >= deadline:
                return "timeout"
            _sleep_while_active(queries, _POLL if deadline is None else min(_POLL, deadline - time.monotonic()))
    except KeyboardInterrupt:
        return "interrupted"


def _sleep_while_active(queries: list[StreamingQuery], seconds: float) -> None:
    """Sleep up to `seconds`, waking within a tick of another query ending (finished or failed): an
    availableNow run is over when its queries stop, and sleeping out the poll interval after that added up to
    0.5 s to every run. isActive is one py4j round trip, well under a millisecond."""
    end = time.monotonic() + seconds
    active = sum(q.isActive for q in queries)
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(_TICK, left))
        if sum(q.isActive for q in queries) < active:
            return


def _short(exc: BaseException) -> str:
    """One line of a Spark error; for a failed Python function, its own exception line, not py4j's."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if "Python" in lines[0]:
        raised = [ln for ln in lines if re.match(r"^[\w.]*(Error|Exception): ", ln) and "pyspark" not in ln]
        if raised:
            return raised[-1][:2000]
    return lines[0][:2000]


def run(
    spec: PipelineSpec,
    spark: SparkSession | None = None,
    progress: bool | ProgressCallback = True,
    timeout: float | None = None,
    until: StopCondition | None = None,
) -> RunResult:
    """Run `spec` until its sources are drained (availableNow), `timeout` seconds pass, `until`
    (called with the progress dict: rows, rows_per_second, lag, batches, elapsed) returns True, or
    Ctrl-C.

    A session is created from ``spec.master``/``spec.spark_conf`` when none is given (and stopped
    afterwards). Queries are stopped cleanly on timeout or Ctrl-C: what they committed stays, and
    the next run resumes from the checkpoint. A failed query stops the others and raises
    PipelineError.
    """
    _check_paths(spec, spec.master if spark is None else spark.sparkContext.master)
    own = False
    if spark is None:
        from logbroker.spark.session import owned_session

        spark, own = owned_session(master=spec.master, app_name=spec.name, conf=spec.spark_conf)
    started = time.monotonic()
    try:
        from pyspark.errors import PySparkException

        try:
            df = decode(_source_frame(spark, spec), spec.decode)
            if spec.watermark is not None:
                df = df.withWatermark(spec.watermark.column, spec.watermark.delay)
            if spec.transform:
                df.createOrReplaceTempView("events")
                df = spark.sql(spec.transform)
        except (PySparkException, ValueError) as exc:  # a bad SQL, schema or column: one line, no JVM trace
            raise PipelineError(f"{'transform' if spec.transform else 'decode'}: {_short(exc)}") from exc
        names = [_describe(s) for s in spec.sinks]
        _check_delta(spark, spec, df)
        if not spec.streaming:
            df = df.cache()
            try:
                n = df.count()
                for sink in spec.sinks:
                    _write_batch(spec, sink, df)
            finally:
                df.unpersist()
            return RunResult(spec.name, n, 1, time.monotonic() - started, names, None, rows_per_sink=[n] * len(names))
        queries: list[StreamingQuery] = []
        tracker: _Progress | None = None
        try:
            for i, sink in enumerate(spec.sinks):
                if spec.checkpoint:
                    _claim_checkpoint(f"{spec.checkpoint.rstrip('/')}/{i}", sink)
            for i, sink in enumerate(spec.sinks):
                queries.append(_start(spec, i, sink, df))
            tracker = _Progress(spec.name, queries, progress)
            stopped = _wait(queries, tracker, timeout, until)
        finally:
            for q in queries:
                if q.isActive:
                    q.stop()
            if tracker is not None:
                tracker.poll()
                tracker.close()
        for i, q in enumerate(queries):
            exc = q.exception()
            if exc is not None:
                raise PipelineError(f"sink {i} ({names[i]}) failed: {_short(exc)}") from exc
        result = RunResult(
            name=spec.name,
            rows_in=tracker.rows(),
            batches=len(tracker.seen[0]),
            seconds=time.monotonic() - started,
            sinks=names,
            lag=tracker.lag,
            stopped=stopped,
            rows_per_sink=[tracker.rows(i) for i in range(len(queries))],
        )
        if progress is True:
            _summary(result)
        return result
    finally:
        if own:
            spark.stop()


def _summary(result: RunResult) -> None:
    from rich.console import Console

    lag = "" if result.lag is None else f", lag {result.lag:,}"
    rate = result.rows_in / result.seconds if result.seconds else 0.0
    Console(stderr=True).print(
        f"{result.name}: {result.rows_in:,} rows in {result.batches} batches, {result.seconds:.1f}s "
        f"({rate:,.0f} rows/s){lag}, {result.stopped} -> {', '.join(result.sinks)}",
        soft_wrap=True, markup=False, highlight=False,
    )  # fmt: skip
