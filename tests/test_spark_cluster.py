"""Pipelines on a real Spark standalone cluster (a master and two one-core workers on loopback, from pyspark's
own spark-class), unchanged from local mode but for file:// URLs: archive, rollup and a transactional replay
against logbroker and Apache Kafka, a worker killed (with its executor) in the middle of the archive and of
the replay, and the one-line error for a path only this machine sees.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Producer

from support import both_targets, high_watermarks, read_topic, require_spark, target_bootstrap, unique
from support import create_topic as create_named_topic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from logbroker_devtools.testing.spark_cluster import SparkStandalone

pytestmark = pytest.mark.spark

T0 = int(time.time()) * 1000 - 3_600_000


@pytest.fixture(scope="module")
def cluster() -> Iterator[SparkStandalone]:
    require_spark()
    from logbroker_devtools.testing.spark_cluster import SparkStandalone

    with SparkStandalone(workers=2, worker_memory="1536m") as c:
        yield c


@pytest.fixture(scope="module")
def spark(cluster: SparkStandalone) -> Iterator[SparkSession]:
    from logbroker.spark import session

    s = session(master=cluster.master_url, app_name="logbroker-test-cluster",
                conf={"spark.executor.memory": "1g", "spark.cores.max": "2"})  # fmt: skip
    s.sparkContext.setLogLevel("ERROR")
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module", params=both_targets())
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from target_bootstrap(request)


@pytest.fixture
def workers(cluster: SparkStandalone) -> Iterator[SparkStandalone]:
    """The cluster with both workers alive before and after the test (a test may kill one)."""
    cluster.wait_workers(2)
    yield cluster
    cluster.restart_dead_workers()


def url(path: Path) -> str:
    return path.as_uri()


def produce(bootstrap: str, topic: str, n: int, partitions: int, size: int = 40) -> list[tuple[int, str, str, int]]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    rows = [(i % partitions, f"k{i}", f"v{i}-" + "x" * size, T0 + i) for i in range(n)]
    for p, k, v, ts in rows:
        producer.produce(topic, key=k.encode(), value=v.encode(), partition=p, timestamp=ts)
        producer.poll(0)
    assert producer.flush(120) == 0
    return rows


class Background:
    """A pipeline call in a thread of the test process (the module's session), its result or error kept."""

    def __init__(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn, args, kwargs), daemon=True)
        self.thread.start()

    def _run(self, fn: Any, args: Any, kwargs: Any) -> None:
        try:
            self.result = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the test
            self.error = exc

    def join(self, timeout: float) -> Any:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"still running after {timeout:.0f}s"
        if self.error is not None:
            raise self.error
        return self.result


@pytest.mark.kafka_side_in_full_tier
def test_archive_and_transactional_replay_survive_a_killed_worker(
    spark: SparkSession, workers: SparkStandalone, backend: str, tmp_path: Path
) -> None:
    """Archive on the cluster; a worker dies (SIGKILL, its executor with it) after the first committed batch:
    Spark reruns the lost tasks on the other worker and the archive holds every record exactly once. Then a
    transactional replay of that archive loses a worker mid-way: the retried tasks fence their earlier
    attempts and skip what those committed, so a read_committed reader sees every record once."""
    from logbroker.spark.builtins import archive, read_archive
    from logbroker.spark.produce import CHUNK
    from logbroker.spark.replay import replay

    topic = create_named_topic(backend, unique("cl-arch"), 4)
    rows = produce(backend, topic, 4 * CHUNK, 4)
    out = tmp_path / "archive"
    job = Background(archive, backend, url(out), topics=[topic], spark=spark, progress=False,
                     max_offsets_per_trigger=4_000, timeout=600)  # fmt: skip
    first_commit = out / "_checkpoint" / "0" / "commits" / "0"
    deadline = time.monotonic() + 300
    while not first_commit.exists():
        assert job.thread.is_alive(), f"the archive ended before its first commit: {job.error!r}"
        assert time.monotonic() < deadline, "no committed batch within 300 s"
        time.sleep(0.05)
    workers.kill_worker(1)
    assert job.thread.is_alive(), "the kill must land mid-stream"
    result = job.join(600)
    assert result.stopped == "finished" and result.rows_in == len(rows)
    archived = read_archive(url(out), spark).selectExpr("partition", "CAST(key AS STRING) AS k", "offset").collect()
    assert len(archived) == len(rows) and len({(r["partition"], r["offset"]) for r in archived}) == len(rows)
    assert sorted((r["partition"], r["k"]) for r in archived) == sorted((p, k) for p, k, _v, _ts in rows)

    workers.start_worker(1)
    workers.wait_workers(2)
    target = create_named_topic(backend, unique("cl-replay"), 4)
    name = unique("cl-replay")
    job = Background(replay, url(out), backend, target, spark=spark, keep_partition=True, transactional_id=name)
    deadline = time.monotonic() + 300
    while high_watermarks(backend, target, 4) < CHUNK // 2:
        assert job.thread.is_alive(), f"the replay ended before the kill: {job.error!r}"
        assert time.monotonic() < deadline, "the replay produced nothing within 300 s"
        time.sleep(0.02)
    workers.kill_worker(0)
    assert job.thread.is_alive(), "the kill must land mid-replay"
    job.join(600)
    got = sorted((m.partition(), m.key().decode(), m.value().decode(), m.timestamp()[1])
                 for m in read_topic(backend, target, 4, timeout=120))  # fmt: skip
    assert len(got) == len(rows) and got == sorted(rows), "read_committed: every record exactly once"


def _notification(event_type: str, priority: str, when: dt.datetime, n: int) -> bytes:
    from logbroker.notify.notifier import encode

    msg = {"message_id": unique("m"), "publisher_id": "compute.host", "event_type": event_type,
           "priority": priority, "payload": {"n": n}, "timestamp": when.strftime("%Y-%m-%d %H:%M:%S.%f")}  # fmt: skip
    return encode({"request_id": f"r{n}"}, msg)


@pytest.mark.kafka_side_in_full_tier
def test_rollup_on_the_cluster_matches_a_count(spark: SparkSession, workers: SparkStandalone, backend: str,
                                               tmp_path: Path) -> None:  # fmt: skip
    """The rollup's Delta merge runs on the cluster's executors: two runs (the second with late events in
    windows the first wrote) give the counts a plain Python count of the same notifications gives."""
    from deltalake import DeltaTable

    from logbroker.spark.builtins import rollup

    topic = create_named_topic(backend, unique("cl-rollup"), 2)
    base = dt.datetime.fromtimestamp((T0 // 60_000) * 60, dt.UTC)
    kinds = [("compute.start", "INFO"), ("volume.attach", "ERROR"), ("port.create", "WARN")]
    want: Counter[tuple[int, str, str]] = Counter()
    producer = Producer({"bootstrap.servers": backend, "acks": "all"})

    def send(seconds: list[int], start: int) -> None:
        for j, s in enumerate(seconds):
            et, pr = kinds[(start + j) % 3]
            when = base + dt.timedelta(seconds=s)
            producer.produce(topic, _notification(et, pr, when, start + j), partition=j % 2)
            want[(int(when.timestamp()) // 60 * 60_000, et, pr)] += 1
        assert producer.flush(60) == 0

    out = tmp_path / "rollup"
    send(list(range(0, 600, 7)), 0)
    assert rollup(backend, url(out), topics=[topic], spark=spark, progress=False, timeout=600).stopped == "finished"
    send([590, 420, 333, 610], 1000)  # late, within the 5-minute watermark
    assert rollup(backend, url(out), topics=[topic], spark=spark, progress=False, timeout=600).rows_in == 4
    got = {(int(r["window_start"].timestamp() * 1000), r["event_type"], r["priority"]): r["count"]
           for r in DeltaTable(str(out)).to_pyarrow_table().to_pylist()}  # fmt: skip
    assert got == dict(want)


def test_a_path_only_this_machine_sees_is_one_clear_error(spark: SparkSession, cluster: SparkStandalone,
                                                          tmp_path: Path) -> None:  # fmt: skip
    from click.testing import CliRunner

    from logbroker.spark.pipeline import PipelineError, run
    from logbroker.spark.spec import load_spec

    spec = {"name": "p", "source": {"bootstrap": "127.0.0.1:1", "topics": ["t"]},
            "checkpoint": url(tmp_path / "cp"), "sinks": [{"type": "delta", "path": "./out"}]}  # fmt: skip
    with pytest.raises(PipelineError) as info:
        run(load_spec(spec), spark=spark, progress=False)
    assert str(info.value) == (
        f"sinks.0.path: ./out is a path on this machine, but the pipeline runs on {cluster.master_url}, where each "
        "worker sees its own disk: give a URL every worker reaches (hdfs://, s3a://, abfss://, gs://, or file:///... "
        "on a filesystem mounted at the same place on every worker)"
    )
    # The CLI refuses before it starts a session.
    yaml = tmp_path / "spec.yaml"
    yaml.write_text(f"name: p\nsource: {{bootstrap: '127.0.0.1:1', topics: [t]}}\ncheckpoint: {tmp_path / 'cp'}\n"
                    "sinks: [{type: parquet, path: 'file:///shared/out'}]\n")  # fmt: skip
    from logbroker.spark.cli import pipeline

    res = CliRunner().invoke(pipeline, ["run", str(yaml), "--master", cluster.master_url, "-q"])
    assert res.exit_code == 1
    assert res.stderr.strip() == (f"error: checkpoint: {tmp_path / 'cp'} is a path on this machine, but the pipeline "
                                  f"runs on {cluster.master_url}, where each worker sees its own disk: "
                                  "give a URL every worker reaches (hdfs://, s3a://, abfss://, gs://, or file:///... "
                                  "on a filesystem mounted at the same place on every worker)")  # fmt: skip
