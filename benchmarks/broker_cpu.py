#!/usr/bin/env python3
"""Broker CPU per GB produced and fetched, driven by a native client (kcat, librdkafka).

A Python client saturates long before the broker does on this machine, so this measures the broker
process itself: its user+system CPU seconds (from /proc) per GB moved, while kcat produces 1 KB records
with acks=all in ~1 MB batches and then consumes them back. Several source trees can be measured side by
side in interleaved rounds (e.g. this checkout against a `git worktree` of the previous commit):

    python benchmarks/broker_cpu.py --mb 512 --rounds 3 --src new=src --src old=/tmp/base/src

`--partitions N` produces instead with the franz-go generator (`lbload`, several acks=all clients) over N
partitions, and reads nothing back: the measure of concurrent appends to many partitions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from logbroker_devtools.bench.procstat import cpu_seconds
from logbroker_devtools.testing.process import BrokerProcess


def kcat_produce(bootstrap: str, payload: Path) -> None:
    """kcat sends the payload's lines to partition 0 of `bench` in big acks=all batches (the native load)."""
    subprocess.run(
        ["kcat", "-P", "-b", bootstrap, "-t", "bench", "-p", "0", "-l", str(payload),
         "-X", "acks=all", "-X", "linger.ms=20", "-X", "batch.size=1000000", "-X", "message.max.bytes=2000000",
         "-X", "queue.buffering.max.kbytes=2000000"],
        check=True, timeout=600,
    )  # fmt: skip


def _payload(path: Path, mb: int) -> int:
    """`mb` MiB of 1 KB newline-delimited records (1023 bytes each plus the delimiter)."""
    line = (b"x" * 1019) + b"%04d\n"
    count = mb * 1024
    with path.open("wb") as f:
        for i in range(count):
            f.write(line % (i % 10_000))
    return count


@contextlib.contextmanager
def serve(src: str, fsync: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`logbroker serve` from the source tree `src` on a free port and a fresh data dir: (bootstrap, process)."""
    broker = BrokerProcess(extra_args=["--fsync", fsync], env={"PYTHONPATH": str(Path(src).resolve())})
    with broker as running:  # started on entry; stopped (SIGTERM) and its data dir removed on exit
        assert running.proc is not None
        yield running.bootstrap, running.proc


def measure_partitions(src: str, records: int, partitions: int, clients: int, fsync: str) -> dict[str, float]:
    """lbload produces `records` 1 KB records over `partitions` partitions from `clients` producers."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from logbroker_devtools.bench.native import lbload

    with serve(src, fsync) as (bootstrap, proc):
        AdminClient({"bootstrap.servers": bootstrap}).create_topics([NewTopic("bench", partitions, 1)])["bench"].result(
            30
        )
        marks: dict[str, float] = {}

        def connected(_line: dict) -> None:
            marks["c0"], marks["t0"] = cpu_seconds([proc.pid]), time.monotonic()

        sample = lbload(bootstrap, "bench", clients=clients, records=records, size=1024, partitions=partitions,
                        on_connected=connected)  # fmt: skip
        cpu, secs = cpu_seconds([proc.pid]) - marks["c0"], time.monotonic() - marks["t0"]
        return {
            "produce_cpu_s_per_gb": cpu / (sample.bytes / 1e9),
            "produce_mb_s": sample.bytes / 1e6 / secs,
            "records_per_s": sample.records / secs,
        }


def measure(src: str, payload: Path, records: int, fsync: str) -> dict[str, float]:
    with serve(src, fsync) as (bootstrap, proc):
        subprocess.run(
            ["kcat", "-b", bootstrap, "-L", "-t", "bench"], check=True, capture_output=True, timeout=30
        )  # auto-creates the topic
        nbytes = payload.stat().st_size - records  # payload without delimiters
        c0, t0 = cpu_seconds([proc.pid]), time.monotonic()
        kcat_produce(bootstrap, payload)
        c1, t1 = cpu_seconds([proc.pid]), time.monotonic()
        out = subprocess.run(
            ["kcat", "-C", "-b", bootstrap, "-t", "bench", "-p", "0", "-o", "beginning", "-e", "-q", "-f", "%o\n",
             "-X", "fetch.max.bytes=52428800", "-X", "max.partition.fetch.bytes=10485760"],
            check=True, timeout=600, capture_output=True,
        )  # fmt: skip
        c2, t2 = cpu_seconds([proc.pid]), time.monotonic()
        got = out.stdout.count(b"\n")
        if got != records:
            raise RuntimeError(f"consumed {got} records, produced {records}")
        gb = nbytes / 1e9
        return {
            "produce_cpu_s_per_gb": (c1 - c0) / gb,
            "fetch_cpu_s_per_gb": (c2 - c1) / gb,
            "produce_mb_s": nbytes / 1e6 / (t1 - t0),
            "fetch_mb_s": nbytes / 1e6 / (t2 - t1),
        }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", action="append", required=True, help="NAME=PATH of a source tree (repeatable)")
    ap.add_argument("--mb", type=int, default=512, help="MiB produced per round (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fsync", default="always")
    ap.add_argument("--partitions", type=int, default=0, help="produce with lbload over this many partitions")
    ap.add_argument("--clients", type=int, default=4, help="lbload producers (with --partitions)")
    args = ap.parse_args()
    if shutil.which("kcat") is None:
        ap.error("kcat not found (apt-get install kcat)")
    trees = dict(s.split("=", 1) for s in args.src)
    with tempfile.TemporaryDirectory() as tmp:
        payload = Path(tmp) / "payload"
        records = _payload(payload, args.mb)
        runs: dict[str, list[dict[str, float]]] = {n: [] for n in trees}
        for r in range(args.rounds):
            for name, src in trees.items():  # interleaved: drift on the shared machine hits every tree alike
                if args.partitions:
                    runs[name].append(measure_partitions(src, records, args.partitions, args.clients, args.fsync))
                else:
                    runs[name].append(measure(src, payload, records, args.fsync))
                print(f"round {r + 1} {name}: {json.dumps({k: round(v, 3) for k, v in runs[name][-1].items()})}")
    print("best of rounds (lowest CPU per GB, highest MB/s):")
    for name, rs in runs.items():
        best = {k: (min if "cpu" in k else max)(r[k] for r in rs) for k in rs[0]}
        print(f"  {name}: " + ", ".join(f"{k}={v:.3f}" for k, v in best.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
