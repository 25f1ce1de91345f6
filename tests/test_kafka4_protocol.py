"""Kafka 4 protocol parity (issue 20): the API versions Kafka 4.4 serves, topic ids in Produce, Fetch,
OffsetCommit and OffsetFetch (KIP-516), ListOffsets' newest timestamps, DescribeTopicPartitions (KIP-966)
and `__consumer_offsets` as clients see it. Every answer is asserted alike on logbroker and Kafka 4.4."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from logbroker.protocol import ApiKey, api
from logbroker.protocol.records import NewRecord, build_batch, decode_records
from support import Wire, both_targets, create_topic, eventually, java_client_tool, target_bootstrap, unique

pytestmark = pytest.mark.timeout(240)
ZERO = uuid.UUID(int=0)
UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC, INVALID_REQUEST, UNSUPPORTED_VERSION = 3, 17, 42, 35
UNKNOWN_TOPIC_ID, UNKNOWN_SERVER_ERROR = 100, -1


@pytest.fixture(scope="module", params=both_targets())
def bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from target_bootstrap(request)


def _topic_id(wire: Wire, name: str) -> uuid.UUID:
    M = api(ApiKey.Metadata).request
    resp = wire.call(ApiKey.Metadata, 12, M(topics=[M.MetadataRequestTopic(name=name, topic_id=None)],
                                            allow_auto_topic_creation=False,
                                            include_topic_authorized_operations=False))  # fmt: skip
    [t] = resp.topics
    assert t.error_code == 0, t
    return t.topic_id


def _produce(wire: Wire, topic_id: uuid.UUID, values: list[bytes], partition: int = 0) -> Any:
    P = api(ApiKey.Produce).request
    batch = build_batch([NewRecord(key=None, value=v) for v in values])
    body = P(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
        P.TopicProduceData(topic_id=topic_id, partition_data=[P.TopicProduceData.PartitionProduceData(
            index=partition, records=batch)])])  # fmt: skip
    return wire.call(ApiKey.Produce, 13, body)


def _fetch(wire: Wire, version: int, topic_id: uuid.UUID, offset: int = 0, partitions: int = 1) -> Any:
    F = api(ApiKey.Fetch).request
    FP = F.FetchTopic.FetchPartition
    body = F(max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
             topics=[F.FetchTopic(topic_id=topic_id, partitions=[
                 FP(partition=p, fetch_offset=offset, partition_max_bytes=1 << 20) for p in range(partitions)])],
             forgotten_topics_data=[], rack_id="")  # fmt: skip
    return wire.call(ApiKey.Fetch, version, body)


@pytest.fixture(scope="module")
def topic(bootstrap: str) -> tuple[str, uuid.UUID]:
    name = create_topic(bootstrap, unique("k4"), partitions=2)
    with Wire(bootstrap, timeout=30) as wire:
        return name, _topic_id(wire, name)


# ------------------------------------------------------------------------------------------- versions


def test_the_versions_kafka_4_4_serves_are_advertised(bootstrap: str) -> None:
    """The maxima Kafka 4.4 advertises for the data and offset APIs, and DescribeTopicPartitions; a client
    that infers the broker from them (kafka-python) takes it for Kafka 4.2 or newer."""
    from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions

    with Wire(bootstrap) as wire:
        resp = wire.call(ApiKey.ApiVersions, 3, client_software_name="t", client_software_version="1")
    got = {k.api_key: k.max_version for k in resp.api_keys}
    want = {ApiKey.Produce: 13, ApiKey.Fetch: 18, ApiKey.ListOffsets: 11, ApiKey.Metadata: 13,
            ApiKey.OffsetCommit: 10, ApiKey.OffsetFetch: 10, ApiKey.DescribeTopicPartitions: 0}  # fmt: skip
    assert {k: got.get(k) for k in want} == want
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert infer_broker_version_from_api_versions(ranges) >= (4, 2)


# --------------------------------------------------------------------------------------- topic ids


def test_produce_and_fetch_by_topic_id_round_trip(bootstrap: str, topic: tuple[str, uuid.UUID]) -> None:
    _, tid = topic
    with Wire(bootstrap, timeout=30) as wire:
        resp = _produce(wire, tid, [b"a", b"b", b"c"], partition=1)
        [t] = resp.responses
        assert t.topic_id == tid
        [p] = t.partition_responses
        assert (p.index, p.error_code) == (1, 0)
        base = p.base_offset
        for version in (13, 15, 17, 18):
            resp = _fetch(wire, version, tid, offset=base, partitions=2)
            assert resp.error_code == 0
            [ft] = resp.responses
            assert ft.topic_id == tid
            by_index = {pd.partition_index: pd for pd in ft.partitions}
            assert by_index[1].error_code == 0 and by_index[1].high_watermark == base + 3
            assert [r.value for r in decode_records(by_index[1].records)] == [b"a", b"b", b"c"]


@pytest.mark.parametrize("kind", ["unknown", "zero"])
def test_an_unknown_topic_id_is_unknown_topic_id_per_partition(bootstrap: str, kind: str) -> None:
    tid = uuid.uuid4() if kind == "unknown" else ZERO
    with Wire(bootstrap, timeout=30) as wire:
        [t] = _produce(wire, tid, [b"x"]).responses
        assert (t.topic_id or ZERO) == tid  # the codec reads a zero uuid as None
        assert [(p.index, p.error_code, p.base_offset) for p in t.partition_responses] == [(0, UNKNOWN_TOPIC_ID, -1)]
        resp = _fetch(wire, 18, tid, partitions=2)
        if kind == "zero":  # Kafka fails the whole fetch
            assert (resp.error_code, resp.responses) == (UNKNOWN_SERVER_ERROR, [])
            return
        assert resp.error_code == 0
        [ft] = resp.responses
        assert ft.topic_id == tid
        assert [(p.partition_index, p.error_code, p.high_watermark) for p in ft.partitions] == [
            (0, UNKNOWN_TOPIC_ID, -1), (1, UNKNOWN_TOPIC_ID, -1)]  # fmt: skip


def _session_fetch(wire: Wire, version: int, session: int, epoch: int, topic_id: uuid.UUID | None = None) -> Any:
    """A session fetch: with `topic_id`, a full one (epoch 0) of its partition 0 from offset 1."""
    F = api(ApiKey.Fetch).request
    FP = F.FetchTopic.FetchPartition
    topics = (
        []
        if topic_id is None
        else [
            F.FetchTopic(topic_id=topic_id, partitions=[FP(partition=0, fetch_offset=1, partition_max_bytes=1 << 20)])
        ]
    )
    return wire.call(ApiKey.Fetch, version, F(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                                              session_id=session, session_epoch=epoch, topics=topics,
                                              forgotten_topics_data=[], rack_id=""))  # fmt: skip


def test_a_fetch_session_by_id_outlives_its_topic(bootstrap: str) -> None:
    """A session made by ids keeps its topics' names: once a topic is gone its partitions are
    UNKNOWN_TOPIC_OR_PARTITION there, while a new fetch by the id gets UNKNOWN_TOPIC_ID. Switching the
    session to names is FETCH_SESSION_TOPIC_ID_ERROR."""
    name = create_topic(bootstrap, unique("k4s"))
    with Wire(bootstrap, timeout=30) as wire:
        tid = _topic_id(wire, name)
        _produce(wire, tid, [b"1"])
        full = _session_fetch(wire, 17, 0, 0, tid)
        assert full.error_code == 0 and full.session_id != 0
        assert _session_fetch(wire, 12, full.session_id, 1).error_code == 106  # FETCH_SESSION_TOPIC_ID_ERROR
        full = _session_fetch(wire, 17, 0, 0, tid)
        assert full.error_code == 0 and full.session_id != 0
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_topics([name])[name].result(30)
        epochs = iter(range(1, 1000))

        def gone() -> Any:
            resp = _session_fetch(wire, 17, full.session_id, next(epochs))
            assert resp.error_code == 0, resp
            codes = [p.error_code for t in resp.responses for p in t.partitions]
            assert codes and codes != [0], codes
            return codes

        assert eventually(gone, timeout=30) == [UNKNOWN_TOPIC_OR_PARTITION]
        [t] = _session_fetch(wire, 17, 0, 0, tid).responses
        assert [p.error_code for p in t.partitions] == [UNKNOWN_TOPIC_ID]


def test_offsets_commit_and_fetch_by_topic_id(bootstrap: str, topic: tuple[str, uuid.UUID]) -> None:
    _, tid = topic
    group = unique("k4g")
    C = api(ApiKey.OffsetCommit).request
    CT = C.OffsetCommitRequestTopic
    Fq = api(ApiKey.OffsetFetch).request
    G = Fq.OffsetFetchRequestGroup
    bogus = uuid.uuid4()
    with Wire(bootstrap, timeout=30) as wire:
        wire.call(ApiKey.FindCoordinator, 4, key_type=0, coordinator_keys=[group])
        resp = wire.call(ApiKey.OffsetCommit, 10, C(
            group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            topics=[CT(topic_id=t, partitions=[CT.OffsetCommitRequestPartition(
                partition_index=1, committed_offset=7, committed_leader_epoch=-1, committed_metadata="m")])
                for t in (tid, bogus)]))  # fmt: skip
        assert [(t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions]) for t in resp.topics] == [
            (bogus, [(1, UNKNOWN_TOPIC_ID)]), (tid, [(1, 0)])]  # fmt: skip
        asked = [G.OffsetFetchRequestTopics(topic_id=t, partition_indexes=[1]) for t in (tid, bogus)]
        resp = wire.call(ApiKey.OffsetFetch, 10, Fq(require_stable=False, groups=[G(
            group_id=group, member_id=None, member_epoch=-1, topics=asked)]))  # fmt: skip
        [g] = resp.groups
        assert g.error_code == 0
        rows = {t.topic_id: [(p.partition_index, p.committed_offset, p.error_code) for p in t.partitions]
                for t in g.topics}  # fmt: skip
        assert rows == {tid: [(1, 7, 0)], bogus: [(1, -1, UNKNOWN_TOPIC_ID)]}
        resp = wire.call(ApiKey.OffsetFetch, 10, Fq(require_stable=False, groups=[G(
            group_id=group, member_id=None, member_epoch=-1, topics=None)]))  # fmt: skip
        [g] = resp.groups
        assert [(t.topic_id, [(p.partition_index, p.committed_offset) for p in t.partitions]) for t in g.topics] == [
            (tid, [(1, 7)])]  # fmt: skip


# ------------------------------------------------------------------------------------------ ListOffsets


def test_list_offsets_answers_every_special_timestamp_as_kafka_without_tiered_storage(
    bootstrap: str, topic: tuple[str, uuid.UUID]
) -> None:
    name, tid = topic
    L = api(ApiKey.ListOffsets).request
    LT = L.ListOffsetsTopic
    stamps = (-1, -2, -3, -4, -5, -6, -7)
    with Wire(bootstrap, timeout=30) as wire:
        _produce(wire, tid, [b"l1", b"l2"], partition=0)
        answers: dict[int, list[Any]] = {}
        for version in (8, 9, 10, 11):
            for ts in stamps:
                part = LT.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=ts)
                resp = wire.call(
                    ApiKey.ListOffsets,
                    version,
                    L(replica_id=-1, isolation_level=0, timeout_ms=1000, topics=[LT(name=name, partitions=[part])]),
                )
                [p] = [p for t in resp.topics for p in t.partitions]
                answers.setdefault(version, []).append((p.error_code, p.offset >= 0, p.timestamp >= 0, p.leader_epoch))
    found = (0, True, False, 0)
    nothing = (0, False, False, -1)
    refused = (UNSUPPORTED_VERSION, False, False, -1)
    max_ts = (0, True, True, 0)
    assert answers[11] == [found, found, max_ts, found, nothing, nothing, refused]
    assert answers[10] == answers[9] == [found, found, max_ts, found, nothing, refused, refused]
    assert answers[8] == [found, found, max_ts, found, refused, refused, refused]


# ----------------------------------------------------------------------------- DescribeTopicPartitions


def _describe(wire: Wire, names: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None) -> Any:
    D = api(ApiKey.DescribeTopicPartitions).request
    cur = None if cursor is None else D.Cursor(topic_name=cursor[0], partition_index=cursor[1])
    return wire.call(ApiKey.DescribeTopicPartitions, 0, D(
        topics=[D.TopicRequest(name=n) for n in names], response_partition_limit=limit, cursor=cur))  # fmt: skip


def _page(resp: Any) -> tuple[list[tuple[str, int, list[int]]], tuple[str, int] | None]:
    cur = resp.next_cursor
    return ([(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in resp.topics],
            None if cur is None else (cur.topic_name, cur.partition_index))  # fmt: skip


def test_describe_topic_partitions_pages_with_a_cursor(bootstrap: str) -> None:
    prefix = unique("k4d")
    a, b = create_topic(bootstrap, prefix + "-a", 3), create_topic(bootstrap, prefix + "-b", 2)
    missing = prefix + "-0missing"
    with Wire(bootstrap, timeout=30) as wire:
        assert _page(_describe(wire, [b, a, missing], limit=2)) == (
            [(missing, UNKNOWN_TOPIC_OR_PARTITION, []), (a, 0, [0, 1])], (a, 2))  # fmt: skip
        assert _page(_describe(wire, [b, a], limit=2, cursor=(a, 2))) == ([(a, 0, [2]), (b, 0, [0])], (b, 1))
        assert _page(_describe(wire, [b, a], limit=3)) == ([(a, 0, [0, 1, 2])], (b, 0))
        assert _page(_describe(wire, [b], limit=0, cursor=(b, 1))) == ([(b, 0, [1])], None)
        assert _page(_describe(wire, [a, b], cursor=(a, 5))) == ([(a, 0, []), (b, 0, [0, 1])], None)
        assert _page(_describe(wire, [a, b], cursor=(missing, 0))) == (
            [(a, INVALID_REQUEST, []), (b, INVALID_REQUEST, [])], None)  # fmt: skip
        assert _page(_describe(wire, [a], cursor=(a, -1))) == ([(a, INVALID_REQUEST, [])], None)
        assert _page(_describe(wire, ["bad name!"])) == ([("bad name!", INVALID_TOPIC, [])], None)
        everything = _describe(wire, [], cursor=(a, 0))
        listed = {t.name: t for t in everything.topics}
        assert a in listed and b in listed and listed[a].topic_id == _topic_id(wire, a)
        assert [p.leader_id for p in listed[a].partitions] == [everything_leader(wire)] * 3
        assert min(listed) == a  # the cursor's topic first, nothing before it


def everything_leader(wire: Wire) -> int:
    resp = wire.call(ApiKey.Metadata, 12, topics=[], allow_auto_topic_creation=False,
                     include_topic_authorized_operations=False)  # fmt: skip
    return resp.brokers[0].node_id


def test_the_java_admin_describes_topics_with_describe_topic_partitions(bootstrap: str) -> None:
    """Kafka 4's Admin.describeTopics pages through DescribeTopicPartitions (`kafka-topics --describe`)."""
    name = create_topic(bootstrap, unique("k4j"), partitions=5)
    from support import kafka_tool

    out = kafka_tool("kafka-topics", bootstrap, "--describe", "--topic", name, "--partition-size-limit-per-response",
                     "2")  # fmt: skip
    lines = [ln for ln in out.stdout.splitlines() if "Partition:" in ln]
    assert [ln.split("Partition:")[1].split()[0] for ln in lines] == ["0", "1", "2", "3", "4"], out.stdout


# -------------------------------------------------------------------------------- __consumer_offsets


def test_consumer_offsets_is_listed_internal_and_closed_to_produce(bootstrap: str) -> None:
    group = unique("k4c")
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        c.list_topics(timeout=10)
        c.committed([], timeout=10)  # finds the group's coordinator: Kafka makes the topic then
    finally:
        c.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def listed() -> Any:
        found = admin.list_topics(timeout=10).topics.get("__consumer_offsets")
        assert found is not None
        return found

    eventually(listed, timeout=30)
    with Wire(bootstrap, timeout=30) as wire:
        resp = wire.call(ApiKey.Metadata, 12, topics=None, allow_auto_topic_creation=False,
                         include_topic_authorized_operations=False)  # fmt: skip
        internal = {t.name: t.is_internal for t in resp.topics}
        assert internal["__consumer_offsets"] is True
        assert not any(v for k, v in internal.items() if not k.startswith("__"))
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10_000, "retries": 0})
    p.produce("__consumer_offsets", b"x", partition=0, on_delivery=lambda err, _m: errors.append(err))
    p.flush(15)
    assert [e.code() if e else None for e in errors] == [INVALID_TOPIC]
    with Wire(bootstrap, timeout=30) as wire:
        D = api(ApiKey.DeleteRecords).request
        resp = wire.call(ApiKey.DeleteRecords, 2, D(timeout_ms=10_000, topics=[D.DeleteRecordsTopic(
            name="__consumer_offsets", partitions=[D.DeleteRecordsTopic.DeleteRecordsPartition(
                partition_index=0, offset=-1)])]))  # fmt: skip
        assert [p.error_code for t in resp.topics for p in t.partitions] == [INVALID_TOPIC]


def test_the_java_client_round_trips_on_the_newest_versions(bootstrap: str) -> None:
    """The Java client 4.4 produces with Produce v13 and fetches with Fetch v18 (topic ids throughout; the
    versions it picks are checked in test_metrics)."""
    name = create_topic(bootstrap, unique("k4java"))
    tool = java_client_tool()
    values = [f"j{i}".encode() for i in range(20)]
    acks = tool.produce(bootstrap, name, [{"value": v, "partition": 0} for v in values])
    assert [a["offset"] for a in acks] == list(range(20))
    got = tool.consume(bootstrap, name, from_offset=0, count=20, timeout_ms=60_000)
    assert [r["value"] for r in got] == values
