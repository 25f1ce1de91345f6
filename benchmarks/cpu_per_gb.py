"""Broker CPU per GB produced and consumed, for several native load generators and batch shapes, on logbroker
and Apache Kafka side by side.

    .venv/bin/python benchmarks/cpu_per_gb.py [--mb 500] [--targets logbroker,kafka] [--rounds 1]
                                              [--generators kcat,perf,franz] [--shapes 1m,64k,16k]
                                              [--hogs 0] [--fsync always] [--json out.json]

Each produce writes --mb MB of 1 KB records (acks=all, no compression) to a fresh one-partition topic:

* kcat: librdkafka 2.0.2 (kcat -P from a file), idempotence off (librdkafka's default);
* perf: Kafka's ProducerPerformance (the Java client; idempotent by default, as every Java producer since 3.0);
* franz: the franz-go generator (`lbload`, one client; idempotent, franz-go's default).

Shapes: the producer's batch size and linger: 1m (1,000,000 bytes, 5 ms), 64k (65,536, 5 ms) and 16k (16,384, the Java
client's default, 5 ms). Consumers read back the kcat 1m topic: kcat -C (librdkafka, its defaults: 1 MB per
partition and fetch) and ConsumerPerformance (the Java client, its defaults: 1 MB per partition, 50 MB per fetch).
Every produce row runs on a broker of its own, started for it (see `one_target`); the consumers read on the kcat 1m
one. The broker's CPU (user + system, every process of its tree, from /proc) is read from when the generator holds its
connection (ProducerPerformance: from when the tool starts, its JVM start-up is a second or two of an idle broker,
subtracted at the broker's own idle rate, measured first) to when it exits. --hogs N runs N busy loops beside the
brokers (a busy machine). The one-record-per-request rows are `logbroker bench --workloads native`'s.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from logbroker_devtools.bench.native import consumer_perf, lbload, producer_perf
from logbroker_devtools.bench.procstat import BrokerView

SHAPES = {"1m": (1_000_000, 5), "64k": (65_536, 5), "16k": (16_384, 5)}
SIZE = 1024
FSYNC = ["always"]  # logbroker's --fsync (set from the command line)


@contextlib.contextmanager
def broker(name: str, workdir: Path) -> Iterator[str]:
    if name == "logbroker":
        from logbroker_devtools.testing.process import BrokerProcess

        with BrokerProcess(workdir / "logbroker-data", own_session=True, extra_args=["--fsync", FSYNC[0]]) as proc:
            yield proc.bootstrap
    else:
        from logbroker_devtools.testing.peers import KafkaPeer

        with KafkaPeer(heap="1g") as peer:
            yield peer.bootstrap


@contextlib.contextmanager
def hogs(n: int) -> Iterator[None]:
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def create(bootstrap: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"cpu-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the result: its handle answers it
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(60)
    return name


def idle_rate(view: BrokerView, seconds: float = 3.0) -> float:
    c0 = view.cpu()
    time.sleep(seconds)
    return (view.cpu() - c0) / seconds


def kcat_produce(bootstrap: str, topic: str, records: int, payload: Path, batch: int, linger: int) -> float:
    args = ["kcat", "-P", "-q", "-b", bootstrap, "-t", topic, "-p", "0", "-l", str(payload), "-X", "acks=all",
            "-X", f"linger.ms={linger}", "-X", f"batch.size={batch}",
            "-X", "queue.buffering.max.kbytes=1000000"]  # fmt: skip
    t0 = time.monotonic()
    subprocess.run(args, check=True, timeout=900)
    return time.monotonic() - t0


def kcat_consume(bootstrap: str, topic: str, records: int) -> float:
    t0 = time.monotonic()
    out = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
                          "-f", "%o\n"], check=True, timeout=900, capture_output=True)  # fmt: skip
    seconds = time.monotonic() - t0
    if (got := out.stdout.count(b"\n")) != records:
        raise RuntimeError(f"kcat read {got} of {records}")
    return seconds


def timed(view: BrokerView, idle: float, run: Callable[[], float]) -> tuple[float, float]:
    """(broker CPU seconds net of its idle rate, wall seconds) of run()."""
    c0, t0 = view.cpu(), time.monotonic()
    run()
    wall = time.monotonic() - t0
    return max(view.cpu() - c0 - idle * wall, 0.0), wall


def produce(gen: str, boot: str, view: BrokerView, idle: float, topic: str, shape: tuple[int, int], records: int,
            payload: Path) -> tuple[float, float]:  # fmt: skip
    """(broker CPU seconds, wall seconds) of one generator's produce of ``records`` to ``topic``."""
    batch, linger = shape
    if gen == "kcat":
        return timed(view, idle, lambda: kcat_produce(boot, topic, records, payload, batch, linger))
    if gen == "perf":
        props = ("acks=all", f"batch.size={batch}", f"linger.ms={linger}", "compression.type=none",
                 "max.request.size=2000000", "buffer.memory=67108864")  # fmt: skip
        return timed(view, idle, lambda: producer_perf(boot, topic, records, SIZE, props).seconds)
    marks: dict[str, float] = {}

    def connected(_line: dict[str, Any]) -> None:
        marks["c0"], marks["t0"] = view.cpu(), time.monotonic()

    lbload(boot, topic, clients=1, records=records, size=SIZE, linger_ms=linger, batch_bytes=batch,
           on_connected=connected)  # fmt: skip
    wall = time.monotonic() - marks["t0"]
    return max(view.cpu() - marks["c0"] - idle * wall, 0.0), wall


def _perf_seconds(bootstrap: str, topic: str, records: int) -> float:
    return consumer_perf(bootstrap, topic, records, SIZE).seconds


def one_target(name: str, args: argparse.Namespace, payload: Path, records: int) -> list[dict[str, Any]]:
    """Every (generator, shape) produce on a broker of its own, started on an empty data directory; the kcat 1m
    topic is read back on its broker. Fresh brokers because the machine's own write path is not steady: on this
    VM the fourth GB written by one broker process cost 2.2-2.9 s/GB against 0.7 for each of the first three, all
    of it system time in the kernel's copy into the page cache (perf: copy_folio_from_iter_atomic, 67%), so rows
    measured late in a long run would be charged for it."""
    rows: list[dict[str, Any]] = []
    gb = records * SIZE / 1e9

    def row(kind: str, gen: str, shape: str, cpu: float, wall: float) -> None:
        rows.append({"target": name, "kind": kind, "generator": gen, "shape": shape,
                     "cpu_s_per_gb": round(cpu / gb, 3), "mb_per_s": round(gb * 1e3 / wall, 1)})  # fmt: skip
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)

    for gen in args.generators:
        for shape in args.shapes:
            with tempfile.TemporaryDirectory(prefix="cpu-per-gb-", dir=args.workdir) as tmp, \
                    broker(name, Path(tmp)) as boot:  # fmt: skip
                view = BrokerView.find(boot)
                assert view is not None, "the broker's process was not found"
                warm = create(boot)  # JIT, caches: not measured
                lbload(boot, warm, clients=1, records=min(records, 100_000), size=SIZE, partitions=1)
                idle = idle_rate(view)
                topic = create(boot)
                row("produce", gen, shape, *produce(gen, boot, view, idle, topic, SHAPES[shape], records, payload))
                if gen != "kcat" or shape != "1m":
                    continue
                # A group consumer's first FindCoordinator creates __consumer_offsets (50 partitions, on either
                # broker): a one-time cost, not the consume's, so the warm topic is read by one first.
                consumer_perf(boot, warm, min(records, 100_000), SIZE)
                cpu, wall = timed(view, idle, functools.partial(kcat_consume, boot, topic, records))
                row("consume", "kcat", "defaults", cpu, wall)
                cpu, wall = timed(view, idle, functools.partial(_perf_seconds, boot, topic, records))
                row("consume", "perf", "defaults", cpu, wall)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--mb", type=int, default=500, help="MB per produce (1 KB records)")
    ap.add_argument("--targets", default="logbroker,kafka")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--generators", default="kcat,perf,franz")
    ap.add_argument("--shapes", default="1m,64k,16k")
    ap.add_argument("--hogs", type=int, default=0, help="busy loops beside the brokers")
    ap.add_argument("--workdir", help="where the brokers keep their data (default: the temp dir)")
    ap.add_argument("--fsync", default="always", choices=["always", "interval", "never"], help="logbroker's policy")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    FSYNC[0] = args.fsync
    args.generators = args.generators.split(",")
    args.shapes = args.shapes.split(",")
    records = args.mb * 1_000_000 // SIZE
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, hogs(args.hogs):
        payload = Path(tmp) / "payload"
        with payload.open("wb") as f:
            line = b"x" * SIZE + b"\n"
            for done in range(0, records, 10_000):
                f.write(line * min(10_000, records - done))
        targets = args.targets.split(",")
        for r in range(args.rounds):
            for name in targets if r % 2 == 0 else targets[::-1]:
                rows += one_target(name, args, payload, records)
    by: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    for row in rows:
        cell = by.setdefault((row["kind"], row["generator"], row["shape"]), {})
        cell.setdefault(row["target"], []).append(row["cpu_s_per_gb"])
        cell.setdefault(row["target"] + " MB/s", []).append(row["mb_per_s"])
    names = args.targets.split(",")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}; hogs: {args.hogs}; {args.mb} MB per produce")
    print("| workload | generator | shape | " + " | ".join(f"{n} CPU s/GB · MB/s" for n in names) + " |")
    print("|---|---|---|" + "---|" * len(names))
    for (kind, gen, shape), cell in by.items():
        vals = [f"{statistics.median(cell[n]):.2f} · {statistics.median(cell[n + ' MB/s']):.0f}" if n in cell else "-"
                for n in names]  # fmt: skip
        print(f"| {kind} | {gen} | {shape} | " + " | ".join(vals) + " |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
