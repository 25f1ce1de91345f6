"""The protocol before Kafka 0.11 on a real broker: Produce v0-v2 with magic 0/1 message sets, Fetch v0-v3
answered in those formats, ListOffsets v0, OffsetCommit v0-v1 and OffsetFetch v0, through the project's
codec and through real clients (kafka-python speaking as a 0.9 / 0.10 client; confluent-kafka as a modern
one on the same topics). protocol_versions=kafka4 refuses them as Kafka 4 does."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from logbroker.jars import jars_available
from logbroker.protocol import ApiKey, api
from logbroker.protocol import ErrorCode as E
from logbroker.protocol.records import Compression, NewRecord, build_batch
from logbroker_devtools.client.connection import Connection
from logbroker_devtools.testing.old_clients import ToolMissing, sarama_round_trip
from logbroker_devtools.testing.peers import STANDARD_AUTHORIZER, Kafka39Peer, java_available
from logbroker_devtools.testing.process import BrokerProcess
from support import create_topic, missing_tool, unique

P = api(ApiKey.Produce).request
F = api(ApiKey.Fetch).request
L = api(ApiKey.ListOffsets).request
OC = api(ApiKey.OffsetCommit).request
OF = api(ApiKey.OffsetFetch).request
OE = api(ApiKey.OffsetForLeaderEpoch).request
ANONYMOUS = "User:ANONYMOUS"


@pytest.fixture(scope="module", params=["logbroker", "kafka39"])
def old(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """logbroker, and Apache Kafka 3.9 (the last to serve these versions) as the reference: every exchange
    here is asserted on both. Both run the StandardAuthorizer with User:ANONYMOUS (every PLAINTEXT client)
    as a super user, so the ACL APIs answer and everything else is allowed."""
    if request.param == "kafka39":
        if not java_available() or not jars_available("kafka39"):
            missing_tool("Kafka 3.9 needs java and .ci/fetch-jars kafka39")
        with Kafka39Peer(authorizer=True, super_users=[ANONYMOUS]) as peer:
            yield SimpleNamespace(name="kafka39", bootstrap=peer.bootstrap, port=peer.port)
        return
    env = {"LOGBROKER_AUTHORIZER_CLASS_NAME": STANDARD_AUTHORIZER, "LOGBROKER_SUPER_USERS": ANONYMOUS}
    proc = BrokerProcess(tmp_path_factory.mktemp("old-protocol") / "data", extra_args=["--num-partitions", "1"],
                         env=env)  # fmt: skip
    proc.start()
    yield SimpleNamespace(name="logbroker", bootstrap=proc.bootstrap, port=proc.port)
    assert proc.stop() == 0, proc.log_tail()


def connect(broker: Any) -> Connection:
    return Connection("127.0.0.1", broker.port, "old-client")


def legacy_set(magic: int, codec: int, values: list[bytes], ts: int = 0) -> bytes:
    b = LegacyRecordBatchBuilder(magic, codec, 1 << 30)
    for i, v in enumerate(values):
        b.append(i, ts or None, b"k%d" % i, v)
    return bytes(b.build())


def produce(c: Connection, version: int, topic: str, records: bytes, acks: int = -1) -> Any:
    part = P.TopicProduceData.PartitionProduceData(index=0, records=records)
    resp = c.do(P(acks=acks, timeout_ms=5000, topic_data=[P.TopicProduceData(name=topic, partition_data=[part])]),
                version)  # fmt: skip
    return resp.responses[0].partition_responses[0]


def fetch(c: Connection, version: int, topic: str, offset: int, max_bytes: int = 1 << 20) -> Any:
    part = F.FetchTopic.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=max_bytes)
    resp = c.do(F(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=max_bytes,
                  topics=[F.FetchTopic(topic=topic, partitions=[part])]), version)  # fmt: skip
    return resp.responses[0].partitions[0]


def read_all(c: Connection, version: int, topic: str, end: int) -> list[Any]:
    """Every message up to offset `end`, fetched as an old consumer does: from the offset after the last
    one it got (an answer holds about as many bytes as were read, so a converted one may stop early)."""
    out: list[Any] = []
    offset = 0
    while offset < end:
        got = fetch(c, version, topic, offset)
        assert got.error_code == 0 and got.high_watermark == end
        new = [r for r in legacy_records(got.records) if r[1] >= offset]
        assert new, f"no progress at offset {offset}"
        out += new
        offset = new[-1][1] + 1
    return out


def coordinator_ready(c: Connection, group: str) -> None:
    """FindCoordinator v0 until the group's coordinator answers, as an old client asks before it commits
    (the first one creates __consumer_offsets, which takes Kafka a moment to load)."""
    fc = api(ApiKey.FindCoordinator).request
    for _ in range(100):
        if c.do(fc(key=group), 0).error_code == 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"no coordinator for {group}")


def legacy_records(data: bytes) -> list[tuple[int, int, int | None, bytes | None, bytes | None]]:
    out = []
    records = MemoryRecords(bytes(data))
    while records.has_next():
        batch = records.next_batch()
        for r in batch:
            out.append((batch.magic, r.offset, r.timestamp, r.key, r.value))
    return out


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4])
@pytest.mark.parametrize(("produce_version", "magic"), [(0, 0), (1, 0), (2, 1)])
def test_old_produce_and_fetch_in_every_format(old: Any, produce_version: int, magic: int,
                                               codec: int) -> None:  # fmt: skip
    """A set of each magic and codec is stored and read back by every fetch version: magic 0 by v0-v1,
    magic 1 (timestamps kept) by v2-v3, v2 batches by v4+; offsets assigned by the broker."""
    topic = unique("old")
    create_topic(old.bootstrap, topic)
    ts = int(time.time() * 1000) - 5000
    with connect(old) as c:
        first = produce(c, produce_version, topic, legacy_set(magic, codec, [b"a", b"b", b"c"], ts))
        assert first.error_code == 0 and first.base_offset == 0
        second = produce(c, produce_version, topic, legacy_set(magic, codec, [b"d"], ts))
        assert second.error_code == 0 and second.base_offset == 3
        for version, want_magic in ((0, 0), (1, 0), (2, 1), (3, 1)):
            got = read_all(c, version, topic, 4)
            stamps = None if want_magic == 0 else (ts if magic == 1 else -1)
            keys = [b"k0", b"k1", b"k2", b"k0"]
            assert got == [(want_magic, i, stamps, keys[i], v) for i, v in enumerate([b"a", b"b", b"c", b"d"])]
        modern = fetch(c, 11, topic, 0)
        assert modern.error_code == 0 and bytes(modern.records)[16] == 2  # stored as v2 batches


def test_refused_message_sets_are_answered_with_kafka_s_codes_and_nothing_is_stored(old: Any) -> None:
    topic = unique("bad")
    create_topic(old.bootstrap, topic)
    good = legacy_set(1, Compression.NONE, [b"x"])
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    with connect(old) as c:
        assert produce(c, 2, topic, bytes(corrupt)).error_code == E.CORRUPT_MESSAGE
        assert produce(c, 2, topic, good + legacy_set(0, Compression.NONE, [b"y"])).error_code == E.INVALID_RECORD
        wrapper = legacy_set(1, Compression.GZIP, [b"z"])
        assert produce(c, 1, topic, wrapper + wrapper).error_code == E.INVALID_RECORD
        assert fetch(c, 3, topic, 0).high_watermark == 0
        # A v2 batch in a v0-v2 request is taken as it is (Kafka checks the magic only from v3 on).
        assert produce(c, 2, topic, build_batch([NewRecord(b"k", b"v2")])).error_code == 0
        assert legacy_records(fetch(c, 2, topic, 0).records)[0][3:] == (b"k", b"v2")


def test_headers_are_dropped_and_control_batches_left_out_for_old_readers(old: Any) -> None:
    """A transaction written by a modern producer: old readers get its records (no isolation level before
    Fetch v4, as from Kafka 3.x) without headers, and never the commit marker."""
    topic = unique("txn")
    create_topic(old.bootstrap, topic)
    p = Producer({"bootstrap.servers": old.bootstrap, "transactional.id": unique("tid")})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, headers=[("h", b"x")])
    p.commit_transaction(30)
    with connect(old) as c:
        got = legacy_records(fetch(c, 3, topic, 0).records)
    assert [(o, k, v) for _m, o, _t, k, v in got] == [(i, b"k%d" % i, b"v%d" % i) for i in range(3)]


def test_a_v0_producer_and_a_modern_consumer_and_the_reverse(old: Any) -> None:
    topic = unique("mixed")
    create_topic(old.bootstrap, topic)
    with connect(old) as c:
        assert produce(c, 0, topic, legacy_set(0, Compression.SNAPPY, [b"old-1", b"old-2"])).error_code == 0
    p = Producer({"bootstrap.servers": old.bootstrap, "compression.type": "lz4"})
    p.produce(topic, key=b"k9", value=b"new-1", headers=[("h", b"dropped for old readers")])
    p.flush(30)
    consumer = Consumer({"bootstrap.servers": old.bootstrap, "group.id": unique("g"), "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([topic])
    seen: list[tuple[int, bytes | None]] = []
    deadline = time.monotonic() + 30
    while len(seen) < 3 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            seen.append((m.offset(), m.value()))
    consumer.close()
    assert seen == [(0, b"old-1"), (1, b"old-2"), (2, b"new-1")]
    with connect(old) as c:
        assert [(o, v) for _m, o, _t, _k, v in legacy_records(fetch(c, 1, topic, 0).records)] == seen


@pytest.mark.parametrize(("api_version", "compression"), [((0, 9), "gzip"), ((0, 9), "lz4"), ((0, 10), None),
                                                          ((0, 10), "snappy")])  # fmt: skip
def test_kafka_python_as_an_old_client_produces_consumes_and_commits(old: Any, api_version: tuple[int, int],
                                                                     compression: str | None) -> None:  # fmt: skip
    """kafka-python told the broker is 0.9 (magic 0, Fetch v1, ListOffsets v0) or 0.10 (magic 1, Fetch v2):
    1,000 keyed messages out, read back from offset 0 in a group, committed and fetched back."""
    topic, group = unique("kp"), unique("g")
    p = KafkaProducer(bootstrap_servers=old.bootstrap, api_version=api_version, compression_type=compression)
    for i in range(1000):
        p.send(topic, key=b"key-%d" % i, value=b"value-%d" % i)
    p.flush(30)
    p.close()
    c = KafkaConsumer(topic, bootstrap_servers=old.bootstrap, api_version=api_version, group_id=group,
                      auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=10_000)  # fmt: skip
    got = [(m.offset, m.key, m.value) for m in c]
    assert got == [(i, b"key-%d" % i, b"value-%d" % i) for i in range(1000)]
    c.commit()
    assert c.committed(TopicPartition(topic, 0)) == 1000
    c.close()


@pytest.mark.parametrize(("version", "compression"), [("0.9.0.0", "snappy"), ("0.10.2.0", "gzip")])
def test_sarama_as_an_old_client_produces_consumes_and_commits(old: Any, version: str, compression: str) -> None:
    """sarama (Go) with Version = V0_9_0_0 (partition consumer and offset manager: sarama joins groups only
    from 0.10.2) and V0_10_2_0 (a consumer group): 1,000 keyed messages out, all read back from the oldest
    offset, the commit read back."""
    try:
        report = sarama_round_trip(old.bootstrap, version, unique("sarama"), unique("g"), 1000, compression)
    except ToolMissing as exc:
        missing_tool(str(exc))
    want = [(0, i, f"key-{i}", f"value-{i}") for i in range(1000)]
    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in report["produced"]] == want
    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in report["consumed"]] == want
    assert report["committed"] == 1000


def test_list_offsets_v0_answers_segment_starts_newest_first(old: Any) -> None:
    topic = unique("lo")
    create_topic(old.bootstrap, topic)
    with connect(old) as c:
        for _ in range(3):
            assert produce(c, 2, topic, legacy_set(1, Compression.NONE, [b"x", b"y"])).error_code == 0

        def offsets(ts: int, n: int) -> tuple[int, list[int]]:
            part = L.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=ts, max_num_offsets=n)
            r = c.do(L(replica_id=-1, topics=[L.ListOffsetsTopic(name=topic, partitions=[part])]), 0)
            row = r.topics[0].partitions[0]
            return row.error_code, list(row.old_style_offsets)

        assert offsets(-1, 1) == (0, [6])
        assert offsets(-1, 10) == (0, [6, 0])  # the log end, then the one segment's start
        assert offsets(-2, 10) == (0, [0])
        assert offsets(-1, 0) == (0, [])
        assert offsets(1, 10) == (0, [])  # nothing was written by then
        assert offsets(int(time.time() * 1000) + 60_000, 10) == (0, [6, 0])
        assert offsets(-3, 1)[0] == E.UNSUPPORTED_VERSION
        assert offsets(-1, -1)[0] == E.UNKNOWN_SERVER_ERROR


def test_offset_commit_v0_v1_and_offset_fetch_v0(old: Any) -> None:
    """v1 commits as Kafka 3.9 does (a member-less commit to an empty group; its own timestamp). v0 (0.8.1
    clients) went to ZooKeeper: Kafka 3.9 in KRaft mode answers UNSUPPORTED_VERSION, logbroker keeps such
    commits with the group's offsets (a deliberate difference: those clients work)."""
    topic, group = unique("oc"), unique("g")
    create_topic(old.bootstrap, topic)
    part = OC.OffsetCommitRequestTopic.OffsetCommitRequestPartition
    with connect(old) as c:
        coordinator_ready(c, group)
        r0 = c.do(OC(group_id=group, topics=[OC.OffsetCommitRequestTopic(name=topic, partitions=[
            part(partition_index=0, committed_offset=5, committed_metadata="zero")])]), 0)  # fmt: skip
        if old.name == "kafka39":
            assert r0.topics[0].partitions[0].error_code == E.UNSUPPORTED_VERSION
            row = part(partition_index=0, committed_offset=5, commit_timestamp=-1, committed_metadata="zero")
            r0 = c.do(OC(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                         topics=[OC.OffsetCommitRequestTopic(name=topic, partitions=[row])]), 1)  # fmt: skip
        assert r0.topics[0].partitions[0].error_code == 0

        def fetched(version: int) -> tuple[int, int, str]:
            r = c.do(OF(group_id=group, topics=[OF.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])]),
                     version)  # fmt: skip
            row = r.topics[0].partitions[0]
            return row.error_code, row.committed_offset, row.metadata

        assert fetched(1) == fetched(5) == (0, 5, "zero")
        v0 = (E.UNSUPPORTED_VERSION, -1, "") if old.name == "kafka39" else (0, 5, "zero")
        assert fetched(0) == v0
        row = part(partition_index=0, committed_offset=7, commit_timestamp=1234, committed_metadata="one")
        r1 = c.do(OC(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                     topics=[OC.OffsetCommitRequestTopic(name=topic, partitions=[row])]), 1)  # fmt: skip
        assert r1.topics[0].partitions[0].error_code == 0
        assert fetched(1) == (0, 7, "one")


def test_a_0_8_2_commit_with_generation_0_as_kpax_sends_it(old: Any) -> None:
    """kpax (a 0.8.2 client) commits with OffsetCommit v1, generation 0 and no member id. Kafka 3.9 refuses it
    for a group it does not know (ILLEGAL_GENERATION, since 0.9); logbroker takes it as a member-less commit,
    as 0.8.2 brokers did, so kpax can commit. Both refuse it while the group has members."""
    topic, group = unique("kpax"), unique("g")
    create_topic(old.bootstrap, topic)
    part = OC.OffsetCommitRequestTopic.OffsetCommitRequestPartition
    row = part(partition_index=0, committed_offset=3, commit_timestamp=int(time.time() * 1000))

    def commit(c: Connection, group: str) -> int:
        r = c.do(OC(group_id=group, generation_id_or_member_epoch=0, member_id="",
                    topics=[OC.OffsetCommitRequestTopic(name=topic, partitions=[row])]), 1)  # fmt: skip
        return int(r.topics[0].partitions[0].error_code)

    with connect(old) as c:
        coordinator_ready(c, group)
        assert commit(c, group) == (E.ILLEGAL_GENERATION if old.name == "kafka39" else 0)
    busy = unique("busy")
    consumer = Consumer({"bootstrap.servers": old.bootstrap, "group.id": busy, "session.timeout.ms": 10_000})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    try:
        with connect(old) as c:
            assert commit(c, busy) == E.UNKNOWN_MEMBER_ID
    finally:
        consumer.close()


@pytest.mark.parametrize("version", [0, 1])
def test_offset_for_leader_epoch_v0_v1(old: Any, version: int) -> None:
    """Pre-KIP-320 forms (no current leader epoch; v0 answers no epoch): the end of epoch 0 is the log end,
    an epoch never seen is -1, an unknown partition UNKNOWN_TOPIC_OR_PARTITION."""
    topic = unique("ofle")
    create_topic(old.bootstrap, topic)
    with connect(old) as c:
        assert produce(c, 2, topic, legacy_set(1, Compression.NONE, [b"x", b"y"])).error_code == 0
        parts = [OE.OffsetForLeaderTopic.OffsetForLeaderPartition(partition=p, leader_epoch=e)
                 for p, e in ((0, 0), (0, 7), (5, 0))]  # fmt: skip
        r = c.do(OE(replica_id=-1, topics=[OE.OffsetForLeaderTopic(topic=topic, partitions=parts)]), version)
    got = [(p.partition, p.error_code, p.end_offset) for p in r.topics[0].partitions]
    assert got == [(0, 0, 2), (0, 0, -1), (5, E.UNKNOWN_TOPIC_OR_PARTITION, -1)]
    if version >= 1:
        assert [p.leader_epoch for p in r.topics[0].partitions] == [0, -1, -1]


def test_admin_requests_of_0_10_clients(old: Any) -> None:
    """CreateTopics v0-1 (v1 adds validate_only), DescribeConfigs v0 (is_default instead of a source) and
    DeleteTopics v0, as kafka-python 1.x's admin client and 0.10-era tools send them."""
    CT, DC, DT = (api(k).request for k in (ApiKey.CreateTopics, ApiKey.DescribeConfigs, ApiKey.DeleteTopics))
    a, b = unique("adm"), unique("adm")

    def create(c: Connection, name: str, version: int, **extra: Any) -> int:
        t = CT.CreatableTopic(
            name=name,
            num_partitions=2,
            replication_factor=1,
            assignments=[],
            configs=[CT.CreatableTopic.CreatableTopicConfig(name="retention.ms", value="3600000")],
        )
        r = c.do(CT(topics=[t], timeout_ms=10_000, **extra), version)  # fmt: skip
        return int(r.topics[0].error_code)

    with connect(old) as c:
        assert create(c, a, 0) == 0
        assert create(c, a, 0) == E.TOPIC_ALREADY_EXISTS
        assert create(c, b, 1, validate_only=True) == 0
        assert create(c, b, 1) == 0
        res = DC.DescribeConfigsResource(
            resource_type=2, resource_name=a, configuration_keys=["retention.ms", "cleanup.policy"]
        )
        r = c.do(DC(resources=[res]), 0)
        rows = {e.name: (e.value, e.is_default, e.read_only) for e in r.results[0].configs}
        assert r.results[0].error_code == 0
        # Kafka 3.x never sets v0's is_default (measured on 3.9), whatever the source.
        assert rows == {"retention.ms": ("3600000", False, False), "cleanup.policy": ("delete", False, False)}
        gone = c.do(DT(topic_names=[a, b, unique("never")], timeout_ms=10_000), 0)
        codes = sorted(int(t.error_code) for t in gone.responses)
        assert codes == [0, 0, E.UNKNOWN_TOPIC_OR_PARTITION]


def test_acl_apis_v0_see_literal_patterns_only(old: Any) -> None:
    """CreateAcls/DescribeAcls/DeleteAcls v0 predate pattern types (KIP-290): a v0 creation is LITERAL, and
    a v0 filter matches LITERAL patterns alone (the field's default), so a PREFIXED ACL on the same name is
    neither listed nor deleted by v0 and stays for v1."""
    CA, DA, DL = (api(k).request for k in (ApiKey.CreateAcls, ApiKey.DescribeAcls, ApiKey.DeleteAcls))
    name, principal = unique("acl"), f"User:{unique('p')}"
    TOPIC, ANY, LITERAL, PREFIXED, READ, WRITE, ALLOW = 2, 1, 3, 4, 3, 4, 3

    def creation(op: int, **extra: Any) -> Any:
        return CA.AclCreation(resource_type=TOPIC, resource_name=name, principal=principal, host="*", operation=op,
                              permission_type=ALLOW, **extra)  # fmt: skip

    def rows(resp: Any, version: int) -> set[tuple[Any, ...]]:
        return {(r.resource_type, r.resource_name, r.pattern_type if version else None, a.principal, a.operation)
                for r in resp.resources for a in r.acls}  # fmt: skip

    who = {"resource_type_filter": ANY, "resource_name_filter": None, "principal_filter": principal,
           "host_filter": None, "operation": ANY, "permission_type": ANY}  # fmt: skip
    with connect(old) as c:
        made = c.do(CA(creations=[creation(READ)]), 0)
        assert [(r.error_code, r.error_message) for r in made.results] == [(0, "")]
        made = c.do(CA(creations=[creation(WRITE, resource_pattern_type=PREFIXED)]), 1)
        assert [r.error_code for r in made.results] == [0]

        def describe(version: int, want: set[tuple[Any, ...]]) -> set[tuple[Any, ...]]:
            extra = {"pattern_type_filter": ANY} if version else {}
            for _ in range(50):  # Kafka applies an ACL through its metadata log, a moment after the answer
                r = c.do(DA(**who, **extra), version)
                assert r.error_code == 0, r
                if (got := rows(r, version)) == want:
                    break
                time.sleep(0.1)
            return got

        literal = (TOPIC, name, LITERAL, principal, READ)
        prefixed = (TOPIC, name, PREFIXED, principal, WRITE)
        assert describe(1, {literal, prefixed}) == {literal, prefixed}
        assert describe(0, {(TOPIC, name, None, principal, READ)}) == {(TOPIC, name, None, principal, READ)}
        gone = c.do(DL(filters=[DL.DeleteAclsFilter(**who)]), 0)
        assert [(f.error_code, [(m.resource_name, m.principal, m.operation) for m in f.matching_acls])
                for f in gone.filter_results] == [(0, [(name, principal, READ)])]  # fmt: skip
        assert describe(1, {prefixed}) == {prefixed}
        assert describe(0, set()) == set()
        rest = c.do(DL(filters=[DL.DeleteAclsFilter(**{**who, "pattern_type_filter": ANY})]), 1)
        assert [len(f.matching_acls) for f in rest.filter_results] == [1]


def test_log_dir_apis_v0(old: Any) -> None:
    """DescribeLogDirs v0 (no error code nor volume sizes) lists the partition with its size; AlterReplicaLogDirs
    v0 to a path that is no log dir is LOG_DIR_NOT_FOUND, to the broker's own dir nothing to do."""
    DLD, ARL = api(ApiKey.DescribeLogDirs).request, api(ApiKey.AlterReplicaLogDirs).request
    topic = unique("dirs")
    create_topic(old.bootstrap, topic)
    with connect(old) as c:
        assert produce(c, 2, topic, legacy_set(1, Compression.NONE, [b"x" * 100])).error_code == 0
        r = c.do(DLD(topics=[DLD.DescribableLogDirTopic(topic=topic, partitions=[0])]), 0)
        assert [d.error_code for d in r.results] == [0]
        [d] = r.results
        [t] = d.topics
        assert (t.name, [p.partition_index for p in t.partitions]) == (topic, [0])
        assert t.partitions[0].partition_size > 100 and not t.partitions[0].is_future_key

        def move(path: str) -> int:
            entry = ARL.AlterReplicaLogDir(path=path, topics=[ARL.AlterReplicaLogDir.AlterReplicaLogDirTopic(
                name=topic, partitions=[0])])  # fmt: skip
            return int(c.do(ARL(dirs=[entry]), 0).results[0].partitions[0].error_code)

        assert move("/no/such/dir") == E.LOG_DIR_NOT_FOUND
        assert move(d.log_dir) == 0


def test_write_txn_markers_v0(old: Any) -> None:
    """WriteTxnMarkers v0 (the 0.11 brokers' form; Kafka 4 serves v1 alone) writes an abort marker for a
    producer with no transaction open: a control batch a modern reader skips, the log end moved past it."""
    W = api(ApiKey.WriteTxnMarkers).request
    topic = unique("mark")
    create_topic(old.bootstrap, topic)
    with connect(old) as c:
        assert produce(c, 2, topic, legacy_set(1, Compression.NONE, [b"x"])).error_code == 0
        m = W.WritableTxnMarker(
            producer_id=4242,
            producer_epoch=0,
            transaction_result=False,
            coordinator_epoch=0,
            topics=[W.WritableTxnMarker.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])],
        )
        r = c.do(W(markers=[m]), 0)
        assert [(x.producer_id, [(t.name, [(p.partition_index, p.error_code) for p in t.partitions])
                for t in x.topics]) for x in r.markers] == [(4242, [(topic, [(0, 0)])])]  # fmt: skip
        got = fetch(c, 4, topic, 0)
        assert got.error_code == 0 and got.high_watermark == 2
        assert [r[1] for r in legacy_records(fetch(c, 3, topic, 0).records)] == [0]


@pytest.mark.parametrize("version", [0, 2])
def test_a_first_message_over_the_partition_limit(old: Any, version: int) -> None:
    """Fetch v0-2 have a hard partition limit on Kafka 3.x (no KIP-74 first-message exception): a stored
    batch larger than partition_max_bytes is not read at all, the answer is empty and an old client asks
    again forever (measured on 3.9). logbroker sends the first batch whole (a deliberate difference, see
    design.md), so the reader moves on."""
    topic = unique("big")
    create_topic(old.bootstrap, topic)
    with connect(old) as c:
        magic = 0 if version < 2 else 1
        assert produce(c, version, topic, legacy_set(magic, Compression.NONE, [b"v" * 300, b"w"])).error_code == 0
        got = fetch(c, version, topic, 0, max_bytes=100)
        assert got.error_code == 0 and got.high_watermark == 2
        whole = [(r[0], r[1], len(r[4] or b"")) for r in legacy_records(got.records)]
        if old.name == "kafka39":
            assert whole == [] and not got.records
        else:  # the producer's set is one stored batch, sent whole
            assert whole == [(magic, 0, 300), (magic, 1, 1)]


def test_downconversion_can_be_turned_off_per_topic(old: Any) -> None:
    topic = unique("noconv")
    create_topic(old.bootstrap, topic, config={"message.downconversion.enable": "false"})
    with connect(old) as c:
        assert produce(c, 2, topic, legacy_set(1, Compression.NONE, [b"x"])).error_code == 0
        assert fetch(c, 3, topic, 0).error_code == E.UNSUPPORTED_VERSION
        assert fetch(c, 4, topic, 0).error_code == 0


def test_kafka4_mode_closes_the_connection_on_removed_versions(tmp_path: Any) -> None:
    broker = BrokerProcess(tmp_path / "data", env={"LOGBROKER_PROTOCOL_VERSIONS": "kafka4"})
    with broker, connect(broker) as c:
        versions = c.versions
        assert versions[ApiKey.Produce][0] == 0 and versions[ApiKey.ListOffsets][0] == 1
        with pytest.raises((ConnectionError, OSError)):
            produce(c, 2, unique("k4"), legacy_set(1, Compression.NONE, [b"x"]))


def test_the_broker_default_turns_downconversion_off(tmp_path: Any) -> None:
    """log.message.downconversion.enable=false (the broker default of the topic config) refuses old fetches
    of every topic without an override, and a topic's override turns it back on."""
    env = {"LOGBROKER_LOG_MESSAGE_DOWNCONVERSION_ENABLE": "false"}
    broker = BrokerProcess(tmp_path / "data", env=env)
    with broker:
        off, on = unique("off"), unique("on")
        create_topic(broker.bootstrap, off)
        create_topic(broker.bootstrap, on, config={"message.downconversion.enable": "true"})
        with connect(broker) as c:
            for topic in (off, on):
                assert produce(c, 2, topic, legacy_set(1, Compression.NONE, [b"x"])).error_code == 0
            assert fetch(c, 1, off, 0).error_code == E.UNSUPPORTED_VERSION
            assert fetch(c, 11, off, 0).error_code == 0
            assert legacy_records(fetch(c, 1, on, 0).records)[0][4] == b"x"
