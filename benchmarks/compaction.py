#!/usr/bin/env python3
"""Produce and consume on a compacted topic while the cleaner runs, next to an uncompacted topic, on logbroker
and Apache Kafka 4.4 in one run; and the cleaner's own throughput (from each broker's cleaning log lines).

    python benchmarks/compaction.py                  # 200 MB per topic, 10k keys, 1 KB values
    python benchmarks/compaction.py --mb 500 --keys 100000 --only logbroker

Both brokers get the same topics: `plain` (delete) and `compact` (cleanup.policy=compact, 8 MiB segments,
min.cleanable.dirty.ratio 0.1, cleaner backoff 1 s), written by one confluent-kafka producer each (the Python
client caps near 150-180 MB/s here: the ratios between topics and brokers are the point).
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from pathlib import Path

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

from logbroker_devtools.testing.peers import KafkaPeer
from logbroker_devtools.testing.process import BrokerProcess

SEGMENT = 8 << 20


def create(bootstrap: str, name: str, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=config)])[name].result(30)
    time.sleep(1)


def produce(bootstrap: str, topic: str, mb: int, keys: int) -> float:
    value = os.urandom(512) * 2
    n = mb * 1_000_000 // len(value)
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20,
                     "queue.buffering.max.kbytes": 1 << 20})  # fmt: skip
    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, key=b"key-%08d" % (i % keys), value=value)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    return n * len(value) / 1e6 / (time.perf_counter() - start)


def consume(bootstrap: str, topic: str) -> tuple[float, int]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time()}", "enable.auto.commit": False,
                     "enable.partition.eof": True, "fetch.max.bytes": 50 << 20})  # fmt: skip
    c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    start = time.perf_counter()
    total = count = 0
    while True:
        for m in c.consume(1000, 1.0):
            if m.error() is not None:
                elapsed = time.perf_counter() - start
                c.close()
                return total / 1e6 / elapsed, count
            total += len(m.value() or b"")
            count += 1


def run(name: str, bootstrap: str, mb: int, keys: int) -> dict[str, float]:
    create(bootstrap, "plain", {"segment.bytes": str(SEGMENT)})
    create(bootstrap, "compact", {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT),
                                  "min.cleanable.dirty.ratio": "0.1"})  # fmt: skip
    out = {"produce plain": produce(bootstrap, "plain", mb, keys)}
    out["produce compact"] = produce(bootstrap, "compact", mb, keys)
    time.sleep(3)  # the cleaner catches up with the last segments
    out["consume plain"], n_plain = consume(bootstrap, "plain")
    out["consume compact"], n_compact = consume(bootstrap, "compact")
    out["records read plain"], out["records read compact"] = n_plain, n_compact
    print(f"{name}: " + ", ".join(f"{k} {v:.1f}" for k, v in out.items()), flush=True)
    return out


def cleaner_rates(log: Path, pattern: str) -> list[float]:
    text = log.read_text(errors="replace") if log.exists() else ""
    return [float(x) for x in re.findall(pattern, text)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--only", choices=("logbroker", "kafka"))
    a = ap.parse_args()
    results = {}
    if a.only != "kafka":
        d = Path(tempfile.mkdtemp(prefix="bench-compaction-"))
        with BrokerProcess(d / "data", env={"LOGBROKER_LOG_CLEANER_BACKOFF_MS": "1000"}) as b:
            results["logbroker"] = run("logbroker", b.bootstrap, a.mb, a.keys)
            rates = cleaner_rates(b.log_path, r"cleaned .*?\(([\d.]+) MB/s\)")
        if rates:
            print(f"logbroker cleaner: {len(rates)} cleanings, median {sorted(rates)[len(rates) // 2]:.1f} MB/s")
    if a.only != "logbroker":
        with KafkaPeer(server_properties={"log.cleaner.backoff.ms": 1000}) as k:
            results["kafka"] = run("kafka", k.bootstrap, a.mb, a.keys)
    if len(results) == 2:
        for key in ("produce plain", "produce compact", "consume plain", "consume compact"):
            lb, kf = results["logbroker"][key], results["kafka"][key]
            print(f"{key}: logbroker {lb:.1f} MB/s, kafka {kf:.1f} MB/s, ratio {lb / kf:.2f}x")


if __name__ == "__main__":
    main()
