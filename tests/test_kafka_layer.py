"""The shared Kafka layer under the faces (`logbroker._kafka`): settings, ensure_topics, error classification.

Real brokers and real librdkafka only: the session's broker (or Apache Kafka with LOGBROKER_TEST_TARGET=kafka)
through the `bootstrap` fixture, and in-process embedded brokers where a broker setting must differ.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from logbroker import _kafka
from logbroker._kafka import Kind, TopicSpec
from logbroker.embedded import EmbeddedBroker
from logbroker.mq import KafkaConfig, MessageTooLarge, MQConfig, MQError, TopicNotFound
from logbroker.mq.client import _kafka_error as _mq_error
from logbroker.notify import KafkaOptions, parse_url
from logbroker.streams import StreamsConfig
from logbroker_devtools.testing.peers import free_port
from support import unique


@pytest.fixture(scope="module")
def strict_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An in-process broker that never auto-creates topics (the faces must then create or refuse)."""
    with EmbeddedBroker(tmp_path_factory.mktemp("no-auto") / "data", auto_create_topics=False) as b:
        yield b.bootstrap


# ------------------------------------------------------------------------------------------ settings


def test_settings_map_to_librdkafka_and_keep_secrets_out_of_repr() -> None:
    s = _kafka.KafkaSettings("h:1", "SASL_SSL", "SCRAM-SHA-512", "u", "pw", ssl_ca="/ca.pem", ssl_key_password="kp",
                             client_id="app", extra={"socket.timeout.ms": 5000})  # fmt: skip
    assert _kafka.librdkafka_config(s, **{"group.id": "g"}) == {
        "bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", "client.id": "app",
        "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": "pw",
        "ssl.ca.location": "/ca.pem", "ssl.key.password": "kp", "socket.timeout.ms": 5000, "group.id": "g",
    }  # fmt: skip
    assert "pw" not in repr(s) and "kp" not in repr(s)
    # credentials and TLS files only where the protocol uses them; "" is unset (oslo's options)
    plain = _kafka.librdkafka_config(_kafka.KafkaSettings("h:1", sasl_username="u", ssl_ca=""))
    assert plain == {"bootstrap.servers": "h:1", "security.protocol": "PLAINTEXT"}
    with pytest.raises(ValueError, match="security_protocol"):
        _kafka.KafkaSettings("h:1", "TLS")  # type: ignore[arg-type]


def test_faces_map_the_same_security_onto_the_same_properties(tmp_path: Path) -> None:
    """mq's sections, oslo's option names and the URL's credentials give one librdkafka configuration."""
    ca = str(tmp_path / "ca.pem")
    mq = MQConfig(type="kafka", kafka=KafkaConfig.model_validate(
        {"bootstrap_servers": "h:1", "sasl": {"mechanism": "SCRAM-SHA-256", "username": "u", "password": "p"},
         "ssl": {"ca": ca}}))  # fmt: skip
    mq_conf = _kafka.librdkafka_config(mq.kafka_settings("h:1"))
    opts = KafkaOptions(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256", ssl_cafile=ca)
    notify_conf = _kafka.librdkafka_config(parse_url("kafka://u:p@h:1", opts).kafka_settings())
    security = {k: v for k, v in mq_conf.items() if k.startswith(("sasl.", "ssl.", "security."))}
    assert security == {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "u",
                        "sasl.password": "p", "ssl.ca.location": ca}  # fmt: skip
    assert {k: v for k, v in notify_conf.items() if k in security} == security
    streams = StreamsConfig.load({"bootstrap": "h:1", "topic": "t", "consumer_group": "g", "security_protocol": "SSL"})
    assert _kafka.librdkafka_config(streams.kafka_settings()) == {"bootstrap.servers": "h:1",
                                                                  "security.protocol": "SSL"}  # fmt: skip


def test_a_refused_client_setting_is_a_config_error(tmp_path: Path) -> None:
    conf = _kafka.librdkafka_config(_kafka.KafkaSettings("127.0.0.1:1", "SSL", ssl_ca=str(tmp_path / "no.pem")))
    with pytest.raises(_kafka.KafkaLayerError) as info:
        _kafka.new_client(Producer, conf)
    assert info.value.kind is Kind.CONFIG and "ssl.ca.location" in str(info.value)
    with pytest.raises(_kafka.KafkaLayerError, match=r"no\.such\.property") as info:
        _kafka.new_client(Consumer, {"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "no.such.property": 1})
    assert info.value.kind is Kind.CONFIG


class _FaceConfigError(Exception):
    pass


@pytest.mark.parametrize("build", [_kafka.producer, _kafka.consumer, _kafka.share_consumer, _kafka.admin])
def test_every_client_kind_is_built_from_settings_and_names_a_refusal_in_the_face_s_terms(
    build: Any, tmp_path: Path
) -> None:
    """The faces build clients only here (test_layers checks that); a refused property reaches the user as the
    face's own error, naming the property, and without ``refused`` as a CONFIG KafkaLayerError."""
    settings = _kafka.KafkaSettings("127.0.0.1:1", "SSL", ssl_ca=str(tmp_path / "no.pem"))
    with pytest.raises(_FaceConfigError, match=r"ssl\.ca\.location"):
        build(settings, refused=_FaceConfigError, **{"group.id": "g"})
    with pytest.raises(_kafka.KafkaLayerError, match=r"no\.such\.property") as info:
        build(_kafka.KafkaSettings("127.0.0.1:1"), **{"group.id": "g", "no.such.property": 1})
    assert info.value.kind is Kind.CONFIG


# A valid value for every one-sided property the layer knows (the test below checks the table covers them all).
_CONSUMER_SAMPLES = {
    "group.id": "g", "group.instance.id": "i", "group.protocol": "classic", "group.protocol.type": "consumer",
    "group.remote.assignor": "uniform", "partition.assignment.strategy": "range", "session.timeout.ms": 45000,
    "heartbeat.interval.ms": 3000, "coordinator.query.interval.ms": 600000, "max.poll.interval.ms": 300000,
    "enable.auto.commit": True, "auto.commit.interval.ms": 5000, "enable.auto.offset.store": True,
    "queued.min.messages": 100000, "queued.max.messages.kbytes": 65536, "fetch.wait.max.ms": 500,
    "fetch.queue.backoff.ms": 1000, "fetch.message.max.bytes": 1048576, "max.partition.fetch.bytes": 1048576,
    "fetch.max.bytes": 52428800, "fetch.min.bytes": 1, "fetch.error.backoff.ms": 500,
    "isolation.level": "read_committed", "enable.partition.eof": False, "check.crcs": False,
    "auto.offset.reset": "earliest", "consume.callback.max.messages": 0,
}  # fmt: skip
_PRODUCER_SAMPLES = {
    "transactional.id": "t", "transaction.timeout.ms": 60000, "enable.idempotence": False,
    "enable.gapless.guarantee": False, "queue.buffering.max.messages": 100000, "queue.buffering.max.kbytes": 1048576,
    "queue.buffering.max.ms": 5, "linger.ms": 5, "message.send.max.retries": 3, "retries": 3,
    "queue.buffering.backpressure.threshold": 1, "compression.codec": "none", "compression.type": "none",
    "compression.level": -1, "batch.num.messages": 10000, "batch.size": 1000000, "delivery.report.only.error": False,
    "sticky.partitioning.linger.ms": 10, "request.required.acks": "all", "acks": "all", "request.timeout.ms": 30000,
    "message.timeout.ms": 300000, "delivery.timeout.ms": 300000, "partitioner": "consistent_random",
}  # fmt: skip


def _confwarns(factory: Any, conf: dict[str, Any]) -> list[str]:
    """librdkafka's CONFWARN lines for a client built from ``conf`` (logs reach a logger on poll)."""
    records: list[str] = []
    logger = logging.getLogger(f"test.rdkafka.{unique('w')}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    handler = logging.Handler()
    handler.emit = lambda r: records.append(r.getMessage())  # type: ignore[method-assign]
    logger.addHandler(handler)
    client = factory({"bootstrap.servers": "127.0.0.1:1", **conf, "logger": logger})
    client.poll(0)
    if hasattr(client, "close"):
        client.close()
    return [r for r in records if "CONFWARN" in r]


def test_one_sided_properties_are_the_ones_librdkafka_ignores_on_the_other_side() -> None:
    """The table behind ``extra``'s filtering is librdkafka's: each consumer-only property draws a CONFWARN from a
    producer and each producer-only one from a consumer."""
    from logbroker._kafka.settings import CONSUMER_ONLY, PRODUCER_ONLY

    assert set(_CONSUMER_SAMPLES) == CONSUMER_ONLY and set(_PRODUCER_SAMPLES) == PRODUCER_ONLY
    for key, value in _CONSUMER_SAMPLES.items():
        assert sum("is a consumer property" in w for w in _confwarns(Producer, {key: value})) == 1, key
    for key, value in _PRODUCER_SAMPLES.items():
        assert sum("is a producer property" in w for w in _confwarns(Consumer, {"group.id": "g", key: value})) == 1, key


@pytest.mark.parametrize(
    ("build", "factory", "kind"),
    [(_kafka.producer, Producer, "producer"), (_kafka.admin, AdminClient, "admin"),
     (_kafka.consumer, Consumer, "consumer")],
)  # fmt: skip
def test_shared_extra_reaches_only_the_clients_that_read_it(build: Any, factory: Any, kind: str) -> None:
    """A face's ``extra`` is shared by its producers, consumers and admin clients: each gets what it reads and
    logs no warning about the rest; its own ``overrides`` are passed as given."""
    extra = {"fetch.queue.backoff.ms": 7, "linger.ms": 3, "socket.connection.setup.timeout.ms": 4000}
    settings = _kafka.KafkaSettings("127.0.0.1:1", extra=extra)
    conf = _kafka.librdkafka_config(settings, kind, **({"group.id": "g"} if kind == "consumer" else {}))
    assert conf["socket.connection.setup.timeout.ms"] == 4000
    assert ("fetch.queue.backoff.ms" in conf) == (kind == "consumer")
    assert ("linger.ms" in conf) == (kind != "consumer")
    assert _confwarns(factory, {k: v for k, v in conf.items() if k != "bootstrap.servers"}) == []
    assert _confwarns(factory, {**librdkafka_all(settings), **({"group.id": "g"} if kind == "consumer" else {})})
    build(settings, **({"group.id": "g"} if kind == "consumer" else {}))


def librdkafka_all(settings: _kafka.KafkaSettings) -> dict[str, Any]:
    """Everything, for every client (the behaviour without a role): the warning the role avoids."""
    return {k: v for k, v in _kafka.librdkafka_config(settings).items() if k != "bootstrap.servers"}


# -------------------------------------------------------------------------------------- ensure_topics


def _describe(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return {k: v.value for k, v in admin.describe_configs([res])[res].result(15).items()}


def test_ensure_topics_creates_with_settings_and_is_idempotent(bootstrap: str) -> None:
    a, b = unique("ens"), unique("ens")
    got = _kafka.ensure_topics({"bootstrap.servers": bootstrap},
                               [a, TopicSpec(b, 3, 1, {"retention.ms": "123456"})], partitions=2)  # fmt: skip
    assert got == {a: [0, 1], b: [0, 1, 2]}
    assert _describe(bootstrap, b)["retention.ms"] == "123456"
    # Existing topics: returned as they are, whatever this call would have created.
    assert _kafka.ensure_topics({"bootstrap.servers": bootstrap}, [b, a], partitions=5) == {b: [0, 1, 2], a: [0, 1]}
    assert _kafka.ensure_topic({"bootstrap.servers": bootstrap}, a, create=False) == [0, 1]


def test_a_just_created_topic_serves_at_once(bootstrap: str) -> None:
    """The race every face used to handle its own way: right after ensure_topics returns, fresh clients can
    query every partition's offsets and produce to each partition of a new multi-partition topic."""
    for _ in range(3):
        topic = unique("race")
        parts = _kafka.ensure_topic({"bootstrap.servers": bootstrap}, TopicSpec(topic, 6))
        assert parts == list(range(6))
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g"), "enable.auto.commit": False})
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 10_000})
        try:
            # ListOffsets has no retry of its own: NOT_LEADER / UNKNOWN_TOPIC here would raise at once.
            assert [consumer.get_watermark_offsets(TopicPartition(topic, p), 10, cached=False)
                    for p in parts] == [(0, 0)] * 6  # fmt: skip
            errors: list[Any] = []
            for p in parts:
                producer.produce(topic, b"x", partition=p, on_delivery=lambda err, _m, out=errors: out.append(err))
            assert producer.flush(15) == 0 and errors == [None] * 6
        finally:
            consumer.close()


def test_missing_topic_policies(strict_broker: str) -> None:
    conf = {"bootstrap.servers": strict_broker}
    with pytest.raises(_kafka.TopicMissing, match="does not exist and auto_create_topics is off") as info:
        _kafka.ensure_topics(conf, [unique()], create=False, missing_hint="auto_create_topics is off")
    assert _kafka.classify(info.value).kind is Kind.UNKNOWN_TOPIC
    start = time.monotonic()
    with pytest.raises(_kafka.TopicMissing, match="did not create it"):
        _kafka.ensure_topics(conf, [unique()], create="broker")  # this broker never auto-creates
    assert time.monotonic() - start < 15
    assert _kafka.ensure_topic(conf, unique(), partitions=2) == [0, 1]  # CreateTopics works regardless


def test_broker_side_creation_where_allowed(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "data", num_partitions=3) as b:
        topic = unique()
        assert _kafka.ensure_topic({"bootstrap.servers": b.bootstrap}, topic, create="broker") == [0, 1, 2]


def test_refused_creation_strict_or_logged(bootstrap: str, caplog: pytest.LogCaptureFixture) -> None:
    conf, bad, good = {"bootstrap.servers": bootstrap}, "bad name!", unique()
    with pytest.raises(_kafka.TopicRefused, match="refused to create") as info:
        _kafka.ensure_topics(conf, [bad])
    assert info.value.cause is not None and info.value.cause.kind is Kind.CONFIG
    with caplog.at_level(logging.WARNING, logger="logbroker.kafka"):
        assert _kafka.ensure_topics(conf, [bad, good], strict=False) == {good: [0]}
    assert "could not create topic bad name!" in caplog.text


def test_unreachable_broker_is_bounded() -> None:
    start = time.monotonic()
    with pytest.raises(_kafka.BrokerUnreachable, match="could not reach") as info:
        _kafka.ensure_topics({"bootstrap.servers": f"127.0.0.1:{free_port()}"}, ["t"], timeout=2)
    assert time.monotonic() - start < 10
    assert _kafka.classify(info.value).kind is Kind.TRANSPORT


# ------------------------------------------------------------------------------------- error mapping


def test_real_errors_are_classified(strict_broker: str) -> None:
    consumer = Consumer({"bootstrap.servers": strict_broker, "group.id": unique("g")})
    try:  # this broker does not auto-create, so the topic stays unknown
        with pytest.raises(KafkaException) as unknown:
            consumer.get_watermark_offsets(TopicPartition(unique("absent"), 0), timeout=10, cached=False)
    finally:
        consumer.close()
    big = unique("big")
    _kafka.ensure_topic({"bootstrap.servers": strict_broker}, big)
    producer = Producer({"bootstrap.servers": strict_broker, "message.max.bytes": 10 << 20})
    reports: list[Any] = []
    producer.produce(big, b"x" * (2 << 20), on_delivery=lambda err, _m: reports.append(err))
    producer.flush(15)
    absent, too_large = _kafka.classify(unknown.value), _kafka.classify(reports[0])
    assert absent.kind is Kind.UNKNOWN_TOPIC and absent.transient
    assert too_large.kind is Kind.MESSAGE_TOO_LARGE and not too_large.transient
    # Each face's own types, from one classification.
    assert isinstance(_mq_error(_kafka.kafka_error_of(unknown.value)), TopicNotFound)
    assert isinstance(_mq_error(reports[0]), MessageTooLarge)
    assert isinstance(_mq_error(_kafka.TopicNotReady("x")), TopicNotFound)
    assert type(_mq_error(_kafka.BrokerUnreachable("x"))) is MQError
    admin = AdminClient({"bootstrap.servers": strict_broker})  # referenced until its future resolves
    with pytest.raises(KafkaException) as info:
        admin.create_topics([NewTopic(big, 1)])[big].result(15)
    assert _kafka.classify(info.value).kind is Kind.TOPIC_EXISTS
    err = _kafka.kafka_error_of(info.value)
    assert err is not None and err.code() == KafkaError.TOPIC_ALREADY_EXISTS


def test_unreachable_errors_are_classified() -> None:
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{free_port()}", "group.id": "g"})
    try:
        with pytest.raises(KafkaException) as info:
            consumer.get_watermark_offsets(TopicPartition("t", 0), timeout=1)
    finally:
        consumer.close()
    c = _kafka.classify(info.value)
    # A dead broker is not worth retrying for a few seconds (a timeout may be a slow one)
    assert c.kind in (Kind.TIMEOUT, Kind.TRANSPORT) and c.transient == (c.kind is Kind.TIMEOUT)


def test_error_map_and_config_errors() -> None:
    mapped = _kafka.ErrorMap(RuntimeError, {Kind.CONFIG: ValueError})
    try:
        _kafka.new_client(Producer, {"bootstrap.servers": "127.0.0.1:1", "bogus.key": 1})
    except _kafka.KafkaLayerError as exc:
        err = mapped(exc, "ctx: ")
    assert isinstance(err, ValueError) and str(err).startswith("ctx: ") and "bogus.key" in str(err)
    assert type(mapped(None)) is RuntimeError
