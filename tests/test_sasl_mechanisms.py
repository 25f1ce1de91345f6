"""The broker's SASL mechanisms, exchanged in process with real client implementations (kafka-python's
SCRAM client, the one it speaks over the wire; scramp's client for escaped names). Wiring them to
SaslHandshake/SaslAuthenticate and listeners is the rest of the security issue; these pin the exchanges."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.net.sasl.scram import ScramClient as KafkaPythonScram
from scramp import ScramClient as ScrampClient

from logbroker.broker.auth.sasl import (
    MIN_ITERATIONS,
    PlainServer,
    SaslFailure,
    ScramCredential,
    ScramServer,
    new_mechanism,
)

MECHS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


def users(**creds: ScramCredential):
    return creds.get


def scram_login(mech: str, lookup, user: str, password: str) -> ScramServer:
    server = ScramServer(mech, lookup)
    client = KafkaPythonScram(user, password, mech)
    first = server.step(client.first_message())
    client.process_server_first_message(first)
    final = server.step(client.final_message())
    client.process_server_final_message(final)  # raises unless the server proved it knows the key
    return server


@pytest.mark.parametrize("mech", MECHS)
def test_scram_login_with_kafka_pythons_client(mech: str) -> None:
    server = scram_login(mech, users(alice=ScramCredential.from_password(mech, "s3cret")), "alice", "s3cret")
    assert server.complete and server.user == "alice"


@pytest.mark.parametrize("mech", MECHS)
def test_credentials_from_a_salted_password_as_alter_user_scram_credentials_sends_it(mech: str) -> None:
    salt, iterations = b"0123456789abcdef", 8192
    hashname = mech.lower().split("-", 1)[1].replace("-", "")
    salted = hashlib.pbkdf2_hmac(hashname, b"pw", salt, iterations)
    cred = ScramCredential.from_salted_password(mech, salt, salted, iterations)
    assert scram_login(mech, users(bob=cred), "bob", "pw").user == "bob"


@pytest.mark.parametrize("mech", MECHS)
def test_wrong_password_and_unknown_user_fail_with_kafkas_generic_message(mech: str) -> None:
    lookup = users(alice=ScramCredential.from_password(mech, "right"))
    generic = f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mech}"
    with pytest.raises(SaslFailure) as wrong:
        scram_login(mech, lookup, "alice", "wrong")
    assert str(wrong.value) == generic and "wrong" not in wrong.value.detail
    server = ScramServer(mech, lookup)
    with pytest.raises(SaslFailure) as unknown:  # refused at the first message, as Kafka does
        server.step(KafkaPythonScram("mallory", "x", mech).first_message())
    assert str(unknown.value) == generic


def test_a_credential_of_the_other_hash_does_not_log_in() -> None:
    lookup = users(alice=ScramCredential.from_password("SCRAM-SHA-256", "pw"))
    with pytest.raises(SaslFailure):
        scram_login("SCRAM-SHA-512", lookup, "alice", "pw")


def test_escaped_names_are_looked_up_unescaped() -> None:
    name = "a,b=c"
    server = ScramServer("SCRAM-SHA-256", users(**{name: ScramCredential.from_password("SCRAM-SHA-256", "pw")}))
    client = ScrampClient(["SCRAM-SHA-256"], name, "pw")
    client.set_server_first(server.step(client.get_client_first().encode()).decode())
    client.set_server_final(server.step(client.get_client_final().encode()).decode())
    assert server.user == name


def test_stored_credentials_hold_no_password_and_round_trip() -> None:
    cred = ScramCredential.from_password("SCRAM-SHA-512", "hunter2-password", iterations=MIN_ITERATIONS)
    text = json.dumps(cred.to_json())
    assert "hunter2" not in text
    assert ScramCredential.from_json(json.loads(text)) == cred


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.binary(max_size=300))
def test_garbage_in_a_scram_exchange_is_only_ever_an_authentication_failure(first: bytes, second: bytes) -> None:
    server = ScramServer("SCRAM-SHA-256", users(u=ScramCredential.from_password("SCRAM-SHA-256", "pw")))
    try:
        server.step(first)
        server.step(second)
    except SaslFailure:
        return
    pytest.fail("garbage authenticated")


def plain(tokens: bytes, check=lambda u, p: (u, p) == ("alice", "pw")) -> PlainServer:
    server = PlainServer(check)
    assert server.step(tokens) == b""
    return server


def test_plain_logins_and_kafkas_refusals() -> None:
    assert plain(b"\0alice\0pw").user == "alice"
    assert plain(b"alice\0alice\0pw").user == "alice"  # an authzid equal to the user is fine
    cases = {
        b"\0alice\0nope": "Authentication failed: Invalid username or password",
        b"bob\0alice\0pw": "Authentication failed: Client requested an authorization id that is different "
        "from username",
        b"alice\0pw": None,  # two tokens: generic
        b"\0\0pw": None,  # no username: generic
        b"\xff\0alice\0pw": None,
    }
    for token, message in cases.items():
        with pytest.raises(SaslFailure) as err:
            plain(token)
        expected = message or "Authentication failed during authentication due to invalid credentials with SASL " \
                              "mechanism PLAIN"  # fmt: skip
        assert str(err.value) == expected, token


def test_new_mechanism_names() -> None:
    assert new_mechanism("PLAIN", lambda u, p: False, users()).name == "PLAIN"
    assert new_mechanism("SCRAM-SHA-512", lambda u, p: False, users()).name == "SCRAM-SHA-512"
    with pytest.raises(ValueError):
        new_mechanism("GSSAPI", lambda u, p: False, users())
