"""logbroker.notify against the embedded broker (`embedded://` URL) and Apache Kafka 4.4 (KafkaPeer,
started once for this module with extra SASL_PLAINTEXT and SSL listeners). Real brokers, real
confluent-kafka, no mocks."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from logbroker._kafka import librdkafka_config
from logbroker.notify import (
    AT_LEAST_ONCE,
    AT_MOST_ONCE,
    PRIORITIES,
    REQUEUE,
    InvalidTransportURL,
    NotificationFilter,
    NotificationListener,
    Notifier,
    NotifyError,
    get_transport,
    parse_url,
    stop_embedded,
)
from logbroker_devtools.testing.peers import KafkaPeer, free_port, jars_available, java_available
from security_support import KEY_PASSWORD

BACKENDS = ["embedded", "kafka"]
SASL_USER, SASL_PASSWORD = "alice", "alice-secret"


def wait_for(cond: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def name(prefix: str = "n") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# ------------------------------------------------------------------------------------------ TLS


def make_certs(d: Path) -> dict[str, Path]:
    """A CA, a server cert for 127.0.0.1 and a client cert whose key is password-protected (KEY_PASSWORD):
    the security suites' set (security_support)."""
    from security_support import make_certs as security_certs

    return security_certs(d)


__all__ = ["KEY_PASSWORD"]  # test_notify_oslo takes it from here


# ------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def kafka(certs: dict[str, Path]) -> Iterator[KafkaPeer]:
    if not (java_available() and jars_available("kafka")):
        pytest.skip("needs java and the Kafka jars (.ci/run fetches them)")
    jaas_plain = f'org.apache.kafka.common.security.plain.PlainLoginModule required user_{SASL_USER}="{SASL_PASSWORD}";'
    props = {
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas_plain,
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.ssl.ssl.keystore.type": "PEM",
        "listener.name.ssl.ssl.keystore.location": str(certs["server_keystore"]),
        "listener.name.ssl.ssl.truststore.type": "PEM",
        "listener.name.ssl.ssl.truststore.location": str(certs["ca"]),
        "listener.name.ssl.ssl.client.auth": "required",
    }  # fmt: skip
    scram = [f"{m}=[name={SASL_USER},password={SASL_PASSWORD}]" for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")]
    peer = KafkaPeer(
        listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT", "SSL": "SSL"},
        server_properties=props,
        format_args=[arg for s in scram for arg in ("--add-scram", s)],
    )
    with peer:
        yield peer


class SecuredLogbroker:
    """Our broker with the same listeners and users as the `kafka` peer: PLAINTEXT, SASL_PLAINTEXT (PLAIN users
    from a file, SCRAM users made with the admin API) and SSL with client certificates required."""

    def __init__(self, data: Path, certs: dict[str, Path]) -> None:
        from logbroker_devtools.testing.net import free_ports
        from logbroker_devtools.testing.process import BrokerProcess

        self.ports = dict(zip(("PLAINTEXT", "SASL_PLAINTEXT", "SSL"), free_ports(3), strict=True))
        users = data.parent / "plain-users.txt"
        users.write_text(f"{SASL_USER}={SASL_PASSWORD}\n")
        self.proc = BrokerProcess(data)
        self.proc.port = self.ports["PLAINTEXT"]
        self.proc.extra_args = [
            "--listeners", ",".join(f"{n}://127.0.0.1:{p}" for n, p in self.ports.items()),
            "--sasl-plain-users-file", str(users),
            "--ssl-keystore-location", str(certs["server_keystore"]),
            "--ssl-truststore-location", str(certs["ca"]),
            "--ssl-client-auth", "required",
        ]  # fmt: skip

    def start(self) -> SecuredLogbroker:
        from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

        self.proc.start()
        admin = AdminClient({"bootstrap.servers": self.proc.bootstrap})
        for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):  # one per request, as Kafka wants
            up = UserScramCredentialUpsertion(SASL_USER, ScramCredentialInfo(m, 4096), SASL_PASSWORD.encode())
            for f in admin.alter_user_scram_credentials([up]).values():
                f.result(timeout=30)
        return self

    def listener_bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


@pytest.fixture(scope="module", params=BACKENDS)
def secured(
    request: pytest.FixtureRequest, certs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """A broker with SASL_PLAINTEXT and SSL listeners: Kafka, or logbroker configured the same way."""
    if request.param == "kafka":
        yield request.getfixturevalue("kafka")
        return
    broker = SecuredLogbroker(tmp_path_factory.mktemp("notify-secured") / "data", certs)
    try:
        yield broker.start()
    finally:
        assert broker.proc.stop() == 0, broker.proc.log_tail()


@pytest.fixture(scope="module")
def embedded_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield f"embedded://{tmp_path_factory.mktemp('notify-embedded') / 'data'}"
    stop_embedded()


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest) -> str:
    if request.param == "kafka":
        return f"kafka://{request.getfixturevalue('kafka').bootstrap}"
    return str(request.getfixturevalue("embedded_url"))


def create_topic(url: str, topic: str, partitions: int) -> None:
    admin = AdminClient(librdkafka_config(get_transport(url).kafka_settings()))
    for fut in admin.create_topics([NewTopic(topic, num_partitions=partitions)]).values():
        fut.result(15)
    del admin


class Recorder:
    """An endpoint with a method per priority that records what it gets."""

    def __init__(self, priorities: tuple[str, ...] = ("info",), filter_rule: NotificationFilter | None = None) -> None:
        self.got: list[tuple[str, dict[str, Any], Any, Any, Any, dict[str, Any]]] = []
        self.lock = threading.Lock()
        if filter_rule is not None:
            self.filter_rule = filter_rule
        for p in priorities:
            setattr(self, p, self._make(p))

    def _make(self, priority: str) -> Callable[..., Any]:
        def handler(ctxt: dict[str, Any], publisher_id: Any, event_type: Any, payload: Any, metadata: Any) -> None:
            with self.lock:
                self.got.append((priority, ctxt, publisher_id, event_type, payload, metadata))

        return handler

    @property
    def payloads(self) -> list[Any]:
        return [g[4] for g in self.got]


# ---------------------------------------------------------------------------------- scenarios


def test_simple(url: str) -> None:
    topic, ep = name("simple"), Recorder()
    with NotificationListener(url, [topic], [ep], pool=name("pool")), Notifier(url, "compute.host1", [topic]) as n:
        n.info({"user": "u1"}, "compute.instance.create", {"id": 7})
        wait_for(lambda: len(ep.got) == 1)
    priority, ctxt, pub, event, payload, md = ep.got[0]
    assert (priority, ctxt, pub, event, payload) == ("info", {"user": "u1"}, "compute.host1",
                                                       "compute.instance.create", {"id": 7})  # fmt: skip
    assert uuid.UUID(md["message_id"]) and md["timestamp"]


def test_multiple_topics(url: str) -> None:
    t1, t2, ep = name("m1"), name("m2"), Recorder()
    with NotificationListener(url, [t1, t2], [ep]), Notifier(url, "p", [t1, t2]) as n:
        n.info({}, "e", "x")
        wait_for(lambda: len(ep.got) == 2)
    time.sleep(0.3)
    assert ep.payloads == ["x", "x"]


def test_independent_topics(url: str) -> None:
    t1, t2, e1, e2 = name("i1"), name("i2"), Recorder(), Recorder()
    with (
        NotificationListener(url, [t1], [e1], pool=name("a")),
        NotificationListener(url, [t2], [e2], pool=name("b")),
        Notifier(url, "p", [t1]) as n1,
        Notifier(url, "p", [t2]) as n2,
    ):
        n1.info({}, "e", "one")
        n2.info({}, "e", "two")
        wait_for(lambda: len(e1.got) == 1 and len(e2.got) == 1)
        time.sleep(0.3)
    assert e1.payloads == ["one"] and e2.payloads == ["two"]


def test_all_priorities(url: str) -> None:
    topic, ep = name("prio"), Recorder(PRIORITIES)
    with NotificationListener(url, [topic], [ep], pool=name("pool")), Notifier(url, "p", [topic]) as n:
        for p in PRIORITIES:
            getattr(n, p)({}, f"ev.{p}", p)
        wait_for(lambda: len(ep.got) == len(PRIORITIES))
    assert sorted((g[0], g[4]) for g in ep.got) == sorted((p, p) for p in PRIORITIES)


def test_batch_listener(url: str) -> None:
    topic, sizes, seen = name("batch"), [], []

    class Batch:
        def info(self, messages: list[dict[str, Any]]) -> None:
            sizes.append(len(messages))
            seen.extend(m["payload"] for m in messages)

    with (
        NotificationListener(url, [topic], [Batch()], pool=name("pool"), batch_size=100, batch_timeout=2.0),
        Notifier(url, "p", [topic], confirm=False) as n,
    ):
        for i in range(205):
            n.info({}, "e", i)
        n.flush()
        wait_for(lambda: len(seen) == 205)
    assert sizes == [100, 100, 5] and seen == list(range(205))


def test_two_pools_each_get_everything(url: str) -> None:
    topic, e1, e2 = name("pools"), Recorder(), Recorder()
    with (
        NotificationListener(url, [topic], [e1], pool=name("p1")),
        NotificationListener(url, [topic], [e2], pool=name("p2")),
        Notifier(url, "p", [topic]) as n,
    ):
        for i in range(20):
            n.info({}, "e", i)
        wait_for(lambda: len(e1.got) == 20 and len(e2.got) == 20)
    assert e1.payloads == list(range(20)) and e2.payloads == list(range(20))


def test_one_pool_splits_partitions(url: str) -> None:
    topic, pool, e1, e2 = name("split"), name("pool"), Recorder(), Recorder()
    create_topic(url, f"{topic}.info", 2)
    with (
        NotificationListener(url, [topic], [e1], pool=pool) as l1,
        NotificationListener(url, [topic], [e2], pool=pool) as l2,
    ):
        wait_for(lambda: len(l1.consumer.assignment) == 1 and len(l2.consumer.assignment) == 1)
        assert l1.consumer.assignment != l2.consumer.assignment
        with Notifier(url, "p", [topic]) as n:
            for i in range(60):
                n.info({}, "e", i)
        wait_for(lambda: len(e1.got) + len(e2.got) == 60)
        time.sleep(0.5)
    assert sorted(e1.payloads + e2.payloads) == list(range(60))
    assert e1.got and e2.got


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compression(url: str, codec: str) -> None:
    topic, ep = name(f"c-{codec}"), Recorder()
    opts = {"compression_codec": codec, "producer_batch_timeout": 0.005}
    with (
        NotificationListener(url, [topic], [ep], pool=name("pool")),
        Notifier(url, "p", [topic], opts, confirm=False) as n,
    ):
        for i in range(50):
            n.info({}, "e", {"i": i, "pad": "abc" * 50})
        n.flush()
        wait_for(lambda: len(ep.got) == 50)
    assert [p["i"] for p in ep.payloads] == list(range(50))


@pytest.mark.parametrize("how", ["raise", "requeue"])
def test_at_least_once_redelivers(url: str, how: str) -> None:
    topic, got, failed = name(f"alo-{how}"), [], set()

    class Flaky:
        def info(self, ctxt: Any, pub: Any, event: Any, payload: int, md: Any) -> Any:
            got.append(payload)
            if payload % 3 == 1 and payload not in failed:
                failed.add(payload)
                if how == "raise":
                    raise RuntimeError("transient")
                return REQUEUE
            return None

    with (
        NotificationListener(url, [topic], [Flaky()], pool=name("pool"), delivery=AT_LEAST_ONCE),
        Notifier(url, "p", [topic]) as n,
    ):
        for i in range(9):
            n.info({}, "e", i)
        wait_for(lambda: len(got) == 12)
        time.sleep(0.3)
    # every third one fails once and comes again, in order, before the next
    assert got == [0, 1, 1, 2, 3, 4, 4, 5, 6, 7, 7, 8]


def test_at_least_once_commits_after_dispatch(url: str) -> None:
    """A listener that stops mid-stream resumes at the first unprocessed notification."""
    topic, pool, got = name("resume"), name("pool"), []
    stop_after = threading.Event()

    class Slow:
        def info(self, ctxt: Any, pub: Any, event: Any, payload: int, md: Any) -> None:
            got.append(payload)
            if payload == 4:
                stop_after.set()
                time.sleep(0.5)

    listener = NotificationListener(url, [topic], [Slow()], pool=pool, delivery=AT_LEAST_ONCE).start()
    with Notifier(url, "p", [topic]) as n:
        for i in range(10):
            n.info({}, "e", i)
    stop_after.wait(15)
    listener.stop()
    listener.wait()
    first = list(got)
    got.clear()
    with NotificationListener(url, [topic], [Slow()], pool=pool, delivery=AT_LEAST_ONCE):
        wait_for(lambda: got and got[-1] == 9)
    assert first[-1] == 4 and got == list(range(5, 10))


def test_replay_from_timestamp(url: str) -> None:
    topic, ep = name("replay"), Recorder()
    create_topic(url, f"{topic}.info", 1)
    with Notifier(url, "p", [topic]) as n:
        n.info({}, "e", "old")
        time.sleep(0.05)
        mark = dt.datetime.now(dt.UTC)
        time.sleep(0.05)
        n.info({}, "e", "new1")
        n.info({}, "e", "new2")
    with NotificationListener(url, [topic], [ep], pool=name("pool"), replay_from=mark):
        wait_for(lambda: len(ep.got) == 2)
        time.sleep(0.3)
    assert ep.payloads == ["new1", "new2"]


def test_filter_rule(url: str) -> None:
    topic = name("filter")
    wanted = Recorder(filter_rule=NotificationFilter(event_type=r"^compute\.", context={"tenant": "^t1$"}))
    everything = Recorder()
    with NotificationListener(url, [topic], [wanted, everything], pool=name("pool")), Notifier(url, "p", [topic]) as n:
        n.info({"tenant": "t1"}, "compute.start", 1)
        n.info({"tenant": "t2"}, "compute.start", 2)
        n.info({"tenant": "t1"}, "volume.start", 3)
        wait_for(lambda: len(everything.got) == 3)
    assert wanted.payloads == [1]


def test_asyncio_executor(url: str) -> None:
    topic, got = name("aio"), []

    class Async:
        async def info(self, ctxt: Any, pub: Any, event: Any, payload: Any, md: Any) -> None:
            await asyncio.sleep(0)
            got.append(payload)

    async def main() -> None:
        listener = NotificationListener(url, [topic], [Async()], pool=name("pool"), executor="asyncio")
        listener.start()
        with Notifier(url, "p", [topic]) as n:
            await asyncio.to_thread(lambda: [n.info({}, "e", i) for i in range(5)])
        deadline = time.monotonic() + 15
        while len(got) < 5 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        listener.stop()
        await listener.wait_async()

    asyncio.run(main())
    assert got == list(range(5))


def test_vhost_topic_naming_agrees(url: str) -> None:
    """Notifier and listener both use `<topic>.<priority>.<vhost>` (oslo's driver disagrees)."""
    vurl = f"kafka://{get_transport(url).bootstrap}/tenant-a"  # embedded too, through its address
    topic, ep = name("vh"), Recorder()
    with NotificationListener(vurl, [topic], [ep], pool=name("pool")) as lst, Notifier(vurl, "p", [topic]) as n:
        assert lst.topics == [f"{topic}.info.tenant-a"]
        n.info({}, "e", 1)
        wait_for(lambda: len(ep.got) == 1)


# ----------------------------------------------------------------------- security (Kafka and logbroker)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_plaintext(secured: Any, mechanism: str) -> None:
    kafka = secured
    url = f"kafka://{SASL_USER}:{SASL_PASSWORD}@{kafka.listener_bootstrap('SASL_PLAINTEXT')}"
    opts = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism}
    topic, ep = name("sasl"), Recorder()
    with (
        NotificationListener(url, [topic], [ep], pool=name("pool"), driver_options=opts),
        Notifier(url, "p", [topic], opts) as n,
    ):
        n.info({}, "e", mechanism)
        wait_for(lambda: len(ep.got) == 1)
    bad = f"kafka://{SASL_USER}:wrong@{kafka.listener_bootstrap('SASL_PLAINTEXT')}"
    with pytest.raises(NotifyError):
        Notifier(bad, "p", [topic], {**opts, "send_timeout": 3}).info({}, "e", 1)


def test_ssl_with_client_certificate(secured: Any, certs: dict[str, Path]) -> None:
    kafka = secured
    url = f"kafka://{kafka.listener_bootstrap('SSL')}"
    opts = {
        "security_protocol": "SSL",
        "ssl_cafile": str(certs["ca"]),
        "ssl_client_cert_file": str(certs["client_cert"]),
        "ssl_client_key_file": str(certs["client_key"]),
        "ssl_client_key_password": KEY_PASSWORD,
    }
    topic, ep = name("ssl"), Recorder()
    with (
        NotificationListener(url, [topic], [ep], pool=name("pool"), driver_options=opts),
        Notifier(url, "p", [topic], opts) as n,
    ):
        n.info({}, "e", "tls")
        wait_for(lambda: len(ep.got) == 1)
    assert ep.payloads == ["tls"]


# ------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("bad", "part"),
    [
        ("127.0.0.1:9092", "no scheme"),
        ("amqp://h:5672/", "scheme 'amqp'"),
        ("kafka://", "no host"),
        ("kafka://h1:99999", "port '99999'"),
        ("kafka://h1:abc", "port 'abc'"),
        ("kafka://h1:", "port of host"),
        ("kafka://h1,,h2", "empty entry"),
        ("kafka://[::1:9092", "unclosed '['"),
        ("kafka://::1:9092", "IPv6 addresses must be in brackets"),
        ("embedded://host/data", "takes no host"),
        ("embedded://", "no data directory"),
    ],
)
def test_malformed_url(bad: str, part: str) -> None:
    with pytest.raises(InvalidTransportURL, match=part.replace("[", r"\[").replace("(", r"\(")):
        parse_url(bad)


def test_url_forms(caplog: pytest.LogCaptureFixture) -> None:
    t = parse_url("kafka://u:p%40ss@h1:1,[::1]:2,h3/vh")
    assert t.hosts == (("h1", 1), ("::1", 2), ("h3", 9092)) and (t.username, t.password) == ("u", "p@ss")
    assert t.bootstrap == "h1:1,[::1]:2,h3:9092" and t.virtual_host == "vh"
    assert t.topic("notifications", "info") == "notifications.info.vh"
    parse_url("kafka://u:p@h1:1,v:q@h2:2")
    assert "different credentials" in caplog.text
    with pytest.raises(ValueError, match="compression_codec"):
        parse_url("kafka://h", {"compression_codec": "brotli"})
    with pytest.raises(ValueError, match="unknown driver option"):
        parse_url("kafka://h", {"max_poll_record": 1})


def test_unreachable_broker_is_a_bounded_error() -> None:
    url = f"kafka://127.0.0.1:{free_port()}"
    n = Notifier(url, "p", ["t"], {"send_timeout": 1.0}, retry=1)
    start = time.monotonic()
    with pytest.raises(NotifyError, match="2 attempt"):
        n.info({}, "e", 1)
    assert time.monotonic() - start < 8
    n.close()  # nothing left queued: the failure was reported at the call site
    listener = NotificationListener(url, ["t"], [Recorder()], driver_options={"connect_timeout": 1.0})
    start = time.monotonic()
    with pytest.raises(NotifyError):
        listener.start(timeout=2.0)
    assert time.monotonic() - start < 15


def test_unserialisable_payload_fails_at_call_site(url: str) -> None:
    topic, ep = name("json"), Recorder()
    with NotificationListener(url, [topic], [ep], pool=name("pool")), Notifier(url, "p", [topic]) as n:
        with pytest.raises(TypeError, match="JSON"):
            n.info({}, "e", {"when": object()})
        n.info({}, "e", "ok")
        wait_for(lambda: len(ep.got) == 1)
        time.sleep(0.3)
    assert ep.payloads == ["ok"]


@pytest.mark.parametrize("delivery", [AT_MOST_ONCE, AT_LEAST_ONCE])
def test_a_share_pool_spreads_one_partition_over_its_listeners(url: str, delivery: str) -> None:
    """A pool run as a share group (KIP-932): three listeners on a one-partition topic all get
    notifications, each exactly once, nothing lost; a consumer-group pool would leave two idle."""
    topic, pool = name("share"), name("pool")
    create_topic(url, f"{topic}.info", 1)
    eps = [Recorder() for _ in range(3)]

    class Slow(Recorder):
        def __init__(self, inner: Recorder) -> None:
            super().__init__()
            self.inner = inner
            self.info = self._slow  # type: ignore[method-assign]

        def _slow(self, *args: Any) -> None:
            time.sleep(0.05)  # a listener busy with one notification leaves the next ones to the others
            self.inner.info(*args)

    opts = {"max_poll_records": 2}
    listeners = [NotificationListener(url, [topic], [Slow(ep)], pool=pool, share=True, delivery=delivery,
                                      driver_options=opts) for ep in eps]  # fmt: skip
    try:
        for lst in listeners:
            lst.start()
        with Notifier(url, "p", [topic]) as n:
            for i in range(60):
                n.info({}, "e", i)
        wait_for(lambda: sum(len(ep.got) for ep in eps) >= 60, timeout=60)
        time.sleep(0.5)
    finally:
        for lst in listeners:
            lst.stop()
        for lst in listeners:
            lst.wait()
    got = [p for ep in eps for p in ep.payloads]
    assert sorted(got) == list(range(60)), "lost or duplicated notifications"
    assert all(ep.got for ep in eps), [len(ep.got) for ep in eps]


def test_a_share_pool_redelivers_a_requeued_notification_to_the_pool(url: str) -> None:
    topic, pool, got = name("share-rq"), name("pool"), []
    failed: set[int] = set()

    class Flaky:
        def info(self, ctxt: Any, pub: Any, event: Any, payload: int, md: Any) -> Any:
            got.append(payload)
            if payload % 3 == 1 and payload not in failed:
                failed.add(payload)
                return REQUEUE
            return None

    with (
        NotificationListener(url, [topic], [Flaky()], pool=pool, share=True, delivery=AT_LEAST_ONCE),
        Notifier(url, "p", [topic]) as n,
    ):
        for i in range(9):
            n.info({}, "e", i)
        wait_for(lambda: len(got) == 12, timeout=60)
        time.sleep(0.3)
    assert sorted(got) == sorted([*range(9), 1, 4, 7])
