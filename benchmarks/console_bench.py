"""How long each web-console page takes to render on a cluster with 1,000 partitions and 100 groups, on the
embedded broker (`logbroker serve --console`) and on Apache Kafka 4.4 (`logbroker console -b`), in one run.

    .venv/bin/python benchmarks/console_bench.py [--topics 10] [--partitions 100] [--groups 100] [--rounds 7]
                                                 [--kafka/--no-kafka] [--json out.json]

Every group has committed offsets on every partition of one topic (100 partitions each: lag is computed over
them); 20,000 records of 100 bytes are spread over the topics. Each page is fetched `rounds` times after one
warm-up (the first request of a session makes the admin clients), and the median and the slowest are
reported in milliseconds: the time from the request to the last byte on loopback, as a browser waits for it.
The message browser reads a 50-record page of a partition holding 20,000 records, and a search that scans
the whole partition: it is bounded by its scan limit, never by the partition's size.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from logbroker_devtools.testing.net import free_port
from logbroker_devtools.testing.process import BrokerProcess

PAGES = ["/", "/topics", "/topics/bench-0", "/topics/bench-0/messages?partition=0&mode=end&limit=50",
         "/topics/big/messages?partition=0&mode=beginning&contains=no-such-needle", "/groups",
         "/groups/view?id=group-0", "/transactions", "/users"]  # fmt: skip


def populate(bootstrap: str, topics: int, partitions: int, groups: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(f"bench-{i}", partitions, 1) for i in range(topics)] + [NewTopic("big", 1, 1)]
    for fut in admin.create_topics(new).values():
        fut.result()
    time.sleep(2)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    value = b"x" * 100
    for i in range(20_000):
        p.produce(f"bench-{i % topics}", value, partition=i % partitions)
        p.produce("big", value, partition=0)
        if i % 5000 == 0:
            p.flush()
    p.flush()
    for g in range(groups):
        t = f"bench-{g % topics}"
        offsets = [TopicPartition(t, q, 1) for q in range(partitions)]
        group = f"group-{g}"
        admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, offsets)])[group].result()


def fetch(url: str, opener: Any) -> float:
    t = time.perf_counter()
    with opener.open(url, timeout=60) as r:
        r.read()
        assert r.status == 200, (url, r.status)
    return (time.perf_counter() - t) * 1000


def measure(base: str, rounds: int) -> dict[str, dict[str, float]]:
    import http.cookiejar

    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    out = {}
    for page in PAGES:
        fetch(base + page, opener)
        times = [fetch(base + page, opener) for _ in range(rounds)]
        out[page] = {"median_ms": round(statistics.median(times), 1), "max_ms": round(max(times), 1)}
    return out


@contextlib.contextmanager
def logbroker_console() -> Iterator[tuple[str, str]]:
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        proc = BrokerProcess(Path(d) / "data", extra_args=["--console", f"127.0.0.1:{port}"])
        proc.start()
        try:
            yield proc.bootstrap, f"http://127.0.0.1:{port}"
        finally:
            proc.stop()


@contextlib.contextmanager
def kafka_console() -> Iterator[tuple[str, str]]:
    from logbroker_devtools.testing import peers

    with peers.KafkaPeer(server_properties={"group.initial.rebalance.delay.ms": 0}) as kafka:
        port = free_port()
        command = [sys.executable, "-m", "logbroker", "console", "-b", kafka.bootstrap, "--listen", f"127.0.0.1:{port}"]
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(3)
            yield kafka.bootstrap, f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(15)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topics", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--kafka", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    results: dict[str, Any] = {"topics": args.topics, "partitions_per_topic": args.partitions, "groups": args.groups}
    targets = [("logbroker", logbroker_console)] + ([("kafka", kafka_console)] if args.kafka else [])
    for name, start in targets:
        with start() as (bootstrap, base):
            populate(bootstrap, args.topics, args.partitions, args.groups)
            results[name] = measure(base, args.rounds)
    print(f"{'page':<78} " + " ".join(f"{n + ' median/max ms':>28}" for n, _ in targets))
    for page in PAGES:
        cells = [f"{results[n][page]['median_ms']:>12.1f} / {results[n][page]['max_ms']:<12.1f}" for n, _ in targets]
        print(f"{page:<78} " + " ".join(f"{c:>28}" for c in cells))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
