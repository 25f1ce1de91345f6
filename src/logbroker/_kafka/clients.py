"""Every confluent-kafka client of the faces and the CLI, built from one `KafkaSettings`; and the one way to
queue a record under back-pressure.

A face names only its own tuning (``overrides``) and how a refused property reads to its users
(``refused``: ``MQConfigError``, ``StreamsConfigError``, the CLI's bad-input exit), so the security and
connection properties cannot differ between faces. test_layers keeps client construction here.

librdkafka refuses a produce with BufferError while its local queue is full; a send that should block
instead serves delivery reports (which drains the queue) and tries again. Every face and the CLI queue
records through `produce` (or `produce_async` when another thread polls the producer), so that policy is
written once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient

from logbroker._kafka.errors import KafkaLayerError, new_client
from logbroker._kafka.settings import KafkaSettings, Role, librdkafka_config

T = TypeVar("T")
POLL_S = 0.05  # how long one wait for delivery reports lasts while the queue is full


Refused = Callable[[str], Exception]


def _build(factory: Callable[[dict[str, Any]], T], settings: KafkaSettings, refused: Refused | None,
           overrides: dict[str, Any], role: Role) -> T:  # fmt: skip
    """librdkafka checks properties (names, values, TLS files) only when a client is built: a refusal is the
    face's configuration error (``refused(message)``), or a CONFIG `KafkaLayerError` without one."""
    try:
        return new_client(factory, librdkafka_config(settings, role, **overrides))
    except KafkaLayerError as exc:
        if refused is None:
            raise
        raise refused(str(exc)) from None


def producer(settings: KafkaSettings, *, refused: Refused | None = None, **overrides: Any) -> Producer:
    """A producer for ``settings``; librdkafka properties in ``overrides`` win over them."""
    return _build(Producer, settings, refused, overrides, "producer")


def consumer(settings: KafkaSettings, *, refused: Refused | None = None, **overrides: Any) -> Consumer:
    return _build(Consumer, settings, refused, overrides, "consumer")


def share_consumer(settings: KafkaSettings, *, refused: Refused | None = None, **overrides: Any) -> ShareConsumer:
    """A KIP-932 share-group member (``group.id`` in ``overrides``)."""
    return _build(ShareConsumer, settings, refused, overrides, "consumer")


def admin(settings: KafkaSettings, *, refused: Refused | None = None, **overrides: Any) -> AdminClient:
    return _build(AdminClient, settings, refused, overrides, "admin")


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
