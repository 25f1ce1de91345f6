"""Every client the project ships on a secured cluster, logbroker and Apache Kafka 4.4 alike: the `logbroker`
commands with Kafka's `--command-config` files and with flags over SASL_PLAINTEXT, SASL_SSL (PLAIN, SCRAM) and
SSL with client certificates; refused logins as one clear line and a non-zero exit, the password nowhere;
the mq and streams faces with SCRAM over TLS and with mutual TLS; a Spark pipeline reading and writing over
SASL_SSL. The listeners, users and certificates (`logbroker certs init`) are those of test_certs_cli.py.

Kafka's client properties are parsed as its tools read a `--command-config` file (java.util.Properties, a
JAAS `sasl.jaas.config` entry: `org.apache.kafka.common.security.authenticator.JaasConfig`), so the same
file drives Kafka's Java tools and ours."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from logbroker._kafka.settings import (
    SecurityConfigError,
    from_properties,
    jaas_config,
    java_client_properties,
    librdkafka_config,
    read_properties,
)
from support import both_targets, eventually, spark_session, unique
from test_certs_cli import KEY_PASSWORD, USERS, Secured, cli, create_topic, make_certs, secured_broker

pytestmark = pytest.mark.timeout(300)

ALICE = USERS["alice"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("client-security") / "tls", "--client", "alice", "--key-password",
                      KEY_PASSWORD)  # fmt: skip


@pytest.fixture(scope="module", params=both_targets())
def secured(request: pytest.FixtureRequest, certs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    with secured_broker(request.param, certs, tmp_path_factory.mktemp("broker")) as broker:
        yield broker


def properties(path: Path, protocol: str, certs: Path, mechanism: str | None = None, user: str = "alice") -> Path:
    """A Kafka client properties file as an operator writes it for Kafka's tools."""
    lines = [f"security.protocol={protocol}"]
    if mechanism is not None:
        lines += [f"sasl.mechanism={mechanism}",
                  "sasl.jaas.config=" + jaas_config(mechanism, user, USERS[user]).replace("\\", "\\\\")]  # fmt: skip
    if protocol.endswith("SSL"):
        lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={certs / 'ca.crt'}"]
    if protocol == "SSL":
        lines += ["ssl.keystore.type=PEM", f"ssl.keystore.location={certs / 'alice-keystore.pem'}",
                  f"ssl.key.password={KEY_PASSWORD}"]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


def logbroker(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real command in a child process: its exit status and both streams as a user sees them."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LOGBROKER_SASL")} | (env or {})
    return subprocess.run([sys.executable, "-m", "logbroker", *args], capture_output=True, text=True, timeout=120,
                          env=full_env, stdin=subprocess.DEVNULL)  # fmt: skip


# ----------------------------------------------------------------------------- client properties


def test_properties_files_parse_as_kafkas_tools_read_them(tmp_path: Path) -> None:
    f = tmp_path / "client.properties"
    f.write_text(
        "# Kafka's format: comments, ':' separators, escapes, continued lines\n"
        "security.protocol : SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="al=ice" password="p\\\\"w\\\\\\\\d";\n'
        "ssl.truststore.type=PEM\nssl.truststore.location=/etc/ca.pem\n"
        "ssl.endpoint.identification.algorithm=\n"
        "ssl.enabled.protocols=TLSv1.3\n"
        "socket.keepalive.enable=true\n"
    )
    s = from_properties(read_properties(f), "h:9093")
    assert (s.security_protocol, s.sasl_mechanism, s.sasl_username, s.sasl_password) == (
        "SASL_SSL", "SCRAM-SHA-512", "al=ice", 'p"w\\d')  # fmt: skip
    assert (s.ssl_ca, s.ssl_check_hostname) == ("/etc/ca.pem", False)
    conf = librdkafka_config(s)
    assert conf["ssl.endpoint.identification.algorithm"] == "none" and conf["socket.keepalive.enable"] == "true"
    assert "ssl.enabled.protocols" not in conf  # Java-only, nothing to tell librdkafka
    assert 'p"w' not in repr(s)
    # Back to the Java client's names (Spark's connector) and through the parser again: the same settings.
    java = java_client_properties(s)
    assert java["sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="al=ice" password="p\\"w\\\\d";'
    )
    again = from_properties(java, "h:9093")
    assert (again.sasl_username, again.sasl_password, again.ssl_ca, again.ssl_check_hostname) == (
        "al=ice", 'p"w\\d', "/etc/ca.pem", False)  # fmt: skip
    # librdkafka's own names are accepted too; a keystore file holds the key and the chain.
    rd = from_properties({"security.protocol": "ssl", "ssl.ca.location": "/ca", "ssl.keystore.location": "/ks.pem",
                          "ssl.keystore.type": "PEM", "ssl.key.password": "k"}, "h:1")  # fmt: skip
    assert (rd.security_protocol, rd.ssl_cert, rd.ssl_key, rd.ssl_key_password) == ("SSL", "/ks.pem", "/ks.pem", "k")
    # Nothing named: the protocol follows from what is given, as in logbroker.mq.
    assert from_properties({"sasl.username": "u", "sasl.password": "p"}, "h:1").security_protocol == "SASL_PLAINTEXT"
    assert from_properties({}, "h:1", ssl_ca="/ca").security_protocol == "SSL"


@pytest.mark.parametrize(
    ("props", "named"),
    [
        ({"security.protocol": "TLS"}, "security.protocol"),
        ({"sasl.mechanism": "GSSAPI"}, "sasl.mechanism"),
        ({"ssl.truststore.type": "JKS", "ssl.truststore.location": "/ts.jks"}, "ssl.truststore.type"),
        ({"ssl.keystore.password": "x"}, "ssl.keystore.password"),
        ({"sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"}, "sasl.jaas.config"),
        (
            {
                "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required username=u "
                "password=p;"
            },
            "sasl.mechanism",
        ),
        (
            {
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                'required username="u" password="p";',
            },
            "sasl.jaas.config",
        ),
        (
            {"sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u";'},
            "sasl.jaas.config",
        ),
        ({"ssl.endpoint.identification.algorithm": "dns"}, "ssl.endpoint.identification.algorithm"),
    ],
)
def test_unusable_properties_are_refused_naming_the_key(props: dict[str, str], named: str) -> None:
    with pytest.raises(SecurityConfigError) as info:
        from_properties(props, "h:1")
    assert str(info.value).startswith(f"{named}:"), info.value


def test_cli_refuses_bad_security_options_before_connecting(tmp_path: Path) -> None:
    f = tmp_path / "bad.properties"
    f.write_text("security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n")
    bad = cli("topics", "list", "-b", "127.0.0.1:1", "--command-config", str(f))
    assert bad.exit_code == 2 and "sasl.mechanism: must be one of" in bad.output
    no_user = cli("topics", "list", "-b", "127.0.0.1:1", "--security-protocol", "SASL_PLAINTEXT")
    assert no_user.exit_code == 2 and "--sasl-username" in no_user.output
    no_password = logbroker("topics", "list", "-b", "127.0.0.1:1", "--sasl-username", "alice")
    assert no_password.returncode == 2 and "LOGBROKER_SASL_PASSWORD" in no_password.stderr


# ----------------------------------------------------------------------------- the CLI on both brokers

CASES = [
    ("SASL_PLAINTEXT", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
    ("SASL_SSL", "SCRAM-SHA-512"),
    ("SASL_SSL", "PLAIN"),
    ("SSL", None),
]


@pytest.mark.parametrize(("protocol", "mechanism"), CASES, ids=[f"{p}-{m or 'mtls'}" for p, m in CASES])
def test_commands_with_a_command_config_file(
    secured: Secured, certs: Path, tmp_path: Path, protocol: str, mechanism: str | None
) -> None:
    b = secured.listener_bootstrap(protocol)
    sec = ("--command-config", str(properties(tmp_path / "client.properties", protocol, certs, mechanism)))
    topic = unique("sec")
    create_topic(b, topic, 2, *sec)
    sent = cli("produce", "-t", topic, "-b", b, *sec, "-K", ":", "k1:one", "k2:two", "k3:three")
    assert sent.exit_code == 0, sent.output
    got = cli("consume", "-t", topic, "-b", b, *sec, "--from-beginning", "-e", "-f", "kv")
    assert got.exit_code == 0, got.output
    assert sorted(got.stdout.splitlines()) == ["k1\tone", "k2\ttwo", "k3\tthree"]
    listed = cli("topics", "list", "-b", b, *sec)
    assert listed.exit_code == 0 and topic in listed.stdout
    groups = cli("groups", "list", "-b", b, *sec, "--json")
    assert groups.exit_code == 0, groups.output
    users = cli("users", "list", "-b", b, *sec, "alice")
    assert users.exit_code == 0 and "SCRAM-SHA-512" in users.stdout, users.output


def test_flags_and_the_password_from_the_environment(secured: Secured, certs: Path) -> None:
    b = secured.listener_bootstrap("SASL_SSL")
    topic = unique("flags")
    scram = ("--sasl-username", "alice", "--sasl-mechanism", "SCRAM-SHA-256", "--ssl-ca", str(certs / "ca.crt"))
    create_topic(b, topic, 1, *scram, "--sasl-password", ALICE)
    sent = logbroker("produce", "-t", topic, "-b", b, *scram, "by-env", env={"LOGBROKER_SASL_PASSWORD": ALICE})
    assert sent.returncode == 0, sent.stderr
    # PLAIN with a password full of quotes and backslashes; the protocol follows from the flags (SASL_SSL).
    plain = ("--sasl-username", "bob", "--ssl-ca", str(certs / "ca.crt"))
    got = logbroker("consume", "-t", topic, "-b", b, *plain, "--from-beginning", "-e",
                    env={"LOGBROKER_SASL_PASSWORD": USERS["bob"]})  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == ["by-env"]
    # Mutual TLS by flags: the keystore file holds key and chain; or separate files, as librdkafka takes them.
    mtls = secured.listener_bootstrap("SSL")
    for cert_flags in (("--ssl-cert", str(certs / "alice-keystore.pem")),
                       ("--ssl-cert", str(certs / "alice.crt"), "--ssl-key", str(certs / "alice.key"))):  # fmt: skip
        again = cli("consume", "-t", topic, "-b", mtls, "--ssl-ca", str(certs / "ca.crt"), *cert_flags,
                    "--from-beginning", "-e", env={"LOGBROKER_SSL_KEY_PASSWORD": KEY_PASSWORD})  # fmt: skip
        assert again.exit_code == 0 and again.stdout.splitlines() == ["by-env"], again.output


@pytest.mark.parametrize(
    ("mechanism", "message"),
    [
        ("PLAIN", "Authentication failed: Invalid username or password"),
        (
            "SCRAM-SHA-512",
            "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
        ),
    ],
)
def test_a_wrong_password_is_one_clear_line_and_a_failed_exit(
    secured: Secured, certs: Path, tmp_path: Path, mechanism: str, message: str
) -> None:
    """Kafka's own failure text (SaslAuthenticate's error_message), the same on both brokers; no password."""
    wrong = "not-the-password-4711"
    for b, extra in ((secured.listener_bootstrap("SASL_SSL"), ("--ssl-ca", str(certs / "ca.crt"))),
                     (secured.listener_bootstrap("SASL_PLAINTEXT"), ())):  # fmt: skip
        r = logbroker("topics", "list", "-b", b, "--sasl-username", "alice", "--sasl-mechanism", mechanism, *extra,
                      env={"LOGBROKER_SASL_PASSWORD": wrong})  # fmt: skip
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert r.stderr.strip().splitlines() == [
            f"Error: authentication with {b} failed: SASL {mechanism} login as alice: SASL_AUTHENTICATION_FAILED "
            f"({message})"
        ], r.stderr
        assert wrong not in r.stdout + r.stderr and r.stdout == ""
    # The same through a properties file: the file's password is not shown either.
    f = tmp_path / "wrong.properties"
    f.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\n"
                 f"sasl.jaas.config={jaas_config(mechanism, 'alice', wrong)}\n")  # fmt: skip
    r = logbroker("groups", "list", "-b", secured.listener_bootstrap("SASL_PLAINTEXT"), "--command-config", str(f))
    assert r.returncode == 1 and "SASL_AUTHENTICATION_FAILED" in r.stderr and wrong not in r.stdout + r.stderr
    # An unknown user fails the same way (no hint whether the user exists).
    r = logbroker("topics", "list", "-b", secured.listener_bootstrap("SASL_PLAINTEXT"), "--sasl-username", "nobody",
                  "--sasl-mechanism", mechanism, env={"LOGBROKER_SASL_PASSWORD": wrong})  # fmt: skip
    assert r.returncode == 1 and message in r.stderr


def test_a_client_without_the_listeners_security_gets_a_hint(secured: Secured, certs: Path) -> None:
    for name in ("SASL_PLAINTEXT", "SASL_SSL", "SSL"):
        r = logbroker("topics", "list", "-b", secured.listener_bootstrap(name))
        assert r.returncode == 1, (name, r.stdout)
        assert "closed the connection (does it need TLS or SASL? see --command-config)" in r.stderr, (name, r.stderr)
        assert "Traceback" not in r.stderr
    # Kafka answers a missing certificate with a TLS alert (bad_certificate); a broker that just closes gets
    # the hint instead. Either way the user reads that a client certificate is wanted.
    no_cert = logbroker("topics", "list", "-b", secured.listener_bootstrap("SSL"), "--ssl-ca", str(certs / "ca.crt"))
    assert no_cert.returncode == 1 and "client certificate" in no_cert.stderr, no_cert.stderr
    assert "Traceback" not in no_cert.stderr


def test_groups_of_a_secured_consumer_described_and_reset(secured: Secured, certs: Path, tmp_path: Path) -> None:
    """A librdkafka consumer configured by the shared layer from the same properties file joins a group; the
    CLI finds its coordinator over the secured listener and describes it."""
    from confluent_kafka import Consumer

    b = secured.listener_bootstrap("SASL_SSL")
    f = properties(tmp_path / "c.properties", "SASL_SSL", certs, "SCRAM-SHA-512")
    sec = ("--command-config", str(f))
    topic, group = unique("gsec"), unique("g")
    create_topic(b, topic, 2, *sec)
    assert cli("produce", "-t", topic, "-b", b, *sec, "-p", "0", "a", "b").exit_code == 0
    conf = librdkafka_config(from_properties(read_properties(f), b), **{
        "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer = Consumer(conf)
    try:
        consumer.subscribe([topic])
        seen: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(seen) < 2 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                seen.append(m.value())
        assert seen == [b"a", b"b"]
        consumer.commit(asynchronous=False)

        def described() -> Any:
            r = cli("groups", "describe", group, "-b", b, *sec, "--json")
            assert r.exit_code == 0, r.output
            report = json.loads(r.stdout)
            assert report["state"] == "Stable" and len(report["members"]) == 1, report
            return report

        report = eventually(described)
        assert {(p["partition"], p["committed"]) for p in report["offsets"] if p["committed"] is not None} == {(0, 2)}
    finally:
        consumer.close()
    reset = cli("groups", "reset-offsets", group, "-b", b, *sec, "--topic", f"{topic}:0", "--to-earliest", "--execute")
    assert reset.exit_code == 0, reset.output
    after = cli("groups", "describe", group, "-b", b, *sec, "--json")
    assert after.exit_code == 0, after.output
    assert [(o["partition"], o["committed"]) for o in json.loads(after.stdout)["offsets"]] == [(0, 0)]


def test_bench_on_a_secured_cluster(secured: Secured, certs: Path, tmp_path: Path) -> None:
    """`logbroker bench --bootstrap` with a properties file: every librdkafka client of the run logs in."""
    f = properties(tmp_path / "bench.properties", "SASL_SSL", certs, "SCRAM-SHA-256")
    r = logbroker("bench", "-b", secured.listener_bootstrap("SASL_SSL"), "--command-config", str(f), "--workloads",
                  "throughput,latency", "--records-100b", "300", "--records-1kb", "100", "--latency-samples", "20",
                  "--no-chart", "--out", str(tmp_path / "out"))  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert list(results["targets"]) == ["cluster"]
    cluster = results["targets"]["cluster"]
    assert cluster["status"] == "ok" and cluster["metrics"]["produce_100B_records_per_s"] > 0, cluster
    assert "over SASL_SSL (SCRAM-SHA-256 as alice)" in cluster["notes"]
    # Without the security options the same cluster cannot be reached: the run fails, not hangs.
    refused = logbroker("bench", "--targets", "logbroker", "--command-config", str(f), "--no-chart")
    assert refused.returncode == 2 and "apply to --bootstrap" in refused.stderr


# ----------------------------------------------------------------------------- the faces


@pytest.mark.kafka_side_in_full_tier  # the Kafka run: 19-22 s, in --full (CI budget)
def test_mq_with_scram_over_tls_and_with_mutual_tls(secured: Secured, certs: Path) -> None:
    from logbroker.mq import Client, InitialPosition, MQConfig, MQError

    def roundtrip(kafka: dict[str, Any]) -> list[bytes]:
        topic = unique("mqsec")
        config = MQConfig.model_validate({"type": "kafka", "kafka": kafka, "request_timeout_s": 20})
        with Client(config) as mq:
            with mq.create_producer(topic) as p:
                p.send(b"payload", {"via": "tls"})
            with mq.subscribe(topic, unique("sub"), InitialPosition.EARLIEST) as c:
                m = c.receive(30)
                assert m is not None
                return [m.payload]

    ca = str(certs / "ca.crt")
    scram = {"bootstrap_servers": secured.listener_bootstrap("SASL_SSL"), "ssl": {"ca": ca},
             "sasl": {"mechanism": "SCRAM-SHA-512", "username": "alice", "password": ALICE}}  # fmt: skip
    assert roundtrip(scram) == [b"payload"]
    mtls = {
        "bootstrap_servers": secured.listener_bootstrap("SSL"),
        "ssl": {
            "ca": ca,
            "cert": str(certs / "alice.crt"),
            "key": str(certs / "alice.key"),
            "key_password": KEY_PASSWORD,
        },
    }
    assert roundtrip(mtls) == [b"payload"]
    wrong = {**scram, "sasl": {**scram["sasl"], "password": "wrong"}}
    with pytest.raises(MQError) as info:
        roundtrip(wrong)
    assert "wrong" not in str(info.value)


def test_streams_with_scram_over_tls(secured: Secured, certs: Path) -> None:
    from logbroker.streams import StreamProvider

    config = {"bootstrap": secured.listener_bootstrap("SASL_SSL"), "topic": unique("stsec"),
              "consumer_group": unique("g"), "num_queues": 2, "init_with_last_offset": False, "metrics_port": None,
              "sasl_mechanism": "SCRAM-SHA-256", "sasl_username": "alice", "sasl_password": ALICE,
              "ssl_ca": str(certs / "ca.crt")}  # fmt: skip

    async def main() -> list[Any]:
        got: list[Any] = []

        async def handle(event: Any, _token: Any) -> None:
            got.append(event)

        async with StreamProvider(config) as provider:
            assert provider.config.kafka_settings().security_protocol == "SASL_SSL"  # implied
            await provider.wait_assigned(2)
            stream = provider.stream("orders", "customer-42")
            await stream.subscribe(handle)
            await stream.publish({"item": "book"})
            deadline = time.monotonic() + 30
            while not got and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        return got

    assert asyncio.run(main()) == [{"item": "book"}]


# ----------------------------------------------------------------------------- Spark


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with spark_session("logbroker-test-client-security") as s:
        yield s


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_spark_pipeline_over_sasl_ssl(secured: Secured, certs: Path, spark: Any, tmp_path: Path) -> None:
    """Spark's connector reads with `kafka.security.protocol`, `kafka.sasl.jaas.config` and a PEM truststore,
    writes with them (a topic sink inheriting the source's security), and the confluent-kafka path of a
    timestamp-keeping sink gets the same settings as librdkafka's."""
    from logbroker.spark.pipeline import run
    from logbroker.spark.spec import load_spec

    b = secured.listener_bootstrap("SASL_SSL")
    f = properties(tmp_path / "spark.properties", "SASL_SSL", certs, "SCRAM-SHA-512")
    sec = ("--command-config", str(f))
    source, copied, kept = unique("spsrc"), unique("spout"), unique("spkept")
    for t in (source, copied, kept):
        create_topic(b, t, 1, *sec)
    assert cli("produce", "-t", source, "-b", b, *sec, "-K", ":", "a:1", "b:2", "c:3").exit_code == 0
    spec = load_spec({
        "name": "secured",
        "source": {"bootstrap": b, "topics": [source], "security": str(f)},
        "transform": "SELECT key, value, timestamp FROM events",
        "sinks": [
            {"type": "parquet", "path": str(tmp_path / "out")},
            {"type": "topic", "topic": copied},
            {"type": "topic", "topic": kept, "keep_timestamp": True, "bootstrap": b,
             "security": {**read_properties(f)}},
        ],
        "checkpoint": str(tmp_path / "ckpt"),
    })  # fmt: skip
    assert spec.source.connector_options()["kafka.security.protocol"] == "SASL_SSL"
    result = run(spec, spark=spark, progress=False, timeout=300)
    assert result.rows_in == 3
    rows = sorted((r["key"].decode(), r["value"].decode()) for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert rows == [("a", "1"), ("b", "2"), ("c", "3")]
    for t in (copied, kept):
        got = cli("consume", "-t", t, "-b", b, *sec, "--from-beginning", "-e", "-f", "kv")
        assert got.exit_code == 0 and sorted(got.stdout.splitlines()) == ["a\t1", "b\t2", "c\t3"], got.output
