"""Runs the archive pipeline in a process of its own, so a test can kill -9 it mid-stream.

Usage: python spark_pipeline_worker.py BOOTSTRAP TOPIC OUT MAX_OFFSETS_PER_TRIGGER
"""

from __future__ import annotations

import sys

from logbroker.spark.builtins import archive


def main() -> None:
    bootstrap, topic, out, max_offsets = sys.argv[1:5]
    result = archive(bootstrap, out, topics=[topic], max_offsets_per_trigger=int(max_offsets), master="local[2]",
                     progress=False)  # fmt: skip
    print(f"done rows={result.rows_in} batches={result.batches}", flush=True)


if __name__ == "__main__":
    main()
