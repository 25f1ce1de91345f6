#!/usr/bin/env python3
"""What validating a produce costs: the record walk per codec and record size, and what other clients see
while the broker walks a hostile request.

    python benchmarks/produce_validation.py                # in-process: validate_batch on ~1 MB batches
    python benchmarks/produce_validation.py --stall        # plus a real broker: ApiVersions latency of a
                                                           # second client while 16 x 1 MB of tiny records
                                                           # are validated
    python benchmarks/produce_validation.py --kcat 512     # plus broker_cpu.py's kcat load on this tree and
                                                           # on Apache Kafka 4.4: CPU per GB, MB/s

The broker-level cost next to Apache Kafka is measured by benchmarks/broker_cpu.py (kcat, broker CPU per
GB) and `logbroker bench --workloads throughput`; docs/design.md ("Produce validation") has the numbers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

from logbroker.protocol.records import Compression, NewRecord, build_batch
from logbroker.protocol.validate import validate_batch

NOW = int(time.time() * 1000)
LIMITS = {
    "max_message_bytes": 1 << 30,
    "log_append_time": False,
    "before_max_ms": (1 << 63) - 1,
    "after_max_ms": 3_600_000,
    "max_inflated_bytes": 100 << 20,
}


def _batch(size: int, codec: int, target: int = 1 << 20) -> tuple[bytes, int]:
    """About `target` bytes of records of `size` bytes (half random, half repeated: compressible 2:1)."""
    n = max(1, target // (size + 8))
    half = os.urandom(size // 2)
    recs = [NewRecord(None, half + half) for _ in range(n)]
    return build_batch(recs, compression=codec, now_ms=NOW), n


def walk_costs(rounds: int) -> None:
    print(f"{'records':>10} {'codec':>7} {'batch bytes':>12} {'us/batch':>9} {'ns/record':>10} {'s/GB records':>13}")
    for size in (100, 1000, 10_000):
        for name, codec in Compression.NAMES.items():
            raw, n = _batch(size, codec)
            buf = bytearray(raw)
            times = []
            for _ in range(rounds):
                t = time.perf_counter()
                validate_batch(memoryview(buf), now_ms=NOW, **LIMITS)
                times.append(time.perf_counter() - t)
            best = min(times)
            payload = n * size
            print(f"{n:>6} x {size:<5} {name:>5} {len(raw):>12,} {best * 1e6:>9.0f} {best / n * 1e9:>10.0f} "
                  f"{best / payload * 1e9:>13.2f}")  # fmt: skip


def _tiny_records_batch(n: int) -> bytes:
    """`n` records of 7 bytes each (null key and value): the most records a megabyte can hold."""
    body = bytearray()
    for i in range(n):
        rec = bytearray(b"\x00\x00")  # attributes, timestamp delta
        off = (i << 1) if i < 1 << 30 else 0
        while off >= 0x80:
            rec.append((off & 0x7F) | 0x80)
            off >>= 7
        rec.append(off)
        rec += b"\x01\x01\x00"  # null key, null value, no headers
        body.append(len(rec) << 1)
        body += rec
    template = bytearray(build_batch([NewRecord(None, None)], now_ms=NOW))
    raw = template[:61] + body
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    struct.pack_into(">i", raw, 23, n - 1)
    struct.pack_into(">i", raw, 57, n)
    from crc32c import crc32c

    struct.pack_into(">I", raw, 17, crc32c(raw[21:]))
    return bytes(raw)


def stall(partitions: int) -> None:
    from logbroker.protocol import ApiKey, api
    from logbroker_devtools.client.connection import Connection, KafkaClient, ProduceRequest
    from logbroker_devtools.testing.process import BrokerProcess

    ApiVersions = api(ApiKey.ApiVersions).request
    with tempfile.TemporaryDirectory() as tmp:
        proc = BrokerProcess(Path(tmp) / "data")
        proc.start()
        try:
            topic = "stall"
            admin = KafkaClient(proc.bootstrap)
            admin.create_topic(topic, partitions=partitions)
            admin.close()
            tiny = _tiny_records_batch(110_000)
            print(f"hostile request: {partitions} partitions x {len(tiny):,} bytes ({110_000:,} records each)")
            host, port = proc.bootstrap.rsplit(":", 1)
            latencies: list[float] = []
            done = threading.Event()

            def probe() -> None:
                with Connection(host, int(port)) as c:
                    while not done.is_set():
                        t = time.perf_counter()
                        c.do(ApiVersions(), 0)
                        latencies.append(time.perf_counter() - t)
                        time.sleep(0.005)

            th = threading.Thread(target=probe)
            th.start()
            time.sleep(0.3)
            P = ProduceRequest.TopicProduceData
            req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=60_000, topic_data=[
                P(name=topic, partition_data=[P.PartitionProduceData(index=i, records=tiny)
                                              for i in range(partitions)])])  # fmt: skip
            with Connection(host, int(port), timeout=120) as c:
                t = time.perf_counter()
                resp = c.do(req)
                took = time.perf_counter() - t
            time.sleep(0.3)
            done.set()
            th.join()
            codes = {p.error_code for p in resp.responses[0].partition_responses}
            print(f"produce answered in {took:.2f} s (error codes {sorted(codes)}); meanwhile {len(latencies)} "
                  f"ApiVersions round trips: median {statistics.median(latencies) * 1e3:.1f} ms, "
                  f"max {max(latencies) * 1e3:.1f} ms")  # fmt: skip
        finally:
            proc.stop()


def kcat_side_by_side(mb: int, rounds: int, fsync: str) -> None:
    """benchmarks/broker_cpu.py's kcat load (1 KB records, acks=all, ~1 MB batches) on this tree's broker
    and on Apache Kafka 4.4 in interleaved rounds: broker CPU seconds per GB and MB/s, best of rounds."""
    import json
    import subprocess

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import broker_cpu  # the same payload, kcat settings and /proc accounting

    from logbroker_devtools.testing.peers import KafkaPeer

    def kafka_round(payload: Path, records: int) -> dict[str, float]:
        with KafkaPeer() as peer:
            pid = peer.pids[0]
            bootstrap = str(peer.bootstrap)
            subprocess.run(["kcat", "-b", bootstrap, "-L", "-t", "bench"], check=True, capture_output=True, timeout=60)
            time.sleep(2)  # the auto-created partition gets its leader
            nbytes = payload.stat().st_size - records
            c0, t0 = broker_cpu._cpu_seconds(pid), time.monotonic()
            broker_cpu.kcat_produce(bootstrap, payload)
            c1, t1 = broker_cpu._cpu_seconds(pid), time.monotonic()
            gb = nbytes / 1e9
            return {"produce_cpu_s_per_gb": (c1 - c0) / gb, "produce_mb_s": nbytes / 1e6 / (t1 - t0)}

    src = str(Path(__file__).resolve().parents[1] / "src")
    with tempfile.TemporaryDirectory() as tmp:
        payload = Path(tmp) / "payload"
        records = broker_cpu._payload(payload, mb)
        runs: dict[str, list[dict[str, float]]] = {"logbroker": [], "kafka": []}
        for r in range(rounds):
            runs["logbroker"].append(broker_cpu.measure(src, payload, records, fsync))
            runs["kafka"].append(kafka_round(payload, records))
            for name, rs in runs.items():
                print(f"round {r + 1} {name}: {json.dumps({k: round(v, 3) for k, v in rs[-1].items()})}")
    print("best of rounds (lowest CPU per GB, highest MB/s):")
    for name, rs in runs.items():
        best = {k: (min if "cpu" in k else max)(x[k] for x in rs) for k in ("produce_cpu_s_per_gb", "produce_mb_s")}
        print(f"  {name}: " + ", ".join(f"{k}={v:.3f}" for k, v in best.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7, help="best of this many validations per batch")
    ap.add_argument("--stall", action="store_true", help="also measure other clients' latency on a real broker")
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--kcat", type=int, metavar="MB", help="also produce MB MiB with kcat to this tree and to Kafka")
    ap.add_argument("--kcat-rounds", type=int, default=3)
    ap.add_argument("--fsync", default="always")
    args = ap.parse_args()
    walk_costs(args.rounds)
    if args.stall:
        stall(args.partitions)
    if args.kcat:
        kcat_side_by_side(args.kcat, args.kcat_rounds, args.fsync)
    return 0


if __name__ == "__main__":
    sys.exit(main())
