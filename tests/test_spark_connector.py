"""Spark's own Kafka connector (``spark-sql-kafka-0-10``) against a real broker process.

The point is not to test Spark but to prove that the broker serves the connector exactly as Kafka
does: the connector's driver side uses the Java AdminClient (topic listing, ListOffsets by
earliest/latest/timestamp) and its executors plain ``assign()`` consumers and producers, so these
tests exercise paths no librdkafka test reaches.

Data is produced and read back with confluent-kafka, independently of Spark. Every test runs twice:
against logbroker (the session's shared ``BrokerProcess``) and against Apache Kafka (``KafkaPeer``,
started once for the module), so the assertions are known to describe Kafka's behaviour and our
broker is held to it. ``LOGBROKER_TEST_TARGET=logbroker`` or ``=kafka`` restricts the run to one.

One SparkSession for the module (a JVM start costs ~6 s of the two shared cores), ``local[2]``, small
data. A missing piece (pyspark, java, connector jars) skips, except under CI, which installs them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from support import both_targets, read_topic, spark_session, target_bootstrap, unique
from support import create_topic as create_topic_named

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.spark

PARTITIONS = 3
PER_PARTITION = 4
# Explicit CreateTime timestamps an hour in the past: Kafka refuses timestamps > 1 h in the future,
# and its 7-day time retention would delete much older data under a running test.
T0 = int(time.time()) * 1000 - 3_600_000
STEP_MS = 1000

Headers = tuple[tuple[str, bytes | None], ...]
Row = tuple[int, bytes | None, bytes | None, int, Headers]  # partition, key, value, timestamp, headers


@dataclass(frozen=True, order=True)
class Rec:
    """One record as the broker stores it; what both confluent-kafka and Spark must report."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: Headers = ()


# ----------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module", params=both_targets())
def bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    """The broker under test (the param id names it); Kafka starts once for the module."""
    yield from target_bootstrap(request)


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with spark_session("logbroker-test-spark-connector") as s:
        yield s


def create_topic(
    bootstrap: str, prefix: str, partitions: int = PARTITIONS, config: dict[str, str] | None = None
) -> str:
    return create_topic_named(bootstrap, unique(prefix), partitions, config)


def produce(bootstrap: str, topic: str, rows: Sequence[Row]) -> list[Rec]:
    """Produce (partition, key, value, timestamp, headers) rows; returns what the broker acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    acked: list[Rec] = []
    errors: list[Any] = []

    def _make_cb(row: Row) -> Any:
        def cb(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
                return
            acked.append(Rec(topic, msg.partition(), msg.offset(), row[1], row[2], row[3], row[4]))

        return cb

    for row in rows:
        partition, key, value, ts, headers = row
        producer.produce(topic, value=value, key=key, partition=partition, timestamp=ts,
                         headers=list(headers), on_delivery=_make_cb(row))  # fmt: skip
    assert producer.flush(30) == 0
    assert not errors, errors
    return sorted(acked)


def standard_rows(n: int = PER_PARTITION, partitions: int = PARTITIONS, start: int = 0) -> list[Row]:
    """Keys, values, duplicate and null-valued headers, a null key, explicit increasing timestamps."""
    rows: list[Row] = []
    for p in range(partitions):
        for i in range(start, start + n):
            key = None if i == 1 else f"k{p}-{i}".encode()
            headers: Headers = (("h", f"{p}/{i}".encode()), ("h", b"dup"), ("nil", None)) if i % 2 == 0 else ()
            rows.append((p, key, f"v{p}-{i}".encode() * (i + 1), T0 + i * STEP_MS, headers))
    return rows


@pytest.fixture(scope="module")
def data_topic(bootstrap: str) -> tuple[str, list[Rec]]:
    """A 3-partition topic with 4 records per partition, shared by the read tests (they only read)."""
    topic = create_topic(bootstrap, "spark-src")
    return topic, produce(bootstrap, topic, standard_rows())


def json_offsets(topic: str, per_partition: dict[int, int]) -> str:
    """The connector's per-partition JSON ({"topic": {"0": n, ...}}) for offsets or timestamps."""
    return json.dumps({topic: {str(p): v for p, v in per_partition.items()}})


def kafka_reader(spark: SparkSession, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader


def spark_recs(df: DataFrame, headers: bool = True, timestamp_type: int = 0) -> list[Rec]:
    """Rows of a Kafka source DataFrame as Recs (timestamps in epoch ms, headers as tuples)."""
    cols = ["topic", "partition", "offset", "key", "value", "unix_millis(timestamp) AS ts", "timestampType"]
    if headers:
        cols.append("headers")
    out = []
    for r in df.selectExpr(*cols).collect():
        assert r["timestampType"] == timestamp_type, f"timestampType {timestamp_type} expected: {r['timestampType']}"
        hs: Headers = tuple((h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"] or ()) \
            if headers else ()  # fmt: skip
        out.append(Rec(r["topic"], r["partition"], r["offset"],
                       None if r["key"] is None else bytes(r["key"]),
                       None if r["value"] is None else bytes(r["value"]), r["ts"], hs))  # fmt: skip
    return sorted(out)


def without_headers(recs: Sequence[Rec]) -> list[Rec]:
    return sorted(Rec(r.topic, r.partition, r.offset, r.key, r.value, r.timestamp) for r in recs)


def consume_all(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> list[Rec]:
    """Everything in the topic, read with assign() from the earliest offset up to the high watermark."""
    return sorted(Rec(topic, m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1], tuple(m.headers() or ()))
                  for m in read_topic(bootstrap, topic, partitions, timeout))  # fmt: skip


# ------------------------------------------------------------------------------------------ batch read


def test_batch_read_subscribe(spark: SparkSession, bootstrap: str, data_topic: tuple[str, list[Rec]]) -> None:
    topic, produced = data_topic
    assert len(produced) == PARTITIONS * PER_PARTITION
    df = kafka_reader(spark, bootstrap, subscribe=topic, includeHeaders="true").load()
    assert spark_recs(df) == produced


def test_batch_read_subscribe_pattern(spark: SparkSession, bootstrap: str, data_topic: tuple[str, list[Rec]]) -> None:
    topic, produced = data_topic
    df = kafka_reader(spark, bootstrap, subscribePattern=topic.replace("-", ".") + "$", includeHeaders="true").load()
    assert spark_recs(df) == produced


def test_batch_read_assign(spark: SparkSession, bootstrap: str, data_topic: tuple[str, list[Rec]]) -> None:
    topic, produced = data_topic
    df = kafka_reader(spark, bootstrap, assign=f'{{"{topic}":[0,2]}}', includeHeaders="true").load()
    assert spark_recs(df) == [r for r in produced if r.partition in (0, 2)]
    # Without includeHeaders the schema has no headers column at all (Kafka's connector contract).
    plain = kafka_reader(spark, bootstrap, assign=f'{{"{topic}":[1]}}').load()
    assert "headers" not in plain.columns
    assert spark_recs(plain, headers=False) == without_headers([r for r in produced if r.partition == 1])


def test_starting_and_ending_offsets(spark: SparkSession, bootstrap: str, data_topic: tuple[str, list[Rec]]) -> None:
    topic, produced = data_topic
    all_ = kafka_reader(spark, bootstrap, subscribe=topic, startingOffsets="earliest", endingOffsets="latest").load()
    assert all_.count() == len(produced)
    # A batch may not start at "latest" (refused by the connector, before any broker request)...
    with pytest.raises(Exception, match="can't be latest"):
        kafka_reader(spark, bootstrap, subscribe=topic, startingOffsets="latest").load()
    # ... but may start at the log end offsets given explicitly: an empty result.
    at_end = json_offsets(topic, dict.fromkeys(range(PARTITIONS), PER_PARTITION))
    none = kafka_reader(spark, bootstrap, subscribe=topic, startingOffsets=at_end, endingOffsets="latest").load()
    assert none.count() == 0
    # JSON: -2 = earliest, -1 = latest; explicit offsets are [start, end).
    starting = json_offsets(topic, {0: 1, 1: -2, 2: 2})
    ending = json_offsets(topic, {0: 3, 1: -1, 2: -1})
    df = kafka_reader(spark, bootstrap, subscribe=topic, startingOffsets=starting, endingOffsets=ending).load()
    got = sorted((r.partition, r.offset) for r in spark_recs(df, headers=False))
    want = [(0, 1), (0, 2)] + [(1, o) for o in range(PER_PARTITION)] + [(2, o) for o in range(2, PER_PARTITION)]
    assert got == want


def test_starting_timestamp(spark: SparkSession, bootstrap: str, data_topic: tuple[str, list[Rec]]) -> None:
    topic, produced = data_topic
    cut = T0 + 2 * STEP_MS  # the third record of each partition, exactly
    df = kafka_reader(spark, bootstrap, subscribe=topic, startingTimestamp=str(cut), includeHeaders="true").load()
    assert spark_recs(df) == [r for r in produced if r.timestamp >= cut]
    # Between two timestamps the offset of the next later record is used.
    df = kafka_reader(spark, bootstrap, subscribe=topic, startingTimestamp=str(cut - 1), includeHeaders="true").load()
    assert spark_recs(df) == [r for r in produced if r.timestamp >= cut]
    # Per partition, with endingOffsetsByTimestamp: [offset of ts >= start, offset of ts >= end).
    start_by = json_offsets(topic, {0: T0, 1: T0 + STEP_MS, 2: cut})
    end_by = json_offsets(topic, dict.fromkeys(range(PARTITIONS), T0 + 3 * STEP_MS))
    df = kafka_reader(spark, bootstrap, subscribe=topic, startingOffsetsByTimestamp=start_by,
                      endingOffsetsByTimestamp=end_by).load()  # fmt: skip
    got = sorted((r.partition, r.offset) for r in spark_recs(df, headers=False))
    assert got == [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]


def test_min_partitions(spark: SparkSession, bootstrap: str, data_topic: tuple[str, list[Rec]]) -> None:
    topic, produced = data_topic
    df = kafka_reader(spark, bootstrap, subscribe=topic, minPartitions="6", includeHeaders="true").load()
    assert df.rdd.getNumPartitions() >= 6
    assert spark_recs(df) == produced


# ------------------------------------------------------------------------------------------ batch sink


def test_batch_sink(spark: SparkSession, bootstrap: str) -> None:
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType

    schema = StructType([
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                     StructField("value", BinaryType())]))),
    ])  # fmt: skip
    a, b, c = (create_topic(bootstrap, f"spark-sink-{x}", partitions=2) for x in "abc")
    rows = [
        (b, 0, b"k1", b"v1", [("h1", b"x"), ("h1", b"y")]),
        (c, 1, None, b"v2", []),
        (b, 1, b"k3", b"", [("n", None)]),
        (c, 0, b"k4", b"v4", None),
    ]
    df = spark.createDataFrame(rows, schema)
    # The topic option wins over the topic column.
    df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", a).save()
    # Without it each row goes to the topic its column names.
    df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).save()

    def view(recs: list[Rec]) -> list[tuple[int, bytes | None, bytes | None, Headers]]:
        return sorted(((r.partition, r.key, r.value, r.headers) for r in recs), key=repr)

    def expect(only: str | None) -> list[tuple[int, bytes | None, bytes | None, Headers]]:
        return sorted(((p, k, v, tuple(h or ())) for t, p, k, v, h in rows if only is None or t == only), key=repr)

    assert view(consume_all(bootstrap, a, 2)) == expect(None)
    assert view(consume_all(bootstrap, b, 2)) == expect(b)
    assert view(consume_all(bootstrap, c, 2)) == expect(c)
    # Records the sink wrote carry producer CreateTime stamps, within this test's run.
    assert all(r.timestamp > T0 for r in consume_all(bootstrap, a, 2))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_batch_sink_compressed_and_small_fetches(spark: SparkSession, bootstrap: str, codec: str) -> None:
    """The connector's Java producer compresses; its executors read back with tiny fetch sizes.

    200 records land in a few compressed batches; reading with max.partition.fetch.bytes=512 makes
    the executor consumer fetch again and again, starting inside batches it has already seen.
    """
    topic = create_topic(bootstrap, f"spark-{codec}", partitions=1)
    n = 200
    df = spark.range(n).selectExpr("CAST(id AS STRING) AS key", "repeat(CAST(id AS STRING), 20) AS value")
    (df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
     .option("kafka.compression.type", codec).option("kafka.linger.ms", "50").save())  # fmt: skip
    want = sorted((str(i).encode(), str(i).encode() * 20) for i in range(n))
    assert sorted((r.key or b"", r.value or b"") for r in consume_all(bootstrap, topic, 1)) == want
    tiny = {"kafka.max.partition.fetch.bytes": "512", "kafka.fetch.max.bytes": "512"}
    back = kafka_reader(spark, bootstrap, subscribe=topic, startingOffsets=json_offsets(topic, {0: 7}), **tiny).load()
    assert spark_recs(back, headers=False) == [r for r in consume_all(bootstrap, topic, 1) if r.offset >= 7]


# ------------------------------------------------------------------------------------------ streaming


def run_available_now(spark: SparkSession, bootstrap: str, topic: str, out: Path, checkpoint: Path,
                      **options: str) -> Any:  # fmt: skip
    """One availableNow run of topic -> Parquet; returns the finished query (for its progress).

    ``subscribePattern`` (or ``assign``) in ``options`` replaces the default ``subscribe=topic``."""
    reader = spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
    if not {"subscribePattern", "assign"} & options.keys():
        reader = reader.option("subscribe", topic)
    for k, v in {"startingOffsets": "earliest", **options}.items():
        reader = reader.option(k, v)
    query = (
        reader.load()
        .selectExpr("topic", "partition", "offset", "key", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    from pyspark.errors import StreamingQueryException

    try:
        query.awaitTermination(120)
    except StreamingQueryException:
        pass  # callers look at query.exception()
    assert not query.isActive, "availableNow query did not finish within 120 s"
    return query


def parquet_offsets(spark: SparkSession, out: Path) -> list[tuple[int, int]]:
    return sorted((r["partition"], r["offset"]) for r in spark.read.parquet(str(out)).collect())


def test_streaming_available_now_twice(spark: SparkSession, bootstrap: str, tmp_path: Path) -> None:
    topic = create_topic(bootstrap, "spark-stream")
    first = produce(bootstrap, topic, standard_rows(n=4))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    q1 = run_available_now(spark, bootstrap, topic, out, checkpoint, maxOffsetsPerTrigger="5")
    assert q1.exception() is None
    assert parquet_offsets(spark, out) == sorted((r.partition, r.offset) for r in first)
    batches = [p["numInputRows"] for p in q1.recentProgress if p["numInputRows"]]
    assert sum(batches) == len(first)
    assert max(batches) <= 5 and len(batches) >= 3, batches  # 12 records, at most 5 per trigger

    second = produce(bootstrap, topic, standard_rows(n=2, start=4))
    q2 = run_available_now(spark, bootstrap, topic, out, checkpoint, maxOffsetsPerTrigger="5")
    assert q2.exception() is None
    new_rows = sum(p["numInputRows"] for p in q2.recentProgress)
    assert new_rows == len(second), "the second run must read only the records produced after the first"
    assert parquet_offsets(spark, out) == sorted((r.partition, r.offset) for r in first + second)


def test_fail_on_data_loss(spark: SparkSession, bootstrap: str, tmp_path: Path) -> None:
    topic = create_topic(bootstrap, "spark-loss", partitions=1)
    produce(bootstrap, topic, standard_rows(n=5, partitions=1))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_available_now(spark, bootstrap, topic, out, checkpoint)
    assert parquet_offsets(spark, out) == [(0, o) for o in range(5)]

    # Five more records, then delete everything before offset 8: offsets 5..7 were never read.
    produce(bootstrap, topic, standard_rows(n=5, partitions=1, start=5))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    done = admin.delete_records([TopicPartition(topic, 0, 8)])
    for fut in done.values():
        assert fut.result(30).low_watermark == 8
    strict_out, strict_checkpoint = tmp_path / "strict-out", tmp_path / "strict-checkpoint"
    shutil.copytree(out, strict_out)
    shutil.copytree(checkpoint, strict_checkpoint)

    lenient = run_available_now(spark, bootstrap, topic, out, checkpoint, failOnDataLoss="false")
    assert lenient.exception() is None
    assert parquet_offsets(spark, out) == [(0, o) for o in [0, 1, 2, 3, 4, 8, 9]]

    # A batch from "earliest" starts at the new log start offset, without data-loss complaints.
    batch = kafka_reader(spark, bootstrap, subscribe=topic, startingOffsets="earliest").load()
    assert sorted(r.offset for r in spark_recs(batch, headers=False)) == [8, 9]

    from pyspark.errors import StreamingQueryException

    strict = run_available_now(spark, bootstrap, topic, strict_out, strict_checkpoint, failOnDataLoss="true")
    exc = strict.exception()
    assert isinstance(exc, StreamingQueryException), exc
    assert "failOnDataLoss" in str(exc) or "data may have been lost" in str(exc).lower(), str(exc)[:2000]


def delete_topic(bootstrap: str, topic: str) -> None:
    """Delete a topic and wait until the broker no longer lists it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{topic} still listed 30 s after DeleteTopics"
        time.sleep(0.1)


def test_deleted_topic_per_fail_on_data_loss(spark: SparkSession, bootstrap: str, tmp_path: Path) -> None:
    """One of the topics a streaming query reads is deleted between two runs.

    With ``subscribePattern`` the connector's driver lists topics, finds the checkpointed partitions
    of the deleted one gone and reports data loss: failOnDataLoss=true fails the query, false goes on
    with the remaining topic. (When *every* partition is gone the connector sees no new offsets and
    runs no batch at all, so nothing is reported: the query needs a surviving topic to notice.) A
    topic re-created under the same name restarts at offset 0, below the checkpoint: data loss again.
    With ``subscribe`` the connector describes the named topics instead and fails on
    UNKNOWN_TOPIC_OR_PARTITION whatever failOnDataLoss says (Spark's behaviour, on Kafka too).
    """
    from pyspark.errors import StreamingQueryException

    prefix = unique("spark-deleted")
    doomed = create_topic_named(bootstrap, f"{prefix}-a", partitions=2)
    kept = create_topic_named(bootstrap, f"{prefix}-b", partitions=1)
    produce(bootstrap, doomed, standard_rows(n=3, partitions=2))
    produce(bootstrap, kept, standard_rows(n=2, partitions=1))
    pattern = {"subscribePattern": prefix.replace("-", ".") + "-.*"}
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    assert run_available_now(spark, bootstrap, doomed, out, checkpoint, **pattern).exception() is None
    named_out, named_checkpoint = tmp_path / "named-out", tmp_path / "named-checkpoint"
    assert run_available_now(spark, bootstrap, doomed, named_out, named_checkpoint).exception() is None

    def archived(path: Path) -> list[tuple[str, int, int]]:
        return sorted((r["topic"], r["partition"], r["offset"]) for r in spark.read.parquet(str(path)).collect())

    before = [(doomed, p, o) for p in (0, 1) for o in range(3)] + [(kept, 0, 0), (kept, 0, 1)]
    assert archived(out) == before
    delete_topic(bootstrap, doomed)
    produce(bootstrap, kept, standard_rows(n=1, partitions=1, start=2))
    strict_out, strict_checkpoint = tmp_path / "strict-out", tmp_path / "strict-checkpoint"
    reborn_out, reborn_checkpoint = tmp_path / "reborn-out", tmp_path / "reborn-checkpoint"
    for o, c in ((strict_out, strict_checkpoint), (reborn_out, reborn_checkpoint)):
        shutil.copytree(out, o)
        shutil.copytree(checkpoint, c)

    def assert_data_loss(query: Any, detail: str) -> None:
        exc = query.exception()
        assert isinstance(exc, StreamingQueryException), f"no data-loss error: {exc}"
        text = str(exc)
        assert "failOnDataLoss" in text and detail in text, text[:3000]

    strict = run_available_now(spark, bootstrap, doomed, strict_out, strict_checkpoint, failOnDataLoss="true",
                               **pattern)  # fmt: skip
    assert_data_loss(strict, f"{doomed}-0")
    lenient = run_available_now(spark, bootstrap, doomed, out, checkpoint, failOnDataLoss="false", **pattern)
    assert lenient.exception() is None, str(lenient.exception())[:3000]
    assert archived(out) == [*before, (kept, 0, 2)]
    for flag in ("true", "false"):
        named = run_available_now(spark, bootstrap, doomed, named_out, named_checkpoint, failOnDataLoss=flag)
        assert "UnknownTopicOrPartition" in str(named.exception()), str(named.exception())[:3000]

    # Same name again, two fresh records in partition 0 (offsets 0, 1). A checkpoint from before the
    # deletion says 3 and 3: offsets went backwards, data loss again. The lenient query above dropped
    # the deleted partitions from its offsets, so to it the topic is new: read from its start.
    create_topic_named(bootstrap, doomed, partitions=2)
    produce(bootstrap, doomed, standard_rows(n=2, partitions=1))
    reborn = run_available_now(spark, bootstrap, doomed, reborn_out, reborn_checkpoint, failOnDataLoss="true",
                               **pattern)  # fmt: skip
    assert_data_loss(reborn, "offset was changed from 3 to")  # 2 for partition 0, 0 for partition 1
    lenient = run_available_now(spark, bootstrap, doomed, out, checkpoint, failOnDataLoss="false", **pattern)
    assert lenient.exception() is None, str(lenient.exception())[:3000]
    assert archived(out) == sorted([*before, (kept, 0, 2), (doomed, 0, 0), (doomed, 0, 1)])


def test_streaming_picks_up_new_partitions_and_topics(spark: SparkSession, bootstrap: str, tmp_path: Path) -> None:
    """Between runs a topic grows a partition (CreatePartitions) and a matching topic appears.

    The connector re-lists topics and partitions for every trigger; what it has not seen before is
    read from the earliest offset, whatever startingOffsets said for the first run.
    """
    prefix = unique("spark-pat")
    first = create_topic(bootstrap, prefix, partitions=1)
    rows = standard_rows(n=3, partitions=1)
    produced = produce(bootstrap, first, rows)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    pattern = {"subscribePattern": prefix.replace("-", ".") + "-.*"}

    def run() -> list[tuple[str, int, int]]:
        reader = spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
        for k, v in {**pattern, "startingOffsets": "earliest"}.items():
            reader = reader.option(k, v)
        query = (reader.load().selectExpr("topic", "partition", "offset").writeStream.format("parquet")
                 .option("path", str(out)).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())  # fmt: skip
        query.awaitTermination(120)
        assert not query.isActive and query.exception() is None
        return sorted((r["topic"], r["partition"], r["offset"]) for r in spark.read.parquet(str(out)).collect())

    assert run() == [(first, r.partition, r.offset) for r in produced]

    from confluent_kafka.admin import NewPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(first, 2)])[first].result(30)
    deadline = time.monotonic() + 30
    while len(admin.list_topics(first, timeout=10).topics[first].partitions) < 2:
        assert time.monotonic() < deadline, "partition 1 never appeared"
        time.sleep(0.1)
    second = create_topic(bootstrap, prefix, partitions=1)
    produced += produce(bootstrap, first, [(1, *r[1:]) for r in rows])
    produced += produce(bootstrap, first, [(0, b"late", b"late", T0 + 9 * STEP_MS, ())])
    produced += produce(bootstrap, second, rows)
    assert run() == sorted((r.topic, r.partition, r.offset) for r in produced)


def test_session_refuses_mismatched_connector(tmp_path: Path) -> None:
    """A jar directory with another Spark release's connector is refused before the JVM starts."""
    pytest.importorskip("pyspark")
    from logbroker.spark import SparkSetupError, connector_jars

    (tmp_path / "spark-sql-kafka-0-10_2.13-0.0.1.jar").write_bytes(b"")
    with pytest.raises(SparkSetupError, match="must match Spark exactly"):
        connector_jars(tmp_path)
    with pytest.raises(SparkSetupError, match="no jars"):
        connector_jars(tmp_path / "missing")


def test_session_without_java_says_so(tmp_path: Path) -> None:
    """With no java on JAVA_HOME or PATH, session() fails with an install hint, not a gateway trace."""
    pytest.importorskip("pyspark")
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PATH")}
    env["PATH"] = str(tmp_path)  # holds no java
    code = "from logbroker.spark import session\nsession()\n"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode != 0
    assert "SparkSetupError" in proc.stderr and "Java runtime" in proc.stderr, proc.stderr[-2000:]


# ------------------------------------------------------------------------ less travelled connector paths


def test_starting_timestamp_after_last_record(
    spark: SparkSession, bootstrap: str, data_topic: tuple[str, list[Rec]]
) -> None:
    """ListOffsets by a timestamp newer than every record finds no offset (-1 from the broker).

    The connector then fails by default (startingOffsetsByTimestampStrategy=error) or, with
    strategy "latest", starts at the log end: an empty batch.
    """
    topic, _ = data_topic
    future = str(int(time.time() * 1000) + 3_600_000)
    with pytest.raises(Exception, match=r"(?i)timestamp"):
        kafka_reader(spark, bootstrap, subscribe=topic, startingTimestamp=future).load().count()
    df = kafka_reader(spark, bootstrap, subscribe=topic, startingTimestamp=future,
                      startingOffsetsByTimestampStrategy="latest").load()  # fmt: skip
    assert df.count() == 0
    # endingTimestamp newer than every record: the batch ends at the log end.
    df = kafka_reader(spark, bootstrap, subscribe=topic, endingTimestamp=future).load()
    assert df.count() == PARTITIONS * PER_PARTITION


def test_read_committed(spark: SparkSession, bootstrap: str, data_topic: tuple[str, list[Rec]]) -> None:
    """isolation.level=read_committed: ListOffsets and Fetch bounded by the last stable offset."""
    topic, produced = data_topic
    df = kafka_reader(spark, bootstrap, subscribe=topic, includeHeaders="true",
                      **{"kafka.isolation.level": "read_committed"}).load()  # fmt: skip
    assert spark_recs(df) == produced


def test_log_append_time(spark: SparkSession, bootstrap: str) -> None:
    """A LogAppendTime topic: the broker stamps records, and the connector reports timestampType 1."""
    topic = create_topic(bootstrap, "spark-lat", partitions=1, config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    produced = produce(bootstrap, topic, standard_rows(n=3, partitions=1))
    after = int(time.time() * 1000)
    recs = spark_recs(kafka_reader(spark, bootstrap, subscribe=topic).load(), headers=False, timestamp_type=1)
    assert [(r.offset, r.key, r.value) for r in recs] == [(r.offset, r.key, r.value) for r in produced]
    assert all(before - 1000 <= r.timestamp <= after + 1000 for r in recs), [r.timestamp for r in recs]


def test_streaming_kafka_to_kafka(spark: SparkSession, bootstrap: str, tmp_path: Path) -> None:
    """A streaming query from one topic into another through the connector's streaming sink."""
    src = create_topic(bootstrap, "spark-s2k-src")
    dst = create_topic(bootstrap, "spark-s2k-dst")
    produced = produce(bootstrap, src, standard_rows(n=3))
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", src)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load()
        .selectExpr("key", "upper(CAST(value AS STRING)) AS value", "headers", "partition")
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", dst)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert not query.isActive and query.exception() is None
    got = consume_all(bootstrap, dst, PARTITIONS)
    assert sorted(((r.partition, r.key, r.value, r.headers) for r in got), key=repr) == sorted(
        ((r.partition, r.key, (r.value or b"").upper(), r.headers) for r in produced), key=repr
    )


def test_deprecated_offset_fetching_uses_a_group(spark: SparkSession, bootstrap: str, tmp_path: Path) -> None:
    """spark.sql.streaming.kafka.useDeprecatedOffsetFetching=true: the driver finds offsets with a
    subscribed KafkaConsumer (a consumer-group join, seekToEnd, position) instead of the
    AdminClient, a path older Spark jobs still use. Classic protocol only: this path calls the
    deprecated Consumer.poll(long), which kafka-clients refuses under group.protocol=consumer (KIP-848),
    on Kafka and logbroker alike."""
    topic = create_topic(bootstrap, "spark-legacy")
    produced = produce(bootstrap, topic, standard_rows(n=3))
    key = "spark.sql.streaming.kafka.useDeprecatedOffsetFetching"
    spark.conf.set(key, "true")
    try:
        out = tmp_path / "out"
        query = run_available_now(spark, bootstrap, topic, out, tmp_path / "checkpoint", maxOffsetsPerTrigger="4")
        assert query.exception() is None
        assert parquet_offsets(spark, out) == sorted((r.partition, r.offset) for r in produced)
        batch = kafka_reader(
            spark, bootstrap, subscribe=topic, startingOffsets=json_offsets(topic, {0: 1, 1: -2, 2: -2})
        )
        assert batch.load().count() == len(produced) - 1
    finally:
        spark.conf.unset(key)
