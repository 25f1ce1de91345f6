"""Persistent streams' rates next to raw confluent-kafka (`benchmarks/streams_bench.py`, `logbroker bench
--workloads faces`): events published and delivered for 1, 100 and 10,000 streams.

Each case gets a fresh topic of 4 partitions and its own provider; events go to the streams round-robin through
an implicit subscription. "published" counts from the first publish to the last acknowledgement; "delivered"
from the first publish to the last handler call; "cpu" is this process's CPU time per event.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

from logbroker.streams import SequenceToken, StreamProvider
from logbroker_devtools.bench.faces import produce_each

IN_FLIGHT = 2000  # concurrent events in flight (--in-flight)


async def one_case(bootstrap: str, streams: int, events: int, idle_timeout: float | None = None,
                   batch: int = 1, in_flight: int = IN_FLIGHT) -> dict[str, Any]:  # fmt: skip
    cfg = {"bootstrap": bootstrap, "topic": f"bench-{uuid.uuid4().hex[:8]}", "consumer_group": uuid.uuid4().hex,
           "num_queues": 4, "init_with_last_offset": False, "cache_timespan": 1.0, "metrics_port": 0}  # fmt: skip
    if idle_timeout is not None:
        cfg["implicit_idle_timeout"] = idle_timeout
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
        todo = iter(range(events // batch))

        async def publisher() -> None:  # a fixed pool: a semaphore with 20,000 waiters costs O(n^2) in 3.11
            for i in todo:
                if batch > 1:  # the batch path: `batch` events of one stream in one publish, one record
                    await handles[i % streams].publish([{"i": i, "j": j} for j in range(batch)], batch=True)
                else:
                    await handles[i % streams].publish({"i": i})

        start, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(publisher() for _ in range(max(1, in_flight // batch))))
        published = time.perf_counter() - start
        await asyncio.wait_for(done.wait(), 300)
        total = time.perf_counter() - start
        cpu = time.process_time() - cpu
        result: dict[str, Any] = {
            "streams": streams, "events": events, "batch": batch, "published_per_s": round(events / published),
            "delivered_per_s": round(events / total), "cpu_us_per_event": round(cpu / events * 1e6, 1),
        }  # fmt: skip
        if idle_timeout:
            delivered_at = time.perf_counter()
            while p._implicit_subs:
                await asyncio.sleep(0.01)
            result["retire_s"] = round(time.perf_counter() - delivered_at, 2)
    return result


def raw(bootstrap: str, events: int) -> dict[str, Any]:
    """Raw confluent-kafka, the ratio's baseline: each event a record of ~100 bytes produced (delivery callback
    per record) while a consumer thread reads them back (the value touched), 4 partitions as the provider's
    topic. Reading runs during the publishing, as a provider's delivery does: both rates then pay for both."""
    import threading

    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"raw-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: the future needs its handle alive
    admin.create_topics([NewTopic(topic, 4, 1)])[topic].result()
    value = json.dumps({"i": 0, "pad": "x" * 80}).encode()
    acked = 0

    def done(err: Any, _msg: Any) -> None:
        nonlocal acked
        acked += err is None

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest",
                  "fetch.queue.backoff.ms": 1})  # fmt: skip
    c.subscribe([topic])
    while not c.assignment():
        c.poll(0.1)
    got, finished = 0, 0.0

    def read() -> None:
        nonlocal got, finished
        while got < events:
            got += sum(len(m.value() or b"") > 0 for m in c.consume(1000, 1.0) if m.error() is None)
        finished = time.perf_counter()

    reader = threading.Thread(target=read, daemon=True)
    start, cpu = time.perf_counter(), time.process_time()
    reader.start()
    produce_each(p, topic, value, events, done)
    published = time.perf_counter() - start
    reader.join(300)
    if reader.is_alive():
        raise RuntimeError(f"raw consumer read {got}/{events}")
    total = finished - start
    cpu = time.process_time() - cpu
    c.close()
    return {"streams": "raw", "events": events, "batch": 1, "published_per_s": round(events / published),
            "delivered_per_s": round(events / total), "cpu_us_per_event": round(cpu / events * 1e6, 1)}  # fmt: skip


async def run_all(bootstrap: str, events: int, idle_timeout: float | None, batch: int = 1, in_flight: int = IN_FLIGHT,
                  streams: tuple[int, ...] = (1, 100, 10_000)) -> list[dict[str, Any]]:  # fmt: skip
    """The raw row, then one row per stream count."""
    return [raw(bootstrap, events)] + [await one_case(bootstrap, n, events, idle_timeout, batch, in_flight)
                                       for n in streams]  # fmt: skip
