#!/usr/bin/env python3
"""Broker CPU per Fetch of a 1,000-partition topic, with and without incremental fetch sessions (KIP-227).

A consumer assigned every partition of a wide topic fetches in a loop, as the Java client's
FetchSessionHandler does: INITIAL (session 0, epoch 0) with every partition; while the broker answers a
session id, incremental fetches naming only the partitions whose position moved; when it answers 0 (a
broker without sessions), a full fetch again. Fetches use max_wait_ms=0 so each is one round trip, and
the broker's user+system CPU (from /proc) is read before and after the loop. Two workloads: idle (no new
data) and lightly fed (one record appended to the next partition before every 10th fetch). Trees are
measured side by side, one broker at a time:

    flock /work/tmp/bench.lock python benchmarks/fetch_sessions.py --src old=/tmp/base/src --src new=src

`--java SECONDS` adds a third workload: the real Java consumer (tests/java/ClientTool.java, assigned every
partition, fetch.max.wait.ms=5) polling the idle topic for that long; CPU per Fetch divides by the broker's
own count of Fetch requests (its /metrics).
"""

from __future__ import annotations

import argparse
import itertools
import json
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

from logbroker_devtools.bench.procstat import cpu_seconds
from logbroker_devtools.testing.process import BrokerProcess, free_port

TOPIC = "wide"


class Client:
    """One connection speaking Fetch v12 with logbroker's codec, and a session the way Java keeps one."""

    def __init__(self, port: int, partitions: int) -> None:
        from logbroker.protocol import ApiKey, ApiSpec, api

        self.api = api(ApiKey.Fetch)
        self.spec = ApiSpec(self.api, 0, 12)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.ids = itertools.count(1)
        self.offsets = dict.fromkeys(range(partitions), 0)
        self.moved: set[int] = set(self.offsets)  # partitions the next request must name
        self.sid, self.epoch = 0, 0
        self.sent = self.received = self.listed = 0

    def fetch(self) -> None:
        from logbroker.protocol.messages import decode_response, encode_request

        F = self.api.request
        names = sorted(self.offsets) if self.epoch == 0 else sorted(self.moved)
        parts = [F.FetchTopic.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=self.offsets[p],
                                             last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
                 for p in names]  # fmt: skip
        req = F(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20, isolation_level=0,
                session_id=self.sid, session_epoch=self.epoch, rack_id="", forgotten_topics_data=[],
                topics=[F.FetchTopic(topic=TOPIC, partitions=parts)] if parts else [])  # fmt: skip
        frame = encode_request(self.spec, 12, next(self.ids), "bench", req)
        self.sock.sendall(frame)
        (size,) = struct.unpack(">i", self._exact(4))
        raw = self._exact(size)
        _, resp = decode_response(self.spec, 12, raw)
        self.sent += len(frame)
        self.received += size + 4
        if resp.error_code:
            raise RuntimeError(f"fetch error {resp.error_code}")
        self.moved.clear()
        for t in resp.responses:
            for p in t.partitions:
                self.listed += 1
                if p.records and p.high_watermark > self.offsets[p.partition_index]:
                    self.offsets[p.partition_index] = p.high_watermark
                    self.moved.add(p.partition_index)
        if resp.session_id:
            self.sid, self.epoch = resp.session_id, (1 if self.epoch == 0 else self.epoch + 1)
        else:
            self.sid, self.epoch = 0, 0  # no session: full fetches, asking for one each time (as Java)

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)


def _fetch_requests(metrics_url: str) -> float:
    from urllib.request import urlopen

    with urlopen(metrics_url + "/metrics", timeout=15) as r:
        lines = r.read().decode().splitlines()
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in lines
               if ln.startswith("logbroker_requests_total{") and 'api="Fetch"' in ln)  # fmt: skip


def java_consumer(pid: int, bootstrap: str, metrics_url: str, seconds: int) -> dict[str, float]:
    from logbroker_devtools.testing.peers import JavaClientTool

    tool = JavaClientTool()
    f0, c0 = _fetch_requests(metrics_url), cpu_seconds([pid])
    tool.run("consume", "--bootstrap", bootstrap, "--topic", TOPIC, "--partition", "all", "--count", "-1",
             "--timeout-ms", str(seconds * 1000), "--property", "fetch.max.wait.ms=5",
             timeout=seconds + 120)  # fmt: skip
    f1, c1 = _fetch_requests(metrics_url), cpu_seconds([pid])
    return {"broker_cpu_us_per_fetch": (c1 - c0) / (f1 - f0) * 1e6, "fetches": f1 - f0}


def measure(src: str, partitions: int, fetches: int, java: int = 0) -> dict[str, dict[str, float]]:
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    mport = free_port()
    broker = BrokerProcess(extra_args=["--fsync", "never", "--metrics-listen", f"127.0.0.1:{mport}"],
                           env={"PYTHONPATH": str(Path(src).resolve())})  # fmt: skip
    out: dict[str, dict[str, float]] = {}
    with broker:
        assert broker.proc is not None
        proc, port = broker.proc, broker.port
        bootstrap = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(60)
        producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        for workload in ("idle", "fed"):
            client = Client(port, partitions)
            client.fetch()  # the first, full fetch (and the session) outside the measurement
            feed = itertools.count()
            c0, t0 = cpu_seconds([proc.pid]), time.monotonic()
            for i in range(fetches):
                if workload == "fed" and i % 10 == 0:
                    producer.produce(TOPIC, value=b"x" * 100, partition=next(feed) % partitions)
                    producer.flush(10)
                client.fetch()
            c1, t1 = cpu_seconds([proc.pid]), time.monotonic()
            out[workload] = {
                "broker_cpu_us_per_fetch": (c1 - c0) / fetches * 1e6,
                "fetches_per_s": fetches / (t1 - t0),
                "request_bytes_per_fetch": client.sent / (fetches + 1),
                "response_bytes_per_fetch": client.received / (fetches + 1),
                "partitions_listed_per_fetch": client.listed / (fetches + 1),
                "session": float(client.sid != 0),
            }
            client.sock.close()
        if java:
            out["java"] = java_consumer(proc.pid, bootstrap, f"http://127.0.0.1:{mport}", java)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--src", action="append", required=True, help="NAME=PATH of a source tree (repeatable)")
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--fetches", type=int, default=1000)
    ap.add_argument("--java", type=int, default=0, metavar="SECONDS", help="also a Java consumer for this long")
    args = ap.parse_args()
    trees = dict(s.split("=", 1) for s in args.src)
    results: dict[str, Any] = {}
    for name, src in trees.items():
        results[name] = measure(src, args.partitions, args.fetches, args.java)
        for workload, r in results[name].items():
            print(f"{name} {workload}: {json.dumps({k: round(v, 1) for k, v in r.items()})}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
