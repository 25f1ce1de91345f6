"""Spark's Kafka source over transactional data: `isolation_level` of logbroker.spark pipelines.

One topic per broker holds, written with confluent-kafka's transactional producer: committed
transactions over two partitions, an aborted one, plain (non-transactional) records, and on
partition 1 a transaction left open with a plain record after it. A read_committed read must return
exactly the committed and plain records below the last stable offset (so nothing of, or after, the
open transaction); a read_uncommitted read returns every data record, aborted and open ones
included. Neither ever returns a COMMIT/ABORT marker. Expected rows are what the producers' delivery
reports acknowledged, so the checks do not depend on how a broker lays out its markers.

Runs on logbroker and on Apache Kafka (the module-scoped `bootstrap` fixture), with one local[2]
SparkSession; the reads are batch reads and availableNow archives (no long-running stream).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Producer

from support import both_targets, create_topic, spark_session, target_bootstrap, unique

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

Row = tuple[int, int, bytes]  # partition, offset, value


@pytest.fixture(scope="module", params=both_targets())
def bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from target_bootstrap(request)


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with spark_session("logbroker-test-spark-read-committed") as s:
        yield s


@dataclass
class TxnTopic:
    name: str
    committed: list[Row]  # what read_committed must return (committed + plain, below the LSO)
    everything: list[Row]  # every data record produced (what read_uncommitted must return)


class _Acks:
    """Delivery reports as (partition, offset, value); any error fails the test."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.errors: list[Any] = []

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.rows.append((msg.partition(), msg.offset(), msg.value()))


def _txn_producer(bootstrap: str, acks: _Acks, timeout_ms: int = 60_000) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("spark-txn"),
                  "transaction.timeout.ms": timeout_ms, "on_delivery": acks, "linger.ms": 0})  # fmt: skip
    p.init_transactions(60)
    return p


def _transaction(p: Producer, topic: str, records: list[tuple[int, bytes]], commit: bool, acks: _Acks) -> list[Row]:
    before = len(acks.rows)
    p.begin_transaction()
    for partition, value in records:
        p.produce(topic, value=value, partition=partition)
    assert p.flush(30) == 0
    if commit:
        p.commit_transaction(30)
    else:
        p.abort_transaction(30)
    assert not acks.errors, acks.errors
    return acks.rows[before:]


def _plain(bootstrap: str, topic: str, partition: int, value: bytes) -> Row:
    acks = _Acks()
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "on_delivery": acks})
    p.produce(topic, value=value, partition=partition)
    assert p.flush(30) == 0 and not acks.errors, acks.errors
    return acks.rows[0]


@pytest.fixture(scope="module")
def txn_topic(bootstrap: str) -> Iterator[TxnTopic]:
    """The topic described in the module docstring; the open transaction stays open until teardown
    (its timeout, 5 min, is far beyond the module's run time, so no broker aborts it meanwhile)."""
    topic = create_topic(bootstrap, unique("spark-rc"), partitions=2)
    acks = _Acks()
    p = _txn_producer(bootstrap, acks)
    c1 = _transaction(p, topic, [(0, b"c1-0"), (0, b"c1-1"), (1, b"c1-p1"), (0, b"c1-2")], True, acks)
    a2 = _transaction(p, topic, [(0, b"a2-0"), (1, b"a2-p1"), (0, b"a2-1")], False, acks)
    c3 = _transaction(p, topic, [(0, b"c3-0")], True, acks)
    p.flush(10)
    plain0 = _plain(bootstrap, topic, 0, b"plain-0")
    open_acks = _Acks()
    open_p = _txn_producer(bootstrap, open_acks, timeout_ms=300_000)
    open_p.begin_transaction()
    open_p.produce(topic, value=b"o4-p1", partition=1)
    assert open_p.flush(30) == 0 and not open_acks.errors, open_acks.errors
    plain1 = _plain(bootstrap, topic, 1, b"plain-1")  # above partition 1's LSO while o4 is open
    assert len(c1) == 4 and len(a2) == 3 and len(c3) == 1 and len(open_acks.rows) == 1
    try:
        yield TxnTopic(topic, sorted([*c1, *c3, plain0]), sorted([*c1, *a2, *c3, plain0, *open_acks.rows, plain1]))
    finally:
        open_p.abort_transaction(30)


def _source_options(bootstrap: str, topic: str, **fields: Any) -> dict[str, str]:
    """The pipeline source's connector options (the code under test), minus streaming-only ones."""
    from logbroker.spark.spec import KafkaSource

    opts = KafkaSource(bootstrap=bootstrap, topics=[topic], **fields).connector_options()
    opts.pop("maxOffsetsPerTrigger", None)
    opts["endingOffsets"] = "latest"
    return opts


def _batch_read(spark: SparkSession, opts: dict[str, str]) -> list[Row]:
    reader = spark.read.format("kafka")
    for k, v in opts.items():
        reader = reader.option(k, v)
    return sorted((r["partition"], r["offset"], bytes(r["value"])) for r in reader.load().collect())


def _archived(spark: SparkSession, path: Path) -> list[Row]:
    from logbroker.spark.builtins import read_archive

    return sorted((r["partition"], r["offset"], bytes(r["value"])) for r in read_archive(path, spark).collect())


# --------------------------------------------------------------------------------- spec (no broker)


def test_isolation_level_option_default_and_conflict() -> None:
    from logbroker.spark.builtins import archive_spec
    from logbroker.spark.spec import KafkaSource, SpecError, load_spec

    src = KafkaSource(bootstrap="h:1", topics=["t"])
    assert src.isolation_level == "read_committed"
    assert src.connector_options()["kafka.isolation.level"] == "read_committed"
    uncommitted = KafkaSource(bootstrap="h:1", topics=["t"], isolation_level="read_uncommitted")
    assert uncommitted.connector_options()["kafka.isolation.level"] == "read_uncommitted"
    raw = KafkaSource(bootstrap="h:1", topics=["t"], options={"kafka.isolation.level": "read_uncommitted"})
    assert raw.connector_options()["kafka.isolation.level"] == "read_uncommitted"  # the escape hatch wins
    spec = archive_spec("h:1", "out", topics="t", isolation_level="read_uncommitted")
    assert spec.source.connector_options()["kafka.isolation.level"] == "read_uncommitted"  # type: ignore[union-attr]
    base = {"name": "x", "checkpoint": "cp", "sinks": [{"type": "console"}]}
    with pytest.raises(SpecError, match=r"^source\.isolation_level: "):
        load_spec({**base, "source": {"bootstrap": "h:1", "topics": ["t"], "isolation_level": "committed"}})
    with pytest.raises(SpecError, match=r"^source\.isolation_level: read_committed contradicts options"):
        load_spec({**base, "source": {"bootstrap": "h:1", "topics": ["t"], "isolation_level": "read_committed",
                                      "options": {"kafka.isolation.level": "read_uncommitted"}}})  # fmt: skip


def test_cli_help_documents_the_default() -> None:
    from click.testing import CliRunner

    from logbroker.spark.cli import pipeline

    res = CliRunner().invoke(pipeline, ["archive", "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "--isolation-level [read_committed|read_uncommitted]" in text
    assert "read_uncommitted (Spark's own default)" in text and "[default: read_committed]" in text


# ------------------------------------------------------------------------------------ on the brokers


def test_batch_read_committed_sees_only_committed(spark: SparkSession, bootstrap: str, txn_topic: TxnTopic) -> None:
    got = _batch_read(spark, _source_options(bootstrap, txn_topic.name))
    assert got == txn_topic.committed
    values = {v for _p, _o, v in got}
    assert not values & {b"a2-0", b"a2-1", b"a2-p1", b"o4-p1", b"plain-1"}


def test_batch_read_uncommitted_sees_everything(spark: SparkSession, bootstrap: str, txn_topic: TxnTopic) -> None:
    got = _batch_read(spark, _source_options(bootstrap, txn_topic.name, isolation_level="read_uncommitted"))
    assert got == txn_topic.everything  # every data record, aborted and open ones too; no marker


def test_archive_pipeline_default_and_cli_option(
    spark: SparkSession, bootstrap: str, txn_topic: TxnTopic, tmp_path: Path
) -> None:
    """The built-in archive (a streaming availableNow query) through the API with the default and
    through `logbroker pipeline archive --isolation-level read_uncommitted`."""
    from click.testing import CliRunner

    from logbroker.spark.builtins import archive
    from logbroker.spark.cli import pipeline

    res = archive(bootstrap, tmp_path / "committed", topics=txn_topic.name, spark=spark, progress=False, timeout=300)
    assert res.stopped == "finished" and res.rows_in == len(txn_topic.committed), res
    assert _archived(spark, tmp_path / "committed") == txn_topic.committed

    out = os.fspath(tmp_path / "all")
    cli = CliRunner().invoke(pipeline, ["archive", out, "-b", bootstrap, "-t", txn_topic.name, "-q",
                                        "--isolation-level", "read_uncommitted"], catch_exceptions=False)  # fmt: skip
    assert cli.exit_code == 0, cli.output
    assert _archived(spark, tmp_path / "all") == txn_topic.everything
