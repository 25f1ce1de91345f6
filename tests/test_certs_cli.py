"""`logbroker certs`: the files it writes (PEM, modes, refusing to overwrite), Python's `ssl` verifying the
chain and host names over a real handshake, and Apache Kafka 4.4 taking the server keystore (PEM, an
encrypted PKCS#8 key) on SSL listeners with and without client certificates, and logbroker taking the same
files; the CLI's client certificates are accepted by both through librdkafka, the `logbroker` commands and
Kafka's own Java tools.

`secured_broker` (also used by test_client_security.py) starts logbroker or the Kafka peer on certificates
made here, with the same listeners and users.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from logbroker.cli import main
from logbroker_devtools.testing.net import free_ports
from logbroker_devtools.testing.peers import KafkaPeer
from logbroker_devtools.testing.process import BrokerProcess
from support import both_targets, eventually, kafka_tool, missing_tool, unique

pytestmark = pytest.mark.timeout(300)

KEY_PASSWORD = "key pw=1"
# SASL users of the secured Kafka: PLAIN logins and SCRAM credentials added at format time.
USERS = {"alice": "alice-secret", "bob": 'b"o\\b pw'}
SASL_LISTENERS = ("SASL_PLAINTEXT", "SASL_SSL")


def certs_cli(*args: str) -> Any:
    result = CliRunner().invoke(main, ["certs", *args], catch_exceptions=False)
    return result


def make_certs(directory: Path, *args: str) -> Path:
    result = certs_cli("init", str(directory), *args)
    assert result.exit_code == 0, result.output
    return directory


# ------------------------------------------------------------------------------------- secured brokers

LISTENERS = {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL", "SSL": "SSL",
             "TLS": "SSL"}  # fmt: skip


@dataclass
class Secured:
    """A broker with the listeners of LISTENERS: SSL wants a client certificate, TLS does not."""

    target: str
    listeners: dict[str, str]  # name -> bootstrap

    def listener_bootstrap(self, name: str) -> str:
        return self.listeners[name]


@contextlib.contextmanager
def secured_broker(target: str, certs: Path, work: Path, key_password: str | None = KEY_PASSWORD) -> Iterator[Secured]:
    """logbroker or Kafka on the certificates `logbroker certs init` wrote in ``certs``, with USERS able to log
    in with PLAIN and (the ones whose password Kafka's format tool can take) SCRAM-SHA-256/512."""
    if target == "kafka":
        with secured_kafka(certs, key_password) as peer:
            yield Secured("kafka", {n: peer.listener_bootstrap(n) for n in LISTENERS if n != "PLAINTEXT"}
                          | {"PLAINTEXT": peer.bootstrap})  # fmt: skip
        return
    ports = dict(zip(LISTENERS, free_ports(len(LISTENERS)), strict=True))
    users = work / "plain-users.txt"
    users.write_text("".join(f"{u}={p}\n" for u, p in USERS.items()))
    config = work / "broker.toml"
    lines = [
        f'listeners = "{",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items())}"',
        f'listener_security_protocol_map = "{",".join(f"{n}:{proto}" for n, proto in LISTENERS.items())}"',
        f'ssl_keystore_location = "{certs / "server-keystore.pem"}"',
        f'ssl_truststore_location = "{certs / "ca.crt"}"',
        'sasl_enabled_mechanisms = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"',
        f'sasl_plain_users_file = "{users}"',
        "group_initial_rebalance_delay_ms = 0",
    ]
    if key_password:
        lines.append(f'ssl_key_password = "{key_password}"')
    lines += ["[listener_configs.SSL]", 'ssl_client_auth = "required"', "[listener_configs.TLS]",
              'ssl_client_auth = "none"']  # fmt: skip
    config.write_text("\n".join(lines) + "\n")
    proc = BrokerProcess(work / "data", port=ports["PLAINTEXT"], extra_args=["--config", str(config)])
    proc.start()
    try:
        plaintext = f"127.0.0.1:{ports['PLAINTEXT']}"
        for user, password in USERS.items():
            if '"' not in password:  # the same users as on Kafka
                added = CliRunner().invoke(main, ["users", "add", user, "--password", password, "--iterations", "4096",
                                                  "-b", plaintext])  # fmt: skip
                assert added.exit_code == 0, added.output
        yield Secured("logbroker", {n: f"127.0.0.1:{p}" for n, p in ports.items()})
    finally:
        assert proc.stop() == 0, proc.log_tail()


@contextlib.contextmanager
def secured_kafka(certs: Path, key_password: str | None = KEY_PASSWORD) -> Iterator[KafkaPeer]:
    """Kafka 4.4 with listeners SASL_PLAINTEXT and SASL_SSL (PLAIN and SCRAM-SHA-256/512 for USERS), SSL
    (client certificate required) and TLS (an SSL listener without client certificates), all on the server
    keystore `logbroker certs init` wrote."""
    from logbroker_devtools.testing import peers

    if not peers.java_available():
        missing_tool("java not found (Apache Kafka needs a JVM)")
    if not peers.jars_available("kafka"):
        missing_tool(f"no Kafka jars in {peers.default_jar_dir('kafka')} (run .ci/fetch-jars)")
    plain = " ".join(f'user_{u}="{_jaas_escape(p)}"' for u, p in USERS.items())
    props: dict[str, object] = {
        "group.initial.rebalance.delay.ms": 0,
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs / "server-keystore.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs / "ca.crt"),
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.tls.ssl.client.auth": "none",
    }
    if key_password:
        props["ssl.key.password"] = key_password
    for listener in SASL_LISTENERS:
        lname = listener.lower()
        props[f"listener.name.{lname}.plain.sasl.jaas.config"] = (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain};"
        )
        for mech in ("scram-sha-256", "scram-sha-512"):
            props[f"listener.name.{lname}.{mech}.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            )
    scram = [
        f"{m}=[name={u},password={p}]"
        for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
        for u, p in USERS.items()
        if '"' not in p
    ]
    peer = KafkaPeer(
        listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL", "SSL": "SSL", "TLS": "SSL"},
        server_properties=props,
        format_args=[arg for s in scram for arg in ("--add-scram", s)],
    )
    with peer:
        yield peer


def _jaas_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


# ------------------------------------------------------------------------------------------ files


def test_init_writes_pem_files_keys_private_and_refuses_to_overwrite(tmp_path: Path) -> None:
    d = make_certs(tmp_path / "tls", "--client", "alice", "--client", "bob", "--key-password", KEY_PASSWORD)
    secret = ["ca.key", "server.key", "server-keystore.pem", "alice.key", "alice-keystore.pem", "bob.key",
              "plain-users.txt", "client.properties", "client-alice.properties", "broker.toml"]  # fmt: skip
    public = ["ca.crt", "server.crt", "alice.crt", "bob.crt"]
    for name in secret:
        assert stat.S_IMODE((d / name).stat().st_mode) == 0o600, name
    for name in public:
        assert stat.S_IMODE((d / name).stat().st_mode) == 0o644, name
    # Kafka's PEM keystore: an (encrypted) PKCS#8 key first, then the chain, leaf before CA.
    ks = (d / "server-keystore.pem").read_text()
    assert ks.startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----") and ks.count("BEGIN CERTIFICATE") == 2
    assert (d / "ca.key").read_text().startswith("-----BEGIN PRIVATE KEY-----")  # the CA key stays plain
    assert ks.endswith((d / "ca.crt").read_text())
    assert not list(d.glob(".*.tmp"))

    ca_before = (d / "ca.crt").read_bytes()
    again = certs_cli("init", str(d))
    assert again.exit_code == 1 and "already exist" in again.output and "--force" in again.output
    assert (d / "ca.crt").read_bytes() == ca_before
    forced = certs_cli("init", str(d), "--force")
    assert forced.exit_code == 0, forced.output
    assert (d / "ca.crt").read_bytes() != ca_before

    non_ascii = certs_cli("client", str(d), "erin", "--key-password", "pässword")
    assert non_ascii.exit_code == 2 and "ASCII" in non_ascii.output and not (d / "erin.key").exists()
    added = certs_cli("client", str(d), "carol")
    assert added.exit_code == 0, added.output
    assert stat.S_IMODE((d / "carol-keystore.pem").stat().st_mode) == 0o600
    assert certs_cli("client", str(d), "carol").exit_code == 1
    assert certs_cli("client", str(d), "carol", "--force").exit_code == 0
    assert "holds no CA" in certs_cli("client", str(tmp_path), "dave").output
    assert certs_cli("client", str(d), "server").exit_code != 0  # would overwrite the server's files
    assert certs_cli("client", str(d), "a,b").exit_code != 0  # not a plain name: breaks the subject


def test_certificates_carry_names_and_usages(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    d = make_certs(tmp_path / "tls", "--host", "broker.example", "--host", "10.1.2.3", "--client", "alice",
                   "--key-type", "rsa")  # fmt: skip
    server = x509.load_pem_x509_certificate((d / "server.crt").read_bytes())
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["broker.example"]
    assert [str(a) for a in san.get_values_for_type(x509.IPAddress)] == ["10.1.2.3"]
    client = x509.load_pem_x509_certificate((d / "alice.crt").read_bytes())
    assert client.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
    eku = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert not client.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    ca = x509.load_pem_x509_certificate((d / "ca.crt").read_bytes())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    client.verify_directly_issued_by(ca)
    server.verify_directly_issued_by(ca)
    assert 'listeners = "SSL://broker.example:9093,SASL_SSL://broker.example:9094"' in (d / "broker.toml").read_text()


def _handshake(
    d: Path, server_name: str, client_cert: str | None, password: str | None, client_password: str | None = None
) -> str:
    """A TLS handshake over a socket pair: Python's `ssl` as the server (the CLI's server keystore, client
    certificates required when ``client_cert``) and as the client (the CLI's CA). Returns the client
    certificate's CN as the server saw it ("" without one)."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(d / "server-keystore.pem", password=password)
    if client_cert:
        server_ctx.verify_mode = ssl.CERT_REQUIRED
        server_ctx.load_verify_locations(d / "ca.crt")
    client_ctx = ssl.create_default_context(cafile=d / "ca.crt")
    if client_cert:
        client_ctx.load_cert_chain(d / f"{client_cert}-keystore.pem", password=client_password)
    a, b = socket.socketpair()
    seen: dict[str, Any] = {}

    def serve() -> None:
        try:
            with server_ctx.wrap_socket(a, server_side=True) as s:
                peer = s.getpeercert()
                seen["cn"] = dict(x[0] for x in peer["subject"])["commonName"] if peer else ""
                s.sendall(b"ok")
        except (ssl.SSLError, OSError) as exc:
            seen["error"] = exc

    t = threading.Thread(target=serve)
    t.start()
    try:
        with client_ctx.wrap_socket(b, server_hostname=server_name) as c:
            assert c.recv(2) == b"ok"
    finally:
        b.close()
        t.join(10)
    if "error" in seen:
        raise seen["error"]
    return str(seen["cn"])


def test_python_ssl_verifies_the_chain_and_host_names(tmp_path: Path) -> None:
    d = make_certs(tmp_path / "tls", "--client", "alice", "--key-password", KEY_PASSWORD)
    assert _handshake(d, "127.0.0.1", None, KEY_PASSWORD) == ""
    assert _handshake(d, "localhost", "alice", KEY_PASSWORD, KEY_PASSWORD) == "alice"
    with pytest.raises(ssl.SSLCertVerificationError, match=r"mismatch|doesn't match"):
        _handshake(d, "elsewhere.example", None, KEY_PASSWORD)
    with pytest.raises(ssl.SSLError):
        ssl.create_default_context().load_cert_chain(d / "alice-keystore.pem", password="wrong")
    # Another CA's client is refused by this server.
    other = make_certs(tmp_path / "other", "--client", "mallory")
    (d / "mallory-keystore.pem").write_bytes((other / "mallory-keystore.pem").read_bytes())
    with pytest.raises(ssl.SSLError):
        _handshake(d, "127.0.0.1", "mallory", KEY_PASSWORD)


# ------------------------------------------------------------------------------------- Apache Kafka


@pytest.fixture(scope="module")
def kafka_certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("kafka-certs") / "tls", "--client", "alice", "--key-password",
                      KEY_PASSWORD)  # fmt: skip


@pytest.fixture(scope="module", params=both_targets())
def kafka(
    request: pytest.FixtureRequest, kafka_certs: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Secured]:
    """The broker under test (logbroker or Apache Kafka) on the CLI's certificates."""
    with secured_broker(request.param, kafka_certs, tmp_path_factory.mktemp("secured")) as broker:
        yield broker


def cli(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def create_topic(bootstrap: str, topic: str, partitions: int, *security: str) -> None:
    """`logbroker topics create`, then wait until every partition answers (Kafka makes leaders after it
    answers CreateTopics: a produce right away may meet NOT_LEADER_OR_FOLLOWER)."""
    made = cli("topics", "create", topic, "-p", str(partitions), "-b", bootstrap, *security)
    assert made.exit_code == 0, made.output

    def ready() -> None:
        described = cli("topics", "describe", topic, "-b", bootstrap, *security)
        assert described.exit_code == 0, described.output

    eventually(ready)


def test_kafka_takes_the_cli_certificates_with_and_without_client_certificates(
    kafka: Secured, kafka_certs: Path
) -> None:
    d = kafka_certs
    topic = unique("certs")
    mtls = kafka.listener_bootstrap("SSL")
    create_topic(mtls, topic, 2, "--command-config", str(d / "client-alice.properties"))
    sent = cli("produce", "-t", topic, "-p", "1", "-b", mtls, "--command-config", str(d / "client-alice.properties"),
               "over-mtls")  # fmt: skip
    assert sent.exit_code == 0, sent.output
    # The TLS listener takes clients with the CA alone; the certificate's host names match 127.0.0.1.
    tls = kafka.listener_bootstrap("TLS")
    got = cli("consume", "-t", topic, "-b", tls, "--ssl-ca", str(d / "ca.crt"), "--from-beginning", "-e")
    assert got.exit_code == 0, got.output
    assert got.stdout.splitlines() == ["over-mtls"]
    # The same files through librdkafka (key and chain as separate files, the key encrypted).
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": mtls, "security.protocol": "SSL", "ssl.ca.location": str(d / "ca.crt"),
                  "ssl.certificate.location": str(d / "alice.crt"), "ssl.key.location": str(d / "alice.key"),
                  "ssl.key.password": KEY_PASSWORD, "group.id": unique("g"),
                  "auto.offset.reset": "earliest"})  # fmt: skip
    try:
        c.subscribe([topic])
        msg = None
        for _ in range(60):
            msg = c.poll(1.0)
            if msg is not None and not msg.error():
                break
        assert msg is not None and msg.value() == b"over-mtls"
    finally:
        c.close()
    # Kafka's own Java tool with the client properties the CLI wrote (PEM keystore, encrypted PKCS#8 key).
    listed = kafka_tool("kafka-topics", mtls, "--list", "--command-config", str(d / "client-alice.properties"))
    assert listed.returncode == 0, listed.output
    assert topic in listed.stdout.split()


def test_kafka_refuses_a_client_without_a_certificate_where_one_is_required(
    kafka: Secured, kafka_certs: Path, tmp_path: Path
) -> None:
    d = kafka_certs
    mtls = kafka.listener_bootstrap("SSL")
    no_cert = cli("topics", "list", "-b", mtls, "--ssl-ca", str(d / "ca.crt"))
    assert no_cert.exit_code == 1
    assert "client certificate" in no_cert.output or "closed the connection" in no_cert.output, no_cert.output
    other = make_certs(tmp_path / "other", "--client", "alice")
    wrong_ca = cli("topics", "list", "-b", kafka.listener_bootstrap("TLS"), "--ssl-ca", str(other / "ca.crt"))
    assert wrong_ca.exit_code == 1
    assert "certificate was not accepted" in wrong_ca.output and "Traceback" not in wrong_ca.output


def test_the_readme_set_up_runs_as_written(tmp_path: Path) -> None:
    """`certs init`, `serve --config broker.toml`, a client with client.properties, alice's grant (the README's
    four commands; only the listeners' ports are moved off 9093/9094 for the test)."""
    d = make_certs(tmp_path / "tls", "--client", "alice", "--key-password", KEY_PASSWORD)
    ssl_port, sasl_port = free_ports(2)
    broker = BrokerProcess(tmp_path / "data", port=sasl_port, extra_args=[
        "--config", str(d / "broker.toml"),
        "--listeners", f"SSL://127.0.0.1:{ssl_port},SASL_SSL://127.0.0.1:{sasl_port}"])  # fmt: skip
    broker.start()
    try:
        sasl, mtls = f"127.0.0.1:{sasl_port}", f"127.0.0.1:{ssl_port}"
        topic = "orders"
        create_topic(sasl, topic, 1, "--command-config", str(d / "client.properties"))
        admin = ("-b", sasl, "--command-config", str(d / "client.properties"))
        granted = cli("acls", "add", "--allow", "User:alice", "--producer", "--consumer", "--topic", "orders",
                      "--group", "*", *admin)  # fmt: skip
        assert granted.exit_code == 0, granted.output
        sent = cli("produce", "-t", topic, "-b", mtls, "--command-config", str(d / "client-alice.properties"), "hi")
        assert sent.exit_code == 0, sent.output
        got = cli("consume", "-t", topic, "-b", sasl, "--command-config", str(d / "client.properties"),
                  "--from-beginning", "-e")  # fmt: skip
        assert got.exit_code == 0 and got.stdout.splitlines() == ["hi"], got.output
        # A SCRAM user added over the authenticated connection logs in with SCRAM right away.
        added = cli("users", "add", "carol", "--password", "carol-pw", "-b", sasl, "--command-config",
                    str(d / "client.properties"))  # fmt: skip
        assert added.exit_code == 0, added.output
        scram = cli("topics", "list", "-b", sasl, "--ssl-ca", str(d / "ca.crt"), "--sasl-username", "carol",
                    "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-password", "carol-pw")  # fmt: skip
        assert scram.exit_code == 0 and topic not in scram.stdout, scram.output  # logged in, granted nothing
    finally:
        assert broker.stop() == 0, broker.log_tail()
