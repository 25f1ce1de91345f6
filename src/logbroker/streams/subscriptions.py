"""Subscriptions (cursors with a handler), stream handles, and the lifecycle of implicit subscriptions.

A subscription is a cursor plus a task that exists only while events are waiting; `ImplicitSubscriptions`
is the provider's part that activates a handler per key on its first event and retires idle ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import inspect
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, Self

from logbroker.streams.cache import LAST, Agent, StreamId
from logbroker.streams.metrics import StreamMetrics
from logbroker.streams.model import HashRing, SequenceToken

# the provider's logger name, as before the split, so existing logging configuration still applies
log = logging.getLogger("logbroker.streams.provider")

Handler = Callable[[Any, SequenceToken], Awaitable[None]]
HandlerFactory = Callable[[str], Handler]
_ids = itertools.count(1)


class StreamHost(Protocol):
    """What subscriptions and stream handles use of their provider (`provider.StreamProvider`)."""

    ring: HashRing
    agents: dict[int, Agent]  # the pulling agents' caches, by owned partition
    subscribers: dict[StreamId, set[Subscription]]

    def read_range(
        self, partition: int, start: SequenceToken, end: int | None, sid: StreamId
    ) -> list[tuple[SequenceToken, Any]]: ...

    def progress(self, partition: int) -> None: ...
    def decode(self, raw: bytes) -> list[Any]: ...

    async def position(self, partition: int, token: SequenceToken) -> tuple[SequenceToken, SequenceToken | None]: ...

    async def send(self, stream: Stream, events: list[Any]) -> None: ...

    def housekeep(self, agent: Agent, now: float) -> None: ...

    def went_idle(self, sub: Subscription) -> None: ...


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("subscription task failed", exc_info=task.exception())


class Subscription:
    """A cursor of one stream with a handler; delivers in token order, one event at a time."""

    def __init__(self, provider: StreamHost, sid: StreamId, handler: Handler, after: SequenceToken | None,
                 rewind_from: SequenceToken | None = None, implicit: bool = False) -> None:  # fmt: skip
        self.provider, self.sid, self.handler, self.implicit = provider, sid, handler, implicit
        self.partition = provider.ring.partition(*sid)
        self.id = next(_ids)  # uuid4 per implicit subscription cost more than delivering its events
        self.after = after
        self._hint: int | None = None  # absolute position in the stream's StreamBuffer of the next event
        self.rewind_from = rewind_from
        self.delivered = 0
        self.active = False  # subscribed (not unsubscribed)
        self._task: asyncio.Task[None] | None = None  # only while there is something to deliver
        self._idle_since = time.monotonic()  # when it last caught up (implicit subscriptions retire on it)
        self._queued = False  # in the provider's idle heap (at most once)
        self._wait: asyncio.Future[None] | None = None  # the previous handler's on_deactivate() of this key
        self._raw: bytes | None = None  # the message whose events `_decoded` holds (decoded once per cursor)
        self._decoded: list[Any] | None = None

    def _start(self) -> None:
        self.active = True
        self._kick()

    def _kick(self) -> None:
        """Start delivering if idle. A task runs only while events are waiting and ends when it catches up, so
        10,000 idle streams hold 10,000 small objects rather than 10,000 parked tasks (and their frames) that
        every garbage collection would walk."""
        if self.active and self._task is None:
            self._task = task = asyncio.get_running_loop().create_task(self._run(), name="streams-subscription")
            task.add_done_callback(_log_failure)

    def behind(self, token: SequenceToken) -> bool:
        return self.after is None or self.after < token

    async def _run(self) -> None:
        """Deliver until caught up with the cache; new events, an assignment or resume() kick it again."""
        p, sid = self.provider, self.sid
        try:
            if self._wait is not None:  # the retired handler of this key finishes deactivating first
                prev, self._wait = self._wait, None
                await asyncio.wait([prev])  # wait(), not await: cancelling this task must not cancel prev
            while True:
                agent = p.agents.get(self.partition)
                if agent is None:
                    return
                if self.rewind_from is not None:
                    await self._rewind(agent)
                    continue
                buf = agent.streams.get(sid)
                if buf is None:
                    return
                i = buf.locate(self.after, self._hint)
                if i >= buf.end:
                    self._hint = buf.base + i
                    self._raw = self._decoded = None  # caught up: hold no decoded events while idle
                    return
                self._hint = buf.base + i + 1  # before the await: eviction may compact the lists meanwhile
                raw, token = buf.raws[i], buf.token(i)
                if raw is None:
                    await self._deliver(buf.events[i], token)
                    continue
                if raw is not self._raw:
                    self._raw = raw
                    try:
                        self._decoded = p.decode(raw)
                    except Exception as exc:
                        self._decoded = None
                        log.warning("skipping undecodable message at %s/%s: %s", token.partition, token.offset, exc)
                decoded = self._decoded
                if decoded is not None and token.index < len(decoded):
                    await self._deliver(decoded[token.index], token)
                else:  # undecodable, or fewer events than its header said: the cursor moves past it
                    self.after = token
                if agent.paused:  # only a paused cache waits for readers to move on
                    p.housekeep(agent, time.monotonic())
        finally:
            self._task = None
            if self.implicit:
                p.went_idle(self)

    async def _deliver(self, event: Any, token: SequenceToken) -> None:
        """One event to the handler; a failing handler is logged and the cursor moves on (Orleans'
        default), so one poison event cannot stall its stream."""
        try:
            await self.handler(event, token)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("handler of stream %s failed on %s; continuing", self.sid, token)
        self.after = token
        self.delivered += 1

    async def _rewind(self, agent: Agent) -> None:
        """Serve a token older than the cache from the broker, up to where the cache starts."""
        start = self.rewind_from
        assert start is not None
        end = agent.low()
        if end is not None and start.offset >= end:  # the cache caught up with the token meanwhile
            self.after, self.rewind_from = SequenceToken(start.partition, start.offset, start.index - 1), None
            self._hint = None
            return
        events = await asyncio.to_thread(self.provider.read_range, self.partition, start, end, self.sid)
        self.rewind_from = None
        for token, event in events:
            await self._deliver(event, token)
        stop = events[-1][0] if events else None
        self._hint = None
        if end is not None:
            self.after = max(filter(None, [stop, SequenceToken(self.partition, end - 1, LAST)]))
        elif stop is not None:
            self.after = stop

    async def unsubscribe(self) -> None:
        """Stop delivery; the cursor no longer holds the cache."""
        self.active = False
        self.provider.subscribers.get(self.sid, set()).discard(self)
        task = self._task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.provider.progress(self.partition)

    async def resume(self, token: SequenceToken | None = None, handler: Handler | None = None) -> Self:
        """Continue after an unsubscribe, optionally from another token or with another handler."""
        if handler is not None:
            self.handler = handler
        if token is not None:
            if self.active:  # restart the cursor rather than move it under a running delivery
                await self.unsubscribe()
            self.after, self.rewind_from = await self.provider.position(self.partition, token)
            self._hint = None
        if not self.active:
            self.provider.subscribers.setdefault(self.sid, set()).add(self)
            self._start()
        return self


class Stream:
    """A virtual stream (namespace, key); cheap to create, mapped to a partition by the hash ring."""

    __slots__ = ("_headers", "_key", "key", "namespace", "partition", "provider")

    def __init__(self, provider: StreamHost, namespace: str, key: str) -> None:
        self.provider, self.namespace, self.key = provider, namespace, key
        self.partition = provider.ring.partition(namespace, key)
        # encoded once per stream handle rather than once per publish
        self._key = f"{namespace}/{key}".encode()
        # "n": the message's event count, so a reader can cache the events without decoding them
        self._headers = [("ns", namespace.encode()), ("key", key.encode()), ("n", b"1")]

    async def publish(self, events: Any, *, batch: bool = False) -> None:
        """Publish one event, or a list of events as one batch when ``batch=True``; returns when acknowledged."""
        items = list(events) if batch else [events]
        await self.provider.send(self, items)

    async def subscribe(self, handler: Handler, token: SequenceToken | None = None) -> Subscription:
        """``handler(event, token)`` for events after now, or from ``token`` (inclusive; rewinds as needed)."""
        p = self.provider
        sid = (self.namespace, self.key)
        if token is None:
            agent = p.agents.get(self.partition)
            nxt = agent.next_offset if agent is not None else None
            after, rewind = (SequenceToken(self.partition, nxt - 1, LAST) if nxt is not None else None), None
        else:
            after, rewind = await p.position(self.partition, token)
        sub = Subscription(p, sid, handler, after, rewind)
        p.subscribers.setdefault(sid, set()).add(sub)
        sub._start()
        return sub

    async def read(self, from_token: SequenceToken | None = None) -> AsyncIterator[tuple[Any, SequenceToken]]:
        """``async for event, token in stream.read()``: a subscription whose cursor moves as you iterate."""
        queue: asyncio.Queue[tuple[Any, SequenceToken]] = asyncio.Queue(maxsize=1)

        async def put(event: Any, token: SequenceToken) -> None:
            await queue.put((event, token))

        sub = await self.subscribe(put, from_token)
        try:
            while True:
                yield await queue.get()
        finally:
            await sub.unsubscribe()


class ImplicitSubscriptions:
    """The provider's implicit subscriptions: one handler per key from its namespace's factory, activated on the
    key's first fetched event, retired after ``implicit_idle_timeout`` idle (a heap of due times, head only)."""

    metrics: StreamMetrics | None
    agents: dict[int, Agent]
    subscribers: dict[StreamId, set[Subscription]]
    _implicit: dict[str, HandlerFactory]
    _implicit_subs: dict[StreamId, Subscription]
    _idle_timeout: float | None
    _idle_heap: list[tuple[float, int, Subscription]]
    _retiring: dict[StreamId, asyncio.Task[None]]
    _closed: bool

    def _activate(self, sid: StreamId, first: SequenceToken) -> None:
        if sid in self._implicit_subs:
            return
        factory = self._implicit.get(sid[0])
        if factory is None:
            return
        sub = Subscription(self, sid, factory(sid[1]), SequenceToken(first.partition, first.offset, first.index - 1),
                           implicit=True)  # fmt: skip
        sub._wait = self._retiring.get(sid)
        self._implicit_subs[sid] = sub
        self.subscribers.setdefault(sid, set()).add(sub)
        assert self.metrics is not None
        self.metrics.implicit_active.set(len(self._implicit_subs))
        sub._start()

    def went_idle(self, sub: Subscription) -> None:
        """An implicit subscription caught up: queue it for retirement once it stays idle long enough."""
        sub._idle_since = now = time.monotonic()
        if self._idle_timeout is not None and not sub._queued and not self._closed:
            sub._queued = True
            heapq.heappush(self._idle_heap, (now + self._idle_timeout, sub.id, sub))

    def _retire_idle(self, now: float, budget: int = 10_000) -> None:
        """Retire implicit subscriptions idle for ``implicit_idle_timeout`` with nothing left to deliver.

        A heap ordered by due time, one entry per subscription pushed when it catches up (not per event), so
        a sweep costs O(log n) per retirement rather than a scan of every key; ``budget`` bounds one sweep so a
        mass retirement does not stall the loop.
        """
        heap, timeout = self._idle_heap, self._idle_timeout
        assert timeout is not None
        while heap and heap[0][0] <= now and budget > 0:
            sub = heapq.heappop(heap)[2]
            sub._queued = False
            if self._implicit_subs.get(sub.sid) is not sub or sub._task is not None or not sub.active:
                continue  # retired already, or delivering: the end of that delivery queues it again
            due = sub._idle_since + timeout
            if due > now:  # delivered again since it was queued
                sub._queued = True
                heapq.heappush(heap, (due, sub.id, sub))
            elif self._pending(sub):  # cannot happen while deliveries are kicked; never retire over events
                sub._kick()
            else:
                budget -= 1
                self._retire(sub)

    def _pending(self, sub: Subscription) -> bool:
        """Whether this process holds events the subscription has not delivered. A revoked partition holds
        none: its new owner starts from the committed offset, which no retired cursor moved past."""
        if sub.rewind_from is not None:
            return True
        agent = self.agents.get(sub.partition)
        buf = agent.streams.get(sub.sid) if agent is not None else None
        return buf is not None and buf.locate(sub.after, sub._hint) < buf.end

    def _retire(self, sub: Subscription, *, count: bool = True) -> None:
        """Forget the cursor of an idle implicit subscription; the key's next event activates a new handler.

        Removed from ``subscribers`` at once, so it holds neither the cache nor the commit point. The handler's
        ``on_deactivate()`` (if it has one) runs as a task; a new activation of the key waits for it.
        """
        sid = sub.sid
        del self._implicit_subs[sid]
        subs = self.subscribers.get(sid)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self.subscribers[sid]
        sub.active = False
        m = self.metrics
        assert m is not None
        if count:
            m.implicit_retired.inc()
        m.implicit_active.set(len(self._implicit_subs))
        hook = getattr(sub.handler, "on_deactivate", None)
        if hook is None:
            return
        prev = self._retiring.get(sid)  # only at close(): otherwise the retired handler had awaited it
        task = asyncio.get_running_loop().create_task(self._deactivate(sid, hook, prev), name="streams-deactivate")
        self._retiring[sid] = task

        def forget(t: asyncio.Task[None]) -> None:
            if self._retiring.get(sid) is t:
                del self._retiring[sid]

        task.add_done_callback(forget)

    async def _deactivate(self, sid: StreamId, hook: Callable[[], Any], prev: asyncio.Task[None] | None) -> None:
        if prev is not None:
            await asyncio.wait([prev])
        try:
            result = hook()
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("on_deactivate() of the handler of stream %s failed", sid)
