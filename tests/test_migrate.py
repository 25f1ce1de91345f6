"""`logbroker migrate`: a logbroker broker copied to Apache Kafka 4.4 with Kafka's own MirrorMaker 2, as a user
leaving the embedded broker for a cluster runs it. Records (keys, values, headers, timestamps), a compacted
topic, topic configs and every group's committed offsets arrive; a consumer switched to the cluster resumes at
the record it would have read next; the report says so. A copy takes MirrorMaker's start and one catch-up
(~20 s); the slow tier has nothing more to add."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from logbroker.jars import jars_available, java_available
from logbroker_devtools.testing.process import BrokerProcess
from support import create_topic, kafka_peer, missing_tool, unique

pytestmark = pytest.mark.timeout(400)


def read_all(bootstrap: str, topic: str, partitions: int, **conf: Any) -> list[Any]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("read"), "enable.auto.commit": False, **conf})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[Any] = []
    idle = time.monotonic()
    while time.monotonic() - idle < 3:
        m = c.poll(0.3)
        if m is not None and m.error() is None:
            out.append((m.partition(), m.key(), m.value(), m.headers(), m.timestamp()))
            idle = time.monotonic()
    c.close()
    return out


def test_migrate_copies_topics_configs_and_group_offsets_to_kafka(tmp_path: Path) -> None:
    if not java_available() or not jars_available("mm2") or not jars_available("kafka"):
        missing_tool("migrate needs java and .ci/fetch-jars mm2 kafka")
    orders, state, group = unique("orders"), unique("state"), unique("app")
    with BrokerProcess(tmp_path / "data") as src, kafka_peer(own=True) as kafka:
        create_topic(src.bootstrap, orders, partitions=2, config={"retention.ms": "3600000"})
        create_topic(src.bootstrap, state, config={"cleanup.policy": "compact"})
        p = Producer({"bootstrap.servers": src.bootstrap, "linger.ms": 5})
        base = int(time.time() * 1000) - 60_000  # recent: retention.ms=1h must not delete them on either side
        for i in range(200):
            p.produce(orders, key=b"k%d" % i, value=b"v%d" % i, headers=[("n", b"%d" % i)], partition=i % 2,
                      timestamp=base + i)  # fmt: skip
        for i in range(60):
            p.produce(state, key=b"s%d" % (i % 10), value=b"x%d" % i)
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": src.bootstrap, "group.id": group, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition(orders, 0, 37), TopicPartition(orders, 1, 100)], asynchronous=False)
        c.close()

        done = subprocess.run([sys.executable, "-m", "logbroker", "migrate", "-b", src.bootstrap, "--to", kafka,
                               "--topics", f"{orders}|{state}", "--json", "--timeout", "240"],
                              capture_output=True, text=True, timeout=360)  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        report = json.loads(done.stdout)

        # Records: the same on both sides, in order, with keys, headers and timestamps.
        assert read_all(kafka, orders, 2) == read_all(src.bootstrap, orders, 2)
        assert read_all(kafka, state, 1) == read_all(src.bootstrap, state, 1)
        # Topic configs came along.
        admin = AdminClient({"bootstrap.servers": kafka})
        for topic, key, value in ((orders, "retention.ms", "3600000"), (state, "cleanup.policy", "compact")):
            res = ConfigResource(ConfigResource.Type.TOPIC, topic)
            assert admin.describe_configs([res])[res].result(30)[key].value == value
        # The report: both sides complete, the group's offsets translated exactly.
        topics = {t["topic"]: t for t in report["topics"]}
        assert topics[orders]["source"]["records"] == topics[orders]["target"]["records"] == 200
        assert topics[state]["complete"] and topics[orders]["complete"]
        assert sorted((g["partition"], g["source_offset"], g["target_offset"], g["exact"]) for g in report["groups"]
                      if g["group"] == group) == [(0, 37, 37, True), (1, 100, 100, True)]  # fmt: skip
        # A consumer switched to the cluster resumes where it left off.
        moved = Consumer({"bootstrap.servers": kafka, "group.id": group, "auto.offset.reset": "earliest"})
        moved.subscribe([orders])
        first: dict[int, bytes] = {}
        deadline = time.monotonic() + 60
        while len(first) < 1 and time.monotonic() < deadline:
            m = moved.poll(0.5)
            if m is not None and m.error() is None:
                first.setdefault(m.partition(), m.key())
        moved.close()
        assert first == {0: b"k74"}  # partition 0 holds the even keys: offset 37 is k74; partition 1 is done
