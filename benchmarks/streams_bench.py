"""Events/s published and delivered by `logbroker.streams` for 1, 100 and 10,000 streams, in one run.

    .venv/bin/python benchmarks/streams_bench.py [--events 20000] [--bootstrap host:port | --kafka] [--json out.json]
                                                 [--idle-timeout SECONDS]

Each case gets a fresh topic of 4 partitions and its own provider; events go to the streams round-robin
through an implicit subscription. "published" counts from the first publish to the last acknowledgement
(2,000 publish() calls in flight, one event each); "delivered" from the first publish to the last handler call.
"cpu" is this process's CPU time per event (the embedded broker's included when it runs in-process): on a
shared machine it varies less than the rates. Without --bootstrap an embedded broker in a temporary directory is
used; --kafka starts Apache Kafka (logbroker_devtools.testing.peers.KafkaPeer) instead. --idle-timeout sets
implicit_idle_timeout and also reports "retire s": from the last delivery until every implicit subscription
has retired (the timeout plus the sweep's own cost; the rates are measured before and are comparable).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
from pathlib import Path

from logbroker.embedded import EmbeddedBroker
from logbroker_devtools.bench.faces.streams import IN_FLIGHT, run_all


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--bootstrap", help="a running broker (default: an embedded one)")
    ap.add_argument("--kafka", action="store_true", help="start Apache Kafka (needs java and .ci/fetch-jars)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--idle-timeout", type=float, help="implicit_idle_timeout; also time the retirement")
    ap.add_argument("--batch", type=int, default=1, help="events per publish(batch=True) (default 1: one each)")
    ap.add_argument("--in-flight", type=int, default=IN_FLIGHT, help="events published and not yet acknowledged")
    args = ap.parse_args()
    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap
        if bootstrap is None and args.kafka:
            from logbroker_devtools.testing.peers import KafkaPeer

            peer = stack.enter_context(KafkaPeer(server_properties={"group.initial.rebalance.delay.ms": 0}))
            bootstrap = peer.bootstrap
        if bootstrap is None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="streams-bench-"))
            bootstrap = stack.enter_context(EmbeddedBroker(Path(tmp) / "data")).bootstrap
        results = asyncio.run(run_all(bootstrap, args.events, args.idle_timeout, args.batch, args.in_flight))
    retire = bool(args.idle_timeout)
    print(f"{'streams':>8} {'events':>8} {'published/s':>12} {'delivered/s':>12} {'cpu us/event':>13}"
          + (f" {'retire s':>9}" if retire else ""))  # fmt: skip
    for r in results:
        print(
            f"{r['streams']:>8} {r['events']:>8} {r['published_per_s']:>12} {r['delivered_per_s']:>12} "
            f"{r['cpu_us_per_event']:>13}" + (f" {r.get('retire_s', ''):>9}" if retire else "")
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
