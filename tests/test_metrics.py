"""The broker's Prometheus endpoint (`serve --metrics-listen`): a real broker, real clients (confluent-kafka, and
raw requests where a client would hide the error codes), the endpoint read with prometheus_client's parser.

logbroker only: Kafka has no Prometheus endpoint (its metrics are JMX), so there is nothing to compare with;
the amounts are checked against what the clients did and what they read back.
"""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from logbroker.protocol import ApiKey, api
from logbroker.protocol.apis import ApiSpec
from logbroker.protocol.messages import decode_response, encode_request
from logbroker.protocol.records import NewRecord, build_batch
from logbroker_devtools.testing.process import LOOPBACK, BrokerProcess, free_port
from support import Wire, create_topic, data_end, eventually, log_since, log_size, read_topic, unique

DASHBOARD = Path(__file__).parent.parent / "examples" / "grafana" / "logbroker-dashboard.json"
Sample = tuple[str, frozenset[tuple[str, str]]]
SPEC_PRODUCE = ApiSpec(api(ApiKey.Produce), 9, 9)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker with the endpoint on a loopback port (`metrics_url` on it)."""
    port = free_port()
    proc = BrokerProcess(tmp_path_factory.mktemp("metrics") / "data",
                         extra_args=["--metrics-listen", f"{LOOPBACK}:{port}"])  # fmt: skip
    proc.metrics_url = f"http://{LOOPBACK}:{port}"  # type: ignore[attr-defined]
    proc.start()
    yield proc
    assert proc.stop() == 0, proc.log_tail()
    proc.cleanup()


def get(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    """(status, content type, body) of one request; HTTP errors are answers too."""
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=15) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


def scrape(broker: BrokerProcess | str) -> dict[Sample, float]:
    """Every sample of /metrics, parsed by prometheus_client: (name, labels) -> value."""
    url = broker if isinstance(broker, str) else broker.metrics_url  # type: ignore[attr-defined]
    status, ctype, text = get(url + "/metrics")
    assert status == 200 and ctype.startswith("text/plain"), (status, ctype)
    out: dict[Sample, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: dict[Sample, float], name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels` (0 when there is none)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def delta(before: dict[Sample, float], after: dict[Sample, float], name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def stored_bytes(broker: BrokerProcess, topic: str) -> int:
    """Bytes the topic's batches take in its segment files, read past the broker."""
    return sum(data_end(f) for f in broker.data_dir.glob(f"{topic}-[0-9]*/*.log"))


def raw_fetch(bootstrap: str, topic: str, partition: int, offset: int) -> int:
    """One Fetch v11 of one partition; its error code."""
    req_cls = api(ApiKey.Fetch).request
    ft = req_cls.FetchTopic
    part = ft.FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                             partition_max_bytes=1 << 20)  # fmt: skip
    req = req_cls(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                  session_epoch=-1, topics=[ft(topic=topic, partitions=[part])], forgotten_topics_data=[],
                  rack_id="")  # fmt: skip
    raw = Wire(bootstrap, timeout=15)
    try:
        [t] = raw.call(ApiKey.Fetch, 11, req).responses
        return int(t.partitions[0].error_code)
    finally:
        raw.close()


def raw_produce(bootstrap: str, topic: str, partition: int) -> int:
    """One Produce v9 (acks=-1) of one record to one partition; its error code."""
    req_cls = api(ApiKey.Produce).request
    p = req_cls.TopicProduceData
    data = [p.PartitionProduceData(index=partition, records=build_batch([NewRecord(b"k", b"v")]))]
    req = req_cls(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[p(name=topic, partition_data=data)])
    raw = Wire(bootstrap, timeout=15)
    try:
        [t] = raw.call(ApiKey.Produce, 9, req).responses
        return int(t.partition_responses[0].error_code)
    finally:
        raw.close()


def produce_one_per_request(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    """Each record in a Produce request of its own (flushed one by one): requests == records."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": False})
    for i, v in enumerate(values):
        producer.produce(topic, v, partition=i % partitions)
        assert producer.flush(30) == 0
    producer.flush(30)


def consume_and_commit(bootstrap: str, topic: str, group: str, count: int) -> None:
    """Read `count` records with a subscribed group consumer, commit just past them, leave."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})  # fmt: skip
    try:
        consumer.subscribe([topic])
        got: list[Any] = []
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg)
        assert len(got) >= count
        consumer.commit(offsets=[TopicPartition(topic, 0, count)], asynchronous=False)
    finally:
        consumer.close()


def test_produce_counts_bytes_messages_requests_and_fsync(served: BrokerProcess) -> None:
    topic = create_topic(served.bootstrap, unique("m-produce"), partitions=2)
    values = [f"value-{i:03d}".encode() * (i + 1) for i in range(20)]
    before = scrape(served)
    produce_one_per_request(served.bootstrap, topic, values, 2)
    after = scrape(served)

    assert delta(before, after, "logbroker_topic_messages_in_total", topic=topic) == 20
    on_disk = stored_bytes(served, topic)
    assert on_disk > sum(map(len, values))
    assert delta(before, after, "logbroker_topic_bytes_in_total", topic=topic) == on_disk
    assert value(after, "logbroker_log_size_bytes", topic=topic) == on_disk
    assert value(after, "logbroker_log_end_offset", topic=topic) == 20  # 10 + 10
    assert value(after, "logbroker_log_start_offset", topic=topic) == 0
    assert value(after, "logbroker_log_segments", topic=topic) == 2
    # One Produce request per record, each timed through every phase, each waiting for its fsync round.
    assert delta(before, after, "logbroker_requests_total", api="Produce") == 20
    for phase in ("queue_time", "local_time", "remote_time", "total_time"):
        assert delta(before, after, f"logbroker_request_{phase}_seconds_count", api="Produce") == 20, phase
    assert delta(before, after, "logbroker_response_queue_time_seconds_count", api="Produce") == 20
    assert delta(before, after, "logbroker_request_remote_time_seconds_sum", api="Produce") > 0
    assert delta(before, after, "logbroker_request_total_time_seconds_bucket", api="Produce", le="+Inf") == 20
    assert delta(before, after, "logbroker_log_flush_seconds_count") >= 1
    assert delta(before, after, "logbroker_log_flush_waiters_total") >= 20
    assert value(after, "logbroker_partitions") >= 2 and value(after, "logbroker_topics") >= 1
    versions = {
        dict(ls)["version"] for (n, ls) in after if n == "logbroker_requests_total" and ("api", "Produce") in ls
    }
    assert versions and all(v.isdigit() and 3 <= int(v) <= 13 for v in versions), versions


def test_the_java_client_uses_kafka_4s_newest_data_versions(served: BrokerProcess) -> None:
    """The Java client 4.4 sends Produce v13 and Fetch v18 (topic ids, KIP-516) and Metadata v13 here, as
    it does to Kafka 4.4: the versions the broker counted while it produced and consumed."""
    from support import java_client_tool

    topic = create_topic(served.bootstrap, unique("m-java"))
    tool = java_client_tool()
    before = scrape(served)
    acks = tool.produce(served.bootstrap, topic, [{"value": b"v%d" % i, "partition": 0} for i in range(5)])
    got = tool.consume(served.bootstrap, topic, from_offset=0, count=5, timeout_ms=60_000)
    after = scrape(served)
    assert [a["offset"] for a in acks] == list(range(5)) and len(got) == 5
    for api_name, version in (("Produce", "13"), ("Fetch", "18"), ("Metadata", "13")):
        assert delta(before, after, "logbroker_requests_total", api=api_name, version=version) >= 1, api_name


def test_fetch_counts_the_bytes_consumers_read(served: BrokerProcess) -> None:
    topic = create_topic(served.bootstrap, unique("m-fetch"), partitions=2)
    produce_one_per_request(served.bootstrap, topic, [b"x" * 100] * 10, 2)
    before = scrape(served)
    got = read_topic(served.bootstrap, topic, 2)
    after = scrape(served)
    assert len(got) == 10
    # Every stored batch was sent once: bytes out equal what the topic holds on disk.
    assert delta(before, after, "logbroker_topic_bytes_out_total", topic=topic) == stored_bytes(served, topic)
    assert delta(before, after, "logbroker_requests_total", api="Fetch") >= 1
    assert delta(before, after, "logbroker_request_total_time_seconds_count", api="Fetch") >= 1


def test_errors_are_counted_by_api_and_code(served: BrokerProcess) -> None:
    topic = create_topic(served.bootstrap, unique("m-errors"), partitions=1)
    before = scrape(served)
    assert raw_fetch(served.bootstrap, topic, 0, 1000) == 1  # OFFSET_OUT_OF_RANGE
    assert raw_produce(served.bootstrap, topic, 7) == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert raw_produce(served.bootstrap, topic, 0) == 0
    after = scrape(served)
    assert delta(before, after, "logbroker_request_errors_total", api="Fetch", error="OFFSET_OUT_OF_RANGE") == 1
    assert delta(before, after, "logbroker_request_errors_total", api="Produce",
                 error="UNKNOWN_TOPIC_OR_PARTITION") == 1  # fmt: skip
    assert delta(before, after, "logbroker_request_errors_total") == 2  # the good produce counted no error


def test_lag_is_log_end_minus_committed_offset(served: BrokerProcess) -> None:
    topic = create_topic(served.bootstrap, unique("m-lag"), partitions=1)
    produce_one_per_request(served.bootstrap, topic, [b"r"] * 30, 1)
    group = unique("m-group")
    consume_and_commit(served.bootstrap, topic, group, 10)

    # What the clients see, independently of the endpoint: the committed offset and the log end.
    admin = AdminClient({"bootstrap.servers": served.bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions

    [fut] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    committed = {tp.partition: tp.offset for tp in fut.result(30).topic_partitions if tp.topic == topic}
    probe = Consumer({"bootstrap.servers": served.bootstrap, "group.id": unique("probe")})
    try:
        _, high = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        probe.close()
    del admin  # its connections close now, not during a later test
    assert committed == {0: 10} and high == 30

    samples = scrape(served)
    key = {"group": group, "topic": topic, "partition": "0"}
    assert value(samples, "logbroker_consumer_group_committed_offset", **key) == 10
    assert value(samples, "logbroker_consumer_group_lag", **key) == high - committed[0] == 20
    assert value(samples, "logbroker_log_end_offset", topic=topic, partition="0") == 30
    assert value(samples, "logbroker_consumer_groups") >= 1

    # More records: the lag follows the log end; a commit at the end brings it to 0.
    produce_one_per_request(served.bootstrap, topic, [b"r"] * 5, 1)
    assert value(scrape(served), "logbroker_consumer_group_lag", **key) == 25
    consumer = Consumer({"bootstrap.servers": served.bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 35)], asynchronous=False)
    finally:
        consumer.close()
    assert value(scrape(served), "logbroker_consumer_group_lag", **key) == 0


def test_connections_by_listener(served: BrokerProcess) -> None:
    # Earlier tests' clients are closed, but the broker may not have seen every close yet.
    eventually(lambda: _assert(value(scrape(served), "logbroker_connections") == 0))
    before = scrape(served)
    raw = Wire(served.bootstrap, timeout=15)
    try:
        eventually(lambda: _assert(delta(before, scrape(served), "logbroker_connections", listener="PLAINTEXT") == 1))
    finally:
        raw.close()
    eventually(lambda: _assert(delta(before, scrape(served), "logbroker_connections_closed_total",
                                     listener="PLAINTEXT") == 1))  # fmt: skip
    after = scrape(served)
    assert delta(before, after, "logbroker_connections_accepted_total", listener="PLAINTEXT") == 1
    assert delta(before, after, "logbroker_connections", listener="PLAINTEXT") == 0
    assert value(after, "logbroker_connections_refused_total", listener="PLAINTEXT") == 0


def produce_frame(topic: str, correlation_id: int, value: bytes) -> bytes:
    """A Produce v9 request frame (acks=all) of one record to partition 0, for clients written by hand."""
    req_cls = api(ApiKey.Produce).request
    p = req_cls.TopicProduceData
    data = [p.PartitionProduceData(index=0, records=build_batch([NewRecord(None, value)]))]
    body = req_cls(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[p(name=topic, partition_data=data)])
    return encode_request(SPEC_PRODUCE, 9, correlation_id, "by-hand", body)


def test_a_deep_pipeline_is_muted_once_per_half_not_once_per_answer(served: BrokerProcess) -> None:
    """A client with more produces in flight than max_pipelined_requests (100; librdkafka allows a million)
    gets every answer in order; reading its connection pauses at 100 and resumes once 50 are answered, so a
    pipeline of 400 mutes it about 8 times, not at nearly every answer (as when resuming at 99)."""
    topic = unique("pipeline")
    create_topic(served.bootstrap, topic)
    count = 400
    frames = b"".join(produce_frame(topic, cid, b"v%d" % cid) for cid in range(1, count + 1))
    before = scrape(served)
    raw = Wire(served.bootstrap, timeout=30)
    try:
        raw.sock.sendall(frames)
        offsets = []
        for cid in range(1, count + 1):
            got, resp = decode_response(SPEC_PRODUCE, 9, raw.recv_raw())
            assert got == cid
            [pr] = resp.responses[0].partition_responses
            assert pr.error_code == 0
            offsets.append(pr.base_offset)
    finally:
        raw.close()
    assert offsets == list(range(count))
    mutes = delta(before, scrape(served), "logbroker_connection_mutes_total", listener="PLAINTEXT")
    assert 1 <= mutes <= count // 25, mutes


def test_a_burst_of_large_produces_is_received_into_pooled_buffers(served: BrokerProcess) -> None:
    """40 clients with a ~200 KB produce each in progress at once: their frames are received into 40 buffers,
    all of which the pool keeps warm for the next burst (it kept 16 at most, so thousands of clients sending
    at once had nearly every frame land in fresh, page-faulted memory)."""
    topic = unique("burst")
    create_topic(served.bootstrap, topic)
    clients = 40
    frames = [produce_frame(topic, cid, bytes([cid]) * 200_000) for cid in range(1, clients + 1)]
    wires = [Wire(served.bootstrap, timeout=30) for _ in range(clients)]
    try:
        for w, f in zip(wires, frames, strict=True):
            w.sock.sendall(f[:-10])  # every frame begun, none complete: each holds its buffer
        time.sleep(0.5)  # the broker has read their heads meanwhile
        for w, f in zip(wires, frames, strict=True):
            w.sock.sendall(f[-10:])
        bases = []
        for cid, w in enumerate(wires, 1):
            got, resp = decode_response(SPEC_PRODUCE, 9, w.recv_raw())
            [pr] = resp.responses[0].partition_responses
            assert got == cid and pr.error_code == 0
            bases.append(pr.base_offset)
    finally:
        for w in wires:
            w.close()
    assert sorted(bases) == list(range(clients))
    after = scrape(served)
    assert value(after, "logbroker_pooled_buffers", pool="requests") >= clients
    assert value(after, "logbroker_pooled_buffer_bytes", pool="requests") >= clients * 200_000


def test_garbage_does_not_grow_labels(served: BrokerProcess) -> None:
    """Unknown API keys and unserved versions close the connection before anything is counted per API; a
    too-new ApiVersions (answered, KIP-511) counts under one `unsupported` version."""
    create_topic(served.bootstrap, unique("m-garbage"))
    before = scrape(served)
    for key, version in [(999, 0), (32767, 3), (-5, 0), (int(ApiKey.Produce), 200), (int(ApiKey.Fetch), 99)]:
        raw = Wire(served.bootstrap, timeout=15)
        try:
            body = struct.pack(">hhih", key, version, 1, -1)
            raw.send_raw(body)
            assert raw.closed(within=15)
        finally:
            raw.close()
    for version in (50, 1234):
        raw = Wire(served.bootstrap, timeout=15)
        try:
            body = struct.pack(">hhih", int(ApiKey.ApiVersions), version, 1, -1) + b"\0"  # header v2: no tags
            raw.send_raw(body)
            assert struct.unpack_from(">h", raw.recv_raw(), 4)[0] == 35  # UNSUPPORTED_VERSION
        finally:
            raw.close()
    after = scrape(served)

    def labels(samples: dict[Sample, float]) -> set[frozenset[tuple[str, str]]]:
        return {ls for (n, ls) in samples if n == "logbroker_requests_total"}

    new = labels(after) - labels(before)
    assert new <= {frozenset({("api", "ApiVersions"), ("version", "unsupported")})}, new
    assert delta(before, after, "logbroker_requests_total", api="ApiVersions", version="unsupported") == 2
    assert delta(before, after, "logbroker_protocol_errors_total", listener="PLAINTEXT") == 5
    apis = {dict(ls)["api"] for (n, ls) in after if n == "logbroker_request_total_time_seconds_count"}
    assert apis <= {a.name for a in ApiKey}, apis


def test_health_ready_and_other_paths(served: BrokerProcess) -> None:
    url = served.metrics_url  # type: ignore[attr-defined]
    assert get(url + "/health")[::2] == (200, "ok\n")
    assert get(url + "/ready")[::2] == (200, "ready\n")
    assert get(url + "/nothing-here")[0] == 404
    assert get(url + "/health", method="POST")[0] == 405
    status, ctype, text = get(url + "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert status == 200 and ctype.startswith("application/openmetrics-text"), ctype
    assert text.rstrip().endswith("# EOF")
    assert value(scrape(served), "logbroker_ready") == 1


def test_dashboard_queries_only_metrics_the_broker_serves(served: BrokerProcess) -> None:
    """Every series the Grafana dashboard queries is on a live broker's endpoint (after the traffic that
    makes each appear: a produce, a consumer group's commit, an error)."""
    topic = create_topic(served.bootstrap, unique("m-dash"))
    produce_one_per_request(served.bootstrap, topic, [b"d"] * 3, 1)
    consume_and_commit(served.bootstrap, topic, unique("m-dash-group"), 1)
    raw_fetch(served.bootstrap, topic, 0, 99)
    names = {n for (n, _) in scrape(served)}

    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 20
    queried = {m for e in exprs for m in re.findall(r"\b(?:logbroker|process)_[a-z0-9_]+", e)}
    assert queried, exprs
    missing = sorted(queried - names)
    assert not missing, f"the dashboard queries series the broker does not serve: {missing}"
    # And the dashboard covers what the issue asks for.
    for wanted in ("logbroker_topic_bytes_in_total", "logbroker_requests_total", "logbroker_request_errors_total",
                   "logbroker_log_flush_seconds_bucket", "logbroker_consumer_group_lag", "logbroker_connections",
                   "logbroker_log_size_bytes", "logbroker_request_total_time_seconds_bucket"):  # fmt: skip
        assert wanted in queried, wanted


def listening_ports(pid: int) -> set[int]:
    """TCP ports process `pid` listens on (its socket inodes matched in /proc/net/tcp{,6})."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # LISTEN
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def test_endpoint_is_off_unless_configured(served: BrokerProcess, tmp_path: Path) -> None:
    assert served.proc is not None
    metrics_port = int(served.metrics_url.rsplit(":", 1)[1])  # type: ignore[attr-defined]
    assert listening_ports(served.proc.pid) == {served.port, metrics_port}
    with BrokerProcess(tmp_path / "data") as plain:
        assert plain.proc is not None
        assert listening_ports(plain.proc.pid) == {plain.port}
        assert "metrics on" not in plain.log_tail(200)


def test_ready_turns_on_after_start_and_off_while_stopping(tmp_path: Path) -> None:
    """/ready is 200 only between start and shutdown; during the shutdown (held open here by a failed SASL
    login, whose answer Kafka delays by connection.failed.authentication.delay.ms) it is 503 while /health
    stays 200. Connections open and close in the DEBUG log with their listener."""
    port, sasl, mport = free_port(), free_port(), free_port()
    url = f"http://{LOOPBACK}:{mport}"
    listeners = f"PLAINTEXT://{LOOPBACK}:{port},SASL_PLAINTEXT://{LOOPBACK}:{sasl}"
    args = ["--listeners", listeners, "--sasl-enabled-mechanisms", "PLAIN", "--log-level", "DEBUG",
            "--metrics-listen", f"{LOOPBACK}:{mport}"]  # fmt: skip
    env = {"LOGBROKER_CONNECTION_FAILED_AUTHENTICATION_DELAY_MS": "4000"}
    proc = BrokerProcess(tmp_path / "data", port=port, extra_args=args, env=env)
    proc.start()
    try:
        eventually(lambda: _assert(get(url + "/ready")[0] == 200))  # once every listener is bound
        before = scrape(url)
        mark = log_size(proc)
        raw = Wire(f"{LOOPBACK}:{sasl}")
        handshake = api(ApiKey.SaslHandshake).request(mechanism="PLAIN")
        assert raw.call(ApiKey.SaslHandshake, 1, handshake).error_code == 0
        token = b"\0nobody\0wrong-password"
        raw.sock.sendall(encode_request(api(ApiKey.SaslAuthenticate), 2, 9, "metrics-test",
                                        api(ApiKey.SaslAuthenticate).request(auth_bytes=token)))  # fmt: skip
        eventually(lambda: _assert(delta(before, scrape(url), "logbroker_failed_authentications_total",
                                         listener="SASL_PLAINTEXT") == 1))  # fmt: skip
        assert proc.proc is not None
        proc.proc.send_signal(signal.SIGTERM)
        # The failed login's answer is due 4 s after it came: the shutdown waits for it.
        eventually(lambda: _assert(get(url + "/ready")[0] == 503), timeout=3.5, interval=0.05)
        assert get(url + "/health")[0] == 200
        assert proc.proc.wait(30) == 0
        raw.close()
        text = log_since(proc, mark)
        assert re.search(rf"connection from {LOOPBACK}:\d+ opened on listener SASL_PLAINTEXT", text), text
        assert re.search(rf"connection from {LOOPBACK}:\d+ closed on listener SASL_PLAINTEXT", text), text
    finally:
        proc.kill()


def _assert(ok: bool) -> bool:
    assert ok
    return True
