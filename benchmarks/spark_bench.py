"""Archive throughput (MB/s) of the Spark `archive` pipeline on logbroker vs Apache Kafka, vs a plain consumer.

    .venv/bin/python benchmarks/spark_bench.py [--records 1000000 | --quick] [--size 1024] [--partitions 4]
                                               [--targets logbroker,kafka] [--json out.json]

For each broker, in one run (one SparkSession, local[2]): start it (logbroker as a `logbroker serve`
process, Apache Kafka as logbroker.testing.peers.KafkaPeer, so both brokers live outside this process), produce
N records of SIZE random bytes (incompressible; 10-byte keys) with confluent-kafka, untimed, then time:

* spark: `logbroker.spark.builtins.archive` end to end (call to return: query start, one availableNow
  batch through Spark's Kafka connector, Parquet partitioned by topic/date, commit), then check the
  archive holds N rows (untimed);
* plain: one confluent-kafka consumer (assign, earliest to the high watermarks) building pyarrow tables
  of the same columns, written with pyarrow every --batch rows (snappy, as Spark), partitioned the same.

``--methods spark,plain,replay`` also times `logbroker.spark.replay` of that archive into a new topic
(keep_partition=True, idempotent acks=all producers in the Spark tasks).

MB/s counts record values only (N * SIZE / 1e6 per second). A small untimed archive warms the JVM up
first. On a shared machine the numbers move with its load: the 1-minute load average is printed with them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TARGETS = ("logbroker", "kafka")


@contextlib.contextmanager
def broker(name: str, workdir: Path) -> Iterator[str]:
    """A broker in its own process, so neither competes with this process's GIL."""
    workdir.mkdir(parents=True, exist_ok=True)
    if name == "logbroker":
        from logbroker.testing.process import BrokerProcess

        with BrokerProcess(workdir / "logbroker-data") as proc:
            yield proc.bootstrap
    elif name == "kafka":
        from logbroker.testing.peers import KafkaPeer

        with KafkaPeer(server_properties={"group.initial.rebalance.delay.ms": 0}, heap="1g") as peer:
            yield peer.bootstrap
    else:
        raise SystemExit(f"unknown target {name!r} (choose from {', '.join(TARGETS)})")


def create_topic(bootstrap: str, partitions: int) -> str:
    name = f"spark-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=10).topics.get(name)
        if md is not None and md.error is None and len(md.partitions) == partitions:
            return name
        time.sleep(0.1)
    raise RuntimeError(f"topic {name} did not appear")


def produce(bootstrap: str, topic: str, records: int, size: int) -> float:
    """N records spread over the partitions by their distinct keys; returns the seconds it took."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "batch.size": 1 << 20,
                         "queue.buffering.max.kbytes": 1 << 20, "compression.type": "none"})  # fmt: skip
    failed: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None and len(failed) < 5:
            failed.append(err.str())

    start = time.perf_counter()
    for i in range(records):
        value = os.urandom(size)
        while True:
            try:
                producer.produce(topic, value=value, key=b"%010d" % i, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(300) or failed:
        raise RuntimeError(f"produce failed: {failed}")
    return time.perf_counter() - start


def spark_archive(spark: Any, bootstrap: str, topic: str, out: Path) -> tuple[float, int]:
    """Seconds for the built-in archive pipeline, and the rows the archive then holds."""
    from logbroker.spark.builtins import archive, read_archive

    start = time.perf_counter()
    result = archive(bootstrap, out, topics=[topic], spark=spark, progress=False, timeout=3600)
    seconds = time.perf_counter() - start
    rows = read_archive(out, spark).count()
    if result.rows_in != rows:
        raise RuntimeError(f"archive read {result.rows_in} records but holds {rows}")
    return seconds, rows


def spark_replay(spark: Any, bootstrap: str, topic: str, partitions: int, out: Path) -> tuple[float, int]:
    """Seconds to replay an archive of the topic (archived first, untimed) into a new topic."""
    from logbroker.spark.replay import replay

    spark_archive(spark, bootstrap, topic, out)
    target = create_topic(bootstrap, partitions)
    start = time.perf_counter()
    sent = replay(out, bootstrap, target, spark=spark, keep_partition=True)
    return time.perf_counter() - start, sent


def plain_archive(bootstrap: str, topic: str, partitions: int, out: Path, batch_rows: int) -> tuple[float, int]:
    """The same archive with one confluent-kafka consumer and pyarrow: the no-Spark baseline."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    schema = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("headers", pa.list_(header)),
                        ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", pa.timestamp("ms", "UTC")),
                        ("timestampType", pa.int32()), ("topic", pa.string())])  # fmt: skip
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"plain-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "fetch.queue.backoff.ms": 1, "queued.max.messages.kbytes": 256 << 10})  # fmt: skip
    cols: dict[str, list[Any]] = {name: [] for name in schema.names}
    written = 0

    def flush() -> None:
        nonlocal written
        if not cols["offset"]:
            return
        table = pa.Table.from_pydict(cols, schema=schema)
        day = pc.cast(pc.divide(pc.cast(table["timestamp"], pa.int64()), 86_400_000), pa.int32())
        table = table.append_column("date", pc.cast(day, pa.date32()))
        pq.write_to_dataset(table, out, partition_cols=["topic", "date"], compression="snappy")
        written += table.num_rows
        for values in cols.values():
            values.clear()

    start = time.perf_counter()
    try:
        consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
        pending = set(range(partitions))
        while pending:
            for msg in consumer.consume(10_000, timeout=1.0):
                err = msg.error()
                if err is not None:
                    if err.code() == -191:  # _PARTITION_EOF
                        pending.discard(msg.partition())
                        continue
                    raise RuntimeError(err.str())
                kind, ts = msg.timestamp()
                cols["key"].append(msg.key())
                cols["value"].append(msg.value())
                cols["headers"].append([{"key": k, "value": v} for k, v in msg.headers() or ()])
                cols["partition"].append(msg.partition())
                cols["offset"].append(msg.offset())
                cols["timestamp"].append(ts)
                cols["timestampType"].append(kind - 1)  # librdkafka 1/2 = Kafka 0/1 (Create/LogAppend)
                cols["topic"].append(topic)
            if len(cols["offset"]) >= batch_rows:
                flush()
        flush()
    finally:
        consumer.close()
    return time.perf_counter() - start, written


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from logbroker.spark import session

    workdir = Path(tempfile.mkdtemp(prefix="spark-bench-", dir=args.workdir))
    spark = session(master="local[2]", app_name="logbroker-spark-bench", conf={"spark.driver.memory": "2g"})
    spark.sparkContext.setLogLevel("ERROR")
    results: list[dict[str, Any]] = []
    mb = args.records * args.size / 1e6
    try:
        for i, name in enumerate(args.targets):
            with broker(name, workdir / name) as bootstrap:
                if i == 0:  # JIT, class loading and the first Parquet writer: not part of any measurement
                    warm = create_topic(bootstrap, args.partitions)
                    produce(bootstrap, warm, 20_000, args.size)
                    spark_archive(spark, bootstrap, warm, workdir / "warmup")
                topic = create_topic(bootstrap, args.partitions)
                produced = produce(bootstrap, topic, args.records, args.size)
                print(f"{name}: produced {args.records:,} x {args.size} B in {produced:.1f}s "
                      f"({mb / produced:.0f} MB/s)", file=sys.stderr, flush=True)  # fmt: skip
                for method in args.methods:
                    load = load_average()
                    out = workdir / f"{name}-{method}"
                    if method == "spark":
                        seconds, rows = spark_archive(spark, bootstrap, topic, out)
                    elif method == "replay":
                        seconds, rows = spark_replay(spark, bootstrap, topic, args.partitions, out)
                    else:
                        seconds, rows = plain_archive(bootstrap, topic, args.partitions, out, args.batch)
                    if rows != args.records:
                        raise RuntimeError(f"{name}/{method}: archived {rows} of {args.records} records")
                    results.append({"target": name, "method": method, "records": rows, "size": args.size,
                                    "partitions": args.partitions, "seconds": round(seconds, 2),
                                    "records_per_s": round(rows / seconds), "mb_per_s": round(mb / seconds, 1),
                                    "produce_mb_per_s": round(mb / produced, 1), "load_1m": load})  # fmt: skip
                    print(f"{name}/{method}: {seconds:.1f}s, {mb / seconds:.1f} MB/s (load {load})",
                          file=sys.stderr, flush=True)  # fmt: skip
                    shutil.rmtree(out, ignore_errors=True)
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def report(results: list[dict[str, Any]]) -> str:
    lines = [f"{'target':<10} {'method':<6} {'records':>10} {'seconds':>8} {'records/s':>10} {'MB/s':>7} {'load':>5}"]
    for r in results:
        lines.append(f"{r['target']:<10} {r['method']:<6} {r['records']:>10,} {r['seconds']:>8.1f} "
                     f"{r['records_per_s']:>10,} {r['mb_per_s']:>7.1f} {r['load_1m']:>5.1f}")  # fmt: skip
    rate = {(r["target"], r["method"]): r["mb_per_s"] for r in results}
    if ("logbroker", "spark") in rate and ("kafka", "spark") in rate:
        lines.append(f"spark archive, logbroker / kafka: {rate['logbroker', 'spark'] / rate['kafka', 'spark']:.2f}x")
    for target in TARGETS:
        if (target, "spark") in rate and (target, "plain") in rate:
            lines.append(f"{target}: spark / plain consumer+pyarrow: "
                         f"{rate[target, 'spark'] / rate[target, 'plain']:.2f}x")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--quick", action="store_true", help="100,000 records")
    ap.add_argument("--size", type=int, default=1024, help="value bytes per record")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch", type=int, default=100_000, help="rows per Parquet write of the plain baseline")
    ap.add_argument("--targets", default=",".join(TARGETS), help="comma-separated: logbroker, kafka")
    ap.add_argument("--methods", default="spark,plain",
                    help="comma-separated: spark, plain, replay (archive -> new topic, opt-in)")  # fmt: skip
    ap.add_argument("--workdir", help="where brokers and archives live (default: the temp dir)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    if args.quick:
        args.records = 100_000
    args.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if unknown := set(args.methods) - {"spark", "plain", "replay"}:
        ap.error(f"unknown method(s): {', '.join(sorted(unknown))}")
    results = run(args)
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
