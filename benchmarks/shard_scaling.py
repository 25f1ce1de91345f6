#!/usr/bin/env python3
"""What more cores buy: one broker process against N processes on one machine (partitions sharded by hand).

Each broker is a `logbroker serve` process (fsync=always) with its own data directory and port; each gets
its own kcat producer (1 KB records, acks=all, ~1 MB batches) writing the same payload, all at once. The
aggregate rate and each broker's CPU (and its threads': the event loop vs the fsync thread) show whether
throughput follows processes, i.e. whether sharding partitions over processes is how a many-core machine
is used. Run on a quiet machine:

    python benchmarks/shard_scaling.py --mb 300 --processes 1,2 [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from logbroker_devtools.bench.procstat import cpu_seconds

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_cpu import _free_port, _payload, _wait_port, kcat_produce


def _threads(pid: int) -> dict[str, float]:
    """CPU seconds per thread: the main (event loop) thread and the rest (the fsync thread, mostly)."""
    out = {"loop": 0.0, "other": 0.0}
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            secs = _cpu_seconds_of(t / "stat")
        except OSError:
            continue
        out["loop" if t.name == str(pid) else "other"] += secs
    return out


def _cpu_seconds_of(stat: Path) -> float:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(n: int, payload: Path) -> dict[str, float]:
    procs, dirs, ports = [], [], []
    try:
        for _ in range(n):
            port = _free_port()
            data = Path(tempfile.mkdtemp(prefix="lb-shard-"))
            cmd = [sys.executable, "-m", "logbroker", "serve", "--listen", f"127.0.0.1:{port}",
                   "--data-dir", str(data), "--fsync", "always"]  # fmt: skip
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            dirs.append(data)
            ports.append(port)
        for port, proc in zip(ports, procs, strict=True):
            _wait_port(port, proc)
            subprocess.run(["kcat", "-b", f"127.0.0.1:{port}", "-L", "-t", "bench"], check=True,
                           capture_output=True, timeout=30)  # fmt: skip
        before = [(cpu_seconds([p.pid]), _threads(p.pid)) for p in procs]
        t0 = time.monotonic()
        with ThreadPoolExecutor(n) as pool:  # one kcat per broker, all at once
            list(pool.map(lambda port: kcat_produce(f"127.0.0.1:{port}", payload), ports))
        elapsed = time.monotonic() - t0
        after = [(cpu_seconds([p.pid]), _threads(p.pid)) for p in procs]
        gb = payload.stat().st_size * n / 1e9
        loop = sum(a[1]["loop"] - b[1]["loop"] for a, b in zip(after, before, strict=True))
        other = sum(a[1]["other"] - b[1]["other"] for a, b in zip(after, before, strict=True))
        return {"processes": n, "aggregate_mb_s": gb * 1000 / elapsed,
                "cpu_s_per_gb": sum(a[0] - b[0] for a, b in zip(after, before, strict=True)) / gb,
                "loop_thread_s_per_gb": loop / gb, "other_threads_s_per_gb": other / gb}  # fmt: skip
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=300, help="MiB per producer")
    ap.add_argument("--processes", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    counts = [int(x) for x in args.processes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        payload = Path(tmp) / "payload"
        _payload(payload, args.mb)
        best: dict[int, dict[str, float]] = {}
        for r in range(args.rounds):
            for n in counts:
                res = run(n, payload)
                print(f"round {r + 1}: " + ", ".join(f"{k}={v:.2f}" for k, v in res.items()), flush=True)
                if n not in best or res["aggregate_mb_s"] > best[n]["aggregate_mb_s"]:
                    best[n] = res
        print("best of rounds:")
        for res in best.values():
            print("  " + ", ".join(f"{k}={v:.2f}" for k, v in res.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
