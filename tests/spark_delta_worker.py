"""Runs a Delta merge pipeline in a process of its own, so a test can kill it at an exact point.

Usage: python spark_delta_worker.py BOOTSTRAP TOPIC TABLE CHECKPOINT MAX_OFFSETS_PER_TRIGGER KILL_AFTER_BATCH

With KILL_AFTER_BATCH >= 0 the process group (this process and its JVM) is SIGKILLed right after that batch's
MERGE has committed to the table and before Spark writes the batch's commit to the checkpoint: the
restarted query replays the batch, and Delta's transaction id must keep it from being applied twice.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from logbroker.spark import pipeline
from logbroker.spark.spec import load_spec

MERGE_SQL = "SELECT CAST(key AS STRING) AS k, CAST(value AS STRING) AS v, partition, offset, timestamp FROM events"


def spec(bootstrap: str, topic: str, table: str, checkpoint: str, max_offsets: int) -> Any:
    return load_spec({
        "name": "delta-merge",
        "source": {"bootstrap": bootstrap, "topics": [topic], "max_offsets_per_trigger": max_offsets},
        "transform": MERGE_SQL,
        "sinks": [{"type": "delta", "path": table, "mode": "merge", "keys": ["k"]}],
        "checkpoint": checkpoint,
        "master": "local[2]",
    })  # fmt: skip


def main() -> None:
    bootstrap, topic, table, checkpoint, max_offsets, kill_after = sys.argv[1:7]
    original = pipeline.merge_batch

    def merge_batch(sink: Any, query: Any) -> Any:
        inner = original(sink, query)

        def merge(batch: Any, batch_id: int) -> None:
            inner(batch, batch_id)
            if batch_id == int(kill_after):
                os.killpg(0, signal.SIGKILL)

        return merge

    pipeline.merge_batch = merge_batch  # type: ignore[assignment]
    result = pipeline.run(spec(bootstrap, topic, table, checkpoint, int(max_offsets)), progress=False)
    print(f"done rows={result.rows_in} batches={result.batches}", flush=True)


if __name__ == "__main__":
    main()
