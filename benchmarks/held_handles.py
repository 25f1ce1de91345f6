"""What holding mq's per-message handles costs in the garbage collector, next to raw confluent-kafka.

    .venv/bin/python benchmarks/held_handles.py [--messages 200000] [--rounds 2]

Against a `logbroker serve` child: per round, raw produce() with a delivery callback, then `send_async` with
every handle kept (as a caller collecting futures does), with each handle dropped, and with every handle kept
after `gc.freeze()` (the process's start-up heap moved out of the collector's way, as an application may do
once it has started). Each row gives the run's seconds and, from `gc.callbacks`, the count and CPU time of
full (generation 2) collections. The freeze is undone after its row.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from pathlib import Path
from typing import Any

from logbroker.mq import Client
from logbroker_devtools.bench.faces.mq import _topic, broker_at, raw_send


class FullCollections:
    """Counts and times (thread CPU) the collector's full collections while active."""

    def __init__(self) -> None:
        self.count, self.cpu, self._t0 = 0, 0.0, 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._t0 = time.thread_time()
        else:
            self.count += 1
            self.cpu += time.thread_time() - self._t0

    def __enter__(self) -> FullCollections:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self)


def send_async(client: Client, n: int, payload: bytes, keep: bool) -> float:
    p = client.create_producer(_topic("held"))
    t = time.perf_counter()
    if keep:
        handles = [p.send_async(payload) for _ in range(n)]
    else:
        for _ in range(n):
            last = p.send_async(payload)
        handles = [last]
    p.flush(60)
    elapsed = time.perf_counter() - t
    assert handles[-1].result(60).offset == n - 1
    p.close()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    n, payload = args.messages, b"x" * 100
    with (
        broker_at(Path(tempfile.mkdtemp()), separate=True) as bootstrap,
        Client({"type": "kafka", "kafka": {"bootstrap_servers": bootstrap}}) as client,
    ):
        print(f"{n} sends of 100 B; a `logbroker serve` child; heap at start: {len(gc.get_objects()):,} objects")
        print(f"{'round':>5}  {'row':<24} {'seconds':>8} {'x raw':>6} {'full GCs':>9} {'their ms':>9}")
        for r in range(args.rounds):
            rows: list[tuple[str, float, FullCollections]] = []
            with FullCollections() as fc:
                rows.append(("raw produce", raw_send(client, _topic("raw"), n, payload), fc))
            with FullCollections() as fc:
                rows.append(("send_async, kept", send_async(client, n, payload, keep=True), fc))
            with FullCollections() as fc:
                rows.append(("send_async, dropped", send_async(client, n, payload, keep=False), fc))
            gc.freeze()
            try:
                with FullCollections() as fc:
                    rows.append(("send_async, kept, frozen", send_async(client, n, payload, keep=True), fc))
            finally:
                gc.unfreeze()
            raw = rows[0][1]
            for name, secs, fc in rows:
                print(f"{r:>5}  {name:<24} {secs:>8.3f} {raw / secs:>6.2f} {fc.count:>9} {fc.cpu * 1000:>9.1f}")


if __name__ == "__main__":
    main()
