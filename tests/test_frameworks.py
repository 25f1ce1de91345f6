"""Kafka's own frameworks, unchanged, on logbroker and on Apache Kafka 4.4: a Kafka Connect worker in distributed
mode (its compacted internal topics, the file source and sink, exactly-once source support) across a kill -9
of the worker, and a Kafka Streams 4.4 word count with exactly_once_v2 and `group.protocol=streams` (KIP-1071)
across two kill -9s of the app. Each runs on logbroker in the default tier; the Kafka runs, the reference, are
in the slow tier (`.ci/run --full`), since each costs a minute of JVM starts and session timeouts."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from logbroker import jars
from logbroker_devtools.testing.net import free_port
from logbroker_devtools.testing.process import BrokerProcess
from support import both_targets, create_topic, kafka_peer, kafka_tool, missing_tool, unique

pytestmark = pytest.mark.timeout(600)

# A killed member's tasks wait for its session to expire: six seconds (Kafka's minimum for streams groups is
# lowered to match; its default is 45 s).
STREAMS_SESSION_MS = 6000
KAFKA_PROPERTIES = {
    "group.streams.min.session.timeout.ms": STREAMS_SESSION_MS,
    "group.streams.session.timeout.ms": STREAMS_SESSION_MS,
    "group.streams.initial.rebalance.delay.ms": 0,
}


LOGBROKER_ENV = {
    "LOGBROKER_GROUP_STREAMS_SESSION_TIMEOUT_MS": str(STREAMS_SESSION_MS),
    "LOGBROKER_GROUP_STREAMS_INITIAL_REBALANCE_DELAY_MS": "0",
}


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "logbroker":
        with BrokerProcess(tmp_path_factory.mktemp("frameworks") / "data", env=LOGBROKER_ENV) as proc:
            yield proc.bootstrap
        return
    with kafka_peer(own=True, **KAFKA_PROPERTIES) as kafka:
        yield kafka


def _need(kind: str) -> None:
    if not jars.java_available() or not jars.javac_available():
        missing_tool("a JDK (java and javac) is needed for Kafka's frameworks")
    if not jars.jars_available(kind):
        missing_tool(f"no {kind} jars in {jars.default_jar_dir(kind)} (run .ci/fetch-jars {kind})")


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


@functools.cache
def _compiled(source: str, kind: str) -> Path:
    """tests/java/<source> compiled against a jar kind, once per test process."""
    out = Path(tempfile.mkdtemp(prefix="frameworks-classes-"))
    src = Path(__file__).parent / "java" / source
    done = subprocess.run(["javac", "--release", "17", "-d", str(out), "-cp", str(jars.default_jar_dir(kind) / "*"),
                           str(src)], capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


def _until(ready: Any, timeout: float, what: str, tail: Any = lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}\n{tail()}")
        time.sleep(0.5)


def _kill(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(30)


def _read_committed(bootstrap: str, topic: str, partitions: int, idle_s: float = 3.0) -> list[Any]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("read"), "enable.auto.commit": False,
                  "isolation.level": "read_committed"})  # fmt: skip
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[Any] = []
    idle = time.monotonic()
    while time.monotonic() - idle < idle_s:
        m = c.poll(0.3)
        if m is not None and m.error() is None:
            out.append(m)
            idle = time.monotonic()
    c.close()
    return out


# ----------------------------------------------------------------------------------------------- Kafka Connect


class ConnectWorker:
    """One distributed-mode Connect worker (ConnectDistributed) with the file connectors on its class path."""

    def __init__(self, bootstrap: str, workdir: Path, group: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.props = workdir / "worker.properties"
        self.log = workdir / "worker.log"
        settings = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "config.storage.topic": f"{group}-configs",
            "offset.storage.topic": f"{group}-offsets",
            "status.storage.topic": f"{group}-status",
            "config.storage.replication.factor": 1,
            "offset.storage.replication.factor": 1,
            "status.storage.replication.factor": 1,
            "listeners": self.url,
            "exactly.once.source.support": "enabled",
            "consumer.isolation.level": "read_committed",
            "offset.flush.interval.ms": 500,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
            # A worker back from a kill -9 gets its connectors at once, not after the 5 minutes Connect waits
            # for a lost worker to return.
            "scheduled.rebalance.max.delay.ms": 0,
        }
        self.props.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        self.proc: subprocess.Popen[Any] | None = None

    def start(self) -> None:
        cp = str(jars.default_jar_dir("connect") / "*")
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(
                [_java(), "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", cp,
                 "org.apache.kafka.connect.cli.ConnectDistributed", str(self.props)],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        _until(lambda: isinstance(self.call("GET", "/connectors"), list), 120, "the worker's REST API", self.tail)

    def kill(self) -> None:
        assert self.proc is not None
        _kill(self.proc)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"the Connect worker exited ({self.proc.returncode}):\n{self.tail()}")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:  # Connect's own error: {"error_code": ..., "message": ...}
            return {"error_code": exc.code, "message": exc.read().decode(errors="replace")}
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None
        return json.loads(raw) if raw else {}

    def running(self, name: str) -> bool:
        status = self.call("GET", f"/connectors/{name}/status")
        if not status or status.get("connector", {}).get("state") != "RUNNING":
            return False
        tasks = status.get("tasks", [])
        return bool(tasks) and all(t["state"] == "RUNNING" for t in tasks)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def close(self) -> None:
        if self.proc is not None:
            _kill(self.proc)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.kafka_side_in_full_tier
def test_connect_distributed_file_connectors_exactly_once_across_a_kill_9(target: str, tmp_path: Path) -> None:
    """The source's records reach the topic exactly once (its offsets commit in its transactions) and the
    sink writes every one, across a kill -9 of the worker; Connect's internal topics are compacted."""
    _need("connect")
    group, topic = unique("connect"), unique("lines")
    create_topic(target, topic)
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    source_file.write_text("".join(f"line {i}\n" for i in range(100)))
    worker = ConnectWorker(target, tmp_path, group)
    try:
        worker.start()
        created = worker.call("POST", "/connectors", {"name": "src", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "file": str(source_file), "topic": topic, "tasks.max": "1", "exactly.once.support": "required",
            "transaction.boundary": "poll",
        }})  # fmt: skip
        assert created and created.get("name") == "src", created
        worker.call("POST", "/connectors", {"name": "sink", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
            "file": str(sink_file), "topics": topic, "tasks.max": "1",
        }})  # fmt: skip
        _until(lambda: len(set(_lines(sink_file))) == 100, 120, "the first 100 lines in the sink", worker.tail)

        worker.kill()  # mid-stream: more lines arrive while the worker is down
        with source_file.open("a") as f:
            f.write("".join(f"line {i}\n" for i in range(100, 250)))
        worker.start()
        _until(lambda: worker.running("src") and worker.running("sink"), 120, "both connectors running", worker.tail)
        expected = [f"line {i}" for i in range(250)]
        _until(lambda: set(_lines(sink_file)) == set(expected), 120, "all 250 lines in the sink", worker.tail)
        # Exactly once into the topic: the source's records and offsets commit together.
        assert [m.value().decode() for m in _read_committed(target, topic, 1)] == expected

        admin = AdminClient({"bootstrap.servers": target})
        for internal in (f"{group}-configs", f"{group}-offsets", f"{group}-status"):
            res = ConfigResource(ConfigResource.Type.TOPIC, internal)
            configs = admin.describe_configs([res])[res].result(30)
            assert configs["cleanup.policy"].value == "compact", internal
    finally:
        worker.close()


# ----------------------------------------------------------------------------------------------- Kafka Streams


class StreamsApp:
    """tests/java/WordCountApp.java, one process (two stream threads), killable."""

    def __init__(self, bootstrap: str, app_id: str, lines: str, counts: str, state_dir: Path, log: Path) -> None:
        self.args = [bootstrap, app_id, lines, counts, "streams", str(state_dir)]
        self.log = log
        self.proc: subprocess.Popen[Any] | None = None

    def start(self) -> None:
        classes = _compiled("WordCountApp.java", "streams")
        cp = f"{classes}{os.pathsep}{jars.default_jar_dir('streams') / '*'}"
        with self.log.open("a") as log:
            command = [_java(), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", cp, "WordCountApp"]
            self.proc = subprocess.Popen([*command, *self.args], stdout=log, stderr=subprocess.STDOUT)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None:
            _kill(self.proc)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""


def _counts(bootstrap: str, topic: str) -> dict[str, list[int]]:
    """Every committed count per word, in order."""
    seen: dict[str, list[int]] = {}
    for m in _read_committed(bootstrap, topic, 2, idle_s=2.0):
        seen.setdefault(m.key().decode(), []).append(int.from_bytes(m.value(), "big"))
    return seen


@pytest.mark.kafka_side_in_full_tier
def test_streams_word_count_is_exactly_once_with_streams_groups_across_two_kill_9s(target: str, tmp_path: Path) -> None:
    """A Kafka Streams 4.4 app with group.protocol=streams and exactly_once_v2, killed with SIGKILL twice while
    it counts: the committed output of every word reads 1, 2, ..., n (no count lost or repeated), the broker
    created its repartition and changelog topics, and kafka-streams-groups lists and describes the group."""
    _need("streams")
    app_id, lines, counts = unique("wc"), unique("lines"), unique("counts")
    create_topic(target, lines, partitions=2)
    create_topic(target, counts, partitions=2)
    words = [f"w{i}" for i in range(13)]
    expected: dict[str, int] = {}
    producer = Producer({"bootstrap.servers": target, "linger.ms": 5})

    def produce(start: int, n: int) -> None:
        for i in range(start, start + n):
            line = f"{words[i % 13]} all {words[(i * 7) % 13]}"
            for w in line.split():
                expected[w] = expected.get(w, 0) + 1
            producer.produce(lines, key=str(i).encode(), value=line.encode())
        assert producer.flush(30) == 0

    def committed_at_least(n: int) -> bool:
        """Whether n counts are committed, read until there are (quick: the app is being watched)."""
        c = Consumer({"bootstrap.servers": target, "group.id": unique("probe"), "enable.auto.commit": False,
                      "isolation.level": "read_committed"})  # fmt: skip
        c.assign([TopicPartition(counts, p, 0) for p in range(2)])
        seen, idle = 0, time.monotonic()
        try:
            while seen < n and time.monotonic() - idle < 1.0:
                batch = c.consume(1000, 0.2)
                seen += sum(1 for m in batch if m.error() is None)
                if batch:
                    idle = time.monotonic()
        finally:
            c.close()
        return seen >= n

    app = StreamsApp(target, app_id, lines, counts, tmp_path / "state", tmp_path / "app.log")
    per_phase = 1500  # lines; three words each
    killed_mid_stream = 0
    try:
        for phase in range(3):
            produce(phase * per_phase, per_phase)
            app.start()
            # Killed once this phase's output has begun, while most of it is still to come.
            want = phase * per_phase * 3 + (200 if phase < 2 else per_phase * 3)

            def reached(want: int = want) -> bool:
                return not app.alive() or committed_at_least(want)

            _until(reached, 240, f"phase {phase}: {want} counts", app.tail)
            assert app.alive(), app.tail()
            if phase < 2:
                app.kill()
                killed_mid_stream += not committed_at_least((phase + 1) * per_phase * 3)
        _until(lambda: sum(len(v) for v in _counts(target, counts).values()) >= sum(expected.values()), 120,
               "every count", app.tail)  # fmt: skip
        got = _counts(target, counts)
        assert {w: v[-1] for w, v in got.items()} == expected, app.tail()
        for w, v in got.items():
            assert v == list(range(1, expected[w] + 1)), (w, v[:20])
        assert killed_mid_stream >= 1, "the app finished each phase before it was killed: nothing was tested"
        admin = AdminClient({"bootstrap.servers": target})
        topics = admin.list_topics(timeout=30).topics
        assert f"{app_id}-words-repartition" in topics
        assert any(t.startswith(app_id) and t.endswith("-changelog") for t in topics)

        listed = kafka_tool("kafka-streams-groups", target, "--list")
        assert listed.returncode == 0 and app_id in listed.stdout.split(), listed.output
        state = kafka_tool("kafka-streams-groups", target, "--describe", "--group", app_id, "--state")
        assert state.returncode == 0 and "Stable" in state.stdout, state.output
        members = kafka_tool("kafka-streams-groups", target, "--describe", "--group", app_id, "--members")
        assert members.returncode == 0 and members.stdout.count("StreamThread") == 2, members.output
    finally:
        app.kill()
