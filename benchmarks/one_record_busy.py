"""One-record produce requests (100 B, acks=all, one in flight) on logbroker and Kafka side by side, with N busy
loops beside them: requests/s and broker CPU per request, on a default topic and on flush.messages=1.

    .venv/bin/python benchmarks/one_record_busy.py [--requests 5000] [--hogs 2] [--rounds 3] [--fsync always]

The generator is Kafka's ProducerPerformance with `logbroker bench`'s one-record settings (batch.size=1, linger 0,
one request in flight, acks=all). Targets alternate each round; the median round is reported.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import cpu_per_gb
from cpu_per_gb import broker, hogs

from logbroker_devtools.bench.native import FLUSH_EACH_APPEND, ONE_PER_REQUEST_PROPS, producer_perf
from logbroker_devtools.bench.procstat import BrokerView


def topic(bootstrap: str, config: dict[str, str] | None) -> str:
    import uuid

    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"one-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=config or {})])[name].result(60)
    return name


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--hogs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fsync", default="always", choices=["always", "interval", "never"], help="logbroker's policy")
    args = ap.parse_args()
    cpu_per_gb.FSYNC[0] = args.fsync
    rows: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with hogs(args.hogs):
        for r in range(args.rounds):
            for name in ("logbroker", "kafka") if r % 2 == 0 else ("kafka", "logbroker"):
                with tempfile.TemporaryDirectory() as tmp, broker(name, Path(tmp)) as boot:
                    view = BrokerView.find(boot)
                    assert view is not None
                    producer_perf(boot, topic(boot, None), 500, 100, ONE_PER_REQUEST_PROPS)  # warm-up
                    for kind, config in (("default topic", None), ("flush.messages=1", FLUSH_EACH_APPEND)):
                        t = topic(boot, config)
                        c0 = view.cpu()
                        sample = producer_perf(boot, t, args.requests, 100, ONE_PER_REQUEST_PROPS)
                        cpu = view.cpu() - c0
                        rate = args.requests / sample.seconds
                        rows.setdefault((name, kind), []).append((rate, cpu / args.requests * 1e6))
                        print(f"round {r + 1} {name} {kind}: {rate:,.0f} requests/s, {cpu / args.requests * 1e6:.0f} "
                              f"us CPU per request", file=sys.stderr, flush=True)  # fmt: skip
    print(
        f"{args.hogs} busy loops, {args.requests} requests per row, median of {args.rounds} rounds, "
        f"logbroker --fsync {args.fsync}"
    )
    print("| topic | logbroker requests/s · CPU us | Kafka requests/s · CPU us | logbroker/Kafka |")
    print("|---|---|---|---|")
    for kind in ("default topic", "flush.messages=1"):
        lb = sorted(rows[("logbroker", kind)])[len(rows[("logbroker", kind)]) // 2]
        kf = sorted(rows[("kafka", kind)])[len(rows[("kafka", kind)]) // 2]
        print(f"| {kind} | {lb[0]:,.0f} · {lb[1]:.0f} | {kf[0]:,.0f} · {kf[1]:.0f} | {lb[0] / kf[0]:.2f}x |")


if __name__ == "__main__":
    main()
