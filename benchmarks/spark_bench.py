"""Archive throughput (MB/s) of the Spark `archive` pipeline on logbroker vs Apache Kafka, vs a plain consumer.

    .venv/bin/python benchmarks/spark_bench.py [--records 1000000 | --quick] [--size 1024] [--partitions 4]
                                               [--targets logbroker,kafka] [--masters local,cluster] [--merge]
                                               [--json out.json]

For each broker, in one run (one SparkSession, local[2]): start it (logbroker as a `logbroker serve`
process, Apache Kafka as logbroker_devtools.testing.peers.KafkaPeer, so both brokers live outside this process), produce
N records of SIZE random bytes (incompressible; 10-byte keys) with confluent-kafka, untimed, then time:

* spark: `logbroker.spark.builtins.archive` end to end (call to return: query start, one availableNow
  batch through Spark's Kafka connector, Parquet partitioned by topic/date, commit), then check the
  archive holds N rows (untimed);
* plain: one confluent-kafka consumer (assign, earliest to the high watermarks) building pyarrow tables
  of the same columns, written with pyarrow every --batch rows (snappy, as Spark), partitioned the same.

``--methods spark,plain,replay`` also times `logbroker.spark.replay` of that archive into a new topic
(keep_partition=True, idempotent acks=all producers in the Spark tasks).

``--masters local,cluster`` runs everything in local[2] and again on a Spark standalone cluster of two
one-core workers on loopback (logbroker_devtools.testing.spark_cluster; archives at file:// URLs), one session each.

``--merge`` also times the rollup's sink: B batches of R rows merged into a table of K keys, by logbroker's Delta
`merge` sink (transaction ids on; engine auto, which is delta-rs in local[2]) and by the Parquet upsert sink it retired
(benchmarks/old_upsert.py), in local[2]; rows/s = B * R / seconds. Two key patterns: "recent" (a rollup's:
half of each batch updates the newest tenth of the keys, half adds new keys, so the table grows) and
"random" (updates anywhere in the table: the full rewrite's best case).

MB/s counts record values only (N * SIZE / 1e6 per second). Both brokers run for the whole session; a small
untimed archive (--warmup records) on each warms the JVM and that broker up first. Every method is then timed
--rounds times per target, the order turning each round (A B, B A, A B), and the targets are compared on their
medians: the Spark JVM keeps warming for several archives, so whatever ran second ran faster (200k records: the
same broker 0.6-1.5 s faster second than first; benchmarks/wire_trace.py shows the time is Spark's), and the
first timed archive is still the slowest; three rounds let each target's median leave it out. On a
shared machine the numbers move with its load: the 1-minute load average is printed with them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
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
        from logbroker_devtools.testing.process import BrokerProcess

        with BrokerProcess(workdir / "logbroker-data", own_session=True) as proc:  # as KafkaPeer: see BrokerProcess
            yield proc.bootstrap
    elif name == "kafka":
        from logbroker_devtools.testing.peers import KafkaPeer

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

    where = out.as_uri()  # a URL: what a cluster needs, and the same directory in local mode
    start = time.perf_counter()
    result = archive(bootstrap, where, topics=[topic], spark=spark, progress=False, timeout=3600)
    seconds = time.perf_counter() - start
    rows = read_archive(where, spark).count()
    if result.rows_in != rows:
        raise RuntimeError(f"archive read {result.rows_in} records but holds {rows}")
    return seconds, rows


def spark_replay(spark: Any, bootstrap: str, topic: str, partitions: int, out: Path) -> tuple[float, int]:
    """Seconds to replay an archive of the topic (archived first, untimed) into a new topic."""
    from logbroker.spark.replay import replay

    spark_archive(spark, bootstrap, topic, out)
    target = create_topic(bootstrap, partitions)
    start = time.perf_counter()
    sent = replay(out.as_uri(), bootstrap, target, spark=spark, keep_partition=True)
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


def merge_bench(spark: Any, workdir: Path, keys: int, batches: int, rows: int, pattern: str) -> list[dict[str, Any]]:
    """Rows/s of B merges of R rows into a K-key table: Delta MERGE (the merge sink) vs the retired upsert."""
    import random

    from old_upsert import upsert_batch

    from logbroker.spark.pipeline import _QueryId, merge_batch
    from logbroker.spark.spec import DeltaSink

    schema = "window_start BIGINT, event_type STRING, count BIGINT, bytes BIGINT"
    rng = random.Random(7)

    def frame(ids: list[int], round_: int) -> Any:
        return spark.createDataFrame([(k // 40, f"type-{k % 40}", round_, k * round_) for k in ids], schema)

    sinks: dict[str, Any] = {}
    query = _QueryId()
    query.set(uuid.uuid4().hex)
    sinks["delta merge"] = merge_batch(DeltaSink(type="delta", path=str(workdir / f"delta-{pattern}"), mode="merge",
                                                 keys=["window_start", "event_type"]), query)  # fmt: skip
    sinks["old upsert"] = upsert_batch(str(workdir / f"upsert-{pattern}"), ["window_start", "event_type"])
    if pattern == "random":  # every batch updates keys anywhere in the table (a full rewrite's best case)
        plan = [rng.sample(range(keys), rows) for _ in range(batches)]
    else:  # "recent", a rollup's: half the rows update the newest tenth of the keys, half are new keys
        plan, top = [], keys
        for _ in range(batches):
            plan.append(rng.sample(range(top - keys // 10, top), rows // 2) + list(range(top, top + rows // 2)))
            top += rows // 2
    out = []
    for name, merge in sinks.items():
        merge(frame(list(range(keys)), 0), 0)  # the table, untimed
        load = load_average()
        start = time.perf_counter()
        for b, ids in enumerate(plan, 1):
            merge(frame(ids, b), b)
        seconds = time.perf_counter() - start
        out.append({"target": pattern, "master": "local[2]", "method": name, "records": batches * rows,
                    "seconds": round(seconds, 2), "records_per_s": round(batches * rows / seconds), "mb_per_s": 0.0,
                    "keys": keys, "load_1m": load})  # fmt: skip
        print(f"{name} ({pattern}): {batches} x {rows:,} rows into {keys:,} keys in {seconds:.1f}s", file=sys.stderr,
              flush=True)  # fmt: skip
    return out


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for master in args.masters:
        results += run_on(args, master)
    return results


def run_on(args: argparse.Namespace, where: str) -> list[dict[str, Any]]:
    from logbroker.spark import session

    workdir = Path(tempfile.mkdtemp(prefix="spark-bench-", dir=args.workdir))
    stack = contextlib.ExitStack()
    if where == "cluster":
        from logbroker_devtools.testing.spark_cluster import SparkStandalone

        master = stack.enter_context(SparkStandalone(workers=2, worker_memory="2g")).master_url
        conf = {"spark.executor.memory": "1500m", "spark.cores.max": "2"}
        label = "cluster:2x1"
    else:
        master, conf, label = "local[2]", {"spark.driver.memory": "2g"}, "local[2]"
    spark = session(master=master, app_name="logbroker-spark-bench", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    results: list[dict[str, Any]] = []
    mb = args.records * args.size / 1e6
    try:
        if args.merge and where == "local":
            for pattern in ("recent", "random"):
                results += merge_bench(spark, workdir / "merge", args.merge_keys, args.merge_batches,
                                       args.merge_rows, pattern)  # fmt: skip
        bootstraps = {name: stack.enter_context(broker(name, workdir / name)) for name in args.targets}
        topics, produced = {}, {}
        for name, bootstrap in bootstraps.items():
            # JIT, class loading, the first Parquet writer, and each broker's own first requests: not measured
            warm = create_topic(bootstrap, args.partitions)
            produce(bootstrap, warm, args.warmup, args.size)
            spark_archive(spark, bootstrap, warm, workdir / f"warmup-{name}")
            shutil.rmtree(workdir / f"warmup-{name}", ignore_errors=True)
            topics[name] = create_topic(bootstrap, args.partitions)
            produced[name] = produce(bootstrap, topics[name], args.records, args.size)
            print(f"{name}: produced {args.records:,} x {args.size} B in {produced[name]:.1f}s "
                  f"({mb / produced[name]:.0f} MB/s)", file=sys.stderr, flush=True)  # fmt: skip
        for round_ in range(args.rounds):
            # The order turns every round (A B, B A, ...): what runs later finds the JVM warmer.
            for name in args.targets if round_ % 2 == 0 else args.targets[::-1]:
                bootstrap, topic = bootstraps[name], topics[name]
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
                    results.append({"target": name, "master": label, "method": method, "records": rows,
                                    "size": args.size, "round": round_ + 1,
                                    "partitions": args.partitions, "seconds": round(seconds, 2),
                                    "records_per_s": round(rows / seconds), "mb_per_s": round(mb / seconds, 1),
                                    "produce_mb_per_s": round(mb / produced[name], 1), "load_1m": load})  # fmt: skip
                    print(f"{label} {name}/{method} (round {round_ + 1}): {seconds:.1f}s, {mb / seconds:.1f} MB/s "
                          f"(load {load})", file=sys.stderr, flush=True)  # fmt: skip
                    shutil.rmtree(out, ignore_errors=True)
    finally:
        spark.stop()
        stack.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def medians(results: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Per (master, target, method), its median over the rounds (rates recomputed from the median time)."""
    runs: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in results:
        runs.setdefault((r["master"], r["target"], r["method"]), []).append(r)
    out = {}
    for key, rs in runs.items():
        seconds = statistics.median(r["seconds"] for r in rs)
        scale = rs[0]["seconds"] / seconds
        out[key] = {**rs[0], "seconds": seconds, "records_per_s": round(rs[0]["records_per_s"] * scale),
                    "mb_per_s": round(rs[0]["mb_per_s"] * scale, 1)}  # fmt: skip
    return out


def report(results: list[dict[str, Any]]) -> str:
    lines = [f"{'master':<12} {'target':<10} {'method':<12} {'records':>10} {'seconds':>8} {'records/s':>10} "
             f"{'MB/s':>7} {'load':>5}"]  # fmt: skip
    for r in results:
        lines.append(f"{r['master']:<12} {r['target']:<10} {r['method']:<12} {r['records']:>10,} {r['seconds']:>8.1f} "
                     f"{r['records_per_s']:>10,} {r['mb_per_s']:>7.1f} {r['load_1m']:>5.1f}")  # fmt: skip
    rate = medians(results)
    for master in dict.fromkeys(r["master"] for r in results):
        lb, kf = rate.get((master, "logbroker", "spark")), rate.get((master, "kafka", "spark"))
        if lb and kf:
            lines.append(f"spark archive on {master}, logbroker / kafka: {lb['mb_per_s'] / kf['mb_per_s']:.2f}x")
        for target in TARGETS:
            sp, pl = rate.get((master, target, "spark")), rate.get((master, target, "plain"))
            if sp and pl:
                ratio = sp["mb_per_s"] / pl["mb_per_s"]
                lines.append(f"{master} {target}: spark / plain consumer+pyarrow: {ratio:.2f}x")
    for target in TARGETS:
        loc, cl = rate.get(("local[2]", target, "spark")), rate.get(("cluster:2x1", target, "spark"))
        if loc and cl:
            ratio = cl["mb_per_s"] / loc["mb_per_s"]
            lines.append(f"{target}: archive on the 2-worker cluster / local[2]: {ratio:.2f}x")
    for pattern in ("recent", "random"):
        dm, up = rate.get(("local[2]", pattern, "delta merge")), rate.get(("local[2]", pattern, "old upsert"))
        if dm and up:
            d, u = dm["records_per_s"], up["records_per_s"]
            lines.append(f"merge ({pattern} keys): delta {d:,} rows/s, old upsert {u:,} rows/s: {d / u:.2f}x")
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
    ap.add_argument("--masters", default="local", help="comma-separated: local (local[2]), cluster (2 workers)")
    ap.add_argument("--merge", action="store_true", help="also time Delta merge against the retired upsert sink")
    ap.add_argument("--merge-keys", type=int, default=200_000)
    ap.add_argument("--merge-batches", type=int, default=8)
    ap.add_argument("--merge-rows", type=int, default=20_000)
    ap.add_argument("--workdir", help="where brokers and archives live (default: the temp dir)")
    ap.add_argument("--warmup", type=int, default=20_000, help="records of each target's untimed warm-up archive")
    ap.add_argument("--rounds", type=int, default=3,
                    help="measurements per target, the order turning each round; the median is compared")  # fmt: skip
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    if args.quick:
        args.records = 100_000
    args.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    args.masters = [m.strip() for m in args.masters.split(",") if m.strip()]
    if unknown := set(args.masters) - {"local", "cluster"}:
        ap.error(f"unknown master(s): {', '.join(sorted(unknown))}")
    if unknown := set(args.methods) - {"spark", "plain", "replay"}:
        ap.error(f"unknown method(s): {', '.join(sorted(unknown))}")
    results = run(args)
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
