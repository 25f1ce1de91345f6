"""Rows/s of the Delta `merge` sink (logbroker.spark.pipeline.merge_batch) into a large table, with its file counts.

    .venv/bin/python benchmarks/delta_merge.py [--keys 1000000] [--rows 20000,100000] [--batches 8]
                                               [--patterns recent,random] [--variants plain,prune,dv,rs]
                                               [--compact-every 0] [--json out.json]

One SparkSession (local[2], the session logbroker.spark.session() builds). For each variant, pattern and batch
size: a table of K keys is written (untimed), then B batches of R rows go through the sink's foreachBatch body,
each tagged with Delta's transaction ids as a streaming query's would be; rows/s = B * R / seconds. Batches are
built and cached before the clock starts, so the time is the merge's, not Python's row building. After the last
batch: the table's file count and size, and the time of one full read (count and a sum over every row), since
small files and deletion vectors cost readers.

Patterns: "recent" (a rollup's: half of each batch updates the newest tenth of the keys, half adds new keys, so the
table grows at its end) and "random" (updates anywhere in the table). Variants, the first three Spark's MERGE:
"plain" (every file is scanned and every touched file rewritten whole), "prune" (the batch's key ranges in the
merge condition: files outside them are neither scanned nor rewritten), "dv" (prune, and a table with deletion
vectors: touched files get a vector instead of a rewrite); "rs" is prune with engine auto (the default: delta-rs
on a local master, the batch collected to the driver as Arrow and merged there). Keys are (window_start
BIGINT, event_type STRING), 40 types per window, as a rollup's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

SCHEMA = "window_start BIGINT, event_type STRING, count BIGINT, bytes BIGINT"


def frame(spark: Any, ids: Any, round_: int) -> Any:
    """Rows of keys `ids` (a numpy array) for round `round_`, built through Arrow (Python tuples cost seconds)."""
    import pandas as pd

    pdf = pd.DataFrame({"window_start": ids // 40, "event_type": [f"type-{k % 40}" for k in ids.tolist()],
                        "count": round_, "bytes": ids * round_})  # fmt: skip
    return spark.createDataFrame(pdf, SCHEMA)


def plan(keys: int, batches: int, rows: int, pattern: str) -> list[Any]:
    import numpy as np

    rng = np.random.default_rng(7)
    if pattern == "random":
        return [rng.choice(keys, rows, replace=False) for _ in range(batches)]
    out, top = [], keys
    for _ in range(batches):
        old = rng.choice(np.arange(top - keys // 10, top), rows // 2, replace=False)
        out.append(np.concatenate([old, np.arange(top, top + rows // 2)]))
        top += rows // 2
    return out


def table_files(spark: Any, path: str) -> tuple[int, int]:
    from delta.tables import DeltaTable

    detail = DeltaTable.forPath(spark, path).detail().collect()[0]
    return int(detail["numFiles"]), int(detail["sizeInBytes"])


def one(spark: Any, workdir: Path, variant: str, pattern: str, keys: int, batches: int, rows: int,
        compact_every: int) -> dict[str, Any]:  # fmt: skip
    from logbroker.spark.pipeline import _QueryId, merge_batch
    from logbroker.spark.spec import DeltaSink

    path = str(workdir / f"{variant}-{pattern}-{rows}")
    sink = DeltaSink(type="delta", path=path, mode="merge", keys=["window_start", "event_type"],
                     deletion_vectors=variant == "dv", prune=variant != "plain", compact_every=compact_every,
                     engine="auto" if variant == "rs" else "spark")  # fmt: skip
    query = _QueryId()
    query.set(uuid.uuid4().hex)
    merge = merge_batch(sink, query)
    merge(spark.range(keys).selectExpr("id div 40 AS window_start", "concat('type-', id % 40) AS event_type",
                                       "0L AS count", "0L AS bytes"), 0)  # fmt: skip
    frames = [frame(spark, ids, b).persist() for b, ids in enumerate(plan(keys, batches, rows, pattern), 1)]
    for f in frames:
        f.count()
    times = []
    start = time.perf_counter()
    for b, f in enumerate(frames, 1):
        t0 = time.perf_counter()
        merge(f, b)
        times.append(time.perf_counter() - t0)
    seconds = time.perf_counter() - start
    for f in frames:
        f.unpersist()
    files, size = table_files(spark, path)
    t0 = time.perf_counter()
    got = spark.read.format("delta").load(path).selectExpr("count(*) AS n", "sum(count) AS s").collect()[0]
    read = time.perf_counter() - t0
    expect = keys + (batches * rows // 2 if pattern == "recent" else 0)
    if got["n"] != expect:
        raise RuntimeError(f"{variant}/{pattern}: table has {got['n']} rows, expected {expect}")
    shutil.rmtree(path, ignore_errors=True)
    row = {"variant": variant, "pattern": pattern, "keys": keys, "rows": rows, "batches": batches,
           "seconds": round(seconds, 2), "rows_per_s": round(batches * rows / seconds),
           "median_merge_s": round(statistics.median(times), 2), "files": files, "mb": round(size / 1e6, 1),
           "read_s": round(read, 2), "compact_every": compact_every}  # fmt: skip
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--rows", default="20000,100000", help="comma-separated batch sizes")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--patterns", default="recent,random")
    ap.add_argument("--variants", default="plain,prune,dv,rs")
    ap.add_argument("--compact-every", type=int, default=0, help="the sink's compact_every (0: never)")
    ap.add_argument("--workdir", help="where tables live (default: the temp dir)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()

    from logbroker.spark import session

    conf = {"spark.driver.memory": "3g", "spark.sql.execution.arrow.pyspark.enabled": "true"}
    spark = session(master="local[2]", app_name="logbroker-delta-merge-bench", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    workdir = Path(tempfile.mkdtemp(prefix="delta-merge-", dir=args.workdir))
    results = []
    try:
        # untimed: the JVM's first MERGE (class loading, JIT) is not the sink's cost
        one(spark, workdir, "prune", "recent", 50_000, 2, 5_000, 0)
        one(spark, workdir, "rs", "recent", 50_000, 2, 5_000, 0)
        for rows in [int(r) for r in args.rows.split(",")]:
            for pattern in args.patterns.split(","):
                for variant in args.variants.split(","):
                    results.append(one(spark, workdir, variant, pattern, args.keys, args.batches, rows,
                                       args.compact_every))  # fmt: skip
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print("| variant | pattern | batch rows | rows/s | median merge s | files | MB | full read s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['variant']} | {r['pattern']} | {r['rows']:,} | {r['rows_per_s']:,} | {r['median_merge_s']} "
              f"| {r['files']} | {r['mb']} | {r['read_s']} |")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
