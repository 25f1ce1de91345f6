"""Replay with a transactional id: exactly once for read_committed readers across a kill -9 of the replay
(its open transaction fenced and aborted, its committed chunks skipped) and across runs under the same id,
on logbroker and on Apache Kafka. Spark retrying a task is the same case as a re-run (tests/test_spark_cluster
kills a worker mid-replay)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Producer

from support import both_targets, high_watermarks, read_topic, spark_session, target_bootstrap, unique
from support import create_topic as create_named_topic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

HERE = Path(__file__).resolve().parent
T0 = int(time.time()) * 1000 - 3_600_000


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with spark_session("logbroker-test-replay-txn") as s:
        yield s


@pytest.fixture(scope="module", params=both_targets())
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from target_bootstrap(request)


@pytest.mark.kafka_side_in_full_tier
def test_transactional_replay_is_exactly_once_across_a_kill_and_a_rerun(
    spark: SparkSession, backend: str, tmp_path: Path
) -> None:
    from logbroker.spark.builtins import archive
    from logbroker.spark.produce import CHUNK
    from logbroker.spark.replay import replay

    source = create_named_topic(backend, unique("txr-src"), 3)
    n = 6 * CHUNK + 5_000  # two chunks and more per source partition: the kill below lands with most unsent
    producer = Producer({"bootstrap.servers": backend, "acks": "all", "linger.ms": 20,
                         "queue.buffering.max.messages": 2 * n})  # fmt: skip
    for i in range(n):
        producer.produce(source, key=f"k{i}".encode(), value=f"v{i}".encode() * 4, partition=i % 3, timestamp=T0 + i)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    out = tmp_path / "archive"
    assert archive(backend, out, topics=[source], spark=spark, progress=False, timeout=600).rows_in == n

    target = create_named_topic(backend, unique("txr-dst"), 3)
    name = unique("replay")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, str(HERE / "spark_replay_worker.py"), str(out), backend, target, name]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while high_watermarks(backend, target, 3) < CHUNK + 1_000:  # a chunk committed, the next one open
            assert proc.poll() is None, f"worker exited early:\n{proc.stdout.read().decode()[-3000:]}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the replay produced nothing within 300 s"
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(60)
        assert proc.stdout is not None
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, "the kill must land before the replay finished"

    produced = replay(out, backend, target, spark=spark, keep_partition=True, transactional_id=name)
    assert 0 < produced < n, "the re-run produces only what the killed run had not committed"
    want = sorted((i % 3, f"k{i}", f"v{i}" * 4, T0 + i) for i in range(n))
    got = sorted((m.partition(), m.key().decode(), m.value().decode(), m.timestamp()[1])
                 for m in read_topic(backend, target, 3, timeout=120))  # fmt: skip
    assert len(got) == len(want) and got == want, "read_committed: every record once"
    # Run again under the same id: everything is recorded as delivered.
    assert replay(out, backend, target, spark=spark, keep_partition=True, transactional_id=name) == 0
    assert len(read_topic(backend, target, 3, timeout=120)) == n
