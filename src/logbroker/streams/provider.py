"""StreamProvider: virtual streams over one topic's partitions, a pulling agent and a rewindable cache per partition.

Threads: librdkafka calls block, so one thread owns the consumer (fetch, pause/resume, commit, rebalance
callbacks) and one polls the producer for acknowledgements. Everything else (caches, cursors, handlers) lives on
the provider's event loop, so the cache needs no locks.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import heapq
import inspect
import itertools
import logging
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Self

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
_new_token = _new_cached = tuple.__new__  # named tuples without their Python-level __new__: one per event
_ids = itertools.count(1)


class _Cached(NamedTuple):
    """One cached message. A tuple of atoms (ints, a float, tuples of str/int) on purpose: the garbage
    collector stops tracking such tuples, so a full cache does not make every collection longer."""

    offset: int
    arrived: float
    sid: StreamId | None  # the stream of the message (one per message); None if it was not ours
    last: SequenceToken | None  # the stream's last event in this message


class _Buf:
    """The cached events of one stream in one partition, oldest first.

    Lists with a moving head rather than a deque: cursors index them in O(1) (deque indexing is O(n)), and
    ``base + i`` is a stable position a cursor keeps between events, so delivery needs no search. Tokens
    and events are parallel lists, not pairs: one object less per cached event for the collector.
    """

    __slots__ = ("base", "events", "head", "tokens")

    def __init__(self) -> None:
        self.tokens: list[SequenceToken] = []
        self.events: list[Any] = []
        self.head = 0  # [:head] are evicted
        self.base = 0  # absolute position of index 0

    def __len__(self) -> int:
        return len(self.tokens) - self.head

    def drop_upto(self, offset: int) -> None:
        """Evict the events of messages at or before ``offset``."""
        tokens, h = self.tokens, self.head
        while h < len(tokens) and tokens[h][1] <= offset:
            self.events[h] = None  # release the event now, not at the next compaction
            h += 1
        if h > 256 and 2 * h > len(tokens):  # compact now and then: amortised O(1) per event
            del tokens[:h]
            del self.events[:h]
            self.base += h
            h = 0
        self.head = h

    def locate(self, after: SequenceToken | None, hint: int | None) -> int:
        """Index of the first event after ``after``; the hint is checked, a bisect is the fallback."""
        tokens, head = self.tokens, self.head
        if after is None:
            return head
        if hint is not None:
            i = hint - self.base
            if head <= i <= len(tokens) and (i == head or tokens[i - 1] <= after) and (
                    i == len(tokens) or tokens[i] > after):  # fmt: skip
                return i
        return bisect.bisect_right(tokens, after, lo=head)


@dataclass(eq=False)
class _Agent:
    """Pulling agent of one owned partition: its cache, eviction, pressure and commit point."""

    partition: int
    messages: deque[_Cached] = field(default_factory=deque)
    streams: dict[StreamId, _Buf] = field(default_factory=dict)
    evicted_upto: int | None = None  # offset after the last message that left the cache
    next_offset: int | None = None
    paused: bool = False
    pressure_cursors: int = 0
    gauges: tuple[Any, ...] = ()  # its labelled children (in cache, pressure, paused): labels() is a lookup

    def low(self) -> int | None:
        return self.messages[0].offset if self.messages else (self.evicted_upto or self.next_offset)


class Subscription:
    """A cursor of one stream with a handler; delivers in token order, one event at a time."""

    def __init__(self, provider: StreamProvider, sid: StreamId, handler: Handler, after: SequenceToken | None,
                 rewind_from: SequenceToken | None = None, implicit: bool = False) -> None:  # fmt: skip
        self.provider, self.sid, self.handler, self.implicit = provider, sid, handler, implicit
        self.partition = provider.ring.partition(*sid)
        self.id = next(_ids)  # uuid4 per implicit subscription cost more than delivering its events
        self.after = after
        self._hint: int | None = None  # absolute position in the stream's _Buf of the next event
        self.rewind_from = rewind_from
        self.delivered = 0
        self.active = False  # subscribed (not unsubscribed)
        self._task: asyncio.Task[None] | None = None  # only while there is something to deliver
        self._idle_since = time.monotonic()  # when it last caught up (implicit subscriptions retire on it)
        self._queued = False  # in the provider's idle heap (at most once)
        self._wait: asyncio.Future[None] | None = None  # the previous handler's on_deactivate() of this key

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
                agent = p._agents.get(self.partition)
                if agent is None:
                    return
                if self.rewind_from is not None:
                    await self._rewind(agent)
                    continue
                buf = agent.streams.get(sid)
                if buf is None:
                    return
                i = buf.locate(self.after, self._hint)
                if i >= len(buf.tokens):
                    self._hint = buf.base + i
                    return
                self._hint = buf.base + i + 1  # before the await: eviction may compact the lists meanwhile
                await self._deliver(buf.events[i], buf.tokens[i])
                if agent.paused:  # only a paused cache waits for readers to move on
                    p._housekeep(agent, time.monotonic())
        finally:
            self._task = None
            if self.implicit:
                p._went_idle(self)

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

    async def _rewind(self, agent: _Agent) -> None:
        """Serve a token older than the cache from the broker, up to where the cache starts."""
        start = self.rewind_from
        assert start is not None
        end = agent.low()
        if end is not None and start.offset >= end:  # the cache caught up with the token meanwhile
            self.after, self.rewind_from = SequenceToken(start.partition, start.offset, start.index - 1), None
            self._hint = None
            return
        events = await asyncio.to_thread(self.provider._read_range, self.partition, start, end, self.sid)
        self.rewind_from = None
        for token, event in events:
            await self._deliver(event, token)
        stop = events[-1][0] if events else None
        self._hint = None
        if end is not None:
            self.after = max(filter(None, [stop, SequenceToken(self.partition, end - 1, _LAST)]))
        elif stop is not None:
            self.after = stop

    async def unsubscribe(self) -> None:
        """Stop delivery; the cursor no longer holds the cache."""
        self.active = False
        self.provider._subs.get(self.sid, set()).discard(self)
        task = self._task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.provider._progress(self.partition)

    async def resume(self, token: SequenceToken | None = None, handler: Handler | None = None) -> Self:
        """Continue after an unsubscribe, optionally from another token or with another handler."""
        if handler is not None:
            self.handler = handler
        if token is not None:
            if self.active:  # restart the cursor rather than move it under a running delivery
                await self.unsubscribe()
            self.after, self.rewind_from = await self.provider._position(self.partition, token)
            self._hint = None
        if not self.active:
            self.provider._subs.setdefault(self.sid, set()).add(self)
            self._start()
        return self


@contextlib.contextmanager
def _librdkafka_settings(key: str) -> Iterator[None]:
    """librdkafka refuses a bad pass-through setting (``streams.producer`` / ``streams.consumer``) only when the
    client is built; report it like any other config error, naming the key."""
    try:
        yield
    except KafkaException as exc:
        raise StreamsConfigError(f"streams.{key}: {exc.args[0].str() if exc.args else exc}") from None


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("subscription task failed", exc_info=task.exception())


class Stream:
    """A virtual stream (namespace, key); cheap to create, mapped to a partition by the hash ring."""

    __slots__ = ("_headers", "_key", "key", "namespace", "partition", "provider")

    def __init__(self, provider: StreamProvider, namespace: str, key: str) -> None:
        self.provider, self.namespace, self.key = provider, namespace, key
        self.partition = provider.ring.partition(namespace, key)
        # encoded once per stream handle rather than once per publish
        self._key = f"{namespace}/{key}".encode()
        self._headers = [("ns", namespace.encode()), ("key", key.encode())]

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
        self._idle_timeout = self.config.implicit_idle_timeout or None  # 0 and None: never retire
        # (due, id, subscription), one entry per caught-up implicit subscription: the sweep looks at the head only
        self._idle_heap: list[tuple[float, int, Subscription]] = []
        self._retiring: dict[StreamId, asyncio.Task[None]] = {}  # on_deactivate() still running, per key
        self._sids: dict[tuple[bytes, bytes], StreamId] = {}
        self._lock = threading.Lock()
        self._want_paused: dict[int, bool] = {}
        self._commits: dict[int, int] = {}
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._maint: asyncio.Task[None] | None = None
        self._producer: Producer | None = None
        self._topic = self.config.topic
        # (publish, error, partition) appended by delivery callbacks; swapped out whole by the producer thread
        self._acked: deque[tuple[tuple[asyncio.Future[None], int, float], KafkaError | None, int]] = deque()
        self._consumer: Consumer | None = None
        self._closed = False

    # ---- lifecycle -------------------------------------------------------------------------------------------

    async def start(self) -> Self:
        """Serve metrics, check or create the topic, start producing and (unless publish-only) join the group."""
        c = self.config
        self._loop = asyncio.get_running_loop()
        self.metrics = StreamMetrics(c.metrics_port, c.metrics_host, required="metrics_port" in c.model_fields_set)
        try:
            await self._start_clients()
        except BaseException:
            await self.close()  # a failed start leaves no endpoint, thread or client behind
            raise
        return self

    async def _start_clients(self) -> None:
        c = self.config
        await asyncio.to_thread(self._ensure_topic)
        common = {"bootstrap.servers": c.bootstrap, "security.protocol": c.security_protocol}
        with _librdkafka_settings("producer"):
            self._producer = Producer({**common, "acks": str(c.acks), "linger.ms": c.produce_wait_ms,
                                       "batch.num.messages": c.produce_batch_size, **c.producer})  # fmt: skip
        self._producer_thread()
        if self.consume:
            self._start_consumer()

    def _producer_thread(self) -> None:
        t = threading.Thread(target=self._produce_loop, name="streams-produce", daemon=True)
        t.start()
        self._threads.append(t)

    def _start_consumer(self) -> None:
        c = self.config
        common = {"bootstrap.servers": c.bootstrap, "security.protocol": c.security_protocol}
        # Orleans' max bytes per fetch is per queue (one receiver per partition); one consumer fetches all the
        # partitions this process owns in one request, so the request may carry that much per partition
        per_request = max(c.max_bytes_per_fetch, min(c.max_bytes_per_fetch * c.num_queues, 50 << 20))
        with _librdkafka_settings("consumer"):
            self._consumer = Consumer({
                **common, "group.id": c.consumer_group, "enable.auto.commit": False,
                "auto.offset.reset": "latest" if c.init_with_last_offset else "earliest",
                "max.partition.fetch.bytes": c.max_bytes_per_fetch, "fetch.max.bytes": per_request,
                "message.max.bytes": c.max_bytes_per_fetch,
                "receive.message.max.bytes": max(100_000_000, per_request + 512),
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
        tasks = []
        for subs in list(self._subs.values()):
            for s in list(subs):
                s.active = False
                if s._task is not None:
                    tasks.append(s._task)
                    s._task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # shutting down deactivates the live implicit handlers too, after any earlier deactivation of their key
        for sub in list(self._implicit_subs.values()):
            self._retire(sub, count=False)
        await asyncio.gather(*self._retiring.values(), return_exceptions=True)
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
        """Activate ``factory(key)`` as the handler of each stream in ``namespace`` on its first event.

        After ``implicit_idle_timeout`` seconds with nothing delivered and nothing pending, the handler is
        retired (its ``on_deactivate()``, sync or async, is called if it has one; also at close()), and the
        key's next event activates a new ``factory(key)`` from that event on.
        """
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
        producer = self._producer
        if producer is None or self._closed:
            raise StreamsError("provider is not started")
        payload = self.serializer.dumps(events)  # raises before anything is sent
        assert self._loop is not None
        fut: asyncio.Future[None] = self._loop.create_future()
        pending = (fut, len(events), time.perf_counter())

        def done(err: KafkaError | None, msg: Any) -> None:  # runs in the producer thread, inside poll()
            self._acked.append((pending, err, msg.partition()))

        while True:
            try:
                producer.produce(self._topic, payload, key=stream._key, partition=stream.partition,
                                 headers=stream._headers, on_delivery=done)  # fmt: skip
                break
            except BufferError:  # librdkafka's queue is full: let acknowledgements drain it
                await asyncio.sleep(0.005)
        await fut

    def _produce_loop(self) -> None:
        """Poll acknowledgements and settle them on the loop in one call per round, not one per message."""
        assert self._producer is not None and self._loop is not None
        producer, loop = self._producer, self._loop
        while not self._stopping.is_set():
            producer.poll(0.05)
            self._hand_over_acks(loop)
        if producer.flush(10):
            # Not acknowledged in time: purge so each remaining message gets its delivery report
            # (an error), or its publish() would wait forever.
            producer.purge()
            producer.flush(1)
        self._hand_over_acks(loop)

    def _hand_over_acks(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._acked:
            return
        batch, self._acked = self._acked, deque()
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits these any more
            loop.call_soon_threadsafe(self._settle, batch)

    def _settle(self, batch: Iterable[tuple[tuple[asyncio.Future[None], int, float], KafkaError | None, int]]) -> None:
        """Resolve publish() futures; a round's acknowledgements per partition are one produce batch."""
        m = self.metrics
        assert m is not None
        now = time.perf_counter()
        ok = 0
        per_partition: Counter[int] = Counter()
        oldest: dict[int, float] = {}
        for (fut, n, started), err, partition in batch:
            per_partition[partition] += 1
            if started < oldest.get(partition, now):
                oldest[partition] = started
            if fut.done():
                continue
            if err is not None:
                fut.set_exception(PublishError(str(err)))
                continue
            fut.set_result(None)
            ok += n
        m.produced.inc(ok)
        for partition, count in per_partition.items():  # per batch, not per message: metrics cost locks
            m.batch_size.observe(count)
            m.produce_time.observe(now - oldest[partition])

    # ---- consume (consumer thread) ---------------------------------------------------------------------------

    def _call(self, coro: Awaitable[Any]) -> Any:
        """Run on the loop and wait. No time limit (a loaded loop is slow, not gone: giving up would kill this
        thread and stop fetching), but stop waiting once the loop itself has stopped."""
        loop = self._loop
        assert loop is not None
        fut = asyncio.run_coroutine_threadsafe(coro, loop)  # type: ignore[arg-type]
        while True:
            try:
                return fut.result(1.0)
            except TimeoutError:
                if loop.is_closed() or not loop.is_running():
                    fut.cancel()
                    raise StreamsError("the provider's event loop stopped without close()") from None

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
        hs = m.headers()
        if hs is not None and len(hs) == 2 and hs[0][0] == "ns" and hs[1][0] == "key":  # as _publish writes them
            raw = (hs[0][1], hs[1][1])
        else:
            h = dict(hs or [])
            if "ns" not in h or "key" not in h:
                return None
            raw = (h["ns"], h["key"])
        try:
            sid = self._sids.get(raw)
            if sid is None:
                sid = self._sids[raw] = (raw[0].decode(), raw[1].decode())
                if len(self._sids) > 100_000:  # bounded: a cache of decoded ids, not a registry of streams
                    self._sids.clear()
            return sid, self.serializer.loads(m.value())
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
        last = m.last
        if m.sid is not None and last is not None:
            for s in self._subs.get(m.sid, ()):
                if s.behind(last):
                    return True
        return False

    async def _take(self, msgs: list[Any]) -> None:
        self._on_messages(msgs)

    def _on_messages(self, msgs: list[Any]) -> None:
        now = time.monotonic()
        touched: set[int] = set()
        consumed = 0
        agents, subs, implicit = self._agents, self._subs, self._implicit
        for m in msgs:
            p = m.partition()
            agent = agents.get(p)
            if agent is None:  # revoked meanwhile; the new owner fetches it from the committed offset
                continue
            offset = m.offset()
            if agent.next_offset is not None and offset < agent.next_offset:
                continue
            agent.next_offset = offset + 1
            got = self._decode(m)
            if got is not None and got[1]:
                sid, events = got
                buf = agent.streams.get(sid)
                if buf is None:
                    buf = agent.streams[sid] = _Buf()
                if len(events) == 1:
                    last = first = _new_token(SequenceToken, (p, offset, 0))
                    buf.tokens.append(first)
                    buf.events.append(events[0])
                else:
                    buf.tokens.extend(_new_token(SequenceToken, (p, offset, i)) for i in range(len(events)))
                    buf.events.extend(events)
                    first, last = SequenceToken(p, offset, 0), SequenceToken(p, offset, len(events) - 1)
                agent.messages.append(_new_cached(_Cached, (offset, now, sid, last)))
                if sid[0] in implicit and sid not in self._implicit_subs:
                    self._activate(sid, first)
                for s in subs.get(sid, ()):
                    s._kick()
                consumed += len(events)
            else:
                agent.messages.append(_new_cached(_Cached, (offset, now, None, None)))
            touched.add(p)
        assert self.metrics is not None
        self.metrics.consumed.inc(consumed)
        for p in touched:
            self._housekeep(agents[p], now)

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
        self._subs.setdefault(sid, set()).add(sub)
        assert self.metrics is not None
        self.metrics.implicit_active.set(len(self._implicit_subs))
        sub._start()

    def _went_idle(self, sub: Subscription) -> None:
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
        agent = self._agents.get(sub.partition)
        buf = agent.streams.get(sub.sid) if agent is not None else None
        return buf is not None and buf.locate(sub.after, sub._hint) < len(buf.tokens)

    def _retire(self, sub: Subscription, *, count: bool = True) -> None:
        """Forget the cursor of an idle implicit subscription; the key's next event activates a new handler.

        Removed from ``_subs`` at once, so it holds neither the cache nor the commit point. The handler's
        ``on_deactivate()`` (if it has one) runs as a task; a new activation of the key waits for it.
        """
        sid = sub.sid
        del self._implicit_subs[sid]
        subs = self._subs.get(sid)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sid]
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
            if oldest.sid is not None:
                buf = agent.streams[oldest.sid]
                buf.drop_upto(oldest.offset)
                if not buf:
                    del agent.streams[oldest.sid]
            agent.evicted_upto = oldest.offset + 1
            evicted += 1
        assert self.metrics is not None
        if evicted:
            self.metrics.evictions.inc(evicted)
            with self._lock:
                self._commits[agent.partition] = agent.evicted_upto  # type: ignore[assignment]
        pressure = len(agent.messages) >= c.cache_size
        agent.pressure_cursors = 0
        if pressure and agent.messages:
            oldest = agent.messages[0]
            last = oldest.last
            if oldest.sid is not None and last is not None:
                agent.pressure_cursors = sum(1 for s in self._subs.get(oldest.sid, ()) if s.behind(last))
        if pressure != agent.paused:
            agent.paused = pressure
            with self._lock:
                self._want_paused[agent.partition] = pressure
        if not agent.gauges:
            label = str(agent.partition)
            m = self.metrics
            agent.gauges = (m.in_cache.labels(label), m.pressure.labels(label), m.paused.labels(label))
        in_cache, pressure_gauge, paused = agent.gauges
        in_cache.set(len(agent.messages))
        pressure_gauge.set(agent.pressure_cursors)
        paused.set(1 if agent.paused else 0)

    async def _maintain(self) -> None:
        period = min(0.2, max(0.01, self.config.cache_timespan / 10))
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for agent in list(self._agents.values()):
                self._housekeep(agent, now)
            if self._idle_timeout is not None:
                self._retire_idle(now)

    def _wake_partition(self, parts: set[int]) -> None:
        for subs in self._subs.values():
            for s in subs:
                if s.partition in parts:
                    s._kick()

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
