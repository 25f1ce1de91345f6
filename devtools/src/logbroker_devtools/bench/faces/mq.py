"""mq's rates next to raw confluent-kafka on one broker (`benchmarks/mq_bench.py`, `logbroker bench --workloads faces`).

Both sides use the same librdkafka settings; each round runs raw and mq back to back on fresh topics and the
median round of each is compared. Workloads, each against raw produce() with a delivery callback and a final
flush: batched async sends (`Producer.send_batch`), per-message `send_async` handles, and iteration (`for msg in
consumer` vs raw consume() batches), touching each payload.
"""

from __future__ import annotations

import contextlib
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from logbroker._kafka import librdkafka_config
from logbroker.embedded import EmbeddedBroker
from logbroker.mq import Client, InitialPosition
from logbroker_devtools.bench.faces import produce_each


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
    produce_each(p, topic, payload, n, delivered)
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
    """`run_on` a broker started for it: embedded (sharing the GIL) or a `logbroker serve` child (``separate``)."""
    with broker_at(data_dir, separate) as bootstrap:
        return run_on(bootstrap, messages, size, rounds)


def run_on(bootstrap: str, messages: int, size: int, rounds: int) -> dict[str, dict[str, float]]:
    """Median messages/s per workload on any broker; raw and mq alternate who goes first each round."""
    payload = b"x" * size
    sends: dict[str, Callable[[Client, str, int, bytes], float]] = {
        "send/raw": raw_send, "batch/mq": mq_send_batch, "async/mq": mq_send,
    }  # fmt: skip
    iters: dict[str, Callable[[Client, str, int], float]] = {"iter/raw": raw_iter, "iter/mq": mq_iter}
    times: dict[str, list[float]] = {}
    with Client({"type": "kafka", "kafka": {"bootstrap_servers": bootstrap}}) as client:
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
