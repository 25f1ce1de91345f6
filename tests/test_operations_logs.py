"""Operators' log lines on a real `logbroker serve`: one INFO line per lifecycle event (topic created,
auto-created, deleted; broker and topic configs changed; groups created, emptied, deleted, offsets expired;
ACLs and SCRAM users), with the facts an operator needs and never a secret; `--log-format json` gives one JSON
object per line; the repeat filter works in both formats.

The main broker runs with TLS (a server key encrypted with a password), SASL (PLAIN and SCRAM users), an
authorizer, JSON logs and DEBUG level, so every secret it holds had a chance to reach its log."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from logbroker.broker.logfilter import RepeatFilter
from logbroker.broker.loggers import setup
from logbroker.config import STANDARD_AUTHORIZER
from logbroker_devtools.testing.process import BrokerProcess
from security_support import KEY_PASSWORD, USERS, SecureBroker, client_config, logbroker_secure, make_certs
from support import eventually, unique

DYNAMIC_SECRET = "dynamic-secret-value"


# ------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    tmp = tmp_path_factory.mktemp("ops-logs")
    certs = make_certs(tmp)
    # The server's key encrypted with a password (ssl.key.password), its certificate valid for 127.0.0.1.
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    from logbroker.certificates import key_pem

    keystore = tmp / "server-encrypted.pem"
    key = load_pem_private_key(certs["server_key"].read_bytes(), password=None)
    keystore.write_bytes(key_pem(key, KEY_PASSWORD) + certs["server_cert"].read_bytes())
    settings = {
        "ssl_keystore_location": str(keystore),
        "ssl_key_password": KEY_PASSWORD,
        "authorizer_class_name": STANDARD_AUTHORIZER,
        "super_users": "User:admin",
        "allow_everyone_if_no_acl_found": True,
        "log_level": "DEBUG",
        "log_format": "json",
    }
    listeners = {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT"}
    with logbroker_secure(tmp, certs, listeners, settings=settings) as b:
        yield b


def records(b: SecureBroker) -> list[dict[str, Any]]:
    """The broker's log so far, every line one JSON object."""
    out = []
    for line in Path(b.process.log_path).read_text().splitlines():
        rec = json.loads(line)
        assert isinstance(rec, dict), line
        out.append(rec)
    return out


def info_lines(b: SecureBroker, pattern: str) -> list[str]:
    rx = re.compile(pattern)
    return [r["message"] for r in records(b) if r["level"] == "INFO" and rx.search(r["message"])]


def once(b: SecureBroker, pattern: str) -> str:
    """The one INFO line matching `pattern`, waiting for it to be written (exactly one, never two)."""

    def check() -> str:
        found = info_lines(b, pattern)
        assert len(found) == 1, found
        return found[0]

    return eventually(check, timeout=20)


def admin(b: SecureBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap("PLAINTEXT")})


# ---------------------------------------------------------------------------------------------- topics


def test_topic_created_altered_deleted(broker: SecureBroker) -> None:
    a, name = admin(broker), unique("ops-topic")
    a.create_topics([NewTopic(name, 3, config={"retention.ms": "3600000"})])[name].result(30)
    line = once(broker, rf"^topic {name} created")
    assert line == f"topic {name} created: 3 partitions, configs: retention.ms=3600000"

    res = ConfigResource(ResourceType.TOPIC, name)
    change = [ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
              ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)]  # fmt: skip
    res.add_incremental_config(change[0])
    res.add_incremental_config(change[1])
    a.incremental_alter_configs([res])[res].result(30)
    line = once(broker, rf"^topic {name}: configs changed")
    assert line == f"topic {name}: configs changed: cleanup.policy: unset -> compact, retention.ms: 3600000 -> 7200000"

    a.delete_topics([name])[name].result(30)
    line = once(broker, rf"^topic {name} deleted")
    assert re.fullmatch(rf"topic {name} deleted \(3 partitions, id \S+\)", line), line
    assert len(info_lines(broker, rf"^topic {name} created")) == 1  # a delete logs no create


def test_auto_create_names_the_client(broker: SecureBroker) -> None:
    name = unique("ops-auto")
    p = Producer({"bootstrap.servers": broker.bootstrap("PLAINTEXT"), "client.id": "ops-log-producer"})
    for i in range(20):  # many Metadata and Produce requests name the topic: one creation, one line
        p.produce(name, str(i).encode())
    assert p.flush(30) == 0
    line = once(broker, rf"^topic {name} auto-created")
    assert re.fullmatch(
        rf"topic {name} auto-created by User:ANONYMOUS \(client ops-log-producer, 127\.0\.0\.1\): 1 partitions",
        line,
    ), line


def test_broker_config_change_masks_secrets(broker: SecureBroker) -> None:
    a = admin(broker)
    res = ConfigResource(ResourceType.BROKER, "1")
    res.add_incremental_config(ConfigEntry("log.retention.ms", "5400000", incremental_operation=AlterConfigOpType.SET))
    res.add_incremental_config(
        ConfigEntry("listener.name.ssl.ssl.key.password", DYNAMIC_SECRET, incremental_operation=AlterConfigOpType.SET)
    )
    a.incremental_alter_configs([res])[res].result(30)
    line = once(broker, r"^broker configs changed \(broker 1\)")
    assert line == (
        "broker configs changed (broker 1): listener.name.ssl.ssl.key.password: unset -> [hidden], "
        "log.retention.ms: unset -> 5400000"
    )
    res = ConfigResource(ResourceType.BROKER, "1")
    res.add_incremental_config(ConfigEntry("log.retention.ms", None, incremental_operation=AlterConfigOpType.DELETE))
    res.add_incremental_config(ConfigEntry("listener.name.ssl.ssl.key.password", None,
                               incremental_operation=AlterConfigOpType.DELETE))  # fmt: skip
    a.incremental_alter_configs([res])[res].result(30)
    once(broker, r"log\.retention\.ms: 5400000 -> unset")


# ---------------------------------------------------------------------------------------------- groups


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_created_emptied_deleted(broker: SecureBroker, protocol: str) -> None:
    topic, group = unique("ops-group-topic"), unique(f"ops-{protocol}")
    a = admin(broker)  # kept: a client's futures fail once it is destroyed
    a.create_topics([NewTopic(topic, 2)])[topic].result(30)
    p = Producer({"bootstrap.servers": broker.bootstrap("PLAINTEXT")})
    p.produce(topic, b"x", partition=0)
    assert p.flush(30) == 0
    conf = {"bootstrap.servers": broker.bootstrap("PLAINTEXT"), "group.id": group, "client.id": "ops-log-consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "group.protocol": protocol}  # fmt: skip
    if protocol == "classic":
        conf["session.timeout.ms"] = 6000
    c = Consumer(conf)
    c.subscribe([topic])
    msg = None
    while msg is None:
        msg = c.poll(1.0)
    assert msg.error() is None, msg.error()
    c.commit(msg, asynchronous=False)
    c.close()
    kind = "classic protocol, consumer" if protocol == "classic" else "consumer protocol"
    created = once(broker, rf"^group {group}: created")
    assert re.fullmatch(rf"group {group}: created \({kind}\) by client ops-log-consumer at /?127\.0\.0\.1", created), (
        created
    )
    assert (
        once(broker, rf"^group {group}: emptied")
        == f"group {group}: emptied, no members left (1 committed offsets kept)"
    )
    a.delete_consumer_groups([group])[group].result(30)
    assert once(broker, rf"^group {group}: deleted") == f"group {group}: deleted (1 committed offsets removed)"


def test_offsets_expire_and_group_goes_text_format(tmp_path: Path) -> None:
    """Offset expiry on a broker of its own (short retention), in the default text format."""
    env = {"LOGBROKER_OFFSETS_RETENTION_MS": "500", "LOGBROKER_OFFSETS_RETENTION_CHECK_INTERVAL_MS": "200"}
    with BrokerProcess(tmp_path / "data", env=env) as proc:
        topic, group = unique("ops-expire"), unique("ops-simple")
        a = AdminClient({"bootstrap.servers": proc.bootstrap})
        a.create_topics([NewTopic(topic, 1)])[topic].result(30)
        c = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": group})
        c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)  # a simple group, no members
        c.close()

        def lines() -> list[str]:
            return [ln for ln in proc.log_path.read_text().splitlines() if f"group {group}:" in ln]

        def check() -> list[str]:
            found = lines()
            assert any(ln.endswith(f"INFO logbroker.broker.groups.coordinator: group {group}: deleted, empty and "
                                   "without committed offsets") for ln in found), found  # fmt: skip
            return found

        found = eventually(check, timeout=30)
        want = [f"group {group}: created by an offset commit (no members)",
                f"group {group}: 1 committed offsets expired (offsets retention)",
                f"group {group}: deleted, empty and without committed offsets"]  # fmt: skip
        assert [ln.split(": ", 1)[1] for ln in found] == want
        assert proc.stop() == 0


# ----------------------------------------------------------------------------------- ACLs and SCRAM users


def test_acls_and_scram_users(broker: SecureBroker) -> None:
    # The fixture gave every user SCRAM-SHA-256 and -512 credentials: one line per user and mechanism.
    for user in USERS:
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            assert once(broker, rf"^SCRAM credential set: user {user}, {mech}$")
    a = AdminClient(client_config("confluent", broker, "SASL_PLAINTEXT", "PLAIN", user="admin"))
    topic = unique("ops-acl")
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
    a.create_acls([binding])[binding].result(30)
    want = f"User:bob ALLOW READ from host * on TOPIC:LITERAL:{topic}"
    assert once(broker, rf"^ACL created: .*{topic}$") == f"ACL created: {want}"
    filt = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None,
                            AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    a.delete_acls([filt])[filt].result(30)
    assert once(broker, rf"^ACL deleted: .*{topic}$") == f"ACL deleted: {want}"


# ------------------------------------------------------------------------------------ format and secrets


def test_json_lines_and_no_secret_even_at_debug(broker: SecureBroker) -> None:
    # Use every secret: TLS (the encrypted key), PLAIN and SCRAM logins, a failed login with a wrong password.
    for listener, mech in (("SSL", None), ("SASL_PLAINTEXT", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-512")):
        AdminClient(client_config("confluent", broker, listener, mech)).list_topics(timeout=30)
    bad = AdminClient(client_config("confluent", broker, "SASL_PLAINTEXT", "PLAIN", password="wrong-secret-pw")
                      | {"socket.timeout.ms": 3000})  # fmt: skip
    with pytest.raises(KafkaException):
        bad.list_topics(timeout=3)
    eventually(lambda: info_lines(broker, r"^Failed authentication"), timeout=20)
    recs = records(broker)  # every line parses as JSON (records() asserts it)
    assert any(r["level"] == "DEBUG" for r in recs), "the broker does not log at DEBUG"
    for r in recs:
        assert {"time", "level", "logger", "message"} <= r.keys(), r
        assert datetime.fromisoformat(r["time"]).utcoffset().total_seconds() == 0, r["time"]
        assert r["logger"].startswith(("logbroker", "asyncio", "root")), r
    text = Path(broker.process.log_path).read_text()
    for secret in (KEY_PASSWORD, DYNAMIC_SECRET, "wrong-secret-pw", *USERS.values()):
        assert secret not in text, f"{secret!r} is in the broker's log"


# ------------------------------------------------------------------------------ the repeat filter, both formats


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_repeat_filter_in_both_formats(fmt: str) -> None:
    out = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    logger = logging.getLogger(f"logbroker.test_repeat_{fmt}")
    flt = RepeatFilter(burst=3, window=60.0)
    try:
        setup("INFO", fmt, out)
        flt.install()
        for i in range(10):
            logger.info("refused connection %d", i)
        for slot in flt._seen.values():  # the window ends (without waiting for it)
            slot[0] = float(slot[0]) - 61.0
        logger.info("refused connection %d", 10)
    finally:
        flt.uninstall()
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    lines = out.getvalue().splitlines()
    messages = [json.loads(ln)["message"] for ln in lines] if fmt == "json" else [ln.split(": ", 1)[1] for ln in lines]
    assert messages == [*(f"refused connection {i}" for i in range(3)),
                        "refused connection 10 [7 similar lines suppressed]"]  # fmt: skip
