"""Several listeners at once, each with its security protocol (Kafka's `listeners`, `advertised.listeners`,
`listener.security.protocol.map`, `listener.name.<l>.*`): what Metadata and FindCoordinator advertise per
listener on logbroker and Kafka, the server.properties translation, TLS start-up refusals and the client
certificate's principal mapping (Kafka's SslPrincipalMapper rules)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from logbroker.broker.auth.authenticator import parse_plain_users
from logbroker.broker.auth.tls import PrincipalMapper
from logbroker.config import load_settings
from logbroker.protocol import ApiKey, api
from logbroker_devtools.client.connection import Connection
from logbroker_devtools.testing.net import free_ports
from logbroker_devtools.testing.process import BrokerProcess
from support import both_targets, eventually

pytestmark = pytest.mark.timeout(180)

Metadata = api(ApiKey.Metadata).request
FindCoordinator = api(ApiKey.FindCoordinator).request


@pytest.fixture(scope="module", params=both_targets())
def two_listeners(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    """A broker with PLAINTEXT and a second PLAINTEXT listener named INTERNAL: {listener name: port}."""
    if request.param == "kafka":
        from logbroker_devtools.testing.peers import KafkaPeer

        with KafkaPeer(listeners={"INTERNAL": "PLAINTEXT"}) as peer:
            yield {"PLAINTEXT": peer.port, "INTERNAL": int(peer.listener_bootstrap("INTERNAL").rsplit(":", 1)[1])}
        return
    p1, p2 = free_ports(2)
    proc = BrokerProcess(tmp_path_factory.mktemp("listeners") / "data")
    proc.port = p1
    proc.extra_args = [
        "--listeners", f"PLAINTEXT://127.0.0.1:{p1},INTERNAL://127.0.0.1:{p2}",
        "--listener-security-protocol-map", "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
    ]  # fmt: skip
    proc.start()
    try:
        yield {"PLAINTEXT": p1, "INTERNAL": p2}
    finally:
        assert proc.stop() == 0, proc.log_tail()


def test_metadata_and_coordinator_advertise_the_listener_the_client_came_in_on(two_listeners: dict[str, int]) -> None:
    for port in two_listeners.values():
        with Connection("127.0.0.1", port, client_id="listeners", timeout=30) as conn:
            md = conn.do(Metadata(topics=[], allow_auto_topic_creation=False), version=9)
            assert [(b.host, b.port) for b in md.brokers] == [("127.0.0.1", port)]

            def coordinator() -> list[tuple[int, str, int]]:
                fc = conn.do(FindCoordinator(key_type=0, coordinator_keys=["g"]), version=4)
                got = [(c.error_code, c.host, c.port) for c in fc.coordinators]
                assert got[0][0] != 15, got  # Kafka: COORDINATOR_NOT_AVAILABLE while __consumer_offsets is made
                return got

            assert eventually(coordinator) == [(0, "127.0.0.1", port)]


def test_server_properties_security_translation(tmp_path: Path) -> None:
    """An operator's secured server.properties (two client listeners, a controller listener, PEM stores, a
    per-listener client-auth and JAAS PLAIN users, the standard authorizer) starts logbroker as it is."""
    f = tmp_path / "server.properties"
    f.write_text(
        "process.roles=broker,controller\nnode.id=1\ncontroller.listener.names=CONTROLLER\n"
        "listeners=PLAINTEXT://127.0.0.1:29092,SASL_SSL://127.0.0.1:29093,CONTROLLER://:9093\n"
        "advertised.listeners=PLAINTEXT://127.0.0.1:29092,SASL_SSL://localhost:29093\n"
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL\n"
        "ssl.keystore.type=PEM\nssl.keystore.location=/certs/server.pem\n"
        "ssl.truststore.type=PEM\nssl.truststore.location=/certs/ca.pem\n"
        "listener.name.sasl_ssl.ssl.client.auth=required\n"
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512\n"
        "listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
        'required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="a\\\\"b";\n'
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram."
        "ScramLoginModule required;\n"
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\nsuper.users=User:admin\n"
        "connections.max.reauth.ms=60000\n"
    )
    notes: list[str] = []
    s = load_settings(f, notes=notes)
    assert [(x.name, x.protocol, x.host, x.port, x.advertised_host) for x in s.listener_list()] == [
        ("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 29092, "127.0.0.1"),
        ("SASL_SSL", "SASL_SSL", "127.0.0.1", 29093, "localhost"),
    ]
    assert s.for_listener("SASL_SSL", "ssl_client_auth") == "required"
    assert s.for_listener("PLAINTEXT", "ssl_client_auth") == "none"
    assert s.sasl_enabled_mechanisms == "PLAIN,SCRAM-SHA-512"
    assert s.connections_max_reauth_ms == 60000
    assert (s.authorizer_class_name, s.super_users) == (
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "User:admin",
    )
    assert parse_plain_users(s.for_listener("SASL_SSL", "sasl_plain_jaas_config")) == {
        "admin": "admin-secret",
        "alice": 'a"b',
    }
    [note] = notes
    assert "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config" in note and "CONTROLLER://:9093" in note


def test_plain_users_file_forms() -> None:
    assert parse_plain_users("# users\nalice = s3cret\n\nbob=x=y\n") == {"alice": "s3cret", "bob": "x=y"}
    with pytest.raises(ValueError, match="not name=password"):
        parse_plain_users("alice\n")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--ssl-keystore-location", "/nonexistent/server.pem"], "ssl_keystore_location /nonexistent/server.pem"),
        ([], "listener SSL uses SSL but no ssl_keystore_location is set"),
        (["--ssl-keystore-location", "{garbage}"], "not a PEM private key and certificate chain"),
        (["--ssl-keystore-location", "{keystore}", "--ssl-client-auth", "required"],
         "ssl_client_auth=required needs ssl_truststore_location"),
    ],
)  # fmt: skip
def test_tls_listener_refuses_to_start_naming_the_setting(tmp_path: Path, args: list[str], expected: str) -> None:
    from test_notify import make_certs

    certs = make_certs(tmp_path)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key\n")
    args = [a.format(garbage=garbage, keystore=certs["server_keystore"]) for a in args]
    (port,) = free_ports(1)
    out = subprocess.run(
        [sys.executable, "-m", "logbroker", "serve", "--data-dir", str(tmp_path / "data"),
         "--listeners", f"SSL://127.0.0.1:{port}", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode != 0
    assert expected in out.stderr, out.stderr


def test_principal_mapping_rules_as_kafka_documents_them() -> None:
    """The examples of Kafka's security documentation for ssl.principal.mapping.rules."""
    mapper = PrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
        "DEFAULT"
    )
    assert mapper.name("CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown") == "serviceuser"
    assert mapper.name("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown") == "adminuser@admin"
    assert mapper.name("OU=Other,CN=Someone.Else") == "someone.else"
    assert mapper.name("O=NoCommonName") == "O=NoCommonName"  # DEFAULT: the whole name
    assert PrincipalMapper("RULE:^CN=(.*)$/$1/U").name("CN=bob") == "BOB"
    with pytest.raises(LookupError, match="No rules apply to O=x"):
        PrincipalMapper("RULE:^CN=(.*)$/$1/").name("O=x")
    with pytest.raises(ValueError, match="invalid rule"):
        PrincipalMapper("RULE:nope")
