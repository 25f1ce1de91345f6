"""`logbroker groups list|describe|delete|reset-offsets` against a real broker.

A confluent-kafka consumer joins a group on a 3-partition topic, consumes part of it and commits; the CLI
must then report what the broker and librdkafka agree on, and offsets it resets must be what a consumer
of the group reads back with committed().

The broker is the shared `broker` fixture. LOGBROKER_TEST_TARGET=kafka runs the same tests against Apache
Kafka (logbroker_devtools.testing.peers.KafkaPeer, jars in .ci/cache/jars/kafka) to show the tool works on a real Kafka.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from logbroker.cli import main
from support import TEST_TARGET

TARGET = TEST_TARGET
PRODUCED = {0: 10, 1: 20, 2: 30}  # records per partition
COMMITTED = {0: 3, 1: 8, 2: 15}  # what the test consumer commits
CLIENT_ID = "groups-cli-test"
JOIN_TIMEOUT_S = 60.0


# ------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def loaded(bootstrap: str) -> tuple[str, int]:
    """A 3-partition topic holding PRODUCED records; record i of each partition is stamped base + i seconds.
    Returns (topic, base timestamp in ms)."""
    topic = f"groups-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(30)
    base = (int(time.time()) - 3600) * 1000
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # metadata of a new topic may lag behind CreateTopics
        md = producer.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == 3:
            break
        time.sleep(0.1)
    errors: list[object] = []
    for p, n in PRODUCED.items():
        for i in range(n):
            producer.produce(
                topic,
                f"{p}-{i}".encode(),
                partition=p,
                timestamp=base + i * 1000,
                on_delivery=lambda err, _m: errors.append(err) if err else None,
            )
    assert producer.flush(30) == 0 and not errors, errors
    return topic, base


def consumer_conf(bootstrap: str, group: str) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": CLIENT_ID,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }


class LiveGroup:
    """A subscribed consumer that has consumed part of the topic and committed COMMITTED."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.group = f"g-{uuid.uuid4().hex[:10]}"
        self.consumer: Consumer | None = Consumer(consumer_conf(bootstrap, self.group))
        self.consumer.subscribe([topic])
        seen = {p: 0 for p in PRODUCED}
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        while any(seen[p] < COMMITTED[p] for p in PRODUCED):
            assert time.monotonic() < deadline, f"consumed only {seen}"
            msg = self.consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            seen[msg.partition()] = max(seen[msg.partition()], msg.offset() + 1)
        self.consumer.commit(
            offsets=[TopicPartition(topic, p, off) for p, off in COMMITTED.items()], asynchronous=False
        )
        self.member_id = self.consumer.memberid()

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None


@pytest.fixture
def live_group(bootstrap: str, loaded: tuple[str, int]) -> Iterator[LiveGroup]:
    g = LiveGroup(bootstrap, loaded[0])
    try:
        yield g
    finally:
        g.close()


@pytest.fixture
def empty_group(live_group: LiveGroup) -> LiveGroup:
    """The same group after its only consumer left: Empty, with COMMITTED offsets."""
    live_group.close()
    return live_group


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int | None]:
    """The group's committed offsets as librdkafka reads them (OffsetFetch, without joining)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in PRODUCED], timeout=20)
    finally:
        c.close()
    return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in got}


def cli(bootstrap: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["groups", *args, "-b", bootstrap], catch_exceptions=False)


def cli_json(bootstrap: str, *args: str) -> object:
    r = cli(bootstrap, *args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


# ------------------------------------------------------------------------------------- list / describe


def test_list_and_describe_while_active_then_empty(bootstrap: str, loaded: tuple[str, int]) -> None:
    topic, _ = loaded
    g = LiveGroup(bootstrap, topic)
    try:
        listed = {x["group_id"]: x for x in cli_json(bootstrap, "list")}  # type: ignore[union-attr]
        assert listed[g.group]["state"] == "Stable"
        assert listed[g.group]["protocol_type"] == "consumer"

        d = cli_json(bootstrap, "describe", g.group)
        assert isinstance(d, dict)
        assert d["state"] == "Stable" and d["protocol_type"] == "consumer" and d["protocol"]
        assert len(d["members"]) == 1
        m = d["members"][0]
        assert m["member_id"] == g.member_id and m["client_id"] == CLIENT_ID and m["host"]
        assert sorted((a["topic"], a["partition"]) for a in m["assignment"]) == [(topic, p) for p in PRODUCED]
        rows = {r["partition"]: r for r in d["offsets"] if r["topic"] == topic}
        assert set(rows) == set(PRODUCED)
        for p, row in rows.items():
            assert row["committed"] == COMMITTED[p]
            assert row["log_end"] == PRODUCED[p]
            assert row["lag"] == PRODUCED[p] - COMMITTED[p]
            assert row["member_id"] == g.member_id
        assert d["totals"]["lag"] == sum(PRODUCED.values()) - sum(COMMITTED.values())
        assert d["totals"]["log_end"] == sum(PRODUCED.values())

        table = cli(bootstrap, "describe", g.group)
        assert table.exit_code == 0, table.output
        assert "Stable" in table.stdout and g.member_id in table.stdout and "total" in table.stdout
        assert f"{topic}:0,1,2" in table.stdout  # the member's decoded assignment
    finally:
        g.close()

    d = cli_json(bootstrap, "describe", g.group)
    assert isinstance(d, dict)
    assert d["state"] == "Empty" and d["members"] == []
    assert {r["partition"]: r["lag"] for r in d["offsets"]} == {p: PRODUCED[p] - COMMITTED[p] for p in PRODUCED}
    assert all(r["member_id"] is None for r in d["offsets"])
    listed = {x["group_id"]: x for x in cli_json(bootstrap, "list")}  # type: ignore[union-attr]
    assert listed[g.group]["state"] == "Empty"
    table = cli(bootstrap, "list")
    assert table.exit_code == 0 and g.group in table.stdout


def test_describe_consumer_protocol_group(bootstrap: str, loaded: tuple[str, int]) -> None:
    """A KIP-848 group (group.protocol=consumer) is described through ConsumerGroupDescribe."""
    topic, _ = loaded
    group = f"g848-{uuid.uuid4().hex[:10]}"
    conf = {**consumer_conf(bootstrap, group), "group.protocol": "consumer"}
    c = Consumer(conf)
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        while len(c.assignment()) < len(PRODUCED):
            assert time.monotonic() < deadline, f"assignment: {c.assignment()}"
            c.poll(0.2)
        c.commit(offsets=[TopicPartition(topic, p, off) for p, off in COMMITTED.items()], asynchronous=False)
        listed = {x["group_id"]: x for x in cli_json(bootstrap, "list")}  # type: ignore[union-attr]
        assert listed[group]["group_type"] == "consumer"
        d = cli_json(bootstrap, "describe", group)
        assert isinstance(d, dict)
        assert d["group_type"] == "consumer" and d["state"] == "Stable"
        assert [m["client_id"] for m in d["members"]] == [CLIENT_ID]
        assert sorted(a["partition"] for a in d["members"][0]["assignment"]) == sorted(PRODUCED)
        assert {r["partition"]: r["lag"] for r in d["offsets"]} == {p: PRODUCED[p] - COMMITTED[p] for p in PRODUCED}
        r = cli(bootstrap, "reset-offsets", group, "--all-topics", "--to-earliest")
        assert r.exit_code == 1 and "inactive" in r.output
    finally:
        c.close()
    d = cli_json(bootstrap, "describe", group)
    assert isinstance(d, dict)
    assert d["state"] == "Empty" and d["members"] == []
    r = cli(bootstrap, "reset-offsets", group, "--all-topics", "--to-earliest", "--execute")
    assert r.exit_code == 0, r.output
    assert committed(bootstrap, group, topic) == {0: 0, 1: 0, 2: 0}


# ------------------------------------------------------------------------------------- refusals while active


def test_reset_and_delete_refused_while_a_member_is_active(bootstrap: str, live_group: LiveGroup) -> None:
    g = live_group
    r = cli(bootstrap, "reset-offsets", g.group, "--all-topics", "--to-earliest", "--execute")
    assert r.exit_code == 1
    assert "inactive" in r.output and "Stable" in r.output
    r = cli(bootstrap, "reset-offsets", g.group, "--topic", g.topic, "--to-latest")  # not even a dry run
    assert r.exit_code == 1 and "inactive" in r.output

    r = cli(bootstrap, "delete", g.group)
    assert r.exit_code == 1 and "NON_EMPTY_GROUP" in r.output
    assert committed(bootstrap, g.group, g.topic) == COMMITTED

    g.close()
    r = cli(bootstrap, "delete", g.group)
    assert r.exit_code == 0, r.output
    assert f"deleted group {g.group}" in r.stdout
    assert committed(bootstrap, g.group, g.topic) == {p: None for p in PRODUCED}
    r = cli(bootstrap, "describe", g.group)
    assert r.exit_code == 1 and "does not exist" in r.output
    assert g.group not in {x["group_id"] for x in cli_json(bootstrap, "list")}  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------- reset-offsets


def test_reset_dry_run_changes_nothing(bootstrap: str, empty_group: LiveGroup) -> None:
    g = empty_group
    r = cli(bootstrap, "reset-offsets", g.group, "--all-topics", "--to-earliest")
    assert r.exit_code == 0, r.output
    assert "dry run" in r.stdout and "--execute" in r.stdout
    plan = cli_json(bootstrap, "reset-offsets", g.group, "--topic", g.topic, "--to-latest")
    assert isinstance(plan, dict) and plan["executed"] is False
    assert {e["partition"]: (e["current"], e["target"]) for e in plan["partitions"]} == {
        p: (COMMITTED[p], PRODUCED[p]) for p in PRODUCED
    }
    assert committed(bootstrap, g.group, g.topic) == COMMITTED


def _shift_minus_five() -> dict[int, int]:
    return {p: COMMITTED[p] - 5 if COMMITTED[p] >= 5 else 0 for p in PRODUCED}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--all-topics", "--to-earliest"], {0: 0, 1: 0, 2: 0}),
        (["--all-topics", "--to-latest"], dict(PRODUCED)),
        (["--topic", "{topic}", "--to-offset", "12"], {0: 10, 1: 12, 2: 12}),  # 0 is clamped to its end
        (["--all-topics", "--shift-by", "-5"], _shift_minus_five()),  # partition 0 clamped at the start
        (["--all-topics", "--shift-by", "100"], dict(PRODUCED)),
        (["--all-topics", "--to-datetime", "{base+4.5s}"], {0: 5, 1: 5, 2: 5}),
        (["--all-topics", "--to-datetime", "{base+15s}"], {0: 10, 1: 15, 2: 15}),  # past p0's newest: its end
        (["--topic", "{topic}:1", "--to-offset", "2"], {0: COMMITTED[0], 1: 2, 2: COMMITTED[2]}),
        (["--topic", "{topic}:0,2", "--to-earliest"], {0: 0, 1: COMMITTED[1], 2: 0}),
    ],
    ids=[
        "earliest",
        "latest",
        "offset",
        "shift-back",
        "shift-forward",
        "datetime",
        "datetime-late",
        "one-partition",
        "two-partitions",
    ],
)
def test_reset_execute_lands_where_expected(
    bootstrap: str, loaded: tuple[str, int], empty_group: LiveGroup, args: list[str], expected: dict[int, int]
) -> None:
    topic, base = loaded
    g = empty_group
    subst = {"{topic}": topic, "{base+4.5s}": iso(base + 4500), "{base+15s}": iso(base + 15000)}
    argv = []
    for a in args:
        for k, v in subst.items():
            a = a.replace(k, v)
        argv.append(a)
    r = cli(bootstrap, "reset-offsets", g.group, *argv, "--execute")
    assert r.exit_code == 0, r.output
    assert "committed new offsets" in r.stdout
    assert committed(bootstrap, g.group, topic) == expected
    # The group is still usable: a consumer of it resumes where the reset put it.
    d = cli_json(bootstrap, "describe", g.group)
    assert isinstance(d, dict)
    assert {r["partition"]: r["committed"] for r in d["offsets"]} == expected


def test_reset_reports_clamping_and_refuses_shift_without_commits(bootstrap: str, empty_group: LiveGroup) -> None:
    g = empty_group
    plan = cli_json(bootstrap, "reset-offsets", g.group, "--topic", g.topic, "--to-offset", "25")
    assert isinstance(plan, dict)
    by_p = {e["partition"]: e for e in plan["partitions"]}
    assert (by_p[0]["target"], by_p[0]["requested"], by_p[0]["clamped"]) == (10, 25, True)
    assert (by_p[2]["target"], by_p[2]["clamped"]) == (25, False)
    r = cli(bootstrap, "reset-offsets", g.group, "--topic", g.topic, "--to-offset", "25")
    assert "clamped from 25" in r.stdout

    fresh = f"g-{uuid.uuid4().hex[:10]}"
    r = cli(bootstrap, "reset-offsets", fresh, "--topic", g.topic, "--shift-by", "1")
    assert r.exit_code == 1 and "committed offset" in r.output


def test_reset_of_unknown_group_creates_its_offsets(bootstrap: str, loaded: tuple[str, int]) -> None:
    topic, _ = loaded
    group = f"new-{uuid.uuid4().hex[:10]}"
    plan = cli_json(bootstrap, "reset-offsets", group, "--topic", topic, "--to-offset", "4")
    assert isinstance(plan, dict)
    assert [(e["current"], e["target"]) for e in plan["partitions"]] == [(None, 4)] * 3
    assert committed(bootstrap, group, topic) == {p: None for p in PRODUCED}
    r = cli(bootstrap, "reset-offsets", group, "--topic", topic, "--to-offset", "4", "--execute")
    assert r.exit_code == 0, r.output
    assert committed(bootstrap, group, topic) == {0: 4, 1: 4, 2: 4}
    r = cli(bootstrap, "delete", group)
    assert r.exit_code == 0, r.output


# ------------------------------------------------------------------------------------- errors


def test_unknown_group_errors(bootstrap: str) -> None:
    group = f"missing-{uuid.uuid4().hex[:10]}"
    r = cli(bootstrap, "describe", group)
    assert r.exit_code == 1 and "does not exist" in r.output
    r = cli(bootstrap, "delete", group)
    assert r.exit_code == 1 and "GROUP_ID_NOT_FOUND" in r.output


def test_delete_reports_each_group(bootstrap: str, empty_group: LiveGroup) -> None:
    missing = f"missing-{uuid.uuid4().hex[:10]}"
    r = cli(bootstrap, "delete", empty_group.group, missing)
    assert r.exit_code == 1
    assert f"deleted group {empty_group.group}" in r.stdout
    assert missing in r.stderr and "GROUP_ID_NOT_FOUND" in r.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--all-topics"], "exactly one of"),
        (["--all-topics", "--to-earliest", "--to-latest"], "exactly one of"),
        (["--to-earliest"], "--topic"),
        (["--topic", "x", "--all-topics", "--to-earliest"], "--topic"),
        (["--all-topics", "--to-datetime", "yesterday"], "ISO 8601"),
        (["--topic", "x:a", "--to-earliest"], "TOPIC:P"),
        (["--all-topics", "--to-offset", "-1"], ">= 0"),
    ],
)
def test_reset_usage_errors(args: list[str], message: str) -> None:
    # Refused before any connection: the bootstrap address is never dialled.
    r = CliRunner().invoke(main, ["groups", "reset-offsets", "g", *args, "-b", "127.0.0.1:1"])
    assert r.exit_code == 2, r.output
    assert message in r.output


def test_reset_of_unknown_partition_is_refused(bootstrap: str, loaded: tuple[str, int]) -> None:
    topic, _ = loaded
    r = cli(bootstrap, "reset-offsets", "g-any", "--topic", f"{topic}:7", "--to-earliest")
    assert r.exit_code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in r.output
    r = cli(bootstrap, "reset-offsets", "g-any", "--topic", f"no-such-{uuid.uuid4().hex[:6]}", "--to-earliest")
    assert r.exit_code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in r.output


def test_unreachable_broker_is_a_clean_error() -> None:
    r = CliRunner().invoke(main, ["groups", "list", "-b", "127.0.0.1:1"])
    assert r.exit_code == 1 and "cannot reach" in r.output


def test_entry_point(bootstrap: str) -> None:
    """The installed command (not just the click group in-process)."""
    proc = subprocess.run(
        [sys.executable, "-m", "logbroker", "groups", "list", "-b", bootstrap, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert isinstance(json.loads(proc.stdout), list)
