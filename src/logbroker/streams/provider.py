"""StreamProvider: virtual streams over one topic's partitions, a pulling agent and a rewindable cache per partition.

Threads: librdkafka calls block, so one thread owns the consumer (fetch, pause/resume, commit, rebalance
callbacks) and one polls the producer for acknowledgements. Everything else (caches, cursors, handlers) lives on
the provider's event loop, so the cache needs no locks. The consuming side is `agent.PullingAgents` (caches in
`cache`), subscriptions and implicit handlers are in `subscriptions`; this module holds the lifecycle, the API
and the producing side.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from typing import Any, Self

from confluent_kafka import Consumer, KafkaError, Producer

from logbroker import _kafka
from logbroker.streams.agent import PullingAgents, refused
from logbroker.streams.cache import Agent, StreamId
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
from logbroker.streams.subscriptions import HandlerFactory, ImplicitSubscriptions, Stream, Subscription

__all__ = ["Stream", "StreamProvider", "Subscription", "batches"]

_publish_error = _kafka.ErrorMap(PublishError)


class StreamProvider(ImplicitSubscriptions, PullingAgents):
    """``async with StreamProvider(config) as provider:`` — producer, consumer-group member and caches."""

    def __init__(self, config: StreamsConfig | Mapping[str, Any], serializer: Serializer | None = None,
                 *, consume: bool = True) -> None:  # fmt: skip
        """``consume=False`` makes a publish-only provider that does not join the consumer group."""
        self.config = StreamsConfig.load(config)
        self.consume = consume
        self.serializer: Serializer = serializer or JsonSerializer()
        self.ring = HashRing(self.config.num_queues)
        self.metrics: StreamMetrics | None = None
        self.agents: dict[int, Agent] = {}
        self.subscribers: dict[StreamId, set[Subscription]] = {}
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
        self._producer = _kafka.producer(c.kafka_settings(), refused=refused("producer"), **{
            "acks": str(c.acks), "linger.ms": c.produce_wait_ms, "batch.num.messages": c.produce_batch_size,
            **c.producer})  # fmt: skip
        self._producer_thread()
        if self.consume:
            self._start_consumer()

    def _producer_thread(self) -> None:
        t = threading.Thread(target=self._produce_loop, name="streams-produce", daemon=True)
        t.start()
        self._threads.append(t)

    async def wait_assigned(self, partitions: int | None = None, timeout: float = 30.0) -> set[int]:
        """Until this process owns ``partitions`` partitions (any, when None); for tests and start-up."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.agents and (partitions is None or len(self.agents) >= partitions):
                return set(self.agents)
            await asyncio.sleep(0.05)
        raise TimeoutError(f"owns {sorted(self.agents)} after {timeout}s")

    @property
    def owned(self) -> set[int]:
        return set(self.agents)

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
        for subs in list(self.subscribers.values()):
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
        """Create the topic (num_queues partitions, replication 1) unless told not to, and wait until it is led."""
        c = self.config
        spec = _kafka.TopicSpec(c.topic, c.num_queues, 1)
        try:
            have = _kafka.ensure_topic(c.kafka_settings(), spec, create=c.create_topic, timeout=30.0,
                                       missing_hint="streams.create_topic is false")  # fmt: skip
        except _kafka.KafkaLayerError as exc:
            raise StreamsError(str(exc)) from None
        if len(have) != c.num_queues:
            raise StreamsConfigError(
                f"streams.num_queues: {c.num_queues} but topic {c.topic!r} has {len(have)} partitions"
            )

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

    async def send(self, stream: Stream, events: list[Any]) -> None:
        producer = self._producer
        if producer is None or self._closed:
            raise StreamsError("provider is not started")
        payload = self.serializer.dumps(events)  # raises before anything is sent
        assert self._loop is not None
        fut: asyncio.Future[None] = self._loop.create_future()
        pending = (fut, len(events), time.perf_counter())

        def done(err: KafkaError | None, msg: Any) -> None:  # runs in the producer thread, inside poll()
            self._acked.append((pending, err, msg.partition()))

        headers = stream._headers
        if len(events) != 1:
            headers = [headers[0], headers[1], ("n", str(len(events)).encode())]
        await _kafka.produce_async(producer, self._topic, value=payload, key=stream._key, partition=stream.partition,
                                   headers=headers, on_delivery=done)  # fmt: skip
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
                fut.set_exception(_publish_error(err))
                continue
            fut.set_result(None)
            ok += n
        m.produced.inc(ok)
        for partition, count in per_partition.items():  # per batch, not per message: metrics cost locks
            m.batch_size.observe(count)
            m.produce_time.observe(now - oldest[partition])

    async def position(self, partition: int, token: SequenceToken) -> tuple[SequenceToken, SequenceToken | None]:
        """Cursor for a subscription from ``token``: inside the cache, or a rewind through the broker."""
        if token.partition != partition:
            raise StreamsError(f"token {token} belongs to partition {token.partition}, the stream to {partition}")
        low_wm = await asyncio.to_thread(self._low_watermark, partition)
        if token.offset < low_wm:
            raise TokenExpiredError(f"token {token} is older than the topic's retention (first offset {low_wm})")
        after = SequenceToken(partition, token.offset, token.index - 1)
        agent = self.agents.get(partition)
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
