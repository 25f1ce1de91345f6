#!/usr/bin/env python3
"""What a topic's compression.type costs the broker: batches arriving in one codec are recompressed to the
topic's on write. Broker CPU per GB produced for compression.type=producer (stored as they come) and each
codec, on logbroker and on Apache Kafka 4.4, side by side in one run.

The franz-go generator (`lbload`, native, acks=all, ~1 MB batches) produces `--mb` MiB of 1 KB log-like
records (`-payload text`: they compress about 4x) in `--producer` codec to a topic per compression.type; the
broker's user+system CPU (from /proc) is read around the timed produce:

    python benchmarks/recompress.py --mb 256 [--producer lz4] [--no-kafka]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from logbroker_devtools.bench.native import lbload
from logbroker_devtools.bench.procstat import cpu_seconds
from logbroker_devtools.testing.peers import KafkaPeer
from logbroker_devtools.testing.process import BrokerProcess

TYPES = ["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]


def measure(name: str, bootstrap: str, pids: list[int], mb: int, producer: str, types: list[str],
            clients: int) -> dict[str, Any]:  # fmt: skip
    admin = AdminClient({"bootstrap.servers": bootstrap})
    out: dict[str, Any] = {}
    for kind in types:
        topic = f"rc-{kind}"
        admin.create_topics([NewTopic(topic, 2, 1, config={"compression.type": kind})])[topic].result(30)
        marks: dict[str, float] = {}

        def connected(_line: dict[str, Any], marks: dict[str, float] = marks) -> None:
            marks["c0"], marks["t0"] = cpu_seconds(pids), time.monotonic()

        sample = lbload(bootstrap, topic, clients=clients, records=mb * 1024, size=1024, partitions=2,
                        on_connected=connected, compression=producer, payload="text")  # fmt: skip
        cpu, secs = cpu_seconds(pids) - marks["c0"], time.monotonic() - marks["t0"]
        gb = sample.bytes / 1e9
        out[kind] = {"cpu_s_per_GB": round(cpu / gb, 2), "MB_per_s": round(sample.bytes / 1e6 / secs, 1)}
        print(name, kind, json.dumps(out[kind]), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--mb", type=int, default=256, help="MiB produced per compression.type")
    ap.add_argument("--producer", default="lz4", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    ap.add_argument("--types", default=",".join(TYPES), help="compression.type values, comma-separated")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--no-kafka", action="store_true", help="logbroker only")
    args = ap.parse_args()
    types = args.types.split(",")
    results: dict[str, Any] = {}
    with BrokerProcess() as broker:  # fsync=always, the default
        assert broker.proc is not None
        results["logbroker"] = measure("logbroker", broker.bootstrap, [broker.proc.pid], args.mb, args.producer,
                                       types, args.clients)  # fmt: skip
    if not args.no_kafka:
        with KafkaPeer(heap="1g") as kafka:
            results["kafka"] = measure("kafka", kafka.bootstrap, kafka.pids, args.mb, args.producer, types,
                                       args.clients)  # fmt: skip
    print(json.dumps({"mb": args.mb, "producer": args.producer, **results}))
    if "kafka" in results:
        print(f"{'compression.type':<16} {'logbroker s/GB':>15} {'kafka s/GB':>11} {'ratio':>6}")
        for kind in types:
            lb, kf = results["logbroker"][kind]["cpu_s_per_GB"], results["kafka"][kind]["cpu_s_per_GB"]
            print(f"{kind:<16} {lb:>15.2f} {kf:>11.2f} {lb / kf:>6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
