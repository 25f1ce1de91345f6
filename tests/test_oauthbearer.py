"""SASL/OAUTHBEARER with unsecured (unsigned) tokens, Kafka's development default, on logbroker and on Apache
Kafka configured the same way: librdkafka's unsecured JWT logs in and the token's subject is the principal;
an expired or malformed token gets RFC 7628's error challenge, then SASL_AUTHENTICATION_FAILED carrying it;
the session lasts as long as the token."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer

from logbroker.protocol import ApiKey, api
from logbroker.protocol.errors import ErrorCode
from logbroker_devtools.client.connection import Connection
from logbroker_devtools.testing.net import free_ports
from logbroker_devtools.testing.process import BrokerProcess
from support import both_targets

pytestmark = pytest.mark.timeout(180)

Handshake = api(ApiKey.SaslHandshake).request
Authenticate = api(ApiKey.SaslAuthenticate).request


@pytest.fixture(scope="module", params=both_targets())
def oauth_bootstrap(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A SASL_PLAINTEXT listener offering OAUTHBEARER with the default (unsecured) token validation."""
    if request.param == "kafka":
        from logbroker_devtools.testing.peers import KafkaPeer

        props = {
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                'unsecuredLoginStringClaim_sub="broker";',
        }  # fmt: skip
        with KafkaPeer(listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"}, server_properties=props) as peer:
            yield peer.listener_bootstrap("SASL_PLAINTEXT")
        return
    plain, sasl = free_ports(2)
    proc = BrokerProcess(tmp_path_factory.mktemp("oauth") / "data")
    proc.port = plain
    proc.extra_args = ["--listeners", f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
                       "--sasl-enabled-mechanisms", "OAUTHBEARER"]  # fmt: skip
    proc.start()
    try:
        yield f"127.0.0.1:{sasl}"
    finally:
        assert proc.stop() == 0, proc.log_tail()


def _b64(obj: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")


def unsecured_token(sub: str, exp: float, iat: float | None = None) -> str:
    claims: dict[str, object] = {"sub": sub, "exp": exp}
    if iat is not None:
        claims["iat"] = iat
    return f"{_b64({'alg': 'none'})}.{_b64(claims)}."


def initial_response(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def test_librdkafka_unsecured_jwt_produces_and_consumes(oauth_bootstrap: str) -> None:
    conf = {
        "bootstrap.servers": oauth_bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=alice",
    }
    topic = f"oauth-{uuid.uuid4().hex[:8]}"
    p = Producer({**conf, "message.timeout.ms": 20000})
    errors: list[object] = []
    p.produce(topic, b"token-signed-off", on_delivery=lambda e, m: errors.append(e))
    assert p.flush(30) == 0 and errors == [None]
    c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    deadline, got = time.monotonic() + 30, []
    while not got and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    assert got == [b"token-signed-off"]


def _authenticate(
    bootstrap: str, response: bytes, then: bytes | None = None
) -> list[tuple[int, str | None, bytes, int]]:
    host, port = bootstrap.rsplit(":", 1)
    out = []
    with Connection(host, int(port), client_id="oauth-probe", timeout=30) as conn:
        hs = conn.do(Handshake(mechanism="OAUTHBEARER"), 1)
        assert (hs.error_code, list(hs.mechanisms)) == (0, ["OAUTHBEARER"])
        for token in (response, then):
            if token is None:
                break
            r = conn.do(Authenticate(auth_bytes=token), 1)
            out.append((r.error_code, r.error_message, bytes(r.auth_bytes), r.session_lifetime_ms))
    return out


def test_a_valid_token_sets_the_session_lifetime(oauth_bootstrap: str) -> None:
    now = time.time()
    [(err, msg, answer, lifetime)] = _authenticate(oauth_bootstrap, initial_response(unsecured_token("bob", now + 120)))
    assert (err, msg, answer) == (0, "", b"")
    assert 100_000 < lifetime <= 120_000  # the token's remaining life: the client must re-authenticate by then


@pytest.mark.parametrize(
    "token",
    [
        pytest.param(unsecured_token("carol", time.time() - 60), id="expired"),
        pytest.param(unsecured_token("carol", time.time() + 600, iat=time.time() + 300), id="issued-in-future"),
        pytest.param(f"{_b64({'alg': 'none'})}.{_b64({'exp': time.time() + 600})}.", id="no-subject"),
        pytest.param(f"{_b64({'alg': 'HS256'})}.{_b64({'sub': 'x', 'exp': time.time() + 600})}.", id="signed-alg"),
        pytest.param("not-a-jws", id="garbage"),
    ],
)
def test_a_bad_token_gets_the_error_challenge_then_fails(oauth_bootstrap: str, token: str) -> None:
    challenge, failure = _authenticate(oauth_bootstrap, initial_response(token), b"\x01")
    assert challenge == (0, "", b'{"status":"invalid_token"}', 0)
    assert failure[:2] == (ErrorCode.SASL_AUTHENTICATION_FAILED, '{"status":"invalid_token"}')


def test_a_malformed_initial_response_fails_with_the_generic_message(oauth_bootstrap: str) -> None:
    [(err, msg, _, _)] = _authenticate(oauth_bootstrap, b"n,,\x01user=alice\x01\x01")  # no auth=Bearer
    assert err == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert (
        msg == "Authentication failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER"
    )
