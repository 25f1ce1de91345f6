"""Throughput of `logbroker.mq` against raw confluent-kafka, in one run on one embedded broker.

    .venv/bin/python benchmarks/mq_bench.py [--messages 100000] [--size 100] [--rounds 5] [--separate] [--json out.json]

Both sides use the same librdkafka settings; each round runs raw and mq back to back on fresh topics,
and the median round of each is compared (the best round of raw sends swung from 536k to 781k msg/s between
two runs on this machine; the medians hold still). `--separate` runs the broker in a process of its own, so
the clients' own Python cost is what differs; by default it is embedded, sharing the GIL with them.
Workloads, each against raw produce() with a delivery callback and a final flush: batched async
sends (`Producer.send_batch`), per-message `send_async` handles, every one kept (the compiled handle,
mq/_delivery.c, which the garbage collector does not track; design.md "mq's held handles"); and iteration
(`for msg in consumer` vs raw consume() batches), touching each payload.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from logbroker_devtools.bench.faces.mq import run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100, help="payload bytes")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--separate", action="store_true", help="the broker in a process of its own (logbroker serve)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mq-bench-") as d:
        res = run(args.messages, args.size, args.rounds, Path(d) / "data", args.separate)
    where = "a broker process of its own" if args.separate else "the embedded broker, in process"
    print(f"{args.messages} messages of {args.size} B, median of {args.rounds} rounds, {where}")
    print(f"{'workload':<28}{'raw msg/s':>12}{'mq msg/s':>12}{'overhead':>10}")
    names = {"batch": "batched send (send_batch)", "async": "send_async per message", "iter": "iteration"}
    for wl, r in res.items():
        print(f"{names[wl]:<28}{r['raw_msgs_per_s']:>12,.0f}{r['mq_msgs_per_s']:>12,.0f}{r['overhead_pct']:>9.1f}%")
    if args.json:
        args.json.write_text(json.dumps({"messages": args.messages, "size": args.size, "results": res}, indent=2))


if __name__ == "__main__":
    main()
