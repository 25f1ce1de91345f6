"""The admin verbs of `logbroker` (topics, groups, cluster, users) on confluent-kafka's AdminClient, against
logbroker and Apache Kafka 4.4 with the same assertions: each verb's effect as a real client (confluent-kafka)
reads it back, the keys of every --json output, a secured cluster (SASL_SSL with SCRAM, mutual TLS; the
listeners of tests/security_support.py), several bootstrap servers, and bad input as one line and exit 2.

One broker per target serves the module: its PLAINTEXT listener for the plain runs, the others for the
secured ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from logbroker.cli import main
from logbroker_devtools.testing.net import free_ports
from security_support import KEY_PASSWORD, USERS, SecureBroker, kafka_secure, logbroker_secure, make_certs
from support import both_targets, eventually, unique

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_certs(tmp_path_factory.mktemp("admin-certs"))


@pytest.fixture(scope="module", params=both_targets())
def cluster(
    request: pytest.FixtureRequest, certs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecureBroker]:
    if request.param == "logbroker":
        with logbroker_secure(tmp_path_factory.mktemp("admin-logbroker"), certs) as broker:
            yield broker
    else:
        with kafka_secure(certs) as broker:
            yield broker


@pytest.fixture(scope="module")
def b(cluster: SecureBroker) -> str:
    return cluster.bootstrap("PLAINTEXT")


def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def ok(*args: str) -> Result:
    r = cli(*args)
    assert r.exit_code == 0, r.output
    return r


def as_json(*args: str) -> Any:
    return json.loads(ok(*args, "--json").stdout)


def logbroker(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real command in a child process: exit status and both streams as a user (or a pipe) sees them."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("LOGBROKER_SASL", "COLUMNS"))}
    return subprocess.run([sys.executable, "-m", "logbroker", *args], capture_output=True, text=True, timeout=120,
                          env=full_env | (env or {}), stdin=subprocess.DEVNULL)  # fmt: skip


def produce(bootstrap: str, topic: str, per_partition: dict[int, int], base_ms: int | None = None) -> None:
    """n records to each partition; record i stamped base + i seconds when `base_ms` is given."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for part, n in per_partition.items():
        for i in range(n):
            ts = {"timestamp": base_ms + i * 1000} if base_ms is not None else {}
            p.produce(topic, f"{part}-{i}".encode(), partition=part, **ts)
    assert p.flush(30) == 0


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=20)
    finally:
        c.close()
    return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in got}


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Offsets committed by a consumer that never joins: the group exists, Empty, with these offsets."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        c.close()


# ------------------------------------------------------------------------------------------------ topics


def test_topics_create_list_describe_alter_grow_trim_delete(b: str) -> None:
    topic = unique("adm")
    r = ok("topics", "create", topic, "-p", "2", "-c", "retention.ms=3600000", "-b", b)
    assert r.stdout.strip() == f"created topic {topic} with 2 partition(s)"
    again = cli("topics", "create", topic, "-b", b)
    assert again.exit_code == 1 and "TOPIC_ALREADY_EXISTS" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1

    listed = {t["topic"]: t for t in as_json("topics", "list", "-b", b)}
    assert set(listed[topic]) == {"topic", "partitions", "replication_factor", "topic_id", "internal"}
    mine = listed[topic]
    assert (mine["partitions"], mine["replication_factor"], mine["internal"]) == (2, 1, False)
    assert len(listed[topic]["topic_id"]) == 22  # Kafka's base64 Uuid
    assert topic in ok("topics", "list", "-b", b).stdout

    produce(b, topic, {0: 5})
    d = as_json("topics", "describe", topic, "-b", b)
    assert set(d) == {"topic", "topic_id", "internal", "partitions", "configs"}
    assert d["topic_id"] == listed[topic]["topic_id"]
    p0, p1 = d["partitions"]
    assert set(p0) == {"partition", "leader", "replicas", "isr", "start_offset", "end_offset", "records", "size_bytes"}
    assert (p0["partition"], p0["start_offset"], p0["end_offset"], p0["records"]) == (0, 0, 5, 5)
    assert (p1["partition"], p1["records"], p1["size_bytes"]) == (1, 0, 0)
    assert p0["replicas"] == p0["isr"] == [p0["leader"]] and p0["size_bytes"] > 0
    configs = {c["name"]: c for c in d["configs"]}
    assert set(configs["retention.ms"]) == {"name", "value", "source", "read_only", "sensitive"}
    assert (configs["retention.ms"]["value"], configs["retention.ms"]["source"]) == ("3600000", "topic")
    assert configs["retention.bytes"]["source"] != "topic"

    r = ok("topics", "alter-config", topic, "--set", "retention.bytes=1048576", "--delete", "retention.ms", "-b", b)
    assert r.stdout.strip() == f"altered topic {topic}: retention.bytes=1048576, retention.ms (default)"

    def altered() -> None:
        now = {c["name"]: c for c in as_json("topics", "describe", topic, "-b", b)["configs"]}
        assert (now["retention.bytes"]["value"], now["retention.bytes"]["source"]) == ("1048576", "topic")
        assert now["retention.ms"]["source"] != "topic"

    eventually(altered)

    r = ok("topics", "add-partitions", topic, "--num", "2", "-b", b)
    assert r.stdout.strip() == f"topic {topic}: 2 -> 4 partitions"
    assert [p["partition"] for p in as_json("topics", "describe", topic, "-b", b)["partitions"]] == [0, 1, 2, 3]

    trimmed = as_json("topics", "delete-records", topic, "-p", "0", "-o", "3", "-b", b)
    assert trimmed == [{"topic": topic, "partition": 0, "low_watermark": 3}]
    p0 = as_json("topics", "describe", topic, "-b", b)["partitions"][0]
    assert (p0["start_offset"], p0["end_offset"], p0["records"]) == (3, 5, 2)

    assert ok("topics", "delete", topic, "-b", b).stdout.strip() == f"deleted topic {topic}"
    gone = cli("topics", "describe", topic, "-b", b)
    assert gone.exit_code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in gone.stderr


def test_delete_records_from_a_kafka_delete_records_file(b: str, tmp_path: Path) -> None:
    topic = unique("trim")
    ok("topics", "create", topic, "-p", "2", "-b", b)
    produce(b, topic, {0: 4, 1: 6})
    spec = tmp_path / "offsets.json"
    entries = [{"topic": topic, "partition": 0, "offset": 2}, {"topic": topic, "partition": 1, "offset": -1}]
    spec.write_text(json.dumps({"version": 1, "partitions": entries}))
    r = ok("topics", "delete-records", "--offset-json-file", str(spec), "-b", b)
    assert r.stdout.splitlines() == [f"{topic} partition 0: log start offset now 2",
                                     f"{topic} partition 1: log start offset now 6"]  # fmt: skip
    parts = as_json("topics", "describe", topic, "-b", b)["partitions"]
    assert [(p["start_offset"], p["records"]) for p in parts] == [(2, 2), (6, 0)]
    # What a consumer reads from the beginning now starts at the new log start.
    c = Consumer({"bootstrap.servers": b, "group.id": unique("g"), "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])  # no coordinator needed (a fresh Kafka has none yet)
        msg = eventually(lambda: _polled(c))
        assert (msg.offset(), msg.value()) == (2, b"0-2")
    finally:
        c.close()


def _polled(c: Consumer) -> Any:
    m = c.poll(1)
    assert m is not None and m.error() is None
    return m


def test_piped_output_is_not_cut_and_several_bootstrap_servers(b: str) -> None:
    """A pipe gets whole lines (rich's console is 80 columns wide when it sees no terminal); a dead server
    listed first does not keep the command from the live one."""
    topic = unique("long-name-" + "x" * 150)
    ok("topics", "create", topic, "-b", b)
    dead = f"127.0.0.1:{free_ports(1)[0]}"
    r = logbroker("topics", "list", "-b", dead, "-b", b)
    assert r.returncode == 0, r.stderr
    assert any(topic in line for line in r.stdout.splitlines())
    r = logbroker("topics", "describe", topic, "-b", f"{dead},{b}")
    assert r.returncode == 0, r.stderr
    assert topic in r.stdout.splitlines()[0]


# ------------------------------------------------------------------------------------------------ groups


def test_groups_list_describe_seek_delete_offsets_delete(b: str) -> None:
    topic, group = unique("gt"), unique("g")
    ok("topics", "create", topic, "-p", "3", "-b", b)
    base = (int(time.time()) - 3600) * 1000
    produce(b, topic, {0: 10, 1: 10, 2: 10}, base)
    commit(b, group, topic, {0: 3, 1: 5, 2: 7})

    listed = {g["group_id"]: g for g in as_json("groups", "list", "-b", b)}
    assert set(listed[group]) == {"group_id", "state", "protocol_type", "group_type"}
    assert listed[group]["state"] == "Empty"
    d = as_json("groups", "describe", group, "-b", b)
    assert set(d) == {"group", "state", "protocol_type", "protocol", "group_type", "coordinator", "members", "offsets",
                      "totals"}  # fmt: skip
    assert set(d["coordinator"]) == {"node_id", "host", "port"}
    assert set(d["totals"]) == {"partitions", "members", "committed_partitions", "log_end", "lag"}
    assert (d["state"], d["members"]) == ("Empty", [])
    assert [(o["partition"], o["committed"], o["log_end"], o["lag"]) for o in d["offsets"]] == [
        (0, 3, 10, 7), (1, 5, 10, 5), (2, 7, 10, 3)]  # fmt: skip
    assert set(d["offsets"][0]) == {"topic", "partition", "committed", "log_end", "lag", "member_id", "client_id",
                                    "host"}  # fmt: skip
    assert d["totals"]["lag"] == 15

    seek = as_json("groups", "seek", group, "--to", "start", "-b", b)
    assert set(seek) == {"group", "strategy", "executed", "partitions"} and seek["executed"] is True
    assert committed(b, group, topic, 3) == {0: 0, 1: 0, 2: 0}
    ok("groups", "seek", group, "--to", "end", "--topic", f"{topic}:1", "-b", b)
    assert committed(b, group, topic, 3) == {0: 0, 1: 10, 2: 0}
    ok("groups", "seek", group, "--to", "4", "-b", b)
    assert committed(b, group, topic, 3) == {0: 4, 1: 4, 2: 4}
    when = datetime.fromtimestamp((base + 6500) / 1000, UTC).isoformat()
    r = ok("groups", "seek", group, "--to", when, "--topic", topic, "-b", b)
    assert "committed new offsets for 3 partition(s)" in r.stdout
    assert committed(b, group, topic, 3) == {0: 7, 1: 7, 2: 7}

    r = ok("groups", "delete-offsets", group, "--topic", f"{topic}:2", "-b", b)
    assert r.stdout.strip() == f"deleted offset of group {group} for {topic}-2"
    assert committed(b, group, topic, 3) == {0: 7, 1: 7, 2: None}

    assert ok("groups", "delete", group, "-b", b).stdout.strip() == f"deleted group {group}"
    assert committed(b, group, topic, 3) == {0: None, 1: None, 2: None}
    gone = cli("groups", "describe", group, "-b", b)
    assert gone.exit_code == 1 and "does not exist" in gone.stderr
    again = cli("groups", "delete", group, "-b", b)
    assert again.exit_code == 1 and "GROUP_ID_NOT_FOUND" in again.stderr


def test_seek_and_delete_offsets_refused_while_a_member_is_active(b: str) -> None:
    topic, group = unique("gact"), unique("g")
    ok("topics", "create", topic, "-b", b)
    produce(b, topic, {0: 3})
    c = Consumer({"bootstrap.servers": b, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})  # fmt: skip
    try:
        c.subscribe([topic])
        eventually(lambda: _polled(c), timeout=60)
        c.commit(asynchronous=False)
        r = cli("groups", "seek", group, "--to", "start", "-b", b)
        assert r.exit_code == 1 and "inactive" in r.stderr and "Stable" in r.stderr
        r = cli("groups", "delete-offsets", group, "--topic", topic, "-b", b)
        assert r.exit_code == 1 and "GROUP_SUBSCRIBED_TO_TOPIC" in r.stderr
        d = as_json("groups", "describe", group, "-b", b)
        assert d["state"] == "Stable" and len(d["members"]) == 1
        assert d["offsets"][0]["member_id"] == d["members"][0]["member_id"]
    finally:
        c.close()


# ------------------------------------------------------------------------------------------------ cluster


def test_cluster_info_and_health(b: str) -> None:
    topic = unique("cl")
    ok("topics", "create", topic, "-p", "3", "-b", b)
    info = as_json("cluster", "info", "-b", b)
    assert set(info) == {"cluster_id", "controller_id", "brokers", "topics", "internal_topics", "partitions"}
    assert isinstance(info["cluster_id"], str) and info["cluster_id"]
    assert [set(x) for x in info["brokers"]] == [{"node_id", "host", "port", "rack", "controller"}]
    (broker,) = info["brokers"]
    assert f"{broker['host']}:{broker['port']}" == b
    assert info["controller_id"] == broker["node_id"] and broker["controller"] is True
    listed = as_json("topics", "list", "-b", b)
    assert info["topics"] == len([t for t in listed if not t["internal"]])
    assert info["partitions"] == sum(t["partitions"] for t in listed)
    text = ok("cluster", "info", "-b", b).stdout
    assert info["cluster_id"] in text and b.rsplit(":", 1)[1] in text

    health = as_json("cluster", "health", "-b", b)
    assert set(health) == {"healthy", "cluster_id", "controller_id", "brokers", "topics", "partitions",
                           "leaderless_partitions", "under_replicated_partitions"}  # fmt: skip
    assert health["healthy"] is True and health["leaderless_partitions"] == []
    assert health["partitions"] == info["partitions"] and health["brokers"] == 1
    assert ok("cluster", "health", "-b", b).stdout.startswith("healthy: ")


def test_health_of_an_unreachable_cluster_fails() -> None:
    r = logbroker("cluster", "health", "-b", f"127.0.0.1:{free_ports(1)[0]}")
    assert r.returncode == 1 and r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("Error: cannot reach 127.0.0.1:")


# ------------------------------------------------------------------------------------------------ users


def test_users_add_list_delete(b: str) -> None:
    user = unique("user")
    ok("users", "add", user, "--password", "pw-0123", "-m", "SCRAM-SHA-256", "--iterations", "5000", "-b", b)
    assert as_json("users", "list", user, "-b", b) == [{"user": user, "mechanism": "SCRAM-SHA-256", "iterations": 5000}]
    everyone = as_json("users", "list", "-b", b)
    assert {"user": user, "mechanism": "SCRAM-SHA-256", "iterations": 5000} in everyone
    assert ok("users", "delete", user, "-b", b).stdout.strip() == f"deleted SCRAM-SHA-256 of user {user}"
    gone = cli("users", "list", user, "-b", b)
    assert gone.exit_code == 1 and "RESOURCE_NOT_FOUND" in gone.stderr


# ------------------------------------------------------------------------------------------------ secured


def _properties(path: Path, cluster: SecureBroker, protocol: str, mechanism: str | None) -> Path:
    from logbroker._kafka.settings import jaas_config

    lines = [f"security.protocol={protocol}"]
    if mechanism:
        jaas = jaas_config(mechanism, "alice", USERS["alice"]).replace("\\", "\\\\")
        lines += [f"sasl.mechanism={mechanism}", f"sasl.jaas.config={jaas}"]
    if protocol.endswith("SSL"):
        lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={cluster.certs['ca']}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_every_verb_over_sasl_ssl_and_mutual_tls(cluster: SecureBroker, tmp_path: Path) -> None:
    sasl = cluster.bootstrap("SASL_SSL")
    sec = ("--command-config", str(_properties(tmp_path / "c.properties", cluster, "SASL_SSL", "SCRAM-SHA-512")))
    topic, group = unique("sec"), unique("g")
    ok("topics", "create", topic, "-p", "2", "-b", sasl, *sec)
    assert topic in {t["topic"] for t in as_json("topics", "list", "-b", sasl, *sec)}
    ok("topics", "alter-config", topic, "--set", "retention.ms=600000", "-b", sasl, *sec)
    ok("topics", "add-partitions", topic, "-n", "1", "-b", sasl, *sec)
    produce(cluster.bootstrap("PLAINTEXT"), topic, {0: 4})
    assert as_json("topics", "delete-records", topic, "-p", "0", "-o", "1", "-b", sasl, *sec)[0]["low_watermark"] == 1
    d = as_json("topics", "describe", topic, "-b", sasl, *sec)
    assert [(p["start_offset"], p["end_offset"]) for p in d["partitions"]] == [(1, 4), (0, 0), (0, 0)]
    commit(cluster.bootstrap("PLAINTEXT"), group, topic, {0: 2})
    assert group in {g["group_id"] for g in as_json("groups", "list", "-b", sasl, *sec)}
    assert as_json("groups", "describe", group, "-b", sasl, *sec)["totals"]["lag"] == 2
    ok("groups", "seek", group, "--to", "end", "-b", sasl, *sec)
    ok("groups", "delete-offsets", group, "--topic", topic, "-b", sasl, *sec)
    ok("groups", "delete", group, "-b", sasl, *sec)
    info = as_json("cluster", "info", "-b", sasl, *sec)
    assert [f"{x['host']}:{x['port']}" for x in info["brokers"]] == [sasl]  # the listener this client uses
    assert as_json("cluster", "health", "-b", sasl, *sec)["healthy"] is True
    assert {"user": "alice", "mechanism": "SCRAM-SHA-512", "iterations": 4096} in as_json(
        "users", "list", "alice", "-b", sasl, *sec)  # fmt: skip
    ok("topics", "delete", topic, "-b", sasl, *sec)
    # Mutual TLS by flags; the key's password from the environment.
    certs = cluster.certs
    mtls = ("-b", cluster.bootstrap("MTLS"), "--ssl-ca", str(certs["ca"]), "--ssl-cert", str(certs["client_cert"]),
            "--ssl-key", str(certs["client_key"]))  # fmt: skip
    r = cli("cluster", "health", *mtls, env={"LOGBROKER_SSL_KEY_PASSWORD": KEY_PASSWORD})
    assert r.exit_code == 0 and r.stdout.startswith("healthy: "), r.output


def test_refused_logins_and_missing_security_are_one_line(cluster: SecureBroker) -> None:
    wrong = "not-the-password-4711"
    b = cluster.bootstrap("SASL_PLAINTEXT")
    r = logbroker("topics", "list", "-b", b, "--sasl-username", "alice", "--sasl-mechanism", "SCRAM-SHA-256",
                  env={"LOGBROKER_SASL_PASSWORD": wrong})  # fmt: skip
    assert r.returncode == 1 and r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"Error: authentication with {b} failed: SASL SCRAM-SHA-256 login as alice: "
                           "SASL_AUTHENTICATION_FAILED"), line  # fmt: skip
    assert wrong not in line
    for listener in ("SASL_PLAINTEXT", "SASL_SSL"):
        r = logbroker("groups", "list", "-b", cluster.bootstrap(listener))
        assert r.returncode == 1 and r.stdout == "", listener
        (line,) = r.stderr.strip().splitlines()
        assert "closed the connection (does it need TLS or SASL? see --command-config)" in line, line
    r = logbroker("cluster", "info", "-b", cluster.bootstrap("MTLS"), "--ssl-ca", str(cluster.certs["ca"]))
    assert r.returncode == 1 and "client certificate" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------------------------------------ bad input


BAD = [
    (["topics", "list", "-b", "foo"], "bootstrap server 'foo' is not HOST:PORT"),
    (["topics", "list", "-b", "host:99999"], "port 99999 is not in 1..65535"),
    (["cluster", "info", "-b", ""], "no bootstrap server given"),
    (["topics", "alter-config", "t", "--set", "retention.ms", "-b", "{b}"], "'retention.ms' is not KEY=VALUE"),
    (["topics", "alter-config", "t", "-b", "{b}"], "nothing to change"),
    (["topics", "create", "t", "-c", "novalue", "-b", "{b}"], "'novalue' is not KEY=VALUE"),
    (["topics", "create", "t", "-p", "0", "-b", "{b}"], "0 is not in the range"),
    (["topics", "delete-records", "t", "-p", "0", "-b", "{b}"], "--offset"),
    (["topics", "add-partitions", "t", "-b", "{b}"], "Missing option '-n' / '--num'"),
    (["topics", "describe", b"bad-\xff-name".decode("utf-8", "surrogateescape"), "-b", "{b}"], "not valid UTF-8"),
    (["groups", "seek", "g", "--to", "yesterday", "-b", "{b}"], "ISO 8601"),
    (["groups", "reset-offsets", "g", "--all-topics", "-b", "{b}"], "exactly one of"),
    (["groups", "delete-offsets", "g", "--topic", "t:x", "-b", "{b}"], "TOPIC:P"),
    (["users", "add", "u", "--password", "p", "--iterations", "100", "-b", "{b}"], "4096"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    """Refused before any connection: the bootstrap address is never dialled."""
    r = logbroker(*[a.replace("{b}", "127.0.0.1:1") for a in args])
    assert r.returncode == 2, (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("Error: ") and message in line, line


def test_broker_refusals_of_bad_input_exit_2(b: str, tmp_path: Path) -> None:
    """Input only the broker can judge: an unknown topic config, a replication factor the cluster cannot
    have, a records file that is not Kafka's format."""
    topic = unique("bad")
    ok("topics", "create", topic, "-b", b)
    for args, message in (
        (["topics", "alter-config", topic, "--set", "no.such.config=1"], "unknown topic config no.such.config"),
        (["topics", "create", unique("rf"), "-r", "3"], "INVALID_REPLICATION_FACTOR"),
        (["topics", "create", unique("cfg"), "-c", "no.such.config=1"], "INVALID_CONFIG"),
        (["topics", "delete-records", topic, "-p", "7", "-o", "1"], "UNKNOWN_TOPIC_OR_PARTITION"),
    ):
        r = logbroker(*args, "-b", b)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        (line,) = r.stderr.strip().splitlines()
        assert message in line, (args, line)
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"partitions": [{"topic": "x"}]}')
    r = logbroker("topics", "delete-records", "--offset-json-file", str(bad), "-b", b)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "kafka-delete-records" in r.stderr


def test_list_offsets_asks_again_only_while_a_leader_moves() -> None:
    """What librdkafka hands back for a partition in an admin result is never marked retriable, so the CLI
    picks by code: a moving leader (Kafka answers NOT_LEADER_OR_FOLLOWER right after add-partitions, while it
    installs the leader its Metadata already shows) is asked again; a topic that is gone is reported at once."""
    from confluent_kafka import KafkaError, KafkaException

    from logbroker.cli.common import leader_moving

    assert not KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION).retriable()  # why it goes by code
    for code in (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                 KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH):  # fmt: skip
        assert leader_moving(KafkaException(KafkaError(code))), code
    for code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED):
        assert not leader_moving(KafkaException(KafkaError(code))), code
    assert not leader_moving(object())  # a result, not a failure
