"""Events/s published and delivered by `logbroker.streams` for 1, 100 and 10,000 streams, in one run.

    .venv/bin/python benchmarks/streams_bench.py [--events 20000] [--bootstrap host:port] [--json out.json]

Each case gets a fresh topic of 4 partitions and its own provider; events go to the streams round-robin
through an implicit subscription. "published" counts from the first publish to the last acknowledgement
(publishes run concurrently, 2,000 in flight); "delivered" from the first publish to the last handler call.
Without --bootstrap an embedded broker in a temporary directory is used.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from logbroker.embedded import EmbeddedBroker
from logbroker.streams import SequenceToken, StreamProvider


async def one_case(bootstrap: str, streams: int, events: int) -> dict[str, Any]:
    cfg = {"bootstrap": bootstrap, "topic": f"bench-{uuid.uuid4().hex[:8]}", "consumer_group": uuid.uuid4().hex,
           "num_queues": 4, "init_with_last_offset": False, "cache_timespan": 1.0}  # fmt: skip
    delivered = 0
    done = asyncio.Event()

    def factory(_key: str) -> Any:
        async def handle(_event: Any, _token: SequenceToken) -> None:
            nonlocal delivered
            delivered += 1
            if delivered == events:
                done.set()

        return handle

    async with StreamProvider(cfg) as p:
        p.implicit("bench", factory)
        await p.wait_assigned(4)
        handles = [p.stream("bench", f"s{i}") for i in range(streams)]
        sem = asyncio.Semaphore(2000)

        async def publish(i: int) -> None:
            async with sem:
                await handles[i % streams].publish({"i": i})

        start = time.perf_counter()
        await asyncio.gather(*(publish(i) for i in range(events)))
        published = time.perf_counter() - start
        await asyncio.wait_for(done.wait(), 300)
        total = time.perf_counter() - start
    return {"streams": streams, "events": events, "published_per_s": round(events / published),
            "delivered_per_s": round(events / total)}  # fmt: skip


async def run_all(bootstrap: str, events: int) -> list[dict[str, Any]]:
    return [await one_case(bootstrap, n, events) for n in (1, 100, 10_000)]


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--bootstrap", help="a running broker (default: an embedded one)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap
        if bootstrap is None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="streams-bench-"))
            bootstrap = stack.enter_context(EmbeddedBroker(Path(tmp) / "data")).bootstrap
        results = asyncio.run(run_all(bootstrap, args.events))
    print(f"{'streams':>8} {'events':>8} {'published/s':>12} {'delivered/s':>12}")
    for r in results:
        print(f"{r['streams']:>8} {r['events']:>8} {r['published_per_s']:>12} {r['delivered_per_s']:>12}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
