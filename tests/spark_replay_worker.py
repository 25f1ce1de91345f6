"""Runs a transactional replay in a process of its own, so a test can kill -9 it mid-way.

Usage: python spark_replay_worker.py ARCHIVE BOOTSTRAP TOPIC TRANSACTIONAL_ID
"""

from __future__ import annotations

import sys

from logbroker.spark.replay import replay
from logbroker.spark.session import session


def main() -> None:
    archive, bootstrap, topic, name = sys.argv[1:5]
    spark = session(master="local[2]", app_name="replay-worker")
    n = replay(archive, bootstrap, topic, spark=spark, keep_partition=True, transactional_id=name)
    print(f"done produced={n}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
