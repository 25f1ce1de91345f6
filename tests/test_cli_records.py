"""`logbroker produce` and `logbroker consume` (kcat -P / -C on confluent-kafka), the same assertions on
logbroker and on Apache Kafka 4.4: keys where the Java partitioner puts them, bytes in and out unchanged,
headers, kcat's offset forms and -f format strings, JSON lines, group consumption that commits, -e on many
empty partitions, the first produce to a topic that does not exist yet, a secured cluster, and bad input as
one line with exit 2."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from support import both_targets, create_topic, java_client_tool, read_topic, target_bootstrap, unique

CLI = [sys.executable, "-m", "logbroker"]


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from target_bootstrap(request)


def run(*args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGBROKER_")}
    return subprocess.run([*CLI, *args], input=input, capture_output=True, timeout=timeout, env=env,
                          stdin=None if input is not None else subprocess.DEVNULL)  # fmt: skip


def ok(*args: str, input: bytes | None = None) -> bytes:
    r = run(*args, input=input)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert b"Traceback" not in r.stderr
    return r.stdout


def one_line_error(r: subprocess.CompletedProcess[bytes], code: int) -> str:
    err = r.stderr.decode(errors="replace")
    assert r.returncode == code, (r.returncode, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("Error: "), err
    return err


# ------------------------------------------------------------------------------------------ produce

PARTITIONS = 7  # not a power of two: a wrong modulo or sign would show
KEYS = [f"order-{i}" for i in range(300)] + ["k", "ключ", "a-little-bit-longer-string", "x" * 200]


def _partitions_by_key(bootstrap: str, topic: str, source: str) -> dict[str, int]:
    """key -> partition of the records whose value starts with `source`; a key on two partitions fails."""
    seen: dict[str, set[int]] = defaultdict(set)
    for msg in read_topic(bootstrap, topic, PARTITIONS):
        if msg.value().decode().startswith(source):
            seen[msg.key().decode()].add(msg.partition())
    assert all(len(parts) == 1 for parts in seen.values()), {k: v for k, v in seen.items() if len(v) > 1}
    return {k: parts.pop() for k, parts in seen.items()}


def test_keys_land_where_the_java_partitioner_puts_them(target: str) -> None:
    """librdkafka's murmur2_random (kcat's choice for Java compatibility) decides, as for our -K keys."""
    topic = create_topic(target, unique("keys"), PARTITIONS)
    lines = "".join(f"{k}:cli-{i}\n" for i, k in enumerate(KEYS)).encode()
    ok("produce", "-b", target, "-t", topic, "-K", ":", "--batch-size", "50", input=lines)
    producer = Producer({"bootstrap.servers": target, "partitioner": "murmur2_random", "acks": "all"})
    for i, k in enumerate(KEYS):
        producer.produce(topic, f"rdkafka-{i}".encode(), k.encode())
    assert producer.flush(30) == 0
    cli = _partitions_by_key(target, topic, "cli-")
    assert cli == _partitions_by_key(target, topic, "rdkafka-")
    assert set(cli) == set(KEYS) and set(cli.values()) == set(range(PARTITIONS))  # the keys really spread

    # -p pins every record; -k gives the unkeyed ones a key (and its partition); no key: the partitioner spreads
    ok("produce", "-b", target, "-t", topic, "-K", ":", "-p", "3", input=b"order-1:pinned\norder-2:pinned\n")
    ok("produce", "-b", target, "-t", topic, "-k", "order-7", "fixed-1", "fixed-2")
    ok("produce", "-b", target, "-t", topic, "unkeyed-1", "unkeyed-2")
    got = read_topic(target, topic, PARTITIONS)
    assert {m.partition() for m in got if m.value() == b"pinned"} == {3}
    assert {(m.partition(), m.key()) for m in got if m.value().startswith(b"fixed-")} == {(cli["order-7"], b"order-7")}
    unkeyed = [m for m in got if m.value().startswith(b"unkeyed-")]
    assert len(unkeyed) == 2 and all(m.key() is None and 0 <= m.partition() < PARTITIONS for m in unkeyed)


@pytest.mark.java
def test_keys_land_where_the_java_client_puts_them(target: str) -> None:
    tool = java_client_tool()
    topic = create_topic(target, unique("java-keys"), PARTITIONS)
    ok("produce", "-b", target, "-t", topic, "-K", ":", input="".join(f"{k}:cli\n" for k in KEYS).encode())
    acks = tool.produce(target, topic, [{"key": k.encode(), "value": b"java"} for k in KEYS])
    java = {k: a["partition"] for k, a in zip(KEYS, acks, strict=True)}
    assert _partitions_by_key(target, topic, "cli") == java


BINARY = [bytes(range(256)), b"\xff\xfe\x00\r\n", b"\xc3\x28", "plain ü".encode(), b"", b"\n" * 3, os.urandom(3000)]


def test_bytes_and_headers_round_trip_unchanged(target: str, tmp_path: Path) -> None:
    """Values that are not UTF-8 (and hold newlines, NULs, CRs) go out as read and come back as stored."""
    topic = create_topic(target, unique("binary"), 1)
    sep = b"|~SEP~|"
    values = [v.replace(sep, b"") for v in BINARY]
    f = tmp_path / "input.bin"
    f.write_bytes(sep.join(b"k\xff" + b"=" + v for v in values) + sep)
    ok("produce", "-b", target, "-t", topic, "-l", str(f), "-D", "|~SEP~|", "-K", "=", "-H", "src=cli",
       "-H", "name=ü", "-H", "src=again")  # fmt: skip
    stored = read_topic(target, topic, 1)
    assert [m.value() for m in stored] == values
    assert {m.key() for m in stored} == {b"k\xff"}
    assert stored[0].headers() == [("src", b"cli"), ("name", "ü".encode()), ("src", b"again")]

    raw = ok("consume", "-b", target, "-t", topic, "-o", "beginning", "-e", "-D", "|~SEP~|", "-q")
    assert raw == sep.join(values) + sep
    rows = [json.loads(line) for line in ok("consume", "-b", target, "-t", topic, "-o", "beginning", "-e", "-J",
                                             "-q").splitlines()]  # fmt: skip
    assert [r["offset"] for r in rows] == list(range(len(values)))

    def value_of(r: dict[str, Any], field: str) -> bytes:
        return base64.b64decode(r[field]) if r.get(f"{field}_encoding") == "base64" else r[field].encode()

    assert [value_of(r, "value") for r in rows] == values
    assert {value_of(r, "key") for r in rows} == {b"k\xff"} and rows[0]["key_encoding"] == "base64"
    assert rows[3]["value"] == "plain ü" and "value_encoding" not in rows[3]
    assert rows[0]["headers"] == [["src", "cli"], ["name", "ü"], ["src", "again"]]
    assert {r["topic"] for r in rows} == {topic} and {r["partition"] for r in rows} == {0}
    assert all(isinstance(r["timestamp"], int) and r["timestamp_type"] == "CreateTime" for r in rows)


def test_the_first_produce_to_a_new_topic_succeeds(target: str) -> None:
    """Auto-created by the first produce (both brokers allow it here), or created just before: librdkafka waits
    for the topic and its leaders instead of failing the first records."""
    topic = unique("fresh")
    ok("produce", "-b", target, "-t", topic, "-K", ":", input=b"a:1\nb:2\nc:3\n")
    assert sorted(m.value() for m in read_topic(target, topic)) == [b"1", b"2", b"3"]
    created = unique("created")
    admin = AdminClient({"bootstrap.servers": target})
    admin.create_topics([NewTopic(created, 3, 1)])[created].result(30)
    ok("produce", "-b", target, "-t", created, "-K", ":", input=b"a:1\nb:2\nc:3\nd:4\n")  # no wait for leaders
    assert len(read_topic(target, created, 3)) == 4


def test_a_refused_record_is_one_line_and_exit_1(target: str) -> None:
    topic = create_topic(target, unique("small"), 1, {"max.message.bytes": "2000"})
    r = run("produce", "-b", target, "-t", topic, input=b"x" * 5000 + b"\n")
    err = one_line_error(r, 1)
    assert "1 of 1 record(s) not delivered" in err and "MESSAGE_TOO_LARGE" in err, err


def test_produce_waits_for_a_topic_created_meanwhile(tmp_path: Path) -> None:
    """With auto-create off, records wait (up to --timeout) for someone to create the topic; if nobody does,
    one line says so."""
    from logbroker_devtools.testing.process import BrokerProcess

    broker = BrokerProcess(tmp_path / "data", env={"LOGBROKER_AUTO_CREATE_TOPICS": "false"})
    broker.start()
    try:
        b = broker.bootstrap
        r = run("produce", "-b", b, "-t", unique("never"), "--timeout", "1", "x")
        assert "does not exist" in one_line_error(r, 1)
        topic = unique("later")
        proc = subprocess.Popen([*CLI, "produce", "-b", b, "-t", topic, "--timeout", "30", "-K", ":"],
                                stdin=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.write(b"k:waited\n")
        proc.stdin.close()
        time.sleep(1.0)  # the producer is waiting for the topic now
        assert proc.poll() is None
        create_topic(b, topic, 2)
        assert proc.wait(60) == 0, proc.stderr.read()
        assert [m.value() for m in read_topic(b, topic, 2)] == [b"waited"]
    finally:
        assert broker.stop() == 0, broker.log_tail()


# ------------------------------------------------------------------------------------------ consume


@pytest.fixture(scope="module")
def timed_topic(target: str) -> tuple[str, int]:
    """One partition, records 0..9 stamped BASE + i seconds."""
    topic = create_topic(target, unique("timed"), 1)
    base = (int(time.time()) - 3600) * 1000
    producer = Producer({"bootstrap.servers": target, "acks": "all"})
    for i in range(10):
        producer.produce(topic, f"v{i}".encode(), f"k{i}".encode(), partition=0, timestamp=base + i * 1000)
    assert producer.flush(30) == 0
    return topic, base


@pytest.mark.parametrize(
    ("offsets", "want"),
    [
        (["beginning"], range(10)),
        (["7"], [7, 8, 9]),
        (["-3"], [7, 8, 9]),
        (["s@{t4500}"], range(5, 10)),
        (["@{t5000}"], range(5, 10)),
        (["beginning", "e@{t3000}"], [0, 1, 2]),
        (["end"], []),
    ],
    ids=["beginning", "offset", "tail", "s@", "@", "e@", "end"],
)
def test_offset_forms(target: str, timed_topic: tuple[str, int], offsets: list[str], want: Any) -> None:
    topic, base = timed_topic
    args = [a for o in offsets for a in ("-o", o.format(t4500=base + 4500, t5000=base + 5000, t3000=base + 3000))]
    out = ok("consume", "-b", target, "-t", topic, *args, "-e", "-f", "%o %T\\n", "-q")
    assert [tuple(map(int, line.split())) for line in out.splitlines()] == [(i, base + i * 1000) for i in want]


def test_count_format_strings_and_key_delimiter(target: str, timed_topic: tuple[str, int]) -> None:
    topic, base = timed_topic
    out = ok("consume", "-b", target, "-t", topic, "--from-beginning", "-c", "2", "-q",
             "-f", "%t|%p|%o|%k|%K|%s|%S|%T|%h|%%\\n")  # fmt: skip
    assert out.decode().splitlines() == [f"{topic}|0|{i}|k{i}|2|v{i}|2|{base + i * 1000}||%" for i in (0, 1)]
    assert ok("consume", "-b", target, "-t", topic, "-o", "-2", "-e", "-K", "=", "-q") == b"k8=v8\nk9=v9\n"
    assert ok("consume", "-b", target, "-t", topic, "-o", "-1", "-e", "-f", "kv", "-q") == b"k9\tv9\n"
    r = run("consume", "-b", target, "-t", topic, "-o", "-1", "-e", "-f", "%R%s")
    assert r.returncode == 0 and r.stdout == b"\x00\x00\x00\x02v9" and r.stderr == b"consumed 1 record(s)\n"
    nulls = unique("nulls")
    ok("produce", "-b", target, "-t", nulls, "-Z", "-K", ":", input=b":\n")  # null key, null value
    assert ok("consume", "-b", target, "-t", nulls, "-o", "beginning", "-e", "-Z", "-K", ":", "-q") == b"NULL:NULL\n"
    assert ok("consume", "-b", target, "-t", nulls, "-o", "beginning", "-e", "-f", "%K %S\\n", "-q") == b"-1 -1\n"


def test_exit_at_end_of_many_empty_partitions(target: str) -> None:
    """-e stops once every partition reported its end (librdkafka's EOF events), from the end and from the
    beginning, with records in a few partitions only."""
    topic = create_topic(target, unique("empty"), 60)
    r = run("consume", "-b", target, "-t", topic, "-e")
    assert r.returncode == 0 and r.stdout == b"" and r.stderr == b"consumed 0 record(s)\n", r.stderr
    ok("produce", "-b", target, "-t", topic, "-p", "17", "a", "b")
    ok("produce", "-b", target, "-t", topic, "-p", "59", "c")
    assert sorted(ok("consume", "-b", target, "-t", topic, "-o", "beginning", "-e", "-q").split()) == [b"a", b"b", b"c"]
    assert ok("consume", "-b", target, "-t", topic, "-p", "59", "-p", "3", "-o", "beginning", "-e", "-q") == b"c\n"


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return [tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)]
    finally:
        c.close()


def test_group_consume_commits_what_it_printed(target: str) -> None:
    topic = create_topic(target, unique("grouped"), 2)
    ok("produce", "-b", target, "-t", topic, "-p", "0", "a0", "a1", "a2")
    ok("produce", "-b", target, "-t", topic, "-p", "1", "b0", "b1", "b2")
    group = unique("g")
    first = ok("consume", "-b", target, "-t", topic, "--group", group, "-o", "beginning", "-e", "-q")
    assert sorted(first.split()) == [b"a0", b"a1", b"a2", b"b0", b"b1", b"b2"]
    assert _committed(target, group, topic, 2) == [3, 3]
    ok("produce", "-b", target, "-t", topic, "-p", "1", "b3")
    assert ok("consume", "-b", target, "-t", topic, "-G", group, "-o", "beginning", "-e", "-q") == b"b3\n"
    assert _committed(target, group, topic, 2) == [3, 4]
    # -c: only what was printed is committed; -o N moves the group's partitions
    other = unique("g")
    two = ok("consume", "-b", target, "-t", topic, "-G", other, "-o", "2", "-c", "2", "-q")
    assert sorted(two.split()) in ([b"a2", b"b2"], [b"b2", b"b3"])  # from offset 2 of each partition, in order
    assert sum(o - 2 for o in _committed(target, other, topic, 2) if o >= 0) == 2


def test_a_missing_topic_and_bad_input(target: str) -> None:
    missing = run("consume", "-b", target, "-t", unique("nowhere"), "-e")
    assert "does not exist" in one_line_error(missing, 1)
    topic = create_topic(target, unique("bad"), 2)
    for args, named in [
        (("consume", "-t", topic, "-p", "5", "-e"), "-p 5"),
        (("consume", "-t", topic, "-o", "soon"), "-o 'soon'"),
        (("consume", "-t", topic, "-o", "e@later"), "milliseconds"),
        (("consume", "-t", topic, "-f", "%s %x"), "%x"),
        (("consume", "-t", topic, "-G", "g", "-p", "0"), "--group"),
        (("consume", "-t", topic, "-o", "stored"), "--group"),
        (("consume", "-t", topic, "-X", "no.such.property=1"), "no.such.property"),
        (("consume", "-t", topic, "-c", "x"), "-c"),
        (("produce", "-t", topic, "-H", "no-equals-sign", "v"), "NAME=VALUE"),
        (("produce", "-t", topic, "-p", "9", "v"), "-p 9"),
        (("produce", "-t", topic, "-D", "", "v"), "-D"),
        (("produce", "-t", topic, "-X", "acks"), "NAME=VALUE"),
        (("produce", "-t", topic, "-l", "/no/such/file"), "/no/such/file"),
    ]:
        err = one_line_error(run(*args, "-b", target), 2)
        assert named in err, (args, err)


def test_a_terminal_gets_a_progress_bar(broker: Any, tmp_path: Path) -> None:
    """On a terminal, a long input shows rich's bar on stderr (gone at the end); piped, nothing but the
    summary."""
    import pty

    f = tmp_path / "lines.txt"
    f.write_bytes(b"".join(b"%08d the quick brown fox\n" % i for i in range(50_000)))
    topic = unique("progress")
    main, sub = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGBROKER_")} | {"TERM": "xterm"}
    proc = subprocess.Popen([*CLI, "produce", "-b", broker.bootstrap, "-t", topic, "-l", str(f), "--progress"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=sub, env=env)  # fmt: skip
    os.close(sub)
    shown = b""
    try:
        while chunk := os.read(main, 65536):  # until the child's end closes the terminal (EIO)
            shown += chunk
    except OSError:
        pass
    finally:
        os.close(main)
    assert proc.wait(60) == 0
    assert proc.returncode == 0
    assert b"records" in shown and b"produced 50000 record(s)" in shown, shown[-500:]
    piped = run("produce", "-b", broker.bootstrap, "-t", topic, "-l", str(f))
    assert piped.returncode == 0 and piped.stderr.decode().splitlines() == [f"produced 50000 record(s) to {topic}-0"]


# ------------------------------------------------------------------------------------------ secured


def test_records_on_a_secured_cluster(tmp_path: Path) -> None:
    """SASL_SSL with SCRAM-SHA-512 from a properties file: produce with keys and headers, consume as JSON and as
    a group; a wrong password is one line without the password."""
    from logbroker._kafka.settings import jaas_config
    from security_support import USERS, logbroker_secure, make_certs

    (tmp_path / "certs").mkdir()
    certs = make_certs(tmp_path / "certs")
    with logbroker_secure(tmp_path, certs) as secured:
        b = secured.bootstrap("SASL_SSL")
        props = tmp_path / "client.properties"

        def write(password: str) -> Path:
            jaas = jaas_config("SCRAM-SHA-512", "alice", password).replace("\\", "\\\\")
            props.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nssl.truststore.type=PEM\n"
                             f"ssl.truststore.location={certs['ca']}\nsasl.jaas.config={jaas}\n")  # fmt: skip
            return props

        sec = ("-b", b, "--command-config", str(write(USERS["alice"])))
        topic = unique("secured")
        ok("produce", *sec, "-t", topic, "-K", ":", "-H", "h=1", input=b"k1:one\nk2:\xff\n")
        rows = [json.loads(x) for x in ok("consume", *sec, "-t", topic, "-o", "beginning", "-e", "-J").splitlines()]
        assert sorted((r["key"], r["value"], r["headers"][0][1]) for r in rows) == [("k1", "one", "1"),
                                                                                     ("k2", "/w==", "1")]  # fmt: skip
        group = unique("g")
        assert sorted(ok("consume", *sec, "-t", topic, "-G", group, "-o", "beginning", "-e", "-q").split()) == [
            b"one", b"\xff"]  # fmt: skip
        wrong = "not-the-password-4711"
        write(wrong)
        for verb in (("produce", "-t", topic, "x"), ("consume", "-t", topic, "-e")):
            r = run(*verb, *sec)
            err = one_line_error(r, 1)
            assert "authentication" in err.lower() and wrong not in err, err
