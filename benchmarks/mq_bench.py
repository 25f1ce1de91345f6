"""Throughput of `logbroker.mq` against raw confluent-kafka, in one run on one embedded broker.

    .venv/bin/python benchmarks/mq_bench.py [--messages 100000] [--size 100] [--rounds 5] [--separate] [--json out.json]

Both sides use the same librdkafka settings; each round runs raw and mq back to back on fresh topics,
and the median round of each is compared (the best round of raw sends swung from 536k to 781k msg/s between
two runs on this machine; the medians hold still). `--separate` runs the broker in a process of its own, so
the clients' own Python cost is what differs; by default it is embedded, sharing the GIL with them.
Workloads, each against raw produce() with a delivery callback and a final flush: batched async
sends (`Producer.send_batch`), per-message `send_async` handles (reported, not the 10% target: a
Python object per message costs ~0.5 us); and iteration (`for msg in consumer` vs raw consume()
batches), touching each payload.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from logbroker._kafka import librdkafka_config
from logbroker.embedded import EmbeddedBroker
from logbroker.mq import Client, InitialPosition


def _topic(kind: str) -> str:
    return f"bench-{kind}-{uuid.uuid4().hex[:8]}"


def raw_send(client: Client, topic: str, n: int, payload: bytes) -> float:
    client.ensure_topic(topic)
    p = Producer(librdkafka_config(client.settings, **client._producer_conf(False)))
    done = 0

    def delivered(err: object, msg: object) -> None:
        nonlocal done
        done += 1

    t = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, payload, on_delivery=delivered)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(60)
    elapsed = time.perf_counter() - t
    assert done == n, (done, n)
    return elapsed


def mq_send(client: Client, topic: str, n: int, payload: bytes) -> float:
    p = client.create_producer(topic)
    t = time.perf_counter()
    futs = [p.send_async(payload) for _ in range(n)]
    p.flush(60)
    last = futs[-1].result(60)
    elapsed = time.perf_counter() - t
    assert last.offset == n - 1 and all(f.done() for f in futs), last
    p.close()
    return elapsed


def mq_send_batch(client: Client, topic: str, n: int, payload: bytes) -> float:
    p = client.create_producer(topic)
    payloads = [payload] * n
    t = time.perf_counter()
    ids = p.send_batch(payloads).result(60)
    elapsed = time.perf_counter() - t
    assert len(ids) == n and ids[-1].offset == n - 1, ids[-1]
    p.close()
    return elapsed


def raw_iter(client: Client, topic: str, n: int) -> float:
    conf = librdkafka_config(client.settings, **client._consumer_conf(_topic("g"), 1024))
    c = Consumer(conf)
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    seen = size = 0
    t = time.perf_counter()
    while seen < n:
        for m in c.consume(500, 1.0):
            if m.error() is None:
                size += len(m.value())
                seen += 1
    elapsed = time.perf_counter() - t
    c.close()
    return elapsed


def mq_iter(client: Client, topic: str, n: int) -> float:
    cons = client.subscribe(topic, _topic("g"), InitialPosition.EARLIEST)
    seen = size = 0
    t = time.perf_counter()
    for seen, m in enumerate(cons, 1):
        size += len(m.payload)
        if seen == n:
            break
    elapsed = time.perf_counter() - t
    cons.close()
    return elapsed


@contextlib.contextmanager
def broker_at(data_dir: Path, separate: bool) -> Iterator[str]:
    """The broker in this process (EmbeddedBroker: its event loop shares the GIL with the clients) or in a
    process of its own (`logbroker serve`: the clients' Python cost alone is measured)."""
    if not separate:
        with EmbeddedBroker(data_dir) as broker:
            yield broker.bootstrap
        return
    from logbroker_devtools.testing.process import BrokerProcess

    proc = BrokerProcess(data_dir, own_session=True)
    proc.start()
    try:
        yield proc.bootstrap
    finally:
        proc.stop()


def run(messages: int, size: int, rounds: int, data_dir: Path, separate: bool = False) -> dict[str, dict[str, float]]:
    """Best seconds per workload; raw and mq alternate who goes first each round."""
    payload = b"x" * size
    sends: dict[str, Callable[[Client, str, int, bytes], float]] = {
        "send/raw": raw_send, "batch/mq": mq_send_batch, "async/mq": mq_send,
    }  # fmt: skip
    iters: dict[str, Callable[[Client, str, int], float]] = {"iter/raw": raw_iter, "iter/mq": mq_iter}
    times: dict[str, list[float]] = {}
    with broker_at(data_dir, separate) as bootstrap, Client({"embedded": {"bootstrap": bootstrap}}) as client:
        for r in range(rounds):
            names = list(sends) if r % 2 == 0 else list(reversed(sends))
            topics = {name: _topic(name.split("/")[0]) for name in names}
            for name in names:
                times.setdefault(name, []).append(sends[name](client, topics[name], messages, payload))
            for name in iters if r % 2 == 0 else reversed(list(iters)):
                t = iters[name](client, topics["send/raw"], messages)
                times.setdefault(name, []).append(t)
    best = {name: statistics.median(ts) for name, ts in times.items()}
    raw_send_s, raw_iter_s = best["send/raw"], best["iter/raw"]
    rows = {"batch": ("batch/mq", raw_send_s), "async": ("async/mq", raw_send_s), "iter": ("iter/mq", raw_iter_s)}
    return {
        wl: {
            "raw_msgs_per_s": messages / raw,
            "mq_msgs_per_s": messages / best[name],
            "overhead_pct": (best[name] / raw - 1) * 100,
        }
        for wl, (name, raw) in rows.items()
    }


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
