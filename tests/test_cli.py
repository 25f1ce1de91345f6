"""The `logbroker` command: serve's configuration sources and errors, topics, a produce/consume round trip
(the record verbs in depth, on both brokers: test_cli_records.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from logbroker.config import ConfigError, load_settings
from logbroker.protocol.errors import ErrorCode
from logbroker.protocol.records import NewRecord, build_batch
from logbroker_devtools.client.connection import BrokerError, KafkaClient
from logbroker_devtools.testing.process import BrokerProcess
from support import both_targets, create_topic, target_bootstrap, unique

CLI = [sys.executable, "-m", "logbroker"]


def run(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([*CLI, *args], input=input, capture_output=True, text=True, timeout=60, env=full_env)


def test_settings_precedence_file_env_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "broker.toml"
    cfg.write_text('num_partitions = 3\nfsync = "interval"\nretention_ms = 1000\n')
    assert load_settings(cfg).num_partitions == 3
    monkeypatch.setenv("LOGBROKER_NUM_PARTITIONS", "5")
    s = load_settings(cfg)
    assert (s.num_partitions, s.fsync.value, s.retention_ms) == (5, "interval", 1000)
    assert load_settings(cfg, num_partitions=7).num_partitions == 7
    yml = tmp_path / "broker.yaml"
    yml.write_text("message-max-bytes: 2000\n")
    assert load_settings(yml).message_max_bytes == 2000


@pytest.mark.parametrize(
    ("content", "key"),
    [
        ("fsync = 'sometimes'", "fsync"),
        ("num_partitions = 0", "num_partitions"),
        ("listen = 'nowhere'", "listen"),
        ("no_such_setting = 1", "no_such_setting"),
        ("message_max_bytes = 999999999999", "message_max_bytes"),
    ],
)
def test_bad_config_is_refused_naming_the_key(tmp_path: Path, content: str, key: str) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(content + "\n")
    with pytest.raises(ConfigError, match=key):
        load_settings(cfg)
    r = run("serve", "--config", str(cfg), "--data-dir", str(tmp_path / "d"))
    assert r.returncode == 2
    assert key in r.stderr


def test_bad_env_and_unreadable_file(tmp_path: Path) -> None:
    r = run("serve", "--data-dir", str(tmp_path / "d"), env={"LOGBROKER_FSYNC_INTERVAL_MS": "soon"})
    assert r.returncode == 2 and "fsync_interval_ms" in r.stderr
    r = run("serve", "--config", str(tmp_path / "missing.toml"))
    assert r.returncode == 2 and "missing.toml" in r.stderr
    (tmp_path / "broken.toml").write_text("this is = = not toml")
    r = run("serve", "--config", str(tmp_path / "broken.toml"))
    assert r.returncode == 2 and "not valid" in r.stderr


def test_second_broker_on_same_data_dir_is_refused(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "d"):
        r = run("serve", "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0")
        assert r.returncode == 1
        assert "in use" in r.stderr


def test_topics_produce_consume_round_trip(broker: BrokerProcess, topic: str) -> None:
    b = ["-b", broker.bootstrap]
    r = run("topics", "create", *b, topic, "-p", "2", "-c", "retention.ms=3600000")
    assert r.returncode == 0, r.stderr
    r = run("topics", "create", *b, topic)
    assert r.returncode != 0 and "TOPIC_ALREADY_EXISTS" in r.stderr
    assert topic in run("topics", "list", *b).stdout
    r = run(
        "produce", *b, "-t", topic, "-p", "1", "-K", ":", "-H", "src=cli", "-z", "zstd", input="k1:v1\nk2:v2\n:v3\n"
    )
    assert r.returncode == 0, r.stderr
    r = run("consume", *b, "-t", topic, "-p", "1", "--from-beginning", "-e", "-f", "json")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(x["key"], x["value"], x["offset"]) for x in rows] == [("k1", "v1", 0), ("k2", "v2", 1), ("", "v3", 2)]
    assert rows[0]["headers"] == [["src", "cli"]]
    r = run("consume", *b, "-t", topic, "-o", "-1", "-e", "-c", "1")
    assert r.stdout.strip() == "v3"
    desc = run("topics", "describe", *b, topic).stdout
    assert "retention.ms" in desc and "3600000" in desc
    assert run("topics", "delete", *b, topic).returncode == 0
    r = run("topics", "describe", *b, topic)
    assert r.returncode != 0 and "UNKNOWN_TOPIC_OR_PARTITION" in r.stderr


def test_unreachable_broker_is_a_clear_error() -> None:
    from logbroker_devtools.testing.process import free_port

    r = run("topics", "list", "-b", f"127.0.0.1:{free_port()}")
    assert r.returncode != 0 and "cannot reach" in r.stderr


# ------------------------------------------------------------------------------ sizes on disk


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from target_bootstrap(request)


def _produce_batch(bootstrap: str, topic: str, records: list[NewRecord]) -> None:
    """One batch to partition 1, retried while Kafka is still electing a new topic's leader."""
    deadline = time.monotonic() + 30
    while True:
        try:
            with KafkaClient(bootstrap) as c:
                c.produce(topic, 1, records)
            return
        except BrokerError as exc:
            if time.monotonic() > deadline or exc.code not in (ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                                               ErrorCode.LEADER_NOT_AVAILABLE):  # fmt: skip
                raise
            time.sleep(0.2)


def test_topics_describe_shows_each_partitions_size(target: str) -> None:
    """`topics describe` reads sizes with DescribeLogDirs, on logbroker and on Apache Kafka alike: an empty
    partition is 0 bytes, one holding a batch is that batch's length, and growing by another batch adds it."""
    topic = create_topic(target, unique("sizes"), 2)
    records = [NewRecord(key=b"k", value=b"v" * 300), NewRecord(key=None, value=b"w" * 50)]
    _produce_batch(target, topic, records)

    def sizes() -> dict[int, str]:
        r = run("topics", "describe", "-b", target, topic)
        assert r.returncode == 0, r.stderr
        header = next(ln for ln in r.stdout.splitlines() if "partition" in ln and "size (bytes)" in ln)
        assert header.split("┃")[-2].strip() == "size (bytes)"
        rows = [[cell.strip() for cell in ln.split("│")[1:-1]] for ln in r.stdout.splitlines() if ln.startswith("│")]
        return {int(row[0]): row[-1] for row in rows if len(row) == 8}  # partition ... size (bytes)

    batch = len(build_batch(records))
    deadline = time.monotonic() + 30
    while (got := sizes()) != {0: "0", 1: str(batch)} and time.monotonic() < deadline:
        time.sleep(0.2)  # Kafka creates a new topic's logs as it catches up with the metadata ("-" until then)
    assert got == {0: "0", 1: str(batch)}
    _produce_batch(target, topic, records)
    assert sizes() == {0: "0", 1: str(2 * batch)}
