"""`logbroker consume -e` against `kcat -C -e`, side by side on the same broker in one run.

    .venv/bin/python benchmarks/cli_consume.py [--records 500000] [--partitions 4] [--runs 3]
                                               [--bootstrap host:port] [--json out.json]

Cases: reading ``--records`` records of 100 bytes from the beginning of a topic to its end (``-o beginning
-e``), and an empty 500-partition topic read from its end (``-e``: the time to learn that every partition is
at its end). Each tool's output goes to a file whose records are counted after the clock stops (a run that
prints the wrong number of records fails the benchmark); times are wall-clock medians of ``--runs`` runs, the
tools alternating. "python startup" is `logbroker --version`: the interpreter and click, which every
`logbroker` command pays and kcat does not. Without --bootstrap a `logbroker serve` process in a temporary
directory is used. Not part of CI: the target is logbroker within 1.5x of kcat.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

LOGBROKER = [sys.executable, "-m", "logbroker"]


def create(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=10).topics.get(name)
        if md is not None and md.error is None and len(md.partitions) == partitions:
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {name} not ready")


def fill(bootstrap: str, topic: str, records: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 1_000_000, "acks": "all"})  # fmt: skip
    value = (b"0123456789abcdefghijklmnopqrstuvwxyz" * 3)[:100]
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, str(i).encode())
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("records left unacknowledged")


def timed(cmd: list[str], out: Path) -> tuple[float, int]:
    """Wall seconds of one run and the records it printed (newlines in its output)."""
    with out.open("wb") as f:
        start = time.perf_counter()
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.PIPE, timeout=600)
        took = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}): {proc.stderr.decode(errors='replace')[-500:]}")
    with out.open("rb") as f:
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    return took, lines


def case(name: str, commands: dict[str, list[str]], expect: int, runs: int, scratch: Path) -> dict[str, Any]:
    times: dict[str, list[float]] = {tool: [] for tool in commands}
    for _ in range(runs):
        for tool, cmd in commands.items():
            took, lines = timed(cmd, scratch / f"{tool}.out")
            if lines != expect:
                raise RuntimeError(f"{name}: {tool} printed {lines} records, not {expect}")
            times[tool].append(took)
    med = {tool: statistics.median(t) for tool, t in times.items()}
    return {"case": name, "runs": runs, "records": expect, **{f"{t}_s": round(v, 3) for t, v in med.items()},
            "ratio": round(med["logbroker"] / med["kcat"], 2)}  # fmt: skip


def run_all(bootstrap: str, records: int, partitions: int, runs: int) -> list[dict[str, Any]]:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        raise SystemExit("kcat not found")
    full, empty = f"bench-cli-{uuid.uuid4().hex[:8]}", f"bench-cli-empty-{uuid.uuid4().hex[:8]}"
    create(bootstrap, full, partitions)
    create(bootstrap, empty, 500)
    fill(bootstrap, full, records)
    results = []
    with tempfile.TemporaryDirectory() as d:
        scratch = Path(d)
        results.append(case(f"{records:,} records x 100 B, {partitions} partitions, -o beginning -e", {
            "kcat": [kcat, "-C", "-b", bootstrap, "-t", full, "-o", "beginning", "-e", "-q"],
            "logbroker": [*LOGBROKER, "consume", "-b", bootstrap, "-t", full, "-o", "beginning", "-e", "-q"],
        }, records, runs, scratch))  # fmt: skip
        results.append(case("empty topic, 500 partitions, -e", {
            "kcat": [kcat, "-C", "-b", bootstrap, "-t", empty, "-e", "-q"],
            "logbroker": [*LOGBROKER, "consume", "-b", bootstrap, "-t", empty, "-e", "-q"],
        }, 0, runs, scratch))  # fmt: skip
        startup = statistics.median(timed([*LOGBROKER, "--version"], scratch / "v.out")[0] for _ in range(runs))
        results.append({"case": "python startup (logbroker --version)", "logbroker_s": round(startup, 3)})
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bootstrap", help="a running broker (default: start logbroker in a temporary directory)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    if args.bootstrap:
        results = run_all(args.bootstrap, args.records, args.partitions, args.runs)
    else:
        from logbroker_devtools.testing.process import BrokerProcess

        with tempfile.TemporaryDirectory(prefix="cli-bench-") as d:
            broker = BrokerProcess(Path(d) / "data")
            broker.start()
            try:
                results = run_all(broker.bootstrap, args.records, args.partitions, args.runs)
            finally:
                broker.stop()
    print(f"{'case':<58} {'kcat s':>8} {'logbroker s':>12} {'ratio':>6}")
    for r in results:
        kcat = f"{r['kcat_s']:.3f}" if "kcat_s" in r else "-"
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else "-"
        print(f"{r['case']:<58} {kcat:>8} {r['logbroker_s']:>12.3f} {ratio:>6}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
