"""SASL on the wire, request by request, on logbroker and on Apache Kafka 4 set up alike: the v0 handshake with
raw tokens, refused mechanisms and requests, garbage and oversized tokens, a storm of failed logins, SASL
requests where no exchange is going on, KIP-368 re-authentication and session expiry, and the principals ACLs
see (a SASL user, a certificate subject).

Both brokers run the StandardAuthorizer with User:admin and User:CN=admin as super users; listeners PLAINTEXT,
SASL_PLAINTEXT, REAUTH (SASL_PLAINTEXT whose sessions last REAUTH_MS) and SSL (a client certificate asked for).
Kafka's SaslServerAuthenticator, KafkaChannel and SocketServer are the spec (see each test).
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from logbroker.protocol import ApiKey, api
from logbroker.protocol.errors import ErrorCode as E
from logbroker.protocol.messages import decode_response, encode_request
from security_support import (
    KEY_PASSWORD,
    USERS,
    SecureBroker,
    client_config,
    kafka_secure,
    logbroker_secure,
    make_certs,
)
from support import Wire, both_targets, java_client_tool, spec, unique

REAUTH_MS = 3000
WIRE_LISTENERS = {
    "PLAINTEXT": "PLAINTEXT",
    "SSL": "SSL",
    "SASL_PLAINTEXT": "SASL_PLAINTEXT",
    "REAUTH": "SASL_PLAINTEXT",
}
SUPER_USERS = ("User:admin", "User:CN=admin")
MAX_RECEIVE = 524288  # sasl.server.max.receive.size, Kafka's default (and logbroker's)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_certs(tmp_path_factory.mktemp("wire-certs"))


@pytest.fixture(scope="module", params=both_targets())
def wire(request: pytest.FixtureRequest, certs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[SecureBroker]:  # fmt: skip
    overrides = {"reauth": {"connections_max_reauth_ms": REAUTH_MS}}
    if request.param == "logbroker":
        settings = {
            "authorizer_class_name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super_users": ";".join(SUPER_USERS),
        }
        with logbroker_secure(tmp_path_factory.mktemp("wire-logbroker"), certs, WIRE_LISTENERS, overrides,
                              settings) as broker:  # fmt: skip
            yield broker
    else:
        with kafka_secure(certs, WIRE_LISTENERS, overrides, authorizer=True, super_users=SUPER_USERS) as broker:
            yield broker


# ------------------------------------------------------------------------------------------ raw client


def metadata(w: Wire) -> Any:
    return w.call(ApiKey.Metadata, 4, topics=[], allow_auto_topic_creation=False)


def log_text(broker: SecureBroker) -> str:
    return broker.process.log_path.read_text(errors="replace")


# ------------------------------------------------------------------------------------------ handshakes


def test_v0_handshake_and_raw_plain_token(wire: SecureBroker) -> None:
    """KIP-43: after SaslHandshake v0 the PLAIN token goes as a bare size-prefixed frame and the broker's
    (empty) answer comes back bare; then the connection serves requests."""
    with Wire(wire.bootstrap("SASL_PLAINTEXT")) as w:
        resp = w.handshake("PLAIN", version=0)
        assert resp.error_code == 0 and "PLAIN" in resp.mechanisms
        w.send_raw(b"\0alice\0" + USERS["alice"].encode())
        assert w.recv_raw() == b""
        assert metadata(w).brokers


def test_v0_raw_token_wrong_password_is_closed_without_answer(wire: SecureBroker) -> None:
    """A v0 exchange has no way to say why: a refused raw token gets no answer, the connection is closed."""
    with Wire(wire.bootstrap("SASL_PLAINTEXT")) as w:
        assert w.handshake("PLAIN", version=0).error_code == 0
        w.send_raw(b"\0alice\0wrong")
        assert w.closed()


def test_unknown_mechanism(wire: SecureBroker) -> None:
    """SaslServerAuthenticator.handleHandshakeRequest: UNSUPPORTED_SASL_MECHANISM with the enabled list; an
    authentication failure, so the answer and the close both wait connection.failed.authentication.delay.ms
    (100 ms: KafkaChannel.prepare's delayed close)."""
    with Wire(wire.bootstrap("SASL_PLAINTEXT")) as w:
        started = time.monotonic()
        resp = w.handshake("GSSAPI")
        answered = time.monotonic()
        assert resp.error_code == E.UNSUPPORTED_SASL_MECHANISM
        assert sorted(resp.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert w.closed()
        assert answered - started >= 0.09


def test_request_before_authentication_is_closed(wire: SecureBroker) -> None:
    """handleKafkaRequest: only ApiVersions and SaslHandshake before the mechanism is chosen; anything else
    ("Unexpected Kafka request of type METADATA during SASL handshake") closes the connection unanswered."""
    with Wire(wire.bootstrap("SASL_PLAINTEXT")) as w:
        assert w.call(ApiKey.ApiVersions, 3, client_software_name="t", client_software_version="1").error_code == 0
        w.send(ApiKey.Metadata, 4, topics=[], allow_auto_topic_creation=False)
        assert w.closed()


@pytest.mark.parametrize("request_key", ["metadata", "find-coordinator"])
def test_request_during_authenticate_is_refused(wire: SecureBroker, request_key: str) -> None:
    """handleSaslToken: after a v1 handshake only SaslAuthenticate; another request is answered with its error
    response (ILLEGAL_SASL_STATE where the response has a top-level error code; Metadata v4 has none) and the
    connection closed."""
    with Wire(wire.bootstrap("SASL_PLAINTEXT")) as w:
        assert w.handshake("PLAIN").error_code == 0
        if request_key == "metadata":
            resp = w.call(ApiKey.Metadata, 4, topics=[], allow_auto_topic_creation=False)
            assert (resp.brokers, resp.topics) == ([], [])
        else:
            resp = w.call(ApiKey.FindCoordinator, 2, key="g", key_type=0)
            assert resp.error_code == E.ILLEGAL_SASL_STATE
        assert w.closed()


@pytest.mark.parametrize("when", ["before-handshake", "after-handshake"])
def test_garbage_is_closed(wire: SecureBroker, when: str) -> None:
    """A frame that is not a Kafka request during the exchange closes the connection unanswered; the broker
    serves the next client."""
    with Wire(wire.bootstrap("SASL_PLAINTEXT")) as w:
        if when == "after-handshake":
            assert w.handshake("SCRAM-SHA-256").error_code == 0
        w.send_raw(b"\xff\xfe garbage, not a request header \x00\x01")
        assert w.closed()
    with Wire(wire.bootstrap("SASL_PLAINTEXT")) as w:
        assert w.plain("alice", USERS["alice"]).error_code == 0


def test_oversized_token_is_closed(wire: SecureBroker) -> None:
    """Before authentication a frame may be at most sasl.server.max.receive.size (512 KiB): a larger one is
    an authentication failure (Kafka: "Failing SASL authentication due to invalid receive size"), closed
    without reading it."""
    with Wire(wire.bootstrap("SASL_PLAINTEXT")) as w:
        assert w.handshake("PLAIN").error_code == 0
        w.sock.sendall(struct.pack(">i", MAX_RECEIVE + 1) + b"\0" * 1024)
        assert w.closed()
    with Wire(wire.bootstrap("SASL_PLAINTEXT")) as w:  # within the bound: an ordinary (failed) login
        assert w.handshake("PLAIN").error_code == 0
        resp = w.call(ApiKey.SaslAuthenticate, 2, auth_bytes=b"\0alice\0" + b"x" * 60000)
        assert resp.error_code == E.SASL_AUTHENTICATION_FAILED


# ------------------------------------------------------------------------------------------ failures


def test_failed_login_message_and_close(wire: SecureBroker) -> None:
    """SASL_AUTHENTICATION_FAILED with Kafka's message, after connection.failed.authentication.delay.ms (100),
    then closed."""
    with Wire(wire.bootstrap("SASL_PLAINTEXT")) as w:
        started = time.monotonic()
        resp = w.plain("alice", "wrong")
        assert time.monotonic() - started >= 0.09
        assert (resp.error_code, resp.error_message) == (
            E.SASL_AUTHENTICATION_FAILED,
            "Authentication failed: Invalid username or password",
        )
        assert w.closed()


def test_failed_login_storm(wire: SecureBroker) -> None:
    """1000 failed logins (100 at a time) while an authenticated client keeps producing: every login is
    refused, the producer never stalls, and (logbroker) the log says so in few lines without a password."""
    from confluent_kafka import Producer

    topic = unique("storm")
    producer = Producer(client_config("confluent", wire, "SASL_PLAINTEXT", "PLAIN", user="admin")
                        | {"linger.ms": 0, "acks": "all"})  # fmt: skip
    mark = len(log_text(wire)) if wire.name == "logbroker" else 0
    host, port = wire.bootstrap("SASL_PLAINTEXT").rsplit(":", 1)
    secret = "storm-password-must-not-be-logged"

    async def one(limit: asyncio.Semaphore) -> int:
        async with limit:
            reader, writer = await asyncio.open_connection(host, int(port))
            try:
                for cid, (key, version, fields) in enumerate(
                    [(ApiKey.SaslHandshake, 1, {"mechanism": "PLAIN"}),
                     (ApiKey.SaslAuthenticate, 2, {"auth_bytes": f"\0alice\0{secret}".encode()})]):  # fmt: skip
                    writer.write(encode_request(spec(key), version, cid, "storm", api(key).request(**fields)))
                    size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))[0]
                    _cid, resp = decode_response(spec(key), version, await reader.readexactly(size))
                return int(resp.error_code)
            finally:
                writer.close()

    async def storm() -> list[int]:
        limit = asyncio.Semaphore(100)
        return await asyncio.gather(*(one(limit) for _ in range(1000)))

    delivered: list[float] = []
    stop = False

    def produce_meanwhile() -> None:
        while not stop:
            producer.produce(topic, b"x", on_delivery=lambda err, msg: delivered.append(time.monotonic()))
            producer.flush(5)
            time.sleep(0.05)

    import threading

    t = threading.Thread(target=produce_meanwhile)
    t.start()
    try:
        started = time.monotonic()
        codes = asyncio.run(storm())
        elapsed = time.monotonic() - started
    finally:
        stop = True
        t.join(30)
    assert codes == [E.SASL_AUTHENTICATION_FAILED] * 1000
    assert len(delivered) >= 5, (len(delivered), elapsed)
    gaps = [b - a for a, b in itertools.pairwise(delivered)]
    assert max(gaps) < 3.0, max(gaps)
    if wire.name == "logbroker":
        text = log_text(wire)[mark:]
        assert secret not in text
        failures = [line for line in text.splitlines() if "Failed authentication" in line]
        assert 1 <= len(failures) < 100, len(failures)


# ------------------------------------------------------------------------------ SASL requests outside an exchange


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SASL_PLAINTEXT"])
def test_sasl_requests_outside_an_exchange(wire: SecureBroker, listener: str) -> None:
    """KafkaApis: SaslHandshake and SaslAuthenticate reaching the request handlers (on a listener without SASL,
    or after authentication) are answered ILLEGAL_SASL_STATE and the connection is kept."""
    with Wire(wire.bootstrap(listener)) as w:
        if listener != "PLAINTEXT":
            assert w.plain("alice", USERS["alice"]).error_code == 0
            # without session expiry a handshake is no re-authentication
        assert w.handshake("PLAIN").error_code == E.ILLEGAL_SASL_STATE
        resp = w.call(ApiKey.SaslAuthenticate, 2, auth_bytes=b"\0alice\0x")
        assert resp.error_code == E.ILLEGAL_SASL_STATE
        assert resp.error_message == "SaslAuthenticate request received after successful authentication"
        assert metadata(w).brokers


# ------------------------------------------------------------------------------------------ KIP-368


def test_session_lifetime_and_expiry(wire: SecureBroker) -> None:
    """connections.max.reauth.ms: the lifetime is in SaslAuthenticate's answer; a client that does not
    re-authenticate is served until then and closed at its first request after (SocketServer)."""
    with Wire(wire.bootstrap("REAUTH")) as w, Wire(wire.bootstrap("SASL_PLAINTEXT")) as forever:
        resp = w.plain("alice", USERS["alice"])
        assert (resp.error_code, resp.session_lifetime_ms) == (0, REAUTH_MS)
        assert forever.plain("alice", USERS["alice"]).session_lifetime_ms == 0
        assert metadata(w).brokers
        time.sleep(REAUTH_MS / 1000 + 0.5)
        assert not w.closed(within=0.2)  # not closed while idle: at its next request
        w.send(ApiKey.Metadata, 4, topics=[], allow_auto_topic_creation=False)
        assert w.closed()
        assert metadata(forever).brokers


def test_reauthentication_raw(wire: SecureBroker) -> None:
    """KIP-368 in band: a SaslHandshake on the live connection (once the last began over a second ago) starts
    a new exchange; same user: a new lifetime; another user: SASL_AUTHENTICATION_FAILED and closed."""
    with Wire(wire.bootstrap("REAUTH")) as w:
        assert w.plain("alice", USERS["alice"]).error_code == 0
        time.sleep(1.1)
        resp = w.plain("alice", USERS["alice"])
        assert (resp.error_code, resp.session_lifetime_ms) == (0, REAUTH_MS)
        assert metadata(w).brokers
        time.sleep(1.1)
        resp = w.plain("bob", USERS["bob"])
        assert resp.error_code == E.SASL_AUTHENTICATION_FAILED
        assert "Cannot change principals during re-authentication from User.alice: User.bob" in resp.error_message
        assert w.closed()


def test_java_client_reauthenticates(wire: SecureBroker) -> None:
    """The Java client re-authenticates before its session ends (KIP-368) and keeps working well past the
    lifetime: a group consumer polls one record at a time over three lifetimes (on logbroker no connection is
    closed for an expired session meanwhile)."""
    import json

    from confluent_kafka import Producer

    tool = java_client_tool()
    topic = unique("reauth")
    producer = Producer(client_config("confluent", wire, "SASL_PLAINTEXT", "PLAIN", user="admin"))
    for i in range(5):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(20) == 0
    mark = len(log_text(wire)) if wire.name == "logbroker" else 0
    conf = client_config("java", wire, "REAUTH", "SCRAM-SHA-256", user="admin") | {"max.poll.records": 1}
    steps: list[dict[str, Any]] = [{"op": "consumer", "name": "c", "group": unique("g"), "topic": topic,
                                    "properties": conf}]  # fmt: skip
    for _ in range(5):
        steps += [
            {"op": "poll", "name": "c", "count": 1, "timeout_ms": 10000},
            {"op": "sleep", "ms": REAUTH_MS * 3 // 5},
        ]
    script = "".join(json.dumps(s) + "\n" for s in steps)
    p = tool.run("txn", "--bootstrap", wire.bootstrap("REAUTH"), *java_props(conf), input=script, timeout=90)
    results = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    assert all(r["ok"] for r in results), results
    values = [rec["value"] for r in results if r["op"] == "poll" for rec in r["records"]]
    assert values == [f"v{i}" for i in range(5)]
    if wire.name == "logbroker":
        assert "SASL session expired" not in log_text(wire)[mark:]


def java_props(conf: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for k, v in conf.items():
        out += ["--property", f"{k}={v}"]
    return out


# ------------------------------------------------------------------------------------------ principals


def create_topic_as(broker: SecureBroker, listener: str, name: str, **who: Any) -> int:
    """CreateTopics v5 over a raw connection as a SASL user or a certificate: the topic's error code."""
    tls = None
    if "SSL" in broker.protocols[listener]:
        tls = ssl.create_default_context(cafile=str(broker.certs["ca"]))
    if "cert" in who:
        assert tls is not None
        tls.load_cert_chain(broker.certs[f"{who['cert']}_cert"], broker.certs[f"{who['cert']}_key"], KEY_PASSWORD)
    with Wire(broker.bootstrap(listener), tls) as w:
        if "user" in who:
            assert w.plain(who["user"], USERS[who["user"]]).error_code == 0
        req = api(ApiKey.CreateTopics).request
        topic = req.CreatableTopic(name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[])
        resp = w.call(ApiKey.CreateTopics, 5, topics=[topic], timeout_ms=10000, validate_only=False)
        return int(resp.topics[0].error_code)


@pytest.mark.parametrize(
    ("listener", "who", "allowed"),
    [
        ("SASL_PLAINTEXT", {"user": "admin"}, True),
        ("SASL_PLAINTEXT", {"user": "bob"}, False),
        ("SSL", {"cert": "admin"}, True),
        ("SSL", {"cert": "client"}, False),
        ("SSL", {}, False),
    ],
    ids=["sasl-super-user", "sasl-other-user", "cert-CN=admin", "cert-CN=client", "no-cert-ANONYMOUS"],
)
def test_principal_seen_by_acls(wire: SecureBroker, listener: str, who: dict[str, str], allowed: bool) -> None:
    """The authorizer sees User:<SASL user> and User:<certificate subject> (CN=admin is a super user, CN=client
    is not; no certificate is User:ANONYMOUS): only super users may create topics here."""
    code = create_topic_as(wire, listener, unique("principal"), **who)
    assert code == (0 if allowed else E.TOPIC_AUTHORIZATION_FAILED), E(code).name
