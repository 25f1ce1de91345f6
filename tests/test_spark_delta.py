"""Delta Lake in the pipelines: the append and merge sinks, exactly-once across a kill between Delta's commit
and Spark's, time travel, Delta archives through read_archive and replay, the clear errors (a table of other
columns, a session without Delta's jars), and the jars a fresh machine fetches.

Broker-facing tests run on logbroker and on Apache Kafka (the `backend` fixture). Tables are read back by
delta-rs (`deltalake`), an implementation independent of Spark, wherever the check is about the table.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Producer

from support import both_targets, read_topic, spark_session, target_bootstrap, unique
from support import create_topic as create_named_topic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

HERE = Path(__file__).resolve().parent
T0 = int(time.time()) * 1000 - 3_600_000  # an hour back: inside Kafka's accepted timestamp range


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with spark_session("logbroker-test-spark-delta") as s:
        yield s


@pytest.fixture(scope="module", params=both_targets())
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from target_bootstrap(request)


Acked = tuple[int, int, str, str, int]  # partition, offset, key, value, timestamp


def produce(bootstrap: str, topic: str, records: list[tuple[int, str, str, int]]) -> list[Acked]:
    """(partition, key, value, timestamp) records; returns (partition, offset, key, value, timestamp) as acked."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    acked: list[Acked] = []

    def report(err: Any, msg: Any) -> None:
        assert err is None, err
        acked.append((msg.partition(), msg.offset(), msg.key().decode(), msg.value().decode(), msg.timestamp()[1]))

    for partition, key, value, ts in records:
        producer.produce(topic, key=key, value=value, partition=partition, timestamp=ts, on_delivery=report)
        producer.poll(0)
    assert producer.flush(60) == 0
    return sorted(acked)


def delta_rows(path: Path, version: int | None = None) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    return DeltaTable(str(path), version=version).to_pyarrow_table().to_pylist()


def delta_history(path: Path) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    return sorted(DeltaTable(str(path)).history(), key=lambda h: h["version"])


# ------------------------------------------------------------------------------------------ merge, killed


@pytest.mark.kafka_side_in_full_tier
def test_kill_9_between_the_delta_commit_and_the_checkpoint_commit(backend: str, tmp_path: Path) -> None:
    """The pipeline dies (process group, JVM included) right after a batch's MERGE committed and before Spark
    recorded the batch as done. The restart replays that batch: the table gets no second commit for it, and
    ends holding every key once with its newest row (greatest timestamp) from the topic. The merges are
    delta-rs' (the default engine on a local master); Spark's are replayed in tests/test_spark_pipeline.py."""
    topic = create_named_topic(backend, unique("delta-kill"), 3)
    records = [(i % 3, f"k{i % 40}", f"v{i}", T0 + i) for i in range(600)]
    acked = produce(backend, topic, records)
    table, checkpoint = tmp_path / "table", tmp_path / "checkpoint"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}

    def worker(kill_after: int) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, str(HERE / "spark_delta_worker.py"), backend, topic, str(table), str(checkpoint),
               "150", str(kill_after)]  # fmt: skip
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, start_new_session=True)

    killed = worker(kill_after=1)
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-3000:] + killed.stderr[-3000:]
    commits = checkpoint / "0" / "commits"
    assert sorted(p.name for p in commits.iterdir() if p.name.isdigit()) == ["0"], "batch 1 must not be committed"
    assert [h["operation"] for h in delta_history(table)] == ["WRITE", "MERGE"], "batch 1's MERGE must be in"
    # local[2] and a local table: the sink's default engine merges with delta-rs (its txn action is the tag)
    assert delta_history(table)[1]["engineInfo"].startswith("delta-rs"), delta_history(table)[1]

    done = worker(kill_after=-1)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    batches = sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    history = delta_history(table)
    # One commit per batch: batch 1, replayed after the restart, did not commit a second time.
    assert len(history) == len(batches), ([h["operation"] for h in history], batches)
    assert batches == list(range(len(batches))) and len(batches) >= 4

    newest: dict[str, Acked] = {}
    for rec in acked:
        if rec[2] not in newest or rec[4] > newest[rec[2]][4]:
            newest[rec[2]] = rec
    got = sorted((r["k"], r["v"], r["partition"], r["offset"]) for r in delta_rows(table))
    assert got == sorted((k, v, p, o) for p, o, k, v, _ts in newest.values())


# ------------------------------------------------------------------------------------------ append: archive


def test_delta_archive_time_travel_and_replay(spark: SparkSession, backend: str, tmp_path: Path) -> None:
    """The archive as a Delta table: each run appends (Delta's streaming sink), read_archive reads the table
    and any earlier version of it, and replay produces a Delta archive back into a topic unchanged."""
    from logbroker.spark.builtins import archive, read_archive
    from logbroker.spark.replay import replay

    topic = create_named_topic(backend, unique("delta-arch"), 2)
    first = produce(backend, topic, [(i % 2, f"k{i}", f"v{i}", T0 + i) for i in range(30)])
    out = tmp_path / "archive"
    r1 = archive(backend, out, topics=[topic], spark=spark, progress=False, timeout=300, table_format="delta")
    assert r1.stopped == "finished" and r1.rows_in == 30
    assert (out / "_delta_log").is_dir() and not (out / "_spark_metadata").exists()
    second = produce(backend, topic, [(i % 2, f"k{i}", f"v{i}", T0 + i) for i in range(30, 50)])
    r2 = archive(backend, out, topics=[topic], spark=spark, progress=False, timeout=300, table_format="delta")
    assert r2.rows_in == 20

    def offsets(df: Any) -> list[tuple[int, int]]:
        return sorted((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect())

    assert offsets(read_archive(out, spark)) == sorted((p, o) for p, o, *_ in first + second)
    assert offsets(read_archive(out, spark, version=0)) == sorted((p, o) for p, o, *_ in first)
    assert len(delta_rows(out)) == 50 and len(delta_rows(out, version=0)) == 30  # delta-rs agrees

    target = create_named_topic(backend, unique("delta-replayed"), 2)
    assert replay(out, backend, target, spark=spark, keep_partition=True) == 50
    back = sorted((m.partition(), m.key().decode(), m.value().decode(), m.timestamp()[1])
                  for m in read_topic(backend, target, 2))  # fmt: skip
    assert back == sorted((p, k, v, ts) for p, _o, k, v, ts in first + second)


# ------------------------------------------------------------------------------------------ clear errors


def test_a_table_with_other_columns_is_one_clear_error(spark: SparkSession, tmp_path: Path) -> None:
    from logbroker.spark.pipeline import PipelineError, run
    from logbroker.spark.spec import load_spec

    spark.createDataFrame([(1, "a")], "id INT, name STRING").write.format("delta").save(str(tmp_path / "t"))
    spark.createDataFrame([(1, 2.5)], "id INT, price DOUBLE").write.parquet(str(tmp_path / "in"))
    spec = load_spec({"name": "s", "source": {"kind": "parquet", "path": str(tmp_path / "in")},
                      "sinks": [{"type": "console"}, {"type": "delta", "path": str(tmp_path / "t"), "mode": "merge",
                                 "keys": ["id"]}]})  # fmt: skip
    with pytest.raises(PipelineError) as info:
        run(spec, spark=spark, progress=False)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg == (f"sinks.1 (delta:{tmp_path / 't'}): the table's columns (id int, name string) differ from the "
                   "rows' (id int, price double); write to a new table or migrate this one")  # fmt: skip
    assert delta_rows(tmp_path / "t") == [{"id": 1, "name": "a"}], "the table is untouched"


def test_a_session_without_delta_is_one_clear_error(tmp_path: Path) -> None:
    """A session whose jars hold the Kafka connector but not Delta (an older jar directory): the pipeline
    refuses before any query starts, in one line naming the sink and the fix."""
    from logbroker.jars import default_jar_dir

    jars = tmp_path / "jars"
    jars.mkdir()
    for jar in default_jar_dir("spark").glob("*.jar"):
        if not jar.name.startswith("delta-"):
            shutil.copy(jar, jars)
    (tmp_path / "in").mkdir()
    script = f"""
import sys
from logbroker.spark import session
from logbroker.spark.pipeline import PipelineError, run
from logbroker.spark.spec import load_spec
spark = session(master="local[1]", jar_dir={str(jars)!r})
spark.createDataFrame([(1,)], "id INT").write.parquet({str(tmp_path / "in" / "d")!r})
spec = load_spec({{"name": "s", "source": {{"kind": "parquet", "path": {str(tmp_path / "in" / "d")!r}}},
                  "sinks": [{{"type": "delta", "path": {str(tmp_path / "t")!r}}}]}})
try:
    run(spec, spark=spark, progress=False)
except PipelineError as exc:
    print("ERROR:", exc)
spark.stop()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("ERROR:")), None)
    want = (f"ERROR: sinks.0 (delta:{tmp_path / 't'}): Delta Lake is not on this session's classpath; "
            "build it with logbroker.spark.session() or add io.delta:delta-spark_2.13")  # fmt: skip
    assert line == want, done.stdout + done.stderr
    assert not (tmp_path / "t").exists()


# ------------------------------------------------------------------------------------------ the jars


def test_a_fresh_machine_fetches_the_same_jars_maven_resolves(tmp_path: Path) -> None:
    """`logbroker.spark.jars` names the jars exactly and fetches them with pyspark's own Ivy (no Maven, no
    transitive tree): the same set, byte for byte, that .ci/fetch-jars resolved from the pom."""
    import pyspark

    from logbroker.jars import default_jar_dir
    from logbroker.spark import jars

    maven = {p.name: p.read_bytes() for p in default_jar_dir("spark").glob("*.jar")}
    dest = tmp_path / "cache" / "jars"
    jars.resolve(dest, pyspark.__version__)
    fetched = {p.name: p.read_bytes() for p in dest.iterdir()}
    assert sorted(fetched) == sorted(maven)
    assert fetched == maven
    assert jars.missing(dest, pyspark.__version__) == []
    assert not [p for p in dest.parent.iterdir() if p.name.startswith(".resolve-")], "scratch left behind"


def test_a_fresh_install_fetches_once_and_starts_quietly(tmp_path: Path) -> None:
    """No jar directory (a `pip install` without .ci/fetch-jars): the first session fetches the jars into the
    user's cache with one line on stderr and no resolver chatter, has Delta, and the second start is silent."""
    script = """
from logbroker.spark import session
from logbroker.spark.session import delta_loaded
s = session(master="local[1]")
print("DELTA", delta_loaded(s), s.range(3).count())
s.stop()
"""
    env = {**os.environ, "LOGBROKER_JARS_DIR": str(tmp_path / "no-jars"), "XDG_CACHE_HOME": str(tmp_path / "cache")}

    def start() -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
        assert "DELTA True 3" in done.stdout, done.stdout + done.stderr
        return done

    noise = ("proxy", "Host", ":: ", "found ", "Setting default log level", " WARN ")
    first = start().stderr.splitlines()
    fetching = [ln for ln in first if ln.startswith("logbroker: fetching")]
    assert len(fetching) == 1 and str(tmp_path / "cache" / "logbroker" / "spark-jars") in fetching[0], first
    assert not [ln for ln in first if any(n in ln for n in noise)], first
    second = start().stderr.splitlines()
    assert not [ln for ln in second if ln.startswith("logbroker:") or any(n in ln for n in noise)], second


def test_a_fetch_that_finds_a_complete_copy_leaves_it_alone(tmp_path: Path) -> None:
    """Two first sessions starting together both fetch: the one finishing second must keep the first's copy
    (a JVM may be loading those very files) and not fail."""
    import pyspark

    from logbroker.spark import jars

    dest = tmp_path / "cache" / "jars"
    jars.resolve(dest, pyspark.__version__)
    before = {p.name: p.stat().st_ino for p in dest.iterdir()}
    jars.resolve(dest, pyspark.__version__)  # the slower of the two
    assert {p.name: p.stat().st_ino for p in dest.iterdir()} == before, "the first complete copy was replaced"
    assert not [p for p in dest.parent.iterdir() if p.name.startswith(".resolve-")], "scratch left behind"


@pytest.mark.parametrize(
    ("master", "local", "loopback"),
    [("local[2]", True, True), ("local", True, True), ("local[2,4]", True, True),
     ("spark://127.0.0.1:7077", False, True), ("spark://localhost:7077", False, True),
     ("spark://spark-master:7077", False, False), ("spark://10.0.0.5:7077,10.0.0.6:7077", False, False),
     ("yarn", False, False)],
)  # fmt: skip
def test_which_masters_get_the_loopback_driver_defaults(master: str, local: bool, loopback: bool) -> None:
    """Loopback binding only where the executors run on this machine's loopback; a remote cluster must be
    able to reach the driver back, and a plain path is refused only off local masters."""
    from logbroker.spark.pipeline import PipelineError, check_shared
    from logbroker.spark.session import is_local, on_loopback

    assert (is_local(master), on_loopback(master)) == (local, loopback)
    if local:
        check_shared("checkpoint", "./cp", master)
    else:
        with pytest.raises(PipelineError, match=r"^checkpoint: \./cp is a path on this machine"):
            check_shared("checkpoint", "./cp", master)
        check_shared("checkpoint", "hdfs://nn/cp", master)
