"""The secured set-up `logbroker certs init` writes, attacked: no certificate, another CA's certificate (one
claiming to be the super user), a valid certificate without ACLs, a SASL_SSL connection that never logs in
or logs in wrongly. Asserted on logbroker serving the generated broker.toml and on Apache Kafka 4.4 given the
same settings (the StandardAuthorizer, User:admin super, client certificates required on SSL). And `serve`
warning about listeners that run without an authorizer (logbroker only: Kafka says nothing)."""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from logbroker.cli import main
from logbroker.cli.certs import PRINCIPAL_RULES
from logbroker_devtools.testing.net import free_ports
from logbroker_devtools.testing.process import BrokerProcess
from support import both_targets, eventually, missing_tool, unique

pytestmark = pytest.mark.timeout(300)


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@dataclass
class Setup:
    target: str
    certs: Path  # the generated set-up
    other: Path  # another CA's set-up: clients alice and admin, as an attacker would make them
    ssl: str  # bootstrap of the mutual-TLS listener
    sasl: str  # bootstrap of the SASL_SSL listener

    def admin(self) -> tuple[str, ...]:
        return ("-b", self.sasl, "--command-config", str(self.certs / "client.properties"))

    def alice(self) -> tuple[str, ...]:
        return ("-b", self.ssl, "--command-config", str(self.certs / "client-alice.properties"))


def _kafka(d: Path) -> Any:
    from logbroker_devtools.testing import peers

    if not peers.java_available() or not peers.jars_available("kafka"):
        missing_tool("Apache Kafka needs java and its jars (run .ci/fetch-jars)")
    user, _, password = (d / "plain-users.txt").read_text().strip().partition("=")
    props = {
        "group.initial.rebalance.delay.ms": 0,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(d / "server-keystore.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(d / "ca.crt"),
        "ssl.client.auth": "required",
        "listener.name.sasl_ssl.ssl.client.auth": "none",
        "ssl.principal.mapping.rules": PRINCIPAL_RULES,
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            f'org.apache.kafka.common.security.plain.PlainLoginModule required user_{user}="{password}";',
    }  # fmt: skip
    return peers.KafkaPeer(authorizer=True, super_users=[f"User:{user}"],
                           listeners={"SSL": "SSL", "SASL_SSL": "SASL_SSL"}, server_properties=props)  # fmt: skip


@pytest.fixture(scope="module", params=both_targets())
def setup(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    base = tmp_path_factory.mktemp("secured-setup")
    for name, args in (("tls", ["--client", "alice"]), ("other", ["--client", "alice", "--client", "admin"])):
        made = cli("certs", "init", str(base / name), *args)
        assert made.exit_code == 0, made.output
    d, other = base / "tls", base / "other"
    if request.param == "kafka":
        with _kafka(d) as peer:
            yield Setup("kafka", d, other, peer.listener_bootstrap("SSL"), peer.listener_bootstrap("SASL_SSL"))
        return
    ssl_port, sasl_port = free_ports(2)
    broker = BrokerProcess(base / "data", port=sasl_port, extra_args=[
        "--config", str(d / "broker.toml"),
        "--listeners", f"SSL://127.0.0.1:{ssl_port},SASL_SSL://127.0.0.1:{sasl_port}"])  # fmt: skip
    broker.start()
    try:
        yield Setup("logbroker", d, other, f"127.0.0.1:{ssl_port}", f"127.0.0.1:{sasl_port}")
    finally:
        assert broker.stop() == 0, broker.log_tail()


def _api_versions_over_tls(bootstrap: str, context: ssl.SSLContext) -> bytes:
    """An ApiVersions v0 request over a TLS connection made with `context`: the answer's bytes, or b"" when
    the broker refused the handshake or closed the connection instead of answering."""
    host, port = bootstrap.rsplit(":", 1)
    request = struct.pack(">hhih", 18, 0, 7, -1)
    try:
        with (
            socket.create_connection((host, int(port)), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            tls.sendall(struct.pack(">i", len(request)) + request)
            return tls.recv(4)
    except (ssl.SSLError, ConnectionError, TimeoutError):
        return b""


def _context(ca: Path | None, keystore: Path | None = None) -> ssl.SSLContext:
    """A client context; without `ca` it does not check the server at all (as a careless attacker's)."""
    ctx = ssl.create_default_context(cafile=str(ca)) if ca else ssl._create_unverified_context()
    if keystore is not None:
        ctx.load_cert_chain(keystore)
    return ctx


def test_a_client_without_a_certificate_is_refused_on_the_mutual_tls_listener(setup: Setup) -> None:
    d = setup.certs
    # The control: the same request with the generated client certificate is answered.
    assert _api_versions_over_tls(setup.ssl, _context(d / "ca.crt", d / "alice-keystore.pem")) != b""
    assert _api_versions_over_tls(setup.ssl, _context(d / "ca.crt")) == b""
    assert _api_versions_over_tls(setup.ssl, _context(None)) == b""  # not even checking the server
    topic = unique("nocert")
    made = cli("topics", "create", topic, "-b", setup.ssl, "--ssl-ca", str(d / "ca.crt"))
    assert made.exit_code == 1, made.output
    assert topic not in cli("topics", "list", *setup.admin()).stdout


def test_another_cas_certificate_is_refused_even_naming_the_super_user(setup: Setup) -> None:
    other = setup.other
    for who in ("alice", "admin"):
        assert _api_versions_over_tls(setup.ssl, _context(None, other / f"{who}-keystore.pem")) == b"", who
    topic = unique("otherca")
    made = cli("topics", "create", topic, "-b", setup.ssl, "--ssl-ca", str(setup.certs / "ca.crt"),
               "--ssl-cert", str(other / "admin.crt"), "--ssl-key", str(other / "admin.key"))  # fmt: skip
    assert made.exit_code == 1, made.output
    assert topic not in cli("topics", "list", *setup.admin()).stdout


def test_a_valid_certificate_without_acls_may_do_nothing_until_granted(setup: Setup) -> None:
    topic = unique("noacl")
    made = cli("topics", "create", topic, *setup.alice())
    assert made.exit_code != 0 and "authoriz" in made.output.lower(), made.output
    ours = unique("admins")
    assert cli("topics", "create", ours, *setup.admin()).exit_code == 0

    def ready() -> None:
        assert ours in cli("topics", "list", *setup.admin()).stdout

    eventually(ready)
    listed = cli("topics", "list", *setup.alice())
    assert listed.exit_code == 0 and ours not in listed.stdout, listed.output  # not even described
    deleted = cli("topics", "delete", ours, *setup.alice())
    assert deleted.exit_code != 0, deleted.output
    sent = cli("produce", "-t", ours, *setup.alice(), "nope")
    assert sent.exit_code != 0, sent.output
    assert ours in cli("topics", "list", *setup.admin()).stdout
    # The super user grants alice a producer's and a consumer's rights on the topic: now she may.
    granted = cli("acls", "add", "--allow", "User:alice", "--producer", "--consumer", "--topic", ours, *setup.admin())
    assert granted.exit_code == 0, granted.output
    group = cli("acls", "add", "--allow", "User:alice", "--operation", "READ", "--group", "*", *setup.admin())
    assert group.exit_code == 0, group.output

    def produced() -> None:
        sent = cli("produce", "-t", ours, *setup.alice(), "granted")
        assert sent.exit_code == 0, sent.output

    eventually(produced)
    got = cli("consume", "-t", ours, *setup.alice(), "--from-beginning", "-e")
    assert got.exit_code == 0 and got.stdout.splitlines() == ["granted"], got.output
    still = cli("topics", "delete", ours, *setup.alice())  # DELETE was not granted
    assert still.exit_code != 0, still.output
    listed = cli("acls", "list", "--principal", "User:alice", "--json", *setup.admin())
    assert listed.exit_code == 0, listed.output
    import json

    rows = {(r["resource_type"], r["name"], r["operation"]) for r in json.loads(listed.stdout)}
    assert rows == {("TOPIC", ours, "WRITE"), ("TOPIC", ours, "DESCRIBE"), ("TOPIC", ours, "CREATE"),
                    ("TOPIC", ours, "READ"), ("GROUP", "*", "READ")}  # fmt: skip
    removed = cli("acls", "remove", "--principal", "User:alice", "--topic", ours, *setup.admin())
    assert removed.exit_code == 0 and removed.output.count("removed") == 4, removed.output

    def revoked() -> None:
        sent = cli("produce", "-t", ours, *setup.alice(), "revoked")
        assert sent.exit_code != 0, sent.output

    eventually(revoked)
    assert cli("acls", "remove", "--principal", "User:alice", *setup.admin()).exit_code == 0


def test_sasl_ssl_wants_a_login_and_the_right_password(setup: Setup) -> None:
    d = setup.certs
    nologin = cli("topics", "list", "-b", setup.sasl, "--ssl-ca", str(d / "ca.crt"))
    assert nologin.exit_code == 1, nologin.output
    wrong = cli("topics", "list", "-b", setup.sasl, "--ssl-ca", str(d / "ca.crt"), "--sasl-mechanism", "PLAIN",
                "--sasl-username", "admin", "--sasl-password", "not-the-password")  # fmt: skip
    assert wrong.exit_code == 1 and "authentication" in wrong.output.lower(), wrong.output
    # A client certificate is not a login there: SASL_SSL asks for none, and one shown changes nothing.
    ok = cli("topics", "list", *setup.admin())
    assert ok.exit_code == 0, ok.output


# ------------------------------------------------------------------------------------------ serve's warning


@pytest.mark.parametrize(
    ("listeners", "warned"),
    [
        ("PLAINTEXT://127.0.0.1:{0}", []),
        ("PLAINTEXT://127.0.0.1:{0},SSL://127.0.0.1:{1}", ["SSL"]),
        ("PLAINTEXT://0.0.0.0:{0},SASL_PLAINTEXT://127.0.0.1:{1}", ["PLAINTEXT", "SASL_PLAINTEXT"]),
    ],
)
def test_serve_warns_about_each_listener_open_to_anyone(tmp_path: Path, listeners: str, warned: list[str]) -> None:
    d = tmp_path / "tls"
    assert cli("certs", "init", str(d)).exit_code == 0
    ports = free_ports(2)
    config = tmp_path / "broker.toml"
    config.write_text("\n".join([
        f'ssl_keystore_location = "{d / "server-keystore.pem"}"',
        f'ssl_truststore_location = "{d / "ca.crt"}"',
        f'sasl_plain_users_file = "{d / "plain-users.txt"}"',
    ]) + "\n")  # fmt: skip
    broker = BrokerProcess(tmp_path / "data", port=ports[0], extra_args=[
        "--config", str(config), "--listeners", listeners.format(*ports)])  # fmt: skip
    with broker:
        deadline = time.monotonic() + 10
        while "serving" not in broker.log_tail(200):
            assert time.monotonic() < deadline, broker.log_tail()
            time.sleep(0.05)
        text = broker.log_path.read_text()
    lines = [ln for ln in text.splitlines() if " WARNING " in ln and "no authorizer" in ln]
    assert [ln.split("listener ", 1)[1].split(" ", 1)[0] for ln in lines] == warned, text


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["add", "--producer", "--topic", "t"], "name a principal"),
        (["add", "--allow", "alice", "--producer", "--topic", "t"], "expected TYPE:NAME"),
        (["add", "--allow", "User:alice", "--producer"], "name a resource"),
        (["add", "--allow", "User:alice", "--topic", "t"], "name what is granted"),
        (["add", "--allow", "User:alice", "--producer", "--group", "g"], "grant nothing"),
        (["remove"], "removing every ACL is not offered"),
    ],
)
def test_acls_bad_input_is_a_usage_error_before_any_connection(args: list[str], says: str) -> None:
    result = CliRunner().invoke(main, ["acls", *args, "-b", "127.0.0.1:1"])
    assert result.exit_code == 2 and says in result.output, result.output
