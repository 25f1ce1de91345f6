"""`logbroker.spark.replay`: an archive (built by `logbroker.spark.builtins.archive`) produced back into
a topic, on logbroker and on Apache Kafka.

A replay is only useful if the copy is the same stream: every record's key, value, headers (order,
duplicates, null values) and CreateTime timestamp, and per source partition the same order. The
records here are produced with confluent-kafka, archived through Spark's Kafka connector, replayed
and read back with confluent-kafka, and compared record by record.

Both brokers run in one module (params of a module-scoped fixture; LOGBROKER_TEST_TARGET=logbroker
or =kafka restricts to one). The module's Kafka has auto.create.topics.enable=false, so the
"missing topic" error is checked on it; the shared logbroker broker auto-creates, which checks the
other branch, and a second small logbroker process without auto-create checks the error there too.
One local[2] SparkSession for the module.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Producer

from logbroker_devtools.testing.process import BrokerProcess
from support import both_targets, kafka_peer, read_topic, spark_session, unique
from support import create_topic as create_named_topic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

NOW_MS = int(time.time()) * 1000
# Two days back and one hour back: two `date` partitions in the archive, a time range for `where`,
# and inside Kafka's default 7-day retention and its 1-hour limit on future timestamps.
T_OLD = NOW_MS - 2 * 86_400_000
T_NEW = NOW_MS - 3_600_000
PARTITIONS = 3
PER_PARTITION = 6

Headers = tuple[tuple[str, bytes | None], ...]
Row = tuple[int, bytes | None, bytes | None, int, Headers]  # partition, key, value, timestamp, headers


@dataclass(frozen=True, order=True)
class Rec:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: Headers = ()

    @property
    def content(self) -> tuple[Any, ...]:
        """What replay must preserve (not topic, partition or offset, which the target assigns)."""
        return (self.key, self.value, self.timestamp, self.headers)


# ----------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    with spark_session("logbroker-test-spark-replay") as s:
        yield s


@dataclass
class Target:
    name: str
    bootstrap: str
    auto_create: bool


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    if request.param == "logbroker":
        yield Target("logbroker", request.getfixturevalue("broker").bootstrap, auto_create=True)
        return
    with kafka_peer(**{"auto.create.topics.enable": "false"}) as kafka:
        yield Target("kafka", kafka, auto_create=False)


@pytest.fixture(scope="module")
def no_auto_create(target: Target, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A broker of the target's kind that does not auto-create topics."""
    if not target.auto_create:
        yield target.bootstrap
        return
    with BrokerProcess(tmp_path_factory.mktemp("no-auto-create") / "data",
                       extra_args=["--no-auto-create-topics"]) as proc:  # fmt: skip
        yield proc.bootstrap


def create_topic(bootstrap: str, prefix: str, partitions: int, config: dict[str, str] | None = None) -> str:
    return create_named_topic(bootstrap, unique(prefix), partitions, config)


def rows_for(partitions: int, n: int, tag: str) -> list[Row]:
    """Repeated keys and a null key per partition, a null value, duplicate / null-valued / empty
    headers, timestamps on two days (not monotonic across the day boundary within a partition)."""
    rows = []
    for p in range(partitions):
        for i in range(n):
            key = None if i == 1 else f"{tag}{p}-{i % 3}".encode()
            value = None if i == 4 else f"{tag}-v{p}-{i}".encode() * (i + 1)
            if i % 2 == 0:
                headers: Headers = (("h", f"{p}/{i}".encode()), ("h", b"dup"), ("nil", None))
            elif i == 3:
                headers = (("empty", b""), ("h", b"x"))
            else:
                headers = ()
            ts = (T_OLD if i in (0, 2) else T_NEW) + i * 1000 + p
            rows.append((p, key, value, ts, headers))
    return rows


def produce(bootstrap: str, topic: str, rows: Sequence[Row]) -> list[Rec]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True})
    acked: list[Rec] = []
    errors: list[Any] = []

    def cb_for(row: Row) -> Any:
        def cb(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                acked.append(Rec(topic, msg.partition(), msg.offset(), row[1], row[2], row[3], row[4]))

        return cb

    for row in rows:
        p, key, value, ts, headers = row
        producer.produce(topic, value=value, key=key, partition=p, timestamp=ts, headers=list(headers),
                         on_delivery=cb_for(row))  # fmt: skip
    assert producer.flush(30) == 0
    assert not errors, errors
    return sorted(acked)


def consume_all(bootstrap: str, topic: str, timeout: float = 60.0) -> list[Rec]:
    """Every record of every partition, earliest to high watermark; asserts CreateTime stamps."""
    out = []
    for m in read_topic(bootstrap, topic, timeout=timeout):
        kind, ts = m.timestamp()
        assert kind == TIMESTAMP_CREATE_TIME, (kind, ts)
        out.append(Rec(topic, m.partition(), m.offset(), m.key(), m.value(), ts, tuple(m.headers() or ())))
    return sorted(out)


@dataclass
class Archived:
    bootstrap: str
    path: Path
    main: str  # 3 partitions
    side: str  # 1 partition, with one 5 KB record
    records: list[Rec]

    def of(self, topic: str) -> list[Rec]:
        return [r for r in self.records if r.topic == topic]


@pytest.fixture(scope="module")
def archived(spark: SparkSession, target: Target, tmp_path_factory: pytest.TempPathFactory) -> Archived:
    """Two topics archived once per target with the built-in archive pipeline."""
    from logbroker.spark.builtins import archive

    main = create_topic(target.bootstrap, "replay-main", PARTITIONS)
    side = create_topic(target.bootstrap, "replay-side", 1)
    records = produce(target.bootstrap, main, rows_for(PARTITIONS, PER_PARTITION, "m"))
    records += produce(target.bootstrap, side, [*rows_for(1, 3, "s"), (0, b"big", b"B" * 5000, T_NEW, ())])
    path = tmp_path_factory.mktemp(f"archive-{target.name}") / "archive"
    result = archive(target.bootstrap, path, topics=[main, side], spark=spark, progress=False, timeout=300)
    assert result.rows_in == len(records)
    return Archived(target.bootstrap, path, main, side, sorted(records))


# ---------------------------------------------------------------------------------------- round trips


def murmur2_partition(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner for keyed records (Java client's murmur2, positive, modulo)."""
    m, h = 0x5BD1E995, (0x9747B28C ^ len(key)) & 0xFFFFFFFF
    whole = len(key) - len(key) % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(key[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = key[whole:]
    if tail:
        for shift, byte in reversed(list(enumerate(tail))):
            h ^= byte << (8 * shift)
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions


def test_murmur2_matches_kafka() -> None:
    """Known partitions of Kafka's Java DefaultPartitioner (from its own unit tests' hash values)."""
    # murmur2 of these inputs as Kafka's Utils.murmur2 computes them (signed int32 in Java).
    known = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829, b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
             b"abc": 479470107}  # fmt: skip
    for key, signed in known.items():
        assert murmur2_partition(key, 1 << 31) == (signed & 0xFFFFFFFF) & 0x7FFFFFFF, key


def test_replay_keep_partition_round_trip(spark: SparkSession, archived: Archived) -> None:
    """Source partition p -> target partition p: the target partitions equal the source ones record
    by record, at the same offsets (a fresh topic, records in offset order)."""
    from logbroker.spark.replay import replay

    boot = archived.bootstrap
    dst = create_topic(boot, "replay-keep", PARTITIONS)
    sent = replay(archived.path, boot, dst, spark=spark, where=f"topic = '{archived.main}'", keep_partition=True)
    source = archived.of(archived.main)
    assert sent == len(source)
    got = consume_all(boot, dst)
    assert [(r.partition, r.offset, *r.content) for r in got] == [(r.partition, r.offset, *r.content) for r in source]


def test_replay_by_key_hash(spark: SparkSession, archived: Archived) -> None:
    """The whole archive (both topics) into a 2-partition topic: the same multiset of records, each
    keyed record in the partition Kafka's murmur2 partitioner picks, and per key in source order."""
    from logbroker.spark.replay import replay

    boot = archived.bootstrap
    dst = create_topic(boot, "replay-hash", 2)
    assert replay(archived.path, boot, dst, spark=spark) == len(archived.records)
    got = consume_all(boot, dst)
    assert sorted((r.content for r in got), key=repr) == sorted((r.content for r in archived.records), key=repr)
    for r in got:
        if r.key is not None:
            assert r.partition == murmur2_partition(r.key, 2), r
    by_key_src: dict[bytes, list[Any]] = defaultdict(list)
    by_key_dst: dict[bytes, list[Any]] = defaultdict(list)
    for r in archived.records:  # sorted by topic, partition, offset
        if r.key is not None:
            by_key_src[r.key].append(r.content)
    for r in sorted(got, key=lambda r: (r.partition, r.offset)):
        if r.key is not None:
            by_key_dst[r.key].append(r.content)
    assert by_key_dst == by_key_src


def test_replay_where(spark: SparkSession, archived: Archived) -> None:
    """`where` filters on any archive column: here one topic and a time range (a day partition)."""
    from logbroker.spark.replay import replay

    boot = archived.bootstrap
    cut = datetime.fromtimestamp(T_NEW / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
    dst = create_topic(boot, "replay-where", PARTITIONS)
    where = f"topic = '{archived.main}' AND timestamp >= TIMESTAMP '{cut}'"
    # spark=None: replay builds (here: finds) the session itself.
    sent = replay(archived.path, boot, dst, where=where, keep_partition=True)
    want = [r for r in archived.of(archived.main) if r.timestamp >= T_NEW]
    assert 0 < sent == len(want) < len(archived.of(archived.main))
    assert [(r.partition, *r.content) for r in consume_all(boot, dst)] == [(r.partition, *r.content) for r in want]
    # The `date` partition column works too, and a filter that matches nothing sends nothing.
    old_day = datetime.fromtimestamp(T_OLD / 1000, UTC).date().isoformat()
    dst2 = create_topic(boot, "replay-where", 1)
    assert replay(archived.path, boot, dst2, spark=spark, where=f"date = DATE '{old_day}'") == len(
        [r for r in archived.records if r.timestamp < T_NEW]
    )
    assert replay(archived.path, boot, dst2, spark=spark, where="offset < 0") == 0


def test_replay_missing_topic(spark: SparkSession, archived: Archived, target: Target, no_auto_create: str) -> None:
    """A target that does not exist: auto-created where the broker allows it (key hash only), a clear
    error where it does not, and always an error with keep_partition (it needs a partition count)."""
    from logbroker.spark.replay import ReplayError, replay

    where, boot = f"topic = '{archived.side}'", archived.bootstrap
    with pytest.raises(ReplayError, match=r"does not exist.*at least 1 partition"):
        replay(archived.path, boot, unique("replay-absent"), spark=spark, where=where, keep_partition=True)
    # The no-auto-create broker has no data of ours; replay checks the topic before producing anything.
    with pytest.raises(ReplayError, match="did not create it"):
        replay(archived.path, no_auto_create, unique("replay-absent"), spark=spark, where=where)
    if target.auto_create:
        dst = unique("replay-auto")
        assert replay(archived.path, archived.bootstrap, dst, spark=spark, where=where) == len(
            archived.of(archived.side)
        )
        assert sorted((r.content for r in consume_all(boot, dst)), key=repr) == sorted(
            (r.content for r in archived.of(archived.side)), key=repr
        )


def test_replay_errors(spark: SparkSession, archived: Archived, tmp_path: Path) -> None:
    from logbroker.spark.builtins import archive
    from logbroker.spark.replay import ReplayError, replay

    boot = archived.bootstrap
    dst = create_topic(boot, "replay-err", 1)
    with pytest.raises(ReplayError, match="does not exist"):
        replay(tmp_path / "nowhere", boot, dst, spark=spark)
    # An archive of an empty topic: a committed Spark output with no records in it.
    empty_topic = create_topic(boot, "replay-empty", 1)
    archive(boot, tmp_path / "empty", topics=[empty_topic], spark=spark, progress=False, timeout=300)
    with pytest.raises(ReplayError, match="holds no records"):
        replay(tmp_path / "empty", boot, dst, spark=spark)
    spark.range(3).write.parquet(str(tmp_path / "not-archive"))
    with pytest.raises(ReplayError, match="not an archive: column"):
        replay(tmp_path / "not-archive", boot, dst, spark=spark)
    with pytest.raises(ReplayError, match="not a valid filter"):
        replay(archived.path, boot, dst, spark=spark, where="no_such_column = 1")
    # Source partitions 0..2 do not fit a 1-partition topic.
    with pytest.raises(ReplayError, match="needs at least 3"):
        replay(archived.path, boot, dst, spark=spark, keep_partition=True)
    assert consume_all(boot, dst) == [], "nothing may be produced before the checks pass"


def test_replay_delivery_error_fails_the_job(spark: SparkSession, archived: Archived) -> None:
    """A record the broker refuses (5 KB into max.message.bytes=1024) fails the Spark job, and
    replay raises with the broker's reason instead of returning a short count."""
    from logbroker.spark.replay import ReplayError, replay

    boot = archived.bootstrap
    dst = create_topic(boot, "replay-small", 1, config={"max.message.bytes": "1024"})
    with pytest.raises(ReplayError, match=r"(?i)replay into .* failed.*(too large|size)"):
        replay(archived.path, boot, dst, spark=spark, where=f"topic = '{archived.side}'")
