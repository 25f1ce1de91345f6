"""Clients from one settings object, and the one way to queue a record under back-pressure.

librdkafka refuses a produce with BufferError while its local queue is full; a send that should block
instead serves delivery reports (which drains the queue) and tries again. Every face and the CLI queue
records through `produce` (or `produce_async` when another thread polls the producer), so that policy is
written once.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from logbroker._kafka.errors import new_client
from logbroker._kafka.settings import KafkaSettings, librdkafka_config

POLL_S = 0.05  # how long one wait for delivery reports lasts while the queue is full


def producer(settings: KafkaSettings, **overrides: Any) -> Producer:
    """A producer for `settings` (librdkafka properties in `overrides` win); refusals are CONFIG errors."""
    return new_client(Producer, librdkafka_config(settings, **overrides))


def consumer(settings: KafkaSettings, **overrides: Any) -> Consumer:
    return new_client(Consumer, librdkafka_config(settings, **overrides))


def admin(settings: KafkaSettings, **overrides: Any) -> AdminClient:
    return new_client(AdminClient, librdkafka_config(settings, **overrides))


def produce(p: Producer, topic: str, *, wait: float | None = None, **record: Any) -> None:
    """Queue one record (`record`: Producer.produce's keyword arguments), blocking while the local queue is
    full; after `wait` seconds of that (None: no limit) the BufferError is raised. KafkaException (an
    unknown partition, a record too large) is raised at once."""
    deadline = None if wait is None else time.monotonic() + wait
    while True:
        try:
            p.produce(topic, **record)
            return
        except BufferError:
            if deadline is not None and time.monotonic() > deadline:
                raise
            p.poll(POLL_S)


async def produce_async(p: Producer, topic: str, *, pause: float = 0.005, **record: Any) -> None:
    """`produce` for a producer another thread polls: waits on the event loop, not in poll()."""
    while True:
        try:
            p.produce(topic, **record)
            return
        except BufferError:
            await asyncio.sleep(pause)
