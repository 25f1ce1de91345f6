"""notify's rates next to raw confluent-kafka written by hand (`benchmarks/notify_bench.py`, `logbroker bench
--workloads faces`).

Raw by hand is what a user writes instead of notify: each notification built (id, timestamp) and JSON-encoded per
send, decoded per read. Dispatch rates are measured from the first to the last notification dispatched.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer

from logbroker.notify import NotificationListener, Notifier

PAYLOAD = {"instance_id": "3f1c2a8e-0000-4000-8000-000000000000", "state": "active", "flavor": "m1.small",
           "host": "compute-17", "memory_mb": 2048, "vcpus": 2}  # fmt: skip
CONSUMER_TUNING = {"fetch.queue.backoff.ms": 1}


def raw(
    bootstrap: str, n: int, by_hand: bool = False, linger_ms: float | None = None, read: bool = True
) -> tuple[float, float]:
    """Raw confluent-kafka. ``by_hand``: what a user writes instead of notify, each notification built (id,
    timestamp) and JSON-encoded per send and decoded per message read; otherwise one value encoded once and
    nothing decoded (the ceiling). ``linger_ms``: the producer's linger (librdkafka's 5 ms by default);
    ``read=False`` sends only (the dispatch rate is then 0)."""
    topic = f"raw-{uuid.uuid4().hex[:8]}"
    value = json.dumps({"payload": PAYLOAD, "event_type": "compute.instance.update", "priority": "INFO",
                        "publisher_id": "bench", "message_id": str(uuid.uuid4()), "_context": {}}).encode()  # fmt: skip
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": "all"}
    if linger_ms is not None:
        conf["linger.ms"] = linger_ms
    p = Producer(conf)
    t0 = time.perf_counter()
    for _ in range(n):
        if by_hand:
            value = json.dumps({"message_id": str(uuid.uuid4()), "publisher_id": "bench",
                                "event_type": "compute.instance.update", "priority": "INFO", "payload": PAYLOAD,
                                "timestamp": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f"),
                                "_context": {"user": "u"}}, separators=(",", ":")).encode()  # fmt: skip
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(60)
    sent = n / (time.perf_counter() - t0)
    if not read:
        return sent, 0.0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                  **CONSUMER_TUNING})  # fmt: skip
    c.subscribe([topic])
    got, first = 0, 0.0
    while got < n:
        msgs = c.consume(500, 1.0)
        if msgs and not first:
            first = time.perf_counter()
        if by_hand:
            got += sum(1 for m in msgs if m.error() is None and json.loads(m.value()))
        else:
            got += sum(1 for m in msgs if m.error() is None)
    dispatched = (n - 1) / (time.perf_counter() - first)
    c.close()
    return sent, dispatched


def notify(bootstrap: str, n: int, batching: bool, confirm: bool) -> tuple[float, float]:
    url = f"kafka://{bootstrap}"
    topic = f"nb-{uuid.uuid4().hex[:8]}"
    opts: dict[str, Any] = {"extra": CONSUMER_TUNING}
    if batching:
        opts.update(producer_batch_timeout=0.005, producer_batch_size=10000)
    start_mark = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    with Notifier(url, "bench", [topic], {"producer_batch_timeout": opts.get("producer_batch_timeout", 0.0),
                                         "producer_batch_size": opts.get("producer_batch_size", 16384)},
                  confirm=confirm) as notifier:  # fmt: skip
        t0 = time.perf_counter()
        for _ in range(n):
            notifier.info({"user": "u"}, "compute.instance.update", PAYLOAD)
        notifier.flush()
        sent = n / (time.perf_counter() - t0)
    count, first, done = 0, 0.0, threading.Event()

    class Endpoint:
        def _seen(self, k: int) -> None:
            nonlocal count, first
            if not first:
                first = time.perf_counter()
            count += k
            if count >= n:
                done.set()

        if batching:

            def info(self, messages: list[dict[str, Any]]) -> None:
                self._seen(len(messages))
        else:

            def info(self, ctxt: Any, pub: Any, event: Any, payload: Any, md: Any) -> None:
                self._seen(1)

    listener = NotificationListener(url, [topic], [Endpoint()], pool=f"p-{topic}", driver_options=opts,
                                    batch_size=100 if batching else 1, batch_timeout=0.1 if batching else None,
                                    replay_from=start_mark)  # fmt: skip
    with listener:
        if not done.wait(300):
            raise RuntimeError(f"only {count}/{n} dispatched")
        dispatched = (n - 1) / (time.perf_counter() - first)
    return sent, dispatched


def rows_for(bootstrap: str, n: int) -> dict[str, tuple[float, float]]:
    """The faces workload's notify rows: (notify's rate, raw by hand's rate) per row; the linger-0 row against
    raw by hand at the same linger (at librdkafka's 5 ms the ratio measured the setting, not the face)."""
    raw_sent, raw_dispatched = raw(bootstrap, n, by_hand=True)
    raw0_sent, _ = raw(bootstrap, n, by_hand=True, linger_ms=0, read=False)
    one_sent, one_dispatched = notify(bootstrap, n, batching=False, confirm=False)
    sent, dispatched = notify(bootstrap, n, batching=True, confirm=False)
    return {
        "notify_sent": (sent, raw_sent),
        "notify_dispatched": (dispatched, raw_dispatched),
        "notify_sent_linger0": (one_sent, raw0_sent),
        "notify_dispatched_one": (one_dispatched, raw_dispatched),
    }
