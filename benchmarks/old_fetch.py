#!/usr/bin/env python3
"""What an old consumer costs the broker: Fetch v1 (message format 0) and v3 (format 1), which are answered by
converting the stored v2 batches, against Fetch v11 (the stored bytes as they are), on logbroker and on Apache
Kafka 3.9 (the last Kafka that converts), side by side in one run.

One topic of one partition is filled with `--mb` MiB of 1 KB records (librdkafka, `--compression`), then
read from offset 0 to the end by one connection per fetch version, 1 MiB per request, max_wait_ms=0. The
broker's user+system CPU (from /proc) is read around each read; reported per GB of record payload read,
with the rate the (Python) reader reached:

    python benchmarks/old_fetch.py --mb 200 [--compression lz4] [--no-kafka]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from confluent_kafka import Producer

from logbroker.protocol import ApiKey, api
from logbroker.protocol.legacy import read_message_set
from logbroker.protocol.records import last_offset_of
from logbroker_devtools.bench.procstat import cpu_seconds
from logbroker_devtools.client.connection import Connection
from logbroker_devtools.testing.peers import Kafka39Peer
from logbroker_devtools.testing.process import BrokerProcess

F = api(ApiKey.Fetch).request
TOPIC = "old-fetch"
RECORD = 1024


def fill(bootstrap: str, mb: int, compression: str) -> int:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                  "compression.type": compression, "queue.buffering.max.kbytes": 1 << 20})  # fmt: skip
    count = mb * 1024 * 1024 // RECORD
    value = b"x" * (RECORD - 16)
    for i in range(count):
        while True:
            try:
                p.produce(TOPIC, key=b"%015d" % i, value=value, partition=0)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0
    return count


def read(port: int, version: int, end: int) -> tuple[int, float]:
    """Fetch from 0 until `end`: (payload bytes received, seconds)."""
    got = 0
    offset = 0
    start = time.monotonic()
    with Connection("127.0.0.1", port, f"old-fetch-v{version}") as c:
        while offset < end:
            part = F.FetchTopic.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
            resp = c.do(F(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                          topics=[F.FetchTopic(topic=TOPIC, partitions=[part])]), version)  # fmt: skip
            p = resp.responses[0].partitions[0]
            assert p.error_code == 0, p
            data = bytes(p.records)
            got += len(data)
            if version >= 4:
                offset = last_offset_of(data) + 1
            else:
                messages = read_message_set(data)
                assert messages, f"no whole message at offset {offset}"
                offset = messages[-1].offset + 1
    return got, time.monotonic() - start


def measure(name: str, port: int, pids: list[int], records: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    payload = records * RECORD / 1e9
    for version in (11, 3, 1):
        c0 = cpu_seconds(pids)
        nbytes, secs = read(port, version, records)
        cpu = cpu_seconds(pids) - c0
        out[f"v{version}"] = {"broker_cpu_s_per_GB": round(cpu / payload, 3), "MB_per_s": round(records * RECORD /
                              secs / 1e6, 1), "response_MB": round(nbytes / 1e6, 1)}  # fmt: skip
        print(name, f"v{version}", json.dumps(out[f"v{version}"]), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4"])
    ap.add_argument("--no-kafka", action="store_true", help="logbroker only")
    args = ap.parse_args()
    results: dict[str, Any] = {}
    with BrokerProcess(extra_args=["--fsync", "never"]) as broker:
        assert broker.proc is not None
        records = fill(broker.bootstrap, args.mb, args.compression)
        results["logbroker"] = measure("logbroker", broker.port, [broker.proc.pid], records)
    if not args.no_kafka:
        with Kafka39Peer(heap="1g") as kafka:
            records = fill(kafka.bootstrap, args.mb, args.compression)
            results["kafka39"] = measure("kafka39", kafka.port, kafka.pids, records)
    print(json.dumps({"mb": args.mb, "compression": args.compression, **results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
