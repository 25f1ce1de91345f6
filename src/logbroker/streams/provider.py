"""StreamProvider: virtual streams over one topic's partitions, a pulling agent and a rewindable cache per partition.

Threads: librdkafka calls block, so one thread owns the consumer (fetch, pause/resume, commit, rebalance
callbacks) and one polls the producer for acknowledgements. Everything else (caches, cursors, handlers) lives on
the provider's event loop, so the cache needs no locks.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from logbroker.streams.config import StreamsConfig
from logbroker.streams.errors import (
    PublishError,
    StreamsConfigError,
    StreamsError,
    TokenExpiredError,
    UnknownNamespaceError,
)
from logbroker.streams.metrics import StreamMetrics
from logbroker.streams.model import HashRing, JsonSerializer, SequenceToken, Serializer

log = logging.getLogger(__name__)

Handler = Callable[[Any, SequenceToken], Awaitable[None]]
HandlerFactory = Callable[[str], Handler]
StreamId = tuple[str, str]
_LAST = 2**62  # an index past any batch: Token(p, o, _LAST) means "all of offset o"


@dataclass(slots=True)
class _Cached:
    offset: int
    arrived: float
    last: dict[StreamId, SequenceToken]  # per stream: its last event in this message


@dataclass(eq=False)
class _Agent:
    """Pulling agent of one owned partition: its cache, eviction, pressure and commit point."""

    partition: int
    messages: deque[_Cached] = field(default_factory=deque)
    streams: dict[StreamId, deque[tuple[SequenceToken, Any]]] = field(default_factory=dict)
    evicted_upto: int | None = None  # offset after the last message that left the cache
    next_offset: int | None = None
    paused: bool = False
    pressure_cursors: int = 0

    def low(self) -> int | None:
        return self.messages[0].offset if self.messages else (self.evicted_upto or self.next_offset)

    def next_after(self, sid: StreamId, after: SequenceToken | None) -> tuple[SequenceToken, Any] | None:
        dq = self.streams.get(sid)
        if not dq:
            return None
        i = 0 if after is None else bisect.bisect_right(dq, after, key=lambda e: e[0])
        return dq[i] if i < len(dq) else None


class Subscription:
    """A cursor of one stream with a handler; delivers in token order, one event at a time."""

    def __init__(self, provider: StreamProvider, sid: StreamId, handler: Handler, after: SequenceToken | None,
                 rewind_from: SequenceToken | None = None, implicit: bool = False) -> None:  # fmt: skip
        self.provider, self.sid, self.handler, self.implicit = provider, sid, handler, implicit
        self.partition = provider.ring.partition(*sid)
        self.id = uuid.uuid4().hex
        self.after = after
        self.rewind_from = rewind_from
        self.delivered = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def _start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"streams-sub-{self.sid}")
        self._task.add_done_callback(_log_failure)
        self._wake.set()

    def behind(self, token: SequenceToken) -> bool:
        return self.after is None or self.after < token

    async def _run(self) -> None:
        p = self.provider
        while True:
            agent = p._agents.get(self.partition)
            if self.rewind_from is not None and agent is not None:
                await self._rewind(agent)
                continue
            item = agent.next_after(self.sid, self.after) if agent is not None else None
            if item is None:
                await self._wake.wait()
                self._wake.clear()
                continue
            token, event = item
            try:
                await self.handler(event, token)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("handler of stream %s failed on %s; continuing", self.sid, token)
            self.after = token
            self.delivered += 1
            p._progress(self.partition)

    async def _rewind(self, agent: _Agent) -> None:
        """Serve a token older than the cache from the broker, up to where the cache starts."""
        start = self.rewind_from
        assert start is not None
        end = agent.low()
        if end is not None and start.offset >= end:  # the cache caught up with the token meanwhile
            self.after, self.rewind_from = SequenceToken(start.partition, start.offset, start.index - 1), None
            return
        events = await asyncio.to_thread(self.provider._read_range, self.partition, start, end, self.sid)
        self.rewind_from = None
        for token, event in events:
            try:
                await self.handler(event, token)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("handler of stream %s failed on %s; continuing", self.sid, token)
            self.after = token
            self.delivered += 1
        stop = events[-1][0] if events else None
        if end is not None:
            self.after = max(filter(None, [stop, SequenceToken(self.partition, end - 1, _LAST)]))
        elif stop is not None:
            self.after = stop

    async def unsubscribe(self) -> None:
        """Stop delivery; the cursor no longer holds the cache."""
        self.provider._subs.get(self.sid, set()).discard(self)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.provider._progress(self.partition)

    async def resume(self, token: SequenceToken | None = None, handler: Handler | None = None) -> Self:
        """Continue after an unsubscribe, optionally from another token or with another handler."""
        if handler is not None:
            self.handler = handler
        if token is not None:
            if self._task is not None:  # restart the cursor rather than move it under a running delivery
                await self.unsubscribe()
            self.after, self.rewind_from = await self.provider._position(self.partition, token)
        if self._task is None:
            self.provider._subs.setdefault(self.sid, set()).add(self)
            self._start()
        return self


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("subscription task failed", exc_info=task.exception())


class Stream:
    """A virtual stream (namespace, key); cheap to create, mapped to a partition by the hash ring."""

    def __init__(self, provider: StreamProvider, namespace: str, key: str) -> None:
        self.provider, self.namespace, self.key = provider, namespace, key
        self.partition = provider.ring.partition(namespace, key)

    async def publish(self, events: Any, *, batch: bool = False) -> None:
        """Publish one event, or a list of events as one batch when ``batch=True``; returns when acknowledged."""
        items = list(events) if batch else [events]
        await self.provider._publish(self, items)

    async def subscribe(self, handler: Handler, token: SequenceToken | None = None) -> Subscription:
        """``handler(event, token)`` for events after now, or from ``token`` (inclusive; rewinds as needed)."""
        p = self.provider
        sid = (self.namespace, self.key)
        if token is None:
            agent = p._agents.get(self.partition)
            nxt = agent.next_offset if agent is not None else None
            after, rewind = (SequenceToken(self.partition, nxt - 1, _LAST) if nxt is not None else None), None
        else:
            after, rewind = await p._position(self.partition, token)
        sub = Subscription(p, sid, handler, after, rewind)
        p._subs.setdefault(sid, set()).add(sub)
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


class StreamProvider:
    """``async with StreamProvider(config) as provider:`` — producer, consumer-group member and caches."""

    def __init__(self, config: StreamsConfig | Mapping[str, Any], serializer: Serializer | None = None,
                 *, consume: bool = True) -> None:  # fmt: skip
        """``consume=False`` makes a publish-only provider that does not join the consumer group."""
        self.config = StreamsConfig.load(config)
        self.consume = consume
        self.serializer: Serializer = serializer or JsonSerializer()
        self.ring = HashRing(self.config.num_queues)
        self.metrics: StreamMetrics | None = None
        self._agents: dict[int, _Agent] = {}
        self._subs: dict[StreamId, set[Subscription]] = {}
        self._implicit: dict[str, HandlerFactory] = {}
        self._implicit_subs: dict[StreamId, Subscription] = {}
        self._lock = threading.Lock()
        self._want_paused: dict[int, bool] = {}
        self._commits: dict[int, int] = {}
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._assigned = asyncio.Event()
        self._maint: asyncio.Task[None] | None = None
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._closed = False

    # ---- lifecycle -------------------------------------------------------------------------------------------

    async def start(self) -> Self:
        c = self.config
        self._loop = asyncio.get_running_loop()
        self.metrics = StreamMetrics(c.metrics_port)
        await asyncio.to_thread(self._ensure_topic)
        common = {"bootstrap.servers": c.bootstrap, "security.protocol": c.security_protocol}
        self._producer = Producer({**common, "acks": str(c.acks), "linger.ms": c.produce_wait_ms,
                                   "batch.num.messages": c.produce_batch_size, **c.producer})  # fmt: skip
        self._producer_thread()
        if self.consume:
            self._start_consumer()
        return self

    def _producer_thread(self) -> None:
        t = threading.Thread(target=self._produce_loop, name="streams-produce", daemon=True)
        t.start()
        self._threads.append(t)

    def _start_consumer(self) -> None:
        c = self.config
        common = {"bootstrap.servers": c.bootstrap, "security.protocol": c.security_protocol}
        self._consumer = Consumer({
            **common, "group.id": c.consumer_group, "enable.auto.commit": False,
            "auto.offset.reset": "latest" if c.init_with_last_offset else "earliest",
            "fetch.max.bytes": c.max_bytes_per_fetch, "message.max.bytes": c.max_bytes_per_fetch,
            "max.partition.fetch.bytes": c.max_bytes_per_fetch,
            "fetch.wait.max.ms": c.receive_wait_ms, "session.timeout.ms": c.session_timeout_ms,
            "heartbeat.interval.ms": max(100, c.session_timeout_ms // 5), "queued.max.messages.kbytes": 1024,
            "fetch.queue.backoff.ms": 10,
            "partition.assignment.strategy": "cooperative-sticky", **c.consumer,
        })  # fmt: skip
        self._consumer.subscribe([c.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                 on_lost=self._on_revoke)  # fmt: skip
        t = threading.Thread(target=self._consume_loop, name="streams-consume", daemon=True)
        t.start()
        self._threads.append(t)
        self._maint = asyncio.get_running_loop().create_task(self._maintain())

    async def wait_assigned(self, partitions: int | None = None, timeout: float = 30.0) -> set[int]:
        """Until this process owns ``partitions`` partitions (any, when None); for tests and start-up."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._agents and (partitions is None or len(self._agents) >= partitions):
                return set(self._agents)
            await asyncio.sleep(0.05)
        raise TimeoutError(f"owns {sorted(self._agents)} after {timeout}s")

    @property
    def owned(self) -> set[int]:
        return set(self._agents)

    async def close(self) -> None:
        """Commit what every reader is past, leave the group, flush produces."""
        if self._closed:
            return
        self._closed = True
        if self._maint is not None:
            self._maint.cancel()
        self._stopping.set()
        for t in self._threads:
            await asyncio.to_thread(t.join)
        self._producer = self._consumer = None  # librdkafka handles are destroyed now, not at garbage collection
        for subs in list(self._subs.values()):
            for s in list(subs):
                if s._task is not None:
                    s._task.cancel()
        if self.metrics is not None:
            self.metrics.close()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _ensure_topic(self) -> None:
        c = self.config
        admin = AdminClient({"bootstrap.servers": c.bootstrap, "security.protocol": c.security_protocol})
        md = admin.list_topics(timeout=15)
        have = md.topics.get(c.topic)
        if have is None or have.error is not None:
            if not c.create_topic:
                raise StreamsError(f"topic {c.topic!r} does not exist and streams.create_topic is false")
            fut = admin.create_topics([NewTopic(c.topic, c.num_queues, 1)])[c.topic]
            try:
                fut.result(15)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise StreamsError(f"cannot create topic {c.topic!r}: {exc}") from exc
            have = self._settled_metadata(admin)
        if len(have.partitions) != c.num_queues:
            raise StreamsConfigError(
                f"streams.num_queues: {c.num_queues} but topic {c.topic!r} has {len(have.partitions)} partitions"
            )

    def _settled_metadata(self, admin: AdminClient) -> Any:
        """A just-created topic (here or by a peer process) shows up leaderless or partial for a moment."""
        deadline = time.monotonic() + 15
        while True:
            have = admin.list_topics(self.config.topic, timeout=15).topics.get(self.config.topic)
            ok = have is not None and have.error is None and have.partitions
            if ok and all(pm.leader >= 0 for pm in have.partitions.values()):
                return have
            if time.monotonic() > deadline:
                raise StreamsError(f"topic {self.config.topic!r} did not become available")
            time.sleep(0.1)

    # ---- API -------------------------------------------------------------------------------------------------

    def stream(self, namespace: str, key: str) -> Stream:
        return Stream(self, namespace, str(key))

    def implicit(self, namespace: str, factory: HandlerFactory) -> None:
        """Activate ``factory(key)`` as the handler of each stream in ``namespace`` on its first event."""
        if not callable(factory):
            raise TypeError("factory must be callable: key -> async handler(event, token)")
        self._implicit[namespace] = factory

    def remove_implicit(self, namespace: str) -> None:
        if namespace not in self._implicit:
            raise UnknownNamespaceError(f"no implicit handler factory for namespace {namespace!r}")
        del self._implicit[namespace]

    def metrics_text(self) -> str:
        return self.metrics.text() if self.metrics is not None else ""

    # ---- produce ---------------------------------------------------------------------------------------------

    async def _publish(self, stream: Stream, events: list[Any]) -> None:
        if self._producer is None or self._closed:
            raise StreamsError("provider is not started")
        payload = self.serializer.dumps(events)  # raises before anything is sent
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        started = time.perf_counter()

        def done(err: KafkaError | None, _msg: Any) -> None:
            def settle() -> None:
                if fut.done():
                    return
                if err is not None:
                    fut.set_exception(PublishError(str(err)))
                else:
                    fut.set_result(None)

            loop.call_soon_threadsafe(settle)

        headers = [("ns", stream.namespace.encode()), ("key", stream.key.encode())]
        while True:
            try:
                self._producer.produce(self.config.topic, payload, key=f"{stream.namespace}/{stream.key}".encode(),
                                       partition=stream.partition, headers=headers, on_delivery=done)  # fmt: skip
                break
            except BufferError:
                await asyncio.sleep(0.005)
        await fut
        assert self.metrics is not None
        self.metrics.produce_time.observe(time.perf_counter() - started)
        self.metrics.batch_size.observe(len(events))
        self.metrics.produced.inc(len(events))

    def _produce_loop(self) -> None:
        assert self._producer is not None
        while not self._stopping.is_set():
            self._producer.poll(0.05)
        self._producer.flush(10)

    # ---- consume (consumer thread) ---------------------------------------------------------------------------

    def _call(self, coro: Awaitable[Any]) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)  # type: ignore[arg-type]

    def _on_assign(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        # confluent-kafka applies the (incremental) assignment itself after the callback returns
        self._call(self._assign([tp.partition for tp in parts]))

    def _on_revoke(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        offsets: dict[int, int] = self._call(self._revoke([tp.partition for tp in parts]))
        self._commit_now(consumer, offsets)

    def _commit_now(self, consumer: Consumer, offsets: dict[int, int]) -> None:
        if not offsets:
            return
        started = time.perf_counter()
        try:
            consumer.commit(offsets=[TopicPartition(self.config.topic, p, o) for p, o in offsets.items()],
                            asynchronous=False)  # fmt: skip
        except KafkaException as exc:
            log.warning("offset commit failed (will be redelivered): %s", exc)
            return
        assert self.metrics is not None
        self.metrics.commit_time.observe(time.perf_counter() - started)
        for p, o in offsets.items():
            self.metrics.committed.labels(str(p)).set(o)

    def _consume_loop(self) -> None:
        c = self._consumer
        assert c is not None and self._loop is not None and self.metrics is not None
        paused: set[int] = set()
        wait = self.config.receive_wait_ms / 1000
        batch = min(500, self.config.cache_size)  # a paused cache overshoots by at most one batch
        ticks = 0
        while not self._stopping.is_set():
            with self._lock:
                want = dict(self._want_paused)
                commits, self._commits = self._commits, {}
            for p, on in want.items():
                tp = [TopicPartition(self.config.topic, p)]
                if on and p not in paused:
                    c.pause(tp)
                    paused.add(p)
                elif not on and p in paused:
                    c.resume(tp)
                    paused.discard(p)
            self._commit_now(c, commits)
            started = time.perf_counter()
            try:
                msgs = c.consume(num_messages=batch, timeout=wait)
            except KafkaException as exc:
                log.warning("fetch failed: %s", exc)
                continue
            self.metrics.fetch_time.observe(time.perf_counter() - started)
            self.metrics.per_fetch.observe(len(msgs))
            good = [m for m in msgs if m.error() is None]
            if good:  # handed over synchronously, so a pause decided on this batch applies before the next fetch
                self._call(self._take(good))
            ticks += 1
            if ticks % 5 == 0:
                self._update_lag(c)
        with self._lock:
            commits, self._commits = self._commits, {}
        self._commit_now(c, commits)
        try:
            c.close()  # leaves the group: the revoke callback commits what readers are past
        except (KafkaException, RuntimeError) as exc:
            log.warning("consumer close: %s", exc)

    def _update_lag(self, c: Consumer) -> None:
        assert self.metrics is not None
        try:
            positions = c.position(c.assignment())
        except KafkaException:
            return
        for tp in positions:
            if tp.offset < 0:
                continue
            self.metrics.offset.labels(str(tp.partition)).set(tp.offset)
            with contextlib.suppress(KafkaException):
                _low, high = c.get_watermark_offsets(tp, cached=True)
                if high >= 0:
                    self.metrics.lag.labels(str(tp.partition)).set(max(0, high - tp.offset))

    def _read_range(self, partition: int, start: SequenceToken, end: int | None,
                    sid: StreamId) -> list[tuple[SequenceToken, Any]]:  # fmt: skip
        """Events of one stream from the broker, offsets [start.offset, end): rewinds beyond the cache."""
        c = self.config
        reader = Consumer({"bootstrap.servers": c.bootstrap, "security.protocol": c.security_protocol,
                           "group.id": f"{c.consumer_group}-rewind-{uuid.uuid4().hex[:8]}",
                           "enable.auto.commit": False, "enable.partition.eof": True})  # fmt: skip
        out: list[tuple[SequenceToken, Any]] = []
        try:
            tp = TopicPartition(c.topic, partition, start.offset)
            _low, high = reader.get_watermark_offsets(tp, timeout=10)
            stop = high if end is None else min(end, high)
            if start.offset >= stop:
                return out
            reader.assign([tp])
            while True:
                msgs = reader.consume(500, timeout=1.0)
                for m in msgs:
                    if m.error() is not None:
                        if m.error().code() == KafkaError._PARTITION_EOF:
                            return out
                        continue
                    if m.offset() >= stop:
                        return out
                    got = self._decode(m)
                    if got is None or got[0] != sid:
                        continue
                    for i, ev in enumerate(got[1]):
                        tok = SequenceToken(partition, m.offset(), i)
                        if tok >= start:
                            out.append((tok, ev))
                    if m.offset() + 1 >= stop:
                        return out
        finally:
            reader.close()

    def _low_watermark(self, partition: int) -> int:
        c = self.config
        reader = Consumer({"bootstrap.servers": c.bootstrap, "security.protocol": c.security_protocol,
                           "group.id": f"{c.consumer_group}-probe", "enable.auto.commit": False})  # fmt: skip
        try:
            low, _high = reader.get_watermark_offsets(TopicPartition(c.topic, partition), timeout=10)
            return int(low)
        finally:
            reader.close()

    # ---- the cache (event loop) ------------------------------------------------------------------------------

    def _decode(self, m: Any) -> tuple[StreamId, list[Any]] | None:
        h = dict(m.headers() or [])
        if "ns" not in h or "key" not in h:
            return None
        try:
            return (h["ns"].decode(), h["key"].decode()), self.serializer.loads(m.value())
        except Exception as exc:
            log.warning("skipping undecodable message at %s/%s: %s", m.partition(), m.offset(), exc)
            return None

    async def _assign(self, parts: list[int]) -> None:
        for p in parts:
            self._agents.setdefault(p, _Agent(p))
        assert self.metrics is not None
        self.metrics.receivers.set(len(self._agents))
        self._wake_partition(set(parts))

    async def _revoke(self, parts: list[int]) -> dict[int, int]:
        offsets: dict[int, int] = {}
        for p in parts:
            agent = self._agents.pop(p, None)
            if agent is None:
                continue
            done = self._readers_past(agent)
            if done is not None:
                offsets[p] = done
            with self._lock:
                self._want_paused.pop(p, None)
                self._commits.pop(p, None)
        assert self.metrics is not None
        self.metrics.receivers.set(len(self._agents))
        return offsets

    def _readers_past(self, agent: _Agent) -> int | None:
        """Commit point: one past the highest offset that every reader has passed (no gaps)."""
        point = agent.evicted_upto
        for m in agent.messages:
            if self._has_readers(m):
                break
            point = m.offset + 1
        return point

    def _has_readers(self, m: _Cached) -> bool:
        for sid, last in m.last.items():
            for s in self._subs.get(sid, ()):
                if s.behind(last):
                    return True
        return False

    async def _take(self, msgs: list[Any]) -> None:
        self._on_messages(msgs)

    def _on_messages(self, msgs: list[Any]) -> None:
        now = time.monotonic()
        touched: set[int] = set()
        assert self.metrics is not None
        for m in msgs:
            p = m.partition()
            agent = self._agents.get(p)
            if agent is None:  # revoked meanwhile; the new owner fetches it from the committed offset
                continue
            if agent.next_offset is not None and m.offset() < agent.next_offset:
                continue
            agent.next_offset = m.offset() + 1
            got = self._decode(m)
            cached = _Cached(m.offset(), now, {})
            if got is not None:
                sid, events = got
                dq = agent.streams.setdefault(sid, deque())
                for i, ev in enumerate(events):
                    dq.append((SequenceToken(p, m.offset(), i), ev))
                if events:
                    cached.last[sid] = SequenceToken(p, m.offset(), len(events) - 1)
                    self._activate(sid, SequenceToken(p, m.offset(), 0))
                    for s in self._subs.get(sid, ()):
                        s._wake.set()
                self.metrics.consumed.inc(len(events))
            agent.messages.append(cached)
            touched.add(p)
        for p in touched:
            self._housekeep(self._agents[p], now)

    def _activate(self, sid: StreamId, first: SequenceToken) -> None:
        if sid in self._implicit_subs:
            return
        factory = self._implicit.get(sid[0])
        if factory is None:
            return
        sub = Subscription(self, sid, factory(sid[1]), SequenceToken(first.partition, first.offset, first.index - 1),
                           implicit=True)  # fmt: skip
        self._implicit_subs[sid] = sub
        self._subs.setdefault(sid, set()).add(sub)
        sub._start()

    def _progress(self, partition: int) -> None:
        agent = self._agents.get(partition)
        if agent is not None and agent.paused:
            self._housekeep(agent, time.monotonic())

    def _housekeep(self, agent: _Agent, now: float) -> None:
        """Evict what may leave, then pause fetching if the cache is full and its oldest message is held."""
        c = self.config
        evicted = 0
        while agent.messages:
            oldest = agent.messages[0]
            full = len(agent.messages) >= c.cache_size
            if not (full or now - oldest.arrived >= c.cache_timespan) or self._has_readers(oldest):
                break
            agent.messages.popleft()
            for sid in oldest.last:
                dq = agent.streams[sid]
                while dq and dq[0][0].offset <= oldest.offset:
                    dq.popleft()
                if not dq:
                    del agent.streams[sid]
            agent.evicted_upto = oldest.offset + 1
            evicted += 1
        assert self.metrics is not None
        label = str(agent.partition)
        if evicted:
            self.metrics.evictions.inc(evicted)
            with self._lock:
                self._commits[agent.partition] = agent.evicted_upto  # type: ignore[assignment]
        pressure = len(agent.messages) >= c.cache_size
        agent.pressure_cursors = 0
        if pressure and agent.messages:
            oldest = agent.messages[0]
            agent.pressure_cursors = sum(
                1 for sid, last in oldest.last.items() for s in self._subs.get(sid, ()) if s.behind(last)
            )
        if pressure != agent.paused:
            agent.paused = pressure
            with self._lock:
                self._want_paused[agent.partition] = pressure
        self.metrics.in_cache.labels(label).set(len(agent.messages))
        self.metrics.pressure.labels(label).set(agent.pressure_cursors)
        self.metrics.paused.labels(label).set(1 if agent.paused else 0)

    async def _maintain(self) -> None:
        period = min(0.2, max(0.01, self.config.cache_timespan / 10))
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for agent in list(self._agents.values()):
                self._housekeep(agent, now)

    def _wake_partition(self, parts: set[int]) -> None:
        for subs in self._subs.values():
            for s in subs:
                if s.partition in parts:
                    s._wake.set()

    async def _position(self, partition: int, token: SequenceToken) -> tuple[SequenceToken, SequenceToken | None]:
        """Cursor for a subscription from ``token``: inside the cache, or a rewind through the broker."""
        if token.partition != partition:
            raise StreamsError(f"token {token} belongs to partition {token.partition}, the stream to {partition}")
        low_wm = await asyncio.to_thread(self._low_watermark, partition)
        if token.offset < low_wm:
            raise TokenExpiredError(f"token {token} is older than the topic's retention (first offset {low_wm})")
        after = SequenceToken(partition, token.offset, token.index - 1)
        agent = self._agents.get(partition)
        low = agent.low() if agent is not None else None
        if low is not None and token.offset >= low:
            return after, None
        return after, token


def batches(items: Iterable[Any], size: int) -> Iterable[list[Any]]:
    """Split for publish(batch=True) callers that want bounded message sizes."""
    chunk: list[Any] = []
    for it in items:
        chunk.append(it)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
