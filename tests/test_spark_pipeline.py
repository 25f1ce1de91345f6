"""The pipeline runner (logbroker.spark.spec/decode/pipeline/builtins/cli) on real brokers.

Every broker-facing test runs twice, on logbroker (the shared `broker` process) and on Apache Kafka
(KafkaPeer), through the module-scoped `backend` fixture: the same pipeline must give the same
result on both. Data is produced and checked with confluent-kafka, independently of Spark.

One SparkSession (local[2]) for the module; the kill test runs its pipeline in a subprocess of its
own (tests/spark_pipeline_worker.py) so it can be killed with SIGKILL, JVM included.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from support import both_targets, missing_tool, read_topic, spark_session, target_bootstrap, unique
from support import create_topic as create_named_topic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

HERE = Path(__file__).resolve().parent
# CreateTime stamps an hour back: Kafka refuses timestamps > 1 h ahead and deletes data > 7 days old.
T0 = int(time.time()) * 1000 - 3_600_000
Headers = tuple[tuple[str, bytes | None], ...]
Row = tuple[int, bytes | None, bytes | None, int | None, Headers]  # partition, key, value, timestamp ms, headers


# ----------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with spark_session("logbroker-test-spark-pipeline") as s:
        yield s


@pytest.fixture(scope="module", params=both_targets())
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Bootstrap of the broker under test: the shared logbroker process, then Apache Kafka."""
    yield from target_bootstrap(request)


# ------------------------------------------------------------------------------------------ helpers


def create_topic(bootstrap: str, prefix: str, partitions: int = 3) -> str:
    return create_named_topic(bootstrap, unique(prefix), partitions)


def produce(bootstrap: str, topic: str, rows: Sequence[Row]) -> list[tuple[Any, ...]]:
    """Produce rows; returns (topic, partition, offset, key, value, timestamp, headers) as acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    acked: list[tuple[Any, ...]] = []
    errors: list[Any] = []

    def on_delivery(headers: Headers) -> Any:
        def cb(err: Any, msg: Any) -> None:  # a delivery report carries no headers: keep the row's
            if err is not None:
                errors.append(err)
            else:
                acked.append(
                    (topic, msg.partition(), msg.offset(), msg.key(), msg.value(), msg.timestamp()[1], headers)
                )

        return cb

    for partition, key, value, ts, headers in rows:
        kw: dict[str, Any] = {"timestamp": ts} if ts is not None else {}
        producer.produce(topic, value=value, key=key, partition=partition, headers=list(headers),
                         on_delivery=on_delivery(headers), **kw)  # fmt: skip
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors
    return sorted(acked)


def rows_for(partitions: int, n: int, start: int = 0, size: int = 1) -> list[Row]:
    """Keys, values, duplicate and null-valued headers, a null key, increasing explicit timestamps."""
    out: list[Row] = []
    for p in range(partitions):
        for i in range(start, start + n):
            key = None if i == 1 else f"k{p}-{i}".encode()
            headers: Headers = (("h", f"{p}/{i}".encode()), ("h", b"dup"), ("nil", None)) if i % 2 == 0 else ()
            out.append((p, key, f"v{p}-{i}".encode() * size, T0 + i * 1000, headers))
    return out


def consume_all(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0) -> list[tuple[Any, ...]]:
    return sorted((topic, m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1], tuple(m.headers() or ()))
                  for m in read_topic(bootstrap, topic, partitions, timeout))  # fmt: skip


def archive_rows(spark: SparkSession, path: Path) -> list[tuple[Any, ...]]:
    """The archive as (topic, partition, offset, key, value, timestamp ms, headers, date) tuples."""
    from logbroker.spark.builtins import read_archive

    df = read_archive(path, spark).selectExpr(
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        "unix_millis(timestamp) AS ts",
        "headers",
        "date",
        "timestampType",
    )
    out = []
    for r in df.collect():
        assert r["timestampType"] == 0
        headers = tuple((h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"] or ())
        out.append((r["topic"], r["partition"], r["offset"], None if r["key"] is None else bytes(r["key"]),
                    None if r["value"] is None else bytes(r["value"]), r["ts"], headers, r["date"]))  # fmt: skip
    return sorted(out)


def with_date(recs: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted((*r, dt.datetime.fromtimestamp(r[5] / 1000, dt.UTC).date()) for r in recs)


def spec_for(bootstrap: str, topic: str, tmp: Path, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": unique("t"),
        "source": {"bootstrap": bootstrap, "topics": [topic]},
        "checkpoint": str(tmp / "checkpoint"),
        "sinks": [{"type": "parquet", "path": str(tmp / "out")}],
        "master": "local[2]",
    }
    base.update(fields)
    return base


def run_spec(spark: SparkSession, spec: dict[str, Any], **kw: Any) -> Any:
    from logbroker.spark.pipeline import run
    from logbroker.spark.spec import load_spec

    result = run(load_spec(spec), spark=spark, progress=False, timeout=300, **kw)
    assert result.stopped == "finished", result
    return result


# ------------------------------------------------------------------------------------------ spec


OK_SPEC: dict[str, Any] = {
    "name": "t",
    "source": {"bootstrap": "127.0.0.1:9092", "topics": ["a"]},
    "checkpoint": "/tmp/cp",
    "sinks": [{"type": "console"}],
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sinks": [{"type": "parquet"}]}, "sinks.0.path: Field required"),
        ({"sinks": [{"type": "console"}, {"type": "parquet", "path": "p", "mode": "upsert", "keys": ["k"]}]},
         "sinks.1.mode: upsert is retired: use type: delta with mode: merge"),
        ({"sinks": [{"type": "delta", "path": "p", "mode": "merge"}]}, "sinks.0.keys: mode merge needs keys"),
        ({"sinks": [{"type": "delta", "path": "p", "keys": ["k"]}]}, "sinks.0.keys: applies to mode merge only"),
        ({"sinks": [{"type": "delta", "path": "p", "mode": "upsert", "keys": ["k"]}]}, "sinks.0.mode: "),
        ({"sinks": [{"type": "delta", "path": "s3a://b/t", "mode": "merge", "keys": ["k"], "engine": "delta-rs"}]},
         "sinks.0.engine: delta-rs here writes local paths only"),
        ({"sinks": [{"type": "delta", "path": "p", "mode": "merge", "keys": ["k"], "engine": "delta-rs",
                     "deletion_vectors": True}]}, "sinks.0.engine: delta-rs does not write deletion vectors"),
        ({"sinks": [{"type": "delta", "path": "p", "engine": "spark"}]}, "sinks.0.engine: applies to mode merge only"),
        ({"sinks": [{"type": "delta", "path": "p", "mode": "merge", "keys": ["k"], "engine": "duckdb"}]},
         "sinks.0.engine: "),
        ({"sinks": [{"path": "x"}]}, "sinks.0.type: Field required"),
        ({"sinks": [{"type": "s3"}]}, "sinks.0.type: must be one of console, delta, parquet, topic"),
        ({"sinks": []}, "sinks: "),
        ({"source": {"bootstrap": "b"}}, "source: give exactly one of topics or pattern"),
        ({"source": {"bootstrap": "b", "topics": ["a"], "pattern": "a.*"}}, "source: give exactly one of topics"),
        ({"source": {"topics": ["a"]}}, "source.bootstrap: Field required"),
        ({"source": {"kind": "jdbc"}}, "source.kind: must be one of kafka, parquet"),
        ({"source": {"bootstrap": "b", "topics": ["a"], "max_offsets_per_trigger": 0}},
         "source.max_offsets_per_trigger: "),
        ({"source": {"bootstrap": "b", "topics": ["a"], "starting_offsets": "middle"}}, "source.starting_offsets"),
        ({"checkpoint": None}, "checkpoint: required for a kafka source"),
        ({"decode": {"format": "json"}}, "decode.schema: json decode needs a schema"),
        ({"decode": {"format": "xml"}}, "decode.format: "),
        ({"trigger": {"processing_time": "10 parsecs"}}, "trigger.processing_time: not an interval"),
        ({"trigger": {"processing_time": "1 second", "available_now": True}}, "trigger: give exactly one of"),
        ({"trigger": {"available_now": False}}, "trigger: give exactly one of"),
        ({"watermark": {"column": "ts", "delay": "soon"}}, "watermark.delay: not an interval"),
        ({"source": {"kind": "parquet", "path": "p"}, "sinks": [{"type": "topic", "topic": "t"}]},
         "sinks.0.bootstrap: required when the source is not kafka"),
        ({"sink": []}, "sink: unknown field"),
    ],
)  # fmt: skip
def test_spec_errors_name_the_field(change: dict[str, Any], message: str) -> None:
    from logbroker.spark.spec import SpecError, load_spec

    with pytest.raises(SpecError) as info:
        load_spec({**OK_SPEC, **change})
    text = str(info.value)
    assert text.startswith(message), text
    assert "\n" not in text


def test_spec_from_yaml(tmp_path: Path) -> None:
    from logbroker.spark.spec import SpecError, load_spec

    good = tmp_path / "good.yaml"
    good.write_text(
        "name: arch\nsource:\n  bootstrap: h:1\n  pattern: 'notifications\\..*'\n  max_offsets_per_trigger: 10\n"
        "decode: {format: json, schema: 'id INT'}\nwatermark: {column: timestamp, delay: 5 minutes}\n"
        "sinks:\n  - {type: parquet, path: out, partition_by: [topic]}\n  - {type: console, num_rows: 5}\n"
        "trigger: {processing_time: 10 seconds}\ncheckpoint: cp\n"
    )
    spec = load_spec(good)
    assert spec.source.connector_options()["subscribePattern"] == "notifications\\..*"  # type: ignore[union-attr]
    assert spec.trigger.processing_time == "10 seconds" and not spec.trigger.available_now
    with pytest.raises(SpecError, match=r"^spec: expected a mapping"):
        (tmp_path / "list.yaml").write_text("- a\n")
        load_spec(tmp_path / "list.yaml")
    with pytest.raises(SpecError, match="not valid YAML"):
        (tmp_path / "bad.yaml").write_text("name: [\n")
        load_spec(tmp_path / "bad.yaml")


def test_cli_bad_spec_exits_2(tmp_path: Path) -> None:
    """In a subprocess, as a user runs it: one line naming the field, status 2, no JVM started."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsource: {bootstrap: 'h:1', topics: [a]}\ncheckpoint: cp\nsinks: [{type: parquet}]\n")
    code = "from logbroker.spark.cli import pipeline; pipeline()"
    proc = subprocess.run([sys.executable, "-c", code, "run", str(bad)], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 2, proc
    assert proc.stderr.strip() == "error: sinks.0.path: Field required", proc.stderr


# ------------------------------------------------------------------------------------------ decoders


def test_decode_json_keeps_bad_records_flagged(spark: SparkSession, backend: str, tmp_path: Path) -> None:
    from logbroker.spark.decode import decode
    from logbroker.spark.pipeline import PipelineError
    from logbroker.spark.spec import Decode

    topic = create_topic(backend, "pl-json", partitions=1)
    values = [b'{"id": 1, "name": "a", "timestamp": "t1"}', b'{"id": "x"}', b"not json", None, b"[1, 2]",
              b'{"id": 2, "extra": {"deep": 1}}']  # fmt: skip
    produce(backend, topic, [(0, b"k", v, T0 + i, ()) for i, v in enumerate(values)])
    schema = "id INT, name STRING, timestamp STRING"
    run_spec(spark, spec_for(backend, topic, tmp_path, decode={"format": "json", "schema": schema}))
    got = {r["offset"]: r for r in spark.read.parquet(str(tmp_path / "out")).collect()}
    assert sorted(got) == list(range(len(values)))
    assert (got[0]["id"], got[0]["name"], got[0]["timestamp"], got[0]["_corrupt"]) == (1, "a", "t1", None)
    assert (got[5]["id"], got[5]["name"], got[5]["_corrupt"]) == (2, None, None)
    assert got[3]["_corrupt"] == "null value"
    for o in (1, 2, 4):
        assert got[o]["_corrupt"] == "not a JSON object matching the schema", got[o]
        assert (got[o]["id"], got[o]["name"]) == (None, None)
    assert all(r["topic"] == topic and r["value_size"] == len(values[o] or b"") for o, r in got.items())

    # drop: only the good records; fail: the query stops, naming the first bad record.
    batch = spark.read.format("kafka").option("kafka.bootstrap.servers", backend).option("subscribe", topic).load()
    dropped = decode(batch, Decode(format="json", schema=schema, on_error="drop"))
    assert sorted(r["offset"] for r in dropped.collect()) == [0, 5] and "_corrupt" not in dropped.columns
    fail = spec_for(backend, topic, tmp_path / "fail", decode={"format": "json", "schema": schema, "on_error": "fail"})
    with pytest.raises(PipelineError, match="undecodable record at"):
        run_spec(spark, fail)


def test_decode_notify(spark: SparkSession, backend: str, tmp_path: Path) -> None:
    from logbroker.notify.notifier import encode

    topic = create_topic(backend, "pl-notify", partitions=1)
    msg = {"message_id": "m1", "publisher_id": "compute.host1", "event_type": "compute.start", "priority": "INFO",
           "payload": {"vm": "a", "n": [1, 2]}, "timestamp": "2026-01-02 03:04:05.123456"}  # fmt: skip
    oslo_inner = {**msg, "message_id": "m2", "_context": {"user": "u"}}
    no_ts = {k: v for k, v in msg.items() if k != "timestamp"} | {"message_id": "m3"}
    bad_ts = {**msg, "message_id": "m4", "timestamp": "yesterday"}
    values = [
        encode({"request_id": "r1"}, msg),
        json.dumps({"oslo.version": "2.0", "oslo.message": json.dumps(oslo_inner)}).encode(),
        encode(None, no_ts),
        encode(None, bad_ts),
        b"{}",
        b"\x00garbage",
    ]
    produce(backend, topic, [(0, None, v, T0 + 7, ()) for v in values])
    run_spec(spark, spec_for(backend, topic, tmp_path, decode={"format": "notify"}))
    df = spark.read.parquet(str(tmp_path / "out")).selectExpr("*", "unix_micros(timestamp) AS us",
                                                              "unix_millis(kafka_timestamp) AS kms")  # fmt: skip
    got = {r["offset"]: r for r in df.collect()}
    event_us = int(dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC).timestamp()) * 1_000_000 + 123456
    r0 = got[0]
    assert (r0["message_id"], r0["publisher_id"], r0["event_type"], r0["priority"]) == \
        ("m1", "compute.host1", "compute.start", "INFO")  # fmt: skip
    assert json.loads(r0["payload"]) == {"vm": "a", "n": [1, 2]}
    assert json.loads(r0["context"]) == {"request_id": "r1"}
    assert r0["us"] == event_us and r0["kms"] == T0 + 7 and r0["_corrupt"] is None
    assert r0["value_size"] == len(values[0])
    assert got[1]["message_id"] == "m2" and json.loads(got[1]["context"]) == {"user": "u"}
    assert got[1]["us"] == event_us
    # No or unparsable envelope timestamp: the Kafka timestamp is the event time.
    assert got[2]["message_id"] == "m3" and got[2]["us"] == (T0 + 7) * 1000
    assert got[3]["message_id"] == "m4" and got[3]["us"] == (T0 + 7) * 1000 and got[3]["_corrupt"] is None
    assert got[4]["_corrupt"] == "notification has no event_type" and got[4]["event_type"] is None
    assert got[5]["_corrupt"] == "not a JSON notification" and got[5]["us"] == (T0 + 7) * 1000


def test_decode_mq(spark: SparkSession, backend: str, tmp_path: Path) -> None:
    from logbroker.mq.ids import MessageID

    topic = create_topic(backend, "pl-mq", partitions=2)
    rows: list[Row] = [
        (0, None, b"p0", None, (("a", b"1"), ("b", None), ("a", b"2"))),
        (1, b"k", b"p1", None, (("x", "ü".encode()),)),
        (1, None, None, None, ()),
    ]
    produced = produce(backend, topic, rows)
    run_spec(spark, spec_for(backend, topic, tmp_path, decode={"format": "mq"}))
    got = sorted((r["message_id"], bytes(r["payload"]), dict(r["properties"] or {}), r["partition"], r["offset"])
                 for r in spark.read.parquet(str(tmp_path / "out")).collect())  # fmt: skip
    # What logbroker.mq's consumer reports: payload b"" for null, properties last-wins with "" for null.
    want = sorted((str(MessageID(t, p, o)), v or b"", {k: (hv or b"").decode() for k, hv in hs}, p, o)
                  for t, p, o, _k, v, _ts, hs in produced)  # fmt: skip
    assert got == want


# ------------------------------------------------------------------------------------ transform, sinks


def test_transform_topic_and_console_sinks(spark: SparkSession, backend: str, tmp_path: Path) -> None:
    """One spec, three sinks (three queries): Spark's Kafka sink, the keep_timestamp producer, console."""
    src = create_topic(backend, "pl-src")
    plain, stamped = create_topic(backend, "pl-dst"), create_topic(backend, "pl-dst-ts")
    produced = produce(backend, src, rows_for(3, 4))
    spec = spec_for(
        backend, src, tmp_path,
        transform="SELECT key, upper(CAST(value AS STRING)) AS value, headers, partition, timestamp "
                  "FROM events WHERE key IS NOT NULL",
        sinks=[{"type": "topic", "topic": plain}, {"type": "topic", "topic": stamped, "keep_timestamp": True},
               {"type": "console", "num_rows": 3}],
    )  # fmt: skip
    result = run_spec(spark, spec)
    assert result.rows_in == len(produced) and result.rows_per_sink == [len(produced)] * 3
    assert result.sinks == [f"topic:{plain}", f"topic:{stamped}", "console"]
    want = sorted((p, k, v.upper(), hs) for _t, p, _o, k, v, _ts, hs in produced if k is not None)
    assert sorted((p, k, v, hs) for _t, p, _o, k, v, _ts, hs in consume_all(backend, plain, 3)) == want
    got = consume_all(backend, stamped, 3)
    assert sorted((p, k, v, hs) for _t, p, _o, k, v, _ts, hs in got) == want
    assert sorted((k, ts) for _t, _p, _o, k, _v, ts, _h in got) == \
        sorted((k, ts) for _t, _p, _o, k, _v, ts, _h in produced if k is not None)  # fmt: skip


def test_checkpoint_refuses_another_sink_and_bad_sql_is_one_error(
    spark: SparkSession, backend: str, tmp_path: Path
) -> None:
    """Sinks changed under an existing checkpoint would inherit another sink's offsets: refused, and
    nothing is written to the new sink; a SQL error is one PipelineError line, not a JVM trace."""
    from logbroker.spark.pipeline import PipelineError, run
    from logbroker.spark.spec import load_spec

    topic = create_topic(backend, "pl-claim", partitions=1)
    produce(backend, topic, [(0, b"k", b"v", T0, ())])
    run_spec(spark, spec_for(backend, topic, tmp_path))
    moved = spec_for(backend, topic, tmp_path, sinks=[{"type": "parquet", "path": str(tmp_path / "elsewhere")}])
    with pytest.raises(PipelineError, match=r"belongs to sink 'parquet:.*out'"):
        run(load_spec(moved), spark=spark, progress=False, timeout=300)
    assert not (tmp_path / "elsewhere").exists()
    bad_sql = spec_for(backend, topic, tmp_path / "sql", transform="SELECT no_such_column FROM events")
    with pytest.raises(PipelineError, match=r"^transform: .*no_such_column") as info:
        run(load_spec(bad_sql), spark=spark, progress=False, timeout=300)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("engine", ["spark", "delta-rs"])
def test_delta_merge_applies_each_batch_once_and_the_newest_row_wins(
    spark: SparkSession, tmp_path: Path, engine: str
) -> None:
    """A batch tagged with the query's id is applied once however often it is replayed (Delta's txnAppId /
    txnVersion); of one key's rows the greatest by order_by wins, in a batch and against the table; null keys
    match null keys; without an order a batch with a key twice is refused, naming the key. Both engines."""
    from logbroker.spark.pipeline import PipelineError, _QueryId, merge_batch
    from logbroker.spark.spec import DeltaSink

    path = str(tmp_path / "t")
    schema = "k STRING, g INT, n LONG, ts LONG"
    sink = DeltaSink(type="delta", path=path, mode="merge", keys=["k", "g"], order_by=["ts"], engine=engine)
    query = _QueryId()
    query.set("query-1")
    merge = merge_batch(sink, query)

    def table() -> list[tuple[Any, ...]]:
        return sorted((tuple(r) for r in spark.read.format("delta").load(path).collect()), key=repr)

    merge(spark.createDataFrame([("a", 1, 10, 1), ("b", 1, 20, 1), ("c", None, 30, 1), ("a", 1, 11, 2)], schema), 0)
    assert table() == sorted([("a", 1, 11, 2), ("b", 1, 20, 1), ("c", None, 30, 1)], key=repr)
    second = spark.createDataFrame([("b", 1, 21, 3), ("c", None, 31, 3), ("d", 2, 40, 3)], schema)
    merge(second, 1)
    merge(spark.createDataFrame([("b", 1, 99, 9)], schema), 1)  # batch 1 again, other rows: not applied
    want = sorted([("a", 1, 11, 2), ("b", 1, 21, 3), ("c", None, 31, 3), ("d", 2, 40, 3)], key=repr)
    assert table() == want
    from delta.tables import DeltaTable

    ops = [r["operation"] for r in DeltaTable.forPath(spark, path).history().orderBy("version").collect()]
    assert ops == ["WRITE", "MERGE"], ops
    # A later batch's older row (a late record) does not undo the table's newer one; a newer one replaces it.
    merge(spark.createDataFrame([("a", 1, 5, 1), ("d", 2, 41, 4)], schema), 2)
    want = sorted([("a", 1, 11, 2), ("b", 1, 21, 3), ("c", None, 31, 3), ("d", 2, 41, 4)], key=repr)
    assert table() == want
    # A new checkpoint is a new query id: its batch 1 is new.
    other = _QueryId()
    other.set("query-2")
    merge_batch(sink, other)(spark.createDataFrame([("b", 1, 99, 9)], schema), 1)
    assert ("b", 1, 99, 9) in table()
    # Time travel: the table as the first batch left it.
    v0 = sorted((tuple(r) for r in spark.read.format("delta").option("versionAsOf", 0).load(path).collect()), key=repr)
    assert v0 == sorted([("a", 1, 11, 2), ("b", 1, 20, 1), ("c", None, 30, 1)], key=repr)

    unordered = DeltaSink(type="delta", path=path, mode="merge", keys=["k", "g"], engine=engine)
    twice = r"batch 7 holds key \{'k': 'z', 'g': 5\} more than once; give the sink order_by"
    with pytest.raises(PipelineError, match=twice):
        merge_batch(unordered, None)(spark.createDataFrame([("z", 5, 1, 1), ("z", 5, 2, 1)], schema).drop("ts"), 7)


@pytest.mark.parametrize("engine", ["spark", "delta-rs"])
def test_delta_merge_skips_files_outside_the_batch_and_compacts(
    spark: SparkSession, tmp_path: Path, engine: str
) -> None:
    """With prune the batch's key range joins the merge condition, so a MERGE never opens the files that
    cannot hold its keys: one of them is moved away while the merges run, and only the unpruned sink
    fails for it, on both engines. Deletion vectors (Spark) mark replaced rows instead of copying their
    files' other rows; compact_every runs OPTIMIZE."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from logbroker.spark.pipeline import _QueryId, merge_batch
    from logbroker.spark.spec import DeltaSink

    query = _QueryId()
    query.set("query-1")
    # The table holds the even keys 0-1998; batch b updates the ten even keys from 20b and adds the odd ones.
    want = {2 * k: 0 for k in range(1000)} | {20 * b + i: b for b in (1, 2, 3) for i in range(20)}

    def merged(**options: Any) -> tuple[str, list[Any]]:
        path = str(tmp_path / "-".join(f"{k}{v}" for k, v in options.items()))
        sink = DeltaSink(type="delta", path=path, mode="merge", keys=["k"], engine=engine, **options)
        merge = merge_batch(sink, query)
        merge(spark.range(1000).selectExpr("2 * id AS k", "0L AS v").repartitionByRange(4, "k"), 0)
        files = spark.read.format("delta").load(path).groupBy(F.input_file_name().alias("f")).agg(F.min("k"))
        last = Path(urlparse(max(files.collect(), key=lambda r: r[1])["f"]).path)  # keys 1500-1998
        last.rename(last.with_suffix(".away"))
        try:
            for b in (1, 2):
                merge(spark.range(20 * b, 20 * b + 20).selectExpr("id AS k", f"{b}L AS v"), b)
        finally:
            last.with_suffix(".away").rename(last)
        merge(spark.range(60, 80).selectExpr("id AS k", "3L AS v"), 3)  # with every file back (OPTIMIZE reads all)
        assert {r["k"]: r["v"] for r in spark.read.format("delta").load(path).collect()} == want
        return path, DeltaTable.forPath(spark, path).history().orderBy("version").collect()

    path, history = merged(deletion_vectors=engine == "spark", compact_every=3)
    assert [h["operation"] for h in history] == ["WRITE", "MERGE", "MERGE", "MERGE", "OPTIMIZE"]
    if engine == "spark":
        for h in history[1:4]:
            assert h["operationMetrics"]["numTargetRowsCopied"] == "0", h  # a vector, not a copy of 240 rows
            assert int(h["operationMetrics"]["numTargetDeletionVectorsAdded"]) >= 1, h
        props = DeltaTable.forPath(spark, path).detail().collect()[0]["properties"]
        assert props["delta.enableDeletionVectors"] == "true"
    else:  # delta-rs' own metrics: of the table's four files each MERGE read one
        for h in history[1:4]:
            assert h["engineInfo"].startswith("delta-rs"), h
            assert h["operationMetrics"]["num_target_files_scanned"] == "1", h
            assert h["operationMetrics"]["num_target_files_skipped_during_scan"] == "3", h

    with pytest.raises(Exception, match=r"FILE_NOT_EXIST|FileNotFound|not found: No such file"):
        merged(prune=False)  # scans every file, the one moved away too


def test_delta_merge_auto_engine_hands_spark_what_delta_rs_should_not_take(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """engine auto merges with delta-rs on a local master, and with Spark a batch over delta_rs.LOCAL_ROWS
    (made 5 here), struct keys and a table with deletion vectors, which delta-rs does not write; engine
    delta-rs refuses that table in one line rather than falling back."""
    from delta.tables import DeltaTable

    from logbroker.spark import delta_rs
    from logbroker.spark.pipeline import PipelineError, _QueryId, merge_batch
    from logbroker.spark.spec import DeltaSink

    monkeypatch.setattr(delta_rs, "LOCAL_ROWS", 5)
    query = _QueryId()
    query.set("query-1")

    def engines(path: str) -> list[str]:
        history = DeltaTable.forPath(spark, path).history().orderBy("version").collect()
        return [h["engineInfo"].split("/")[0].split(":")[0] for h in history[1:]]

    plain, vectors = str(tmp_path / "plain"), str(tmp_path / "vectors")
    merge = merge_batch(DeltaSink(type="delta", path=plain, mode="merge", keys=["k"]), query)
    merge(spark.range(10).selectExpr("id AS k", "0L AS v"), 0)
    merge(spark.range(3).selectExpr("id AS k", "1L AS v"), 1)  # 3 rows: delta-rs
    merge(spark.range(20).selectExpr("id AS k", "2L AS v"), 2)  # 20 rows: Spark
    # Replays through the other engine: each sees the other's transaction id and skips the batch.
    merge(spark.range(2).selectExpr("id AS k", "3L AS v"), 2)
    merge(spark.range(30).selectExpr("id AS k", "4L AS v"), 1)
    assert engines(plain) == ["delta-rs", "Apache-Spark"]
    assert sorted(tuple(r) for r in spark.read.format("delta").load(plain).collect()) == [(k, 2) for k in range(20)]

    nested = str(tmp_path / "nested")  # a struct key: pyarrow cannot group it for the duplicate check
    merge = merge_batch(DeltaSink(type="delta", path=nested, mode="merge", keys=["k"]), query)
    merge(spark.range(3).selectExpr("named_struct('a', id) AS k", "0L AS v"), 0)
    merge(spark.range(2).selectExpr("named_struct('a', id) AS k", "1L AS v"), 1)
    assert engines(nested) == ["Apache-Spark"]

    sink = DeltaSink(type="delta", path=vectors, mode="merge", keys=["k"], deletion_vectors=True)
    merge = merge_batch(sink, query)
    merge(spark.range(10).selectExpr("id AS k", "0L AS v"), 0)
    merge(spark.range(3).selectExpr("id AS k", "1L AS v"), 1)
    assert engines(vectors) == ["Apache-Spark"]
    insisting = DeltaSink(type="delta", path=vectors, mode="merge", keys=["k"], engine="delta-rs")
    with pytest.raises(
        PipelineError, match=r"delta-rs does not write this table \(deletionVectors\); use engine spark"
    ):
        merge_batch(insisting, query)(spark.range(3).selectExpr("id AS k", "2L AS v"), 2)


# ------------------------------------------------------------------------------------------ waiting


class _FakeClock:
    """time.monotonic/sleep on a clock that moves only when slept on: waits are checked without timing them."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class _FakeQuery:
    def __init__(self, clock: _FakeClock, ends_at: float) -> None:
        self.clock, self.ends_at = clock, ends_at

    @property
    def isActive(self) -> bool:  # pyspark's name
        return self.clock.now < self.ends_at

    def exception(self) -> None:
        return None


class _NoProgress:
    def poll(self) -> None:
        pass

    def info(self) -> dict[str, Any]:
        return {}


@pytest.mark.parametrize("ends", [[1.23], [0.61, 2.07]])
def test_run_notices_the_end_of_its_queries_within_a_tick(monkeypatch: pytest.MonkeyPatch, ends: list[float]) -> None:
    """An availableNow run returns as soon as its last query stops, not at the next 0.5 s progress poll
    (which added up to 0.5 s to every archive and made benchmark times come in 0.5 s steps)."""
    from logbroker.spark import pipeline

    clock = _FakeClock()
    monkeypatch.setattr(pipeline, "time", clock)
    queries: list[Any] = [_FakeQuery(clock, end) for end in ends]
    assert pipeline._wait(queries, _NoProgress(), None, None) == "finished"  # type: ignore[arg-type]
    assert max(ends) <= clock.now <= max(ends) + pipeline._TICK + 1e-9
    clock.now = 0.0
    assert pipeline._wait(queries, _NoProgress(), 0.3, None) == "timeout"  # type: ignore[arg-type]
    assert 0.3 <= clock.now <= 0.3 + 1e-9


# ------------------------------------------------------------------------------------------ archive


def test_archive_available_now_twice(spark: SparkSession, backend: str, tmp_path: Path) -> None:
    from logbroker.spark.builtins import archive

    topic = create_topic(backend, "pl-arch")
    first = produce(backend, topic, rows_for(3, 4))
    out = tmp_path / "archive"
    seen: list[dict[str, Any]] = []
    r1 = archive(backend, out, topics=[topic], max_offsets_per_trigger=5, spark=spark, progress=seen.append,
                 timeout=300)  # fmt: skip
    assert r1.stopped == "finished" and r1.rows_in == len(first) and r1.batches >= 3, r1
    assert r1.lag == 0 and seen and seen[-1]["rows"] == len(first)
    assert archive_rows(spark, out) == with_date(first)
    assert (out / "_spark_metadata").is_dir() and (out / "_checkpoint" / "0" / "commits").is_dir()
    assert {p.name for p in out.iterdir() if p.name.startswith("topic=")} == {f"topic={topic}"}

    second = produce(backend, topic, rows_for(3, 2, start=4))
    r2 = archive(backend, out, topics=[topic], spark=spark, progress=False, timeout=300)
    assert r2.rows_in == len(second), "the second run must read only what was produced after the first"
    assert archive_rows(spark, out) == with_date(first + second)


@pytest.mark.kafka_side_in_full_tier
def test_archive_kill_9_and_restart_is_exactly_once(spark: SparkSession, backend: str, tmp_path: Path) -> None:
    """SIGKILL the pipeline process (Python and its JVM) after its first committed batch, restart:
    every record is in the archive exactly once."""
    from logbroker.spark.builtins import archive, read_archive

    topic = create_topic(backend, "pl-kill")
    produced = produce(backend, topic, rows_for(3, 1500, size=20))
    out = tmp_path / "archive"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(HERE / "spark_pipeline_worker.py"), backend, topic, str(out), "150"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)  # fmt: skip
    try:
        first_commit = out / "_checkpoint" / "0" / "commits" / "0"
        deadline = time.monotonic() + 300
        while not first_commit.exists():
            assert proc.poll() is None, f"worker exited early:\n{proc.stdout.read().decode()[-3000:]}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "no committed batch within 300 s"
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(60)
        assert proc.stdout is not None
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    before = read_archive(out, spark).count()
    assert 0 < before < len(produced), f"the kill must land mid-stream ({before} of {len(produced)})"

    result = archive(backend, out, topics=[topic], spark=spark, progress=False, timeout=600)
    assert result.stopped == "finished"
    got = archive_rows(spark, out)
    keys = [(t, p, o) for t, p, o, *_ in got]
    assert len(keys) == len(set(keys)), "duplicates in the archive"
    assert got == with_date(produced)


# ------------------------------------------------------------------------------------------ rollup


def _notification(event_type: str, priority: str, when: dt.datetime, n: int) -> bytes:
    from logbroker.notify.notifier import encode

    msg = {"message_id": unique("m"), "publisher_id": "compute.host", "event_type": event_type,
           "priority": priority, "payload": {"n": n, "pad": "x" * (n % 7)},
           "timestamp": when.strftime("%Y-%m-%d %H:%M:%S.%f")}  # fmt: skip
    return encode({"request_id": f"r{n}"}, msg)


@pytest.mark.kafka_side_in_full_tier
def test_rollup_matches_pandas_with_late_data(spark: SparkSession, backend: str, tmp_path: Path) -> None:
    """Counts and bytes per (minute, event type, priority) equal a pandas group-by over the same
    notifications; late events within the 5-minute watermark update their window, older ones are
    dropped. Event time comes from the notification's timestamp field (Kafka's for a bad record)."""
    try:
        import pandas as pd
    except ImportError:
        missing_tool("pandas is not installed")
    from logbroker.spark.builtins import rollup

    topic = create_topic(backend, "pl-rollup", partitions=2)
    base = dt.datetime.fromtimestamp((T0 // 60_000) * 60, dt.UTC)  # on a minute boundary, an hour back
    kinds = [("compute.start", "INFO"), ("compute.end", "INFO"), ("volume.attach", "ERROR")]
    events: list[tuple[dt.datetime, str, str, int]] = []  # event time, type, priority, size (counted ones)

    def batch(offsets_s: Sequence[int], counted: bool, start: int) -> list[Row]:
        rows: list[Row] = []
        for j, s in enumerate(offsets_s):
            et, pr = kinds[(start + j) % len(kinds)]
            when = base + dt.timedelta(seconds=s)
            value = _notification(et, pr, when, start + j)
            rows.append(((start + j) % 2, None, value, None, ()))
            if counted:
                events.append((when, et, pr, len(value)))
        return rows

    # Phase 1: ten minutes of events; afterwards the watermark is base + 580 s - 5 min = base + 280 s.
    produce(backend, topic, batch(range(0, 600, 20), True, 0))
    out = tmp_path / "rollup"
    r1 = rollup(backend, out, topics=[topic], spark=spark, progress=False, timeout=300)
    assert r1.stopped == "finished" and r1.rows_in == 30
    # Phase 2: late but within the watermark (counted), too late (dropped), and a bad record, which
    # counts as _corrupt at its Kafka timestamp.
    late_ok = batch([460, 340, 300, 575], True, 100)
    too_late = batch([10, 100, 200], False, 200)
    corrupt_ts = int((base + dt.timedelta(seconds=570)).timestamp() * 1000)
    corrupt: list[Row] = [(0, None, b"{not json", corrupt_ts, ())]
    events.append((base + dt.timedelta(seconds=570), "_corrupt", None, len(b"{not json")))  # type: ignore[arg-type]
    produce(backend, topic, late_ok + too_late + corrupt)
    r2 = rollup(backend, out, topics=[topic], spark=spark, progress=False, timeout=300)
    assert r2.rows_in == len(late_ok) + len(too_late) + 1

    def expected() -> list[tuple[Any, ...]]:
        frame = pd.DataFrame(events, columns=["t", "event_type", "priority", "size"])
        frame["window_start"] = frame["t"].dt.floor("min")
        want = frame.groupby(["window_start", "event_type", "priority"], dropna=False).agg(
            count=("size", "size"), bytes=("size", "sum")
        )
        return sorted(
            (int(ws.timestamp() * 1000), int(ws.timestamp() * 1000) + 60_000, et, None if pd.isna(pr) else pr,
             int(row["count"]), int(row["bytes"]))
            for (ws, et, pr), row in want.iterrows()
        )  # fmt: skip

    def got(version: int | None = None) -> list[tuple[Any, ...]]:
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return sorted(
            (r["ws"], r["we"], r["event_type"], r["priority"], r["count"], r["bytes"])
            for r in reader.load(str(out)).selectExpr(
                "unix_millis(window_start) AS ws", "unix_millis(window_end) AS we", "event_type", "priority",
                "count", "bytes").collect()
        )  # fmt: skip

    assert got() == expected()
    after_two = got()
    from delta.tables import DeltaTable

    version_two = DeltaTable.forPath(spark, str(out)).history(1).collect()[0]["version"]
    # Phase 3: more late events in windows already written, and a new minute: merged into their rows.
    produce(backend, topic, batch([590, 480, 650], True, 300))
    r3 = rollup(backend, out, topics=[topic], spark=spark, progress=False, timeout=300)
    assert r3.rows_in == 3
    assert got() == expected()
    history = DeltaTable.forPath(spark, str(out)).history().orderBy("version").collect()
    assert history[0]["operation"] == "WRITE" and {h["operation"] for h in history[1:]} == {"MERGE"}
    assert history[-1]["version"] > version_two
    assert got(version_two) == after_two, "time travel: the table as the second run left it"


# ------------------------------------------------------------------------------------------ CLI


def test_cli_run_and_archive(spark: SparkSession, backend: str, tmp_path: Path) -> None:
    """`pipeline run SPEC.yaml` and `pipeline archive` in-process (they reuse the module's session)."""
    from click.testing import CliRunner

    from logbroker.spark.cli import pipeline

    topic = create_topic(backend, "pl-cli", partitions=1)
    produced = produce(backend, topic, rows_for(1, 5))
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"name: cli\nsource: {{bootstrap: '{backend}', topics: [{topic}]}}\ncheckpoint: {tmp_path / 'cp'}\n"
        "transform: SELECT offset, CAST(value AS STRING) AS text FROM events\n"
        f"sinks: [{{type: parquet, path: '{tmp_path / 'out'}'}}]\n"
    )
    runner = CliRunner()
    res = runner.invoke(pipeline, ["run", str(spec)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "cli: rows=5" in res.stdout
    assert "cli: 5 rows in" in res.stderr, res.stderr  # the progress summary (rich, on stderr)
    rows = sorted((r["offset"], r["text"]) for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert rows == [(o, v.decode()) for _t, _p, o, _k, v, _ts, _h in produced]

    res = runner.invoke(pipeline, ["archive", str(tmp_path / "arch"), "-b", backend, "-t", topic, "-q"],
                        catch_exceptions=False)  # fmt: skip
    assert res.exit_code == 0, res.output
    assert archive_rows(spark, tmp_path / "arch") == with_date(produced)
    res = runner.invoke(pipeline, ["archive", str(tmp_path / "x"), "-b", backend], catch_exceptions=False)
    assert res.exit_code == 2 and "exactly one of --topic or --pattern" in res.stderr
    assert runner.invoke(pipeline, ["replay", "--help"]).exit_code == 0


# ------------------------------------------------------------------------ parquet source, processingTime


def test_parquet_source_batch_and_stream(spark: SparkSession, backend: str, tmp_path: Path) -> None:
    """An archive read back as a source: once as a batch (no checkpoint), and as a file stream
    (checkpoint) that sees only files committed since its last run."""
    from logbroker.notify.notifier import encode
    from logbroker.spark.builtins import archive

    topic = create_topic(backend, "pl-pq", partitions=1)

    def notes(start: int, n: int) -> list[Row]:
        return [(0, None, encode(None, {"message_id": f"m{i}", "event_type": f"e{i % 2}", "priority": "INFO",
                                        "payload": {"i": i}, "timestamp": "2026-01-02 03:04:05.000000"}),
                 T0 + i, ()) for i in range(start, start + n)]  # fmt: skip

    produce(backend, topic, notes(0, 4))
    arch = tmp_path / "archive"
    archive(backend, arch, topics=[topic], spark=spark, progress=False, timeout=300)
    fields: dict[str, Any] = {
        "source": {"kind": "parquet", "path": str(arch)},
        "decode": {"format": "notify"},
        "transform": "SELECT message_id, event_type, offset FROM events",
    }
    batch = spec_for(backend, topic, tmp_path, checkpoint=None,
                     sinks=[{"type": "parquet", "path": str(tmp_path / "b")}], **fields)  # fmt: skip
    assert run_spec(spark, batch).rows_in == 4
    got = sorted(tuple(r) for r in spark.read.parquet(str(tmp_path / "b")).collect())
    assert got == [(f"m{i}", f"e{i % 2}", i) for i in range(4)]

    stream = spec_for(backend, topic, tmp_path, checkpoint=str(tmp_path / "cp"),
                      sinks=[{"type": "parquet", "path": str(tmp_path / "s")}], **fields)  # fmt: skip
    assert run_spec(spark, stream).rows_in == 4
    produce(backend, topic, notes(4, 3))
    archive(backend, arch, topics=[topic], spark=spark, progress=False, timeout=300)
    assert run_spec(spark, stream).rows_in == 3, "the file stream must only read the new archive files"
    got = sorted(tuple(r) for r in spark.read.parquet(str(tmp_path / "s")).collect())
    assert got == [(f"m{i}", f"e{i % 2}", i) for i in range(7)]


def test_processing_time_runs_until_stopped(spark: SparkSession, backend: str, tmp_path: Path) -> None:
    """A processingTime pipeline keeps running (data produced while it runs is picked up) until
    stopped; it is then stopped cleanly and the next run resumes from the checkpoint."""
    from logbroker.spark.pipeline import run
    from logbroker.spark.spec import load_spec

    topic = create_topic(backend, "pl-pt")
    first = produce(backend, topic, rows_for(3, 2))
    sink = {"type": "parquet", "path": str(tmp_path / "out"), "partition_by": ["partition"]}
    spec = load_spec(spec_for(backend, topic, tmp_path, trigger={"processing_time": "1 second"}, sinks=[sink]))
    produced_more: list[tuple[Any, ...]] = []

    def until(info: dict[str, Any]) -> bool:
        if info["rows"] >= len(first) and not produced_more:
            produced_more.extend(produce(backend, topic, rows_for(3, 1, start=2)))
        return info["rows"] >= len(first) + len(produced_more) > len(first)

    result = run(spec, spark=spark, progress=False, timeout=300, until=until)
    assert result.stopped == "until", result
    assert not spark.streams.active
    offsets = sorted((r["partition"], r["offset"]) for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert offsets == sorted((p, o) for _t, p, o, *_ in first + produced_more)
    last = produce(backend, topic, [(1, b"last", b"v", T0, ())])
    again = run(spec, spark=spark, progress=False, timeout=300, until=lambda info: info["rows"] >= 1)
    assert again.stopped == "until" and again.rows_in == 1, again
    offsets = sorted((r["partition"], r["offset"]) for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert offsets == sorted((p, o) for _t, p, o, *_ in first + produced_more + last)


def test_data_loss_is_reported_per_fail_on_data_loss(spark: SparkSession, backend: str, tmp_path: Path) -> None:
    """Records deleted before the archive read them: the run fails naming failOnDataLoss (default),
    or with fail_on_data_loss=False archives what is left."""
    from logbroker.spark.builtins import archive
    from logbroker.spark.pipeline import PipelineError

    topic = create_topic(backend, "pl-loss", partitions=1)
    first = produce(backend, topic, rows_for(1, 3))
    out = tmp_path / "archive"
    archive(backend, out, topics=[topic], spark=spark, progress=False, timeout=300)
    later = produce(backend, topic, rows_for(1, 4, start=3))  # offsets 3..6; 3 and 4 are deleted unread
    admin = AdminClient({"bootstrap.servers": backend})
    for fut in admin.delete_records([TopicPartition(topic, 0, 5)]).values():
        assert fut.result(30).low_watermark == 5
    with pytest.raises(PipelineError, match=r"(?i)failOnDataLoss|data may have been lost"):
        archive(backend, out, topics=[topic], spark=spark, progress=False, timeout=300)
    assert archive_rows(spark, out) == with_date(first)
    # The operator accepts the loss: the same checkpoint, resumed leniently, archives what is left.
    archive(backend, out, topics=[topic], spark=spark, progress=False, timeout=300, fail_on_data_loss=False)
    assert archive_rows(spark, out) == with_date(first + [r for r in later if r[2] >= 5])
