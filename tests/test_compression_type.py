"""Topic `compression.type` other than `producer`: batches arriving in another codec are recompressed to the
topic's on write, as Kafka does. Asserted on logbroker and Apache Kafka 4.4 alike: the stored batches' codec
(read raw), every record as a consumer sees it (keys, values, headers, timestamps, offsets), transactions and
idempotent producers through it, the size limit applied to the recompressed batch, the levels, and the
refusal of an unknown codec or level."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from logbroker.protocol import ApiKey, api
from logbroker.protocol.errors import ErrorCode as E
from logbroker.protocol.records import Compression, NewRecord, build_batch, iter_headers
from logbroker_devtools.client.connection import Connection, fetch_request, parse_bootstrap
from support import both_targets, create_topic, target_bootstrap, unique

pytestmark = pytest.mark.timeout(240)

CODEC = {"uncompressed": Compression.NONE, "none": Compression.NONE, "gzip": Compression.GZIP,
         "snappy": Compression.SNAPPY, "lz4": Compression.LZ4, "zstd": Compression.ZSTD}  # fmt: skip
P = api(ApiKey.Produce).request


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from target_bootstrap(request)


def stored(bootstrap: str, topic: str, partition: int = 0) -> list[tuple[int, int, int, bool]]:
    """(base offset, records, codec, transactional) of each stored batch, read raw (a consumer cannot tell)."""
    with Connection(*parse_bootstrap(bootstrap)) as c:
        resp = c.do(fetch_request(topic, partition, 0, 100, 16 << 20))
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0
    return [(h.base_offset, h.records_count, h.compression, h.is_transactional)
            for h in iter_headers(part.records or b"")]  # fmt: skip


def consume(bootstrap: str, topic: str, n: int, **conf: Any) -> list[Any]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g"), "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, **conf})  # fmt: skip
    c.assign([ck.TopicPartition(topic, 0, 0)])  # no group to join: the records alone are under test
    out: list[Any] = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append((m.offset(), m.key(), m.value(), m.headers(), m.timestamp()))
    finally:
        c.close()
    return out


# Each topic codec fed by a producer in another one, so every direction of a recompression is covered once.
PAIRS = [("uncompressed", "zstd"), ("gzip", "none"), ("snappy", "gzip"), ("lz4", "snappy"), ("zstd", "lz4")]


@pytest.mark.parametrize(("topic_codec", "producer_codec"), PAIRS)
def test_batches_are_stored_in_the_topics_codec_and_read_back_unchanged(target: str, topic_codec: str,
                                                                       producer_codec: str) -> None:  # fmt: skip
    topic = create_topic(target, unique("codec"), config={"compression.type": topic_codec})
    p = ck.Producer({"bootstrap.servers": target, "compression.type": producer_codec, "linger.ms": 20})
    sent = []
    base = int(time.time() * 1000) - 60_000  # recent: the shared Kafka's retention check must not delete them
    for i in range(300):
        key, value, headers = b"k%d" % i, (b"value-%d-" % i) * 20, [("h", b"%d" % i), ("empty", None)]
        p.produce(topic, key=key, value=value, headers=headers, timestamp=base + i)
        sent.append((key, value, headers, (ck.TIMESTAMP_CREATE_TIME, base + i)))
    assert p.flush(30) == 0
    got = consume(target, topic, 300)
    assert [o for o, *_ in got] == list(range(300))
    assert [tuple(r) for _o, *r in got] == [(k, v, h, ts) for k, v, h, ts in sent]
    batches = stored(target, topic)
    assert sum(n for _b, n, _c, _t in batches) == 300
    assert {c for _b, _n, c, _t in batches} == {CODEC[topic_codec]}


def test_a_change_of_compression_type_applies_to_new_batches(target: str) -> None:
    topic = create_topic(target, unique("change"), config={"compression.type": "gzip"})
    p = ck.Producer({"bootstrap.servers": target, "compression.type": "none", "linger.ms": 0})
    p.produce(topic, key=b"a", value=b"first")
    assert p.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": target})
    res = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ck.admin.ConfigEntry("compression.type", "lz4", incremental_operation=ck.admin.AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([res])[res].result(30)
    deadline = time.monotonic() + 30
    while True:  # Kafka applies a topic config through its metadata log, a moment after the answer
        p.produce(topic, key=b"b", value=b"later")
        assert p.flush(30) == 0
        codecs = [c for _b, _n, c, _t in stored(target, topic)]
        if codecs[-1] == Compression.LZ4 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert codecs[0] == Compression.GZIP and codecs[-1] == Compression.LZ4
    assert [v for _o, _k, v, *_ in consume(target, topic, len(codecs))][:1] == [b"first"]


def test_transactional_and_idempotent_batches_keep_their_producer_state(target: str) -> None:
    """A recompressed transactional batch is still transactional (read_committed hides an aborted one), and
    an idempotent producer's batches are deduplicated on their sequence numbers as before."""
    topic = create_topic(target, unique("txn"), config={"compression.type": "zstd"})
    tp = ck.Producer({"bootstrap.servers": target, "transactional.id": unique("tid"), "compression.type": "gzip"})
    tp.init_transactions(30)
    for commit in (False, True):
        tp.begin_transaction()
        for i in range(5):
            tp.produce(topic, key=b"t%d" % i, value=b"committed" if commit else b"aborted")
        assert tp.flush(30) == 0  # written before the end (an abort drops what is still queued)
        (tp.commit_transaction if commit else tp.abort_transaction)(30)
    idem = ck.Producer({"bootstrap.servers": target, "enable.idempotence": True, "compression.type": "snappy"})
    for i in range(5):
        idem.produce(topic, key=b"i%d" % i, value=b"idempotent")
    assert idem.flush(30) == 0
    data = [b for b in stored(target, topic) if b[1] == 5]
    assert [(c, t) for _b, _n, c, t in data] == [(Compression.ZSTD, True), (Compression.ZSTD, True),
                                                 (Compression.ZSTD, False)]  # fmt: skip
    committed = consume(target, topic, 10, **{"isolation.level": "read_committed"})
    assert sorted(v for _o, _k, v, *_ in committed) == [b"committed"] * 5 + [b"idempotent"] * 5


def test_log_append_time_survives_a_recompression(target: str) -> None:
    topic = create_topic(target, unique("lat"), config={"compression.type": "lz4",
                                                         "message.timestamp.type": "LogAppendTime"})  # fmt: skip
    before = int(time.time() * 1000)
    p = ck.Producer({"bootstrap.servers": target, "compression.type": "gzip"})
    for i in range(3):
        p.produce(topic, value=b"v%d" % i, timestamp=1_000)
    assert p.flush(30) == 0
    got = consume(target, topic, 3)
    assert {ts[0] for *_r, ts in got} == {ck.TIMESTAMP_LOG_APPEND_TIME}
    assert all(before - 5_000 <= ts[1] <= time.time() * 1000 + 5_000 for *_r, ts in got)


def raw_produce(bootstrap: str, topic: str, batch: bytes) -> Any:
    with Connection(*parse_bootstrap(bootstrap)) as c:
        part = P.TopicProduceData.PartitionProduceData(index=0, records=batch)
        resp = c.do(P(acks=-1, timeout_ms=10_000, topic_data=[P.TopicProduceData(name=topic, partition_data=[part])]))
    return resp.responses[0].partition_responses[0]


def test_the_size_limit_applies_to_the_recompressed_batch(target: str) -> None:
    """A zstd batch well under max.message.bytes that grows past it when stored uncompressed is refused
    MESSAGE_TOO_LARGE, and nothing is written."""
    topic = create_topic(target, unique("big"), config={"compression.type": "uncompressed",
                                                         "max.message.bytes": "4000"})  # fmt: skip
    batch = build_batch([NewRecord(b"k", b"x" * 10_000)], compression=Compression.ZSTD)
    assert len(batch) < 4000
    got = raw_produce(target, topic, batch)
    assert got.error_code == E.MESSAGE_TOO_LARGE
    assert raw_produce(target, topic, build_batch([NewRecord(b"k", b"x" * 1000)], compression=Compression.ZSTD)
                       ).error_code == 0  # fmt: skip
    assert [(b, n, c) for b, n, c, _t in stored(target, topic)] == [(0, 1, Compression.NONE)]


def test_levels_shape_the_stored_batches(target: str) -> None:
    """compression.gzip.level applies to what the topic recompresses: level 1 stores more bytes than 9."""
    text = b" ".join(b"%d:%s" % (i, b"abcdefghij"[i % 7 :] * (i % 5)) for i in range(4000))
    sizes = {}
    for level in ("1", "9"):
        topic = create_topic(target, unique("lvl"), config={"compression.type": "gzip",
                                                             "compression.gzip.level": level})  # fmt: skip
        assert raw_produce(target, topic, build_batch([NewRecord(b"k", text)])).error_code == 0
        with Connection(*parse_bootstrap(target)) as c:
            part = c.do(fetch_request(topic, 0, 0, 100, 1 << 20)).responses[0].partitions[0]
        sizes[level] = len(part.records)
    assert sizes["1"] > sizes["9"], sizes


@pytest.mark.parametrize(("config", "value", "message"), [
    ("compression.type", "brotli", "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ("compression.gzip.level", "10", "Value must be between 1 and 9 or equal to -1"),
    ("compression.zstd.level", "23", "Value must be no more than 22"),
])  # fmt: skip
def test_unknown_codecs_and_levels_are_refused(target: str, config: str, value: str, message: str) -> None:
    admin = AdminClient({"bootstrap.servers": target})
    name = unique("bad")
    with pytest.raises(ck.KafkaException) as err:
        admin.create_topics([NewTopic(name, 1, 1, config={config: value})])[name].result(30)
    e = err.value.args[0]
    assert e.code() == ck.KafkaError.INVALID_CONFIG
    assert e.str() == f"Invalid value {value} for configuration {config}: {message}"
