"""Notification listeners: endpoints with a method per priority, filters, batches, pools and executors."""

from __future__ import annotations

import asyncio
import datetime as _dt
import enum
import inspect
import logging
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from logbroker.notify.consumer import AT_LEAST_ONCE, AT_MOST_ONCE, Incoming, NotificationConsumer
from logbroker.notify.notifier import PRIORITIES
from logbroker.notify.share import ShareNotificationConsumer
from logbroker.notify.transport import KafkaOptions, Transport, get_transport

LOG = logging.getLogger(__name__)


class NotificationResult(enum.Enum):
    HANDLED = "handled"
    REQUEUE = "requeue"


@dataclass(frozen=True)
class Target:
    """A topic to listen on (oslo's Target, reduced to what notifications use)."""

    topic: str
    exchange: str | None = None


class NotificationFilter:
    """Regexes on context keys, publisher id, event type and metadata keys (oslo's rules): an
    endpoint with `filter_rule` sees only matching notifications."""

    def __init__(
        self,
        context: Mapping[str, str] | None = None,
        publisher_id: str | None = None,
        event_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        self._context = {k: re.compile(v) for k, v in (context or {}).items()}
        self._publisher = re.compile(publisher_id) if publisher_id else None
        self._event = re.compile(event_type) if event_type else None
        self._metadata = {k: re.compile(v) for k, v in (metadata or {}).items()}

    @staticmethod
    def _match(value: Any, pattern: re.Pattern[str] | None) -> bool:
        return pattern is None or (isinstance(value, str) and pattern.match(value) is not None)

    def match(self, ctxt: Mapping[str, Any], publisher_id: Any, event_type: Any, metadata: Mapping[str, Any]) -> bool:
        return (
            self._match(publisher_id, self._publisher)
            and self._match(event_type, self._event)
            and all(self._match(ctxt.get(k), p) for k, p in self._context.items())
            and all(self._match(metadata.get(k), p) for k, p in self._metadata.items())
        )


def _metadata(message: Mapping[str, Any]) -> dict[str, Any]:
    return {"message_id": message.get("message_id"), "timestamp": message.get("timestamp")}


def _priority(message: Mapping[str, Any]) -> str:
    p = str(message.get("priority", "")).lower()
    return "warn" if p == "warning" else p


# The `priority` field as notifiers write it (oslo: upper case), so routing a message is one dict lookup;
# any other value goes through `_priority`.
_SPELLINGS = {s: p for p in PRIORITIES for s in (p, p.upper(), p.capitalize())}
_SPELLINGS.update({s: "warn" for s in ("warning", "WARNING", "Warning")})

_HANDLED = NotificationResult.HANDLED
_REQUEUE = NotificationResult.REQUEUE

Targets = list[tuple[Any, NotificationFilter | None]]


class Dispatcher:
    """Routes notifications to endpoint methods; returns REQUEUE if any endpoint asked for it.

    `raise_as_requeue`: in at-least-once mode an endpoint that raises gets the message again;
    oslo (at-most-once) only logs it. As in oslo's dispatcher, endpoint methods and filter rules are
    looked up once, here, and a message's filter is checked just before its endpoint is called.
    """

    def __init__(self, endpoints: Sequence[Any], batch: bool, raise_as_requeue: bool) -> None:
        self.endpoints = list(endpoints)
        self.batch = batch
        self.raise_as_requeue = raise_as_requeue
        self.targets: dict[str, Targets] = {}
        for p in PRIORITIES:
            found = [(getattr(e, p), getattr(e, "filter_rule", None)) for e in self.endpoints
                     if callable(getattr(e, p, None))]  # fmt: skip
            if found:
                self.targets[p] = found
        self.priorities = list(self.targets)
        if not self.priorities:
            raise ValueError(f"no endpoint has a method for any priority ({', '.join(PRIORITIES)})")
        self._routes: dict[str, Targets] = {s: self.targets.get(p, []) for s, p in _SPELLINGS.items()}

    def _route(self, message: Mapping[str, Any]) -> Targets:
        raw = message.get("priority", "")
        if type(raw) is str:
            found = self._routes.get(raw)
            if found is not None:
                return found
        return self.targets.get(_priority(message), [])

    def calls(self, incoming: list[Incoming]) -> list[tuple[Any, tuple[Any, ...]]]:
        """(method, args) pairs to run, in order (filters already applied)."""
        out: list[tuple[Any, tuple[Any, ...]]] = []
        if not self.batch:
            for m in incoming:
                msg = m.message
                for method, rule in self._route(msg):
                    args = (m.ctxt, msg.get("publisher_id"), msg.get("event_type"), msg.get("payload"), _metadata(msg))
                    if rule is None or rule.match(args[0], args[1], args[2], args[4]):
                        out.append((method, args))
            return out
        groups: dict[int, list[Incoming]] = {}  # by the id of a priority's targets, in arrival order
        routes = self._routes
        for m in incoming:
            raw = m.message.get("priority", "")
            targets = routes.get(raw) if type(raw) is str else None
            if targets is None:
                targets = self._route(m.message)
            if targets:
                group = groups.get(id(targets))
                if group is None:
                    group = groups[id(targets)] = []
                group.append(m)
        for targets in self.targets.values():
            group = groups.get(id(targets))
            if group is None:
                continue
            for method, rule in targets:
                batch = []
                for m in group:
                    msg = m.message
                    md = {"message_id": msg.get("message_id"), "timestamp": msg.get("timestamp")}
                    if rule is None or rule.match(m.ctxt, msg.get("publisher_id"), msg.get("event_type"), md):
                        batch.append({"ctxt": m.ctxt, "publisher_id": msg.get("publisher_id"),
                                      "event_type": msg.get("event_type"), "payload": msg.get("payload"),
                                      "metadata": md})  # fmt: skip
                if batch:
                    out.append((method, (batch,)))
        return out

    def outcome(self, result: Any, exc: BaseException | None) -> NotificationResult:
        if exc is not None:
            LOG.error("notification endpoint failed: %r", exc, exc_info=exc)
            return _REQUEUE if self.raise_as_requeue else _HANDLED
        if result is _REQUEUE or result == "requeue":
            return _REQUEUE
        return _HANDLED

    def run_one(self, m: Incoming) -> NotificationResult:
        """`run([m])` for a listener without batches, without the intermediate lists."""
        msg = m.message
        result = _HANDLED
        for method, rule in self._route(msg):
            md = {"message_id": msg.get("message_id"), "timestamp": msg.get("timestamp")}
            if rule is not None and not rule.match(m.ctxt, msg.get("publisher_id"), msg.get("event_type"), md):
                continue
            try:
                out = method(m.ctxt, msg.get("publisher_id"), msg.get("event_type"), msg.get("payload"), md)
            except Exception as e:  # endpoints are user code
                if self.outcome(None, e) is _REQUEUE:
                    result = _REQUEUE
                continue
            if out is not None and (out is _REQUEUE or out == "requeue"):
                result = _REQUEUE
        return result

    def run(self, incoming: list[Incoming]) -> NotificationResult:
        if not self.batch and len(incoming) == 1:
            return self.run_one(incoming[0])
        result = _HANDLED
        for method, args in self.calls(incoming):
            try:
                out, exc = method(*args), None
            except Exception as e:  # endpoints are user code
                out, exc = None, e
            if self.outcome(out, exc) is _REQUEUE:
                result = _REQUEUE
        return result

    async def run_async(self, incoming: list[Incoming]) -> NotificationResult:
        result = _HANDLED
        for method, args in self.calls(incoming):
            try:
                out, exc = method(*args), None
                if inspect.isawaitable(out):
                    out = await out
            except Exception as e:
                out, exc = None, e
            if self.outcome(out, exc) is _REQUEUE:
                result = _REQUEUE
        return result


def _to_ms(value: _dt.datetime | float | int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        return int(value.timestamp() * 1000)
    return int(value)


class NotificationListener:
    """Dispatches notifications on `targets` to `endpoints`; a `pool` is a consumer group.

    Single messages are dispatched one at a time (in order per partition); with `batch_size` > 1
    endpoints get lists. `delivery="at-least-once"` commits after the endpoints return and
    redelivers what raised or returned REQUEUE; `replay_from` (datetime or epoch ms) starts a new
    assignment at that time instead of at the end.

    `share=True` runs the pool as a Kafka share group (KIP-932, brokers from Kafka 4.2 and logbroker):
    every listener may receive from every partition, so a pool spreads its notifications over any number
    of listeners, even on a one-partition topic; there is no order between listeners (see `share`).
    """

    def __init__(
        self,
        transport: str | Transport,
        targets: Sequence[Target | str | Any],
        endpoints: Sequence[Any],
        pool: str | None = None,
        executor: str = "threading",
        batch_size: int = 1,
        batch_timeout: float | None = None,
        driver_options: KafkaOptions | dict[str, Any] | None = None,
        delivery: str = AT_MOST_ONCE,
        replay_from: _dt.datetime | float | int | None = None,
        share: bool = False,
    ) -> None:
        if executor not in ("threading", "asyncio"):
            raise ValueError(f"executor must be 'threading' or 'asyncio', not {executor!r}")
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.transport = get_transport(transport, driver_options)
        self.executor = executor
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout
        self.dispatcher = Dispatcher(endpoints, batch=batch_size > 1, raise_as_requeue=delivery == AT_LEAST_ONCE)
        names = [t if isinstance(t, str) else t.topic for t in targets]
        topics = [self.transport.topic(n, p) for n in names for p in self.dispatcher.priorities]
        kind = ShareNotificationConsumer if share else NotificationConsumer
        self.consumer: NotificationConsumer | ShareNotificationConsumer = kind(
            self.transport, topics, pool, self.transport.options, delivery, _to_ms(replay_from)
        )
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[None] | None = None
        self._running = False

    @property
    def topics(self) -> list[str]:
        return list(self.consumer.topics)

    def _handle(self, batch: list[Incoming], result: NotificationResult) -> None:
        if result is NotificationResult.REQUEUE:
            self.consumer.requeue(batch)
        else:
            self.consumer.ack(batch)

    def _loop(self) -> None:
        consumer = self.consumer
        if self.batch_size == 1 and consumer.delivery == AT_MOST_ONCE:
            # Nothing to acknowledge after dispatch (committed before fetching).
            fetch, run_one = consumer.fetch, self.dispatcher.run_one
            while self._running:
                for m in fetch(1):
                    if run_one(m) is _REQUEUE:
                        consumer.requeue([m])
            return
        while self._running:
            batch = consumer.fetch(self.batch_size, self.batch_timeout)
            if batch:
                self._handle(batch, self.dispatcher.run(batch))

    async def _aloop(self) -> None:
        loop = asyncio.get_running_loop()
        consumer = self.consumer
        # At-most-once has nothing to commit after dispatch, and a single notification already fetched
        # is taken without waiting (timeout 0): neither needs a hop to the executor's thread.
        settle_here = consumer.delivery == AT_MOST_ONCE
        while self._running:
            batch = consumer.fetch(1, self.batch_timeout, 0) if self.batch_size == 1 else None
            if batch:
                await asyncio.sleep(0)  # other tasks still run between notifications
            else:
                batch = await loop.run_in_executor(None, consumer.fetch, self.batch_size, self.batch_timeout)
            if batch:
                result = await self.dispatcher.run_async(batch)
                if settle_here:
                    self._handle(batch, result)
                else:
                    await loop.run_in_executor(None, self._handle, batch, result)

    def start(self, timeout: float | None = None) -> NotificationListener:
        """Join the pool and wait for an assignment, then dispatch in a thread (threading) or a task
        on the running loop (asyncio, so call it from a coroutine)."""
        if self._running:
            return self
        loop = asyncio.get_running_loop() if self.executor == "asyncio" else None
        self.consumer.start(timeout)
        self._running = True
        if loop is not None:
            self._task = loop.create_task(self._aloop())
        else:
            self._thread = threading.Thread(target=self._loop, name="logbroker-notify-listener", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop dispatching (the current batch finishes)."""
        self._running = False
        self.consumer.stop()

    def wait(self) -> None:
        """Wait for the dispatch thread, then leave the pool."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.consumer.close()

    async def wait_async(self) -> None:
        if self._task is not None:
            await self._task
            self._task = None
        await asyncio.get_running_loop().run_in_executor(None, self.consumer.close)

    def __enter__(self) -> NotificationListener:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.wait()
