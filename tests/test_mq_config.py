"""`logbroker.mq` configuration, MessageID encoding and the client-owned embedded broker (no peers needed)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from logbroker._kafka import librdkafka_config
from logbroker.mq import (
    Client,
    InitialPosition,
    MessageID,
    MQConfigError,
    load_config,
    message_id_from_bytes,
    message_id_from_string,
)


def test_defaults_yaml_env_and_overrides(tmp_path: Path) -> None:
    assert load_config(env={}).type == "embedded"
    f = tmp_path / "mq.yaml"
    f.write_text(
        "mq:\n  type: kafka\n  kafka:\n    bootstrap_servers: a:9092\n"
        "    sasl: {mechanism: SCRAM-SHA-512, username: u, password: p}\n    producer: {linger.ms: 20}\n"
    )
    env = {"LOGBROKER_MQ_NUM_PARTITIONS": "4", "LOGBROKER_MQ_KAFKA__CONSUMER__FETCH_MAX_BYTES": "1000"}
    cfg = load_config(f, env=env, ack_commit="message")
    assert cfg.kafka is not None and cfg.kafka.sasl is not None
    assert (cfg.num_partitions, cfg.ack_commit, cfg.kafka.sasl.mechanism) == (4, "message", "SCRAM-SHA-512")
    assert cfg.kafka.producer == {"linger.ms": 20} and cfg.kafka.consumer == {"fetch.max.bytes": "1000"}
    assert "p" not in repr(cfg.kafka.sasl).replace("password", "")  # SecretStr


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"type": "pulsar"}, "mq.type"),
        ({"type": "kafka"}, "mq"),
        ({"type": "kafka", "kafka": {"bootstrap_servers": "a:1", "sasl": {"username": "u"}}}, "mq.kafka.sasl"),
        ({"type": "kafka", "kafka": {"bootstrap_servers": "a:1", "sasl": {"password": "hunter2"}}}, "mq.kafka.sasl"),
        ({"kafka": {"bootstrap_servers": "a:1", "sasl": {"mechanism": "GSSAPI", "username": "u", "password": "p"}}},
         "mq.kafka.sasl.mechanism"),
        ({"num_partitions": 0}, "mq.num_partitions"),
        ({"ack_commit": "sometimes"}, "mq.ack_commit"),
        ({"kafka": {"bootstrap_servers": "a:1", "ssl": {"cert": "/c.pem"}}}, "mq.kafka.ssl"),
        ({"bogus": 1}, "mq.bogus"),
    ],
)  # fmt: skip
def test_invalid_config_names_the_key(data: dict[str, object], key: str) -> None:
    with pytest.raises(MQConfigError) as info:
        load_config(env={}, **data)
    msg = str(info.value)
    assert msg.split(":")[0] == key and "hunter2" not in msg and "\n" not in msg


def test_environment_names_are_checked_and_nest() -> None:
    with pytest.raises(MQConfigError, match=r"^mq\.bogus: no such setting \(LOGBROKER_MQ_BOGUS\)"):
        load_config(env={"LOGBROKER_MQ_BOGUS": "1"})
    cfg = load_config(env={"LOGBROKER_MQ_TYPE": "kafka", "LOGBROKER_MQ_KAFKA__BOOTSTRAP_SERVERS": "h:1",
                           "LOGBROKER_MQ_KAFKA__SASL__USERNAME": "u", "LOGBROKER_MQ_KAFKA__SASL__PASSWORD": "p",
                           "LOGBROKER_MQ_EMBEDDED__LISTEN": "127.0.0.1:9"})  # fmt: skip
    assert cfg.kafka is not None and cfg.kafka.sasl is not None and cfg.kafka.sasl.username == "u"
    assert cfg.embedded.listen == "127.0.0.1:9"


def test_passthrough_warns_and_hides_credentials(caplog: pytest.LogCaptureFixture) -> None:
    cfg = load_config(env={}, type="kafka", kafka={
        "bootstrap_servers": "127.0.0.1:1", "sasl": {"username": "u", "password": "hunter2"},
        "producer": {"linger.ms": 50, "sasl.password": "other-secret"}})  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="logbroker.mq"):
        c = Client(cfg)
        conf = librdkafka_config(c.settings, **c._producer_conf(False))  # as the producer is built
        c.close()
    assert conf["linger.ms"] == 50 and conf["security.protocol"] == "SASL_PLAINTEXT"
    assert conf["sasl.password"] == "other-secret"
    assert "linger.ms=50 overrides the default 2" in caplog.text
    assert "sasl.password=*** overrides the default ***" in caplog.text
    assert "hunter2" not in caplog.text and "other-secret" not in caplog.text


def test_unusable_tls_files_are_a_config_error(tmp_path: Path) -> None:
    cfg = load_config(
        env={}, type="kafka", kafka={"bootstrap_servers": "127.0.0.1:1", "ssl": {"ca": tmp_path / "no.pem"}}
    )
    with pytest.raises(MQConfigError, match=r"^mq\.kafka \(admin client\): .*ssl\.ca\.location"):
        Client(cfg)


def test_message_id_encoding_and_order() -> None:
    a, b = MessageID("t", 1, 5), MessageID("t", 1, 9)
    assert message_id_from_bytes(a.serialize()) == a and message_id_from_string(str(a)) == a
    assert a <= b and a < b and not b <= a and a.equal(a.serialize()) and not a.equal(b.serialize())
    milvus = message_id_from_bytes((7).to_bytes(8, "big"))  # Milvus' 8-byte KafkaID
    assert milvus == MessageID("", 0, 7) and message_id_from_string("7") == milvus
    assert Client.earliest_message_id().at_earliest_position() and not a.at_earliest_position()
    with pytest.raises(ValueError, match="different topics"):
        _ = a <= MessageID("u", 1, 5)
    with pytest.raises(ValueError):
        message_id_from_bytes(b"\x09junk-junk-junk")


def test_embedded_client_owns_a_durable_broker(tmp_path: Path) -> None:
    """type=embedded starts the broker in-process with the data dir, stops it on close; data survives."""
    data = tmp_path / "data"
    with Client({"embedded": {"data_dir": data}}) as c:
        broker = c._embedded
        assert broker is not None and broker.running
        with c.create_producer("orders") as p:
            first = p.send(b"kept", {"vchannel": "v1"})
    assert not broker.running
    with Client({"embedded": {"data_dir": data}}) as c, c.subscribe("orders", "s", InitialPosition.EARLIEST) as cons:
        m = cons.receive(10)
        assert m is not None and (m.id, m.payload, m.properties) == (first, b"kept", {"vchannel": "v1"})
