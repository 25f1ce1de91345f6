"""The faces' own rates next to raw confluent-kafka on the same broker (`logbroker bench --workloads faces`).

Each face is measured the way its benchmark script measures it (`benchmarks/mq_bench.py`, `notify_bench.py`,
`streams_bench.py`, which call these modules); the ratio to raw confluent-kafka, run in the same process against
the same broker, is the number the faces are held to (>= 0.8x for mq and notify, >= 0.75x for streams).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

# key -> row label; each row has a rate (messages or events/s) and its ratio to raw confluent-kafka.
FACES_ROWS = {
    "mq_batch": "mq send_batch",
    "mq_async": "mq send_async",
    "mq_iter": "mq iteration",
    "notify_sent": "notify sent (5 ms linger)",
    "notify_dispatched": "notify dispatched (batches of 100)",
    "notify_sent_linger0": "notify sent (oslo's linger 0, unconfirmed; raw at linger 0)",
    "notify_dispatched_one": "notify dispatched one at a time",
    "streams_published": "streams published (batches of 100)",
    "streams_delivered": "streams delivered (batches of 100)",
    "streams_10k_delivered": "streams delivered, 10,000 streams",
}
STREAMS_BATCH = 100
STREAMS_IN_FLIGHT = 20_000


def produce_each(producer: Any, topic: str, value: bytes, n: int, on_delivery: Callable[[Any, Any], None]) -> None:
    """The raw baseline's send loop: ``n`` produce() calls with a delivery callback (waiting out a full queue),
    polled every 1,000 sends, then flushed."""
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        if not i % 1000:
            producer.poll(0)
    producer.flush(60)


def _mq(bootstrap: str, messages: int) -> dict[str, tuple[float, float]]:
    from logbroker_devtools.bench.faces.mq import run_on

    res = run_on(bootstrap, messages, 100, rounds=3)
    return {f"mq_{wl}": (r["mq_msgs_per_s"], r["raw_msgs_per_s"]) for wl, r in res.items()}


def _notify(bootstrap: str, messages: int) -> dict[str, tuple[float, float]]:
    from logbroker_devtools.bench.faces.notify import rows_for

    return rows_for(bootstrap, messages)


def _streams(bootstrap: str, messages: int) -> dict[str, tuple[float, float]]:
    from logbroker_devtools.bench.faces.streams import run_all

    rows = asyncio.run(run_all(bootstrap, messages, None, STREAMS_BATCH, STREAMS_IN_FLIGHT, (1, 10_000)))
    raw, one, many = rows
    return {
        "streams_published": (one["published_per_s"], raw["published_per_s"]),
        "streams_delivered": (one["delivered_per_s"], raw["delivered_per_s"]),
        "streams_10k_delivered": (many["delivered_per_s"], raw["delivered_per_s"]),
    }


def run_faces(bootstrap: str, messages: int) -> tuple[dict[str, float], dict[str, str]]:
    """(metrics, skip reasons per face). A face that fails on a broker is reported, not fatal: Tansu, say,
    may lack what one face needs while the others still measure."""
    metrics: dict[str, float] = {}
    skipped: dict[str, str] = {}
    faces: dict[str, Callable[[str, int], dict[str, tuple[float, float]]]] = {
        "mq": _mq, "notify": _notify, "streams": _streams,
    }  # fmt: skip
    for face, run in faces.items():
        try:
            got = run(bootstrap, messages)
        except Exception as exc:
            skipped[face] = f"{face}: {type(exc).__name__}: {str(exc)[:200]}"
            continue
        for key, (rate, raw) in got.items():
            metrics[f"faces_{key}_per_s"] = rate
            metrics[f"faces_{key}_x_raw"] = rate / raw if raw else float("nan")
    return metrics, skipped


def faces_detail(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if k.startswith("faces_")}
