"""The pulling agents: the consumer thread that fetches the owned partitions, and the caches it fills.

librdkafka calls block, so one thread owns the consumer (fetch, pause/resume, commits, rebalance callbacks) and
hands fetched batches to the event loop synchronously; eviction, pressure (pausing a full cache whose oldest
message a reader still needs) and commit points are decided on the loop, so the cache needs no locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from logbroker import _kafka
from logbroker.streams.cache import Agent, Cached, StreamBuffer, StreamId, new_cached, new_token
from logbroker.streams.config import StreamsConfig
from logbroker.streams.errors import StreamsConfigError, StreamsError
from logbroker.streams.metrics import StreamMetrics
from logbroker.streams.model import SequenceToken, Serializer
from logbroker.streams.subscriptions import HandlerFactory, Subscription

log = logging.getLogger("logbroker.streams.provider")


def refused(key: str) -> Callable[[str], Exception]:
    """librdkafka refuses a bad pass-through setting (``streams.producer`` / ``streams.consumer``) only when the
    client is built; report it like any other config error, naming the key."""
    return lambda message: StreamsConfigError(f"streams.{key}: {message}")


class PullingAgents:
    """The provider's consuming side: an `Agent` (cache) per owned partition, fed by the consumer thread."""

    config: StreamsConfig
    serializer: Serializer
    metrics: StreamMetrics | None
    agents: dict[int, Agent]
    subscribers: dict[StreamId, set[Subscription]]
    _implicit: dict[str, HandlerFactory]
    _implicit_subs: dict[StreamId, Subscription]
    _activate: Callable[[StreamId, SequenceToken], None]  # ImplicitSubscriptions
    _sids: dict[tuple[bytes, bytes], StreamId]
    _lock: threading.Lock
    _want_paused: dict[int, bool]
    _commits: dict[int, int]
    _stopping: threading.Event
    _threads: list[threading.Thread]
    _loop: asyncio.AbstractEventLoop | None
    _maint: asyncio.Task[None] | None
    _consumer: Consumer | None

    def _start_consumer(self) -> None:
        c = self.config
        # Orleans' max bytes per fetch is per queue (one receiver per partition); one consumer fetches all the
        # partitions this process owns in one request, so the request may carry that much per partition
        per_request = max(c.max_bytes_per_fetch, min(c.max_bytes_per_fetch * c.num_queues, 50 << 20))
        self._consumer = _kafka.consumer(c.kafka_settings(), refused=refused("consumer"), **{
            "group.id": c.consumer_group, "enable.auto.commit": False,
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

    def read_range(self, partition: int, start: SequenceToken, end: int | None,
                    sid: StreamId) -> list[tuple[SequenceToken, Any]]:  # fmt: skip
        """Events of one stream from the broker, offsets [start.offset, end): rewinds beyond the cache."""
        c = self.config
        reader = _kafka.consumer(c.kafka_settings(), refused=refused("consumer"), **{
            "group.id": f"{c.consumer_group}-rewind-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
            "enable.partition.eof": True})  # fmt: skip
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
                    got = self._decode(m, eager=True)
                    if got is None or got[0] != sid or got[1] is None:
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
        reader = _kafka.consumer(c.kafka_settings(), refused=refused("consumer"), **{
            "group.id": f"{c.consumer_group}-probe", "enable.auto.commit": False})  # fmt: skip
        try:
            low, _high = reader.get_watermark_offsets(TopicPartition(c.topic, partition), timeout=10)
            return int(low)
        finally:
            reader.close()

    def _decode(self, m: Any, eager: bool = False) -> tuple[StreamId, list[Any] | None, int, bytes] | None:
        """(stream, events, count, value) of a message of ours, None for anything else. With the count in its
        "n" header (as `send` writes it) the events stay encoded (None) until delivered, unless ``eager``; a
        count the value cannot hold (more events than bytes) is not trusted and the value is decoded now."""
        hs = m.headers()
        if hs is not None and len(hs) == 3 and hs[0][0] == "ns" and hs[1][0] == "key" and hs[2][0] == "n":
            raw, count = (hs[0][1], hs[1][1]), hs[2][1]  # as send writes them
        else:
            h = dict(hs or [])
            if "ns" not in h or "key" not in h:
                return None
            raw, count = (h["ns"], h["key"]), h.get("n")
        value = m.value() or b""
        try:
            sid = self._sids.get(raw)
            if sid is None:
                sid = self._sids[raw] = (raw[0].decode(), raw[1].decode())
                if len(self._sids) > 100_000:  # bounded: a cache of decoded ids, not a registry of streams
                    self._sids.clear()
            if not eager and count is not None and count.isdigit() and int(count) <= len(value):
                return sid, None, int(count), value
            events = self.serializer.loads(value)
            return sid, events, len(events), value
        except Exception as exc:
            log.warning("skipping undecodable message at %s/%s: %s", m.partition(), m.offset(), exc)
            return None

    def decode(self, raw: bytes) -> list[Any]:
        """A cached message's events, decoded as a subscription reaches them (raises what the serializer does)."""
        return self.serializer.loads(raw)

    async def _assign(self, parts: list[int]) -> None:
        for p in parts:
            self.agents.setdefault(p, Agent(p))
        assert self.metrics is not None
        self.metrics.receivers.set(len(self.agents))
        self._wake_partition(set(parts))

    async def _revoke(self, parts: list[int]) -> dict[int, int]:
        offsets: dict[int, int] = {}
        for p in parts:
            agent = self.agents.pop(p, None)
            if agent is None:
                continue
            done = self._readers_past(agent)
            if done is not None:
                offsets[p] = done
            with self._lock:
                self._want_paused.pop(p, None)
                self._commits.pop(p, None)
        assert self.metrics is not None
        self.metrics.receivers.set(len(self.agents))
        return offsets

    def _readers_past(self, agent: Agent) -> int | None:
        """Commit point: one past the highest offset that every reader has passed (no gaps)."""
        point = agent.evicted_upto
        for m in agent.messages:
            if self._has_readers(m):
                break
            point = m.offset + 1
        return point

    def _has_readers(self, m: Cached) -> bool:
        last = m.last
        if m.sid is not None and last is not None:
            for s in self.subscribers.get(m.sid, ()):
                if s.behind(last):
                    return True
        return False

    async def _take(self, msgs: list[Any]) -> None:
        self._on_messages(msgs)

    def _on_messages(self, msgs: list[Any]) -> None:
        now = time.monotonic()
        touched: set[int] = set()
        consumed = 0
        agents, subs, implicit = self.agents, self.subscribers, self._implicit
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
            if got is not None and got[2]:
                sid, events, n, value = got
                buf = agent.streams.get(sid)
                if buf is None:
                    buf = agent.streams[sid] = StreamBuffer(p)
                buf.add(offset, n, events, value)
                first = new_token(SequenceToken, (p, offset, 0))
                last = first if n == 1 else new_token(SequenceToken, (p, offset, n - 1))
                agent.messages.append(new_cached(Cached, (offset, now, sid, last)))
                if sid[0] in implicit and sid not in self._implicit_subs:
                    self._activate(sid, first)
                for s in subs.get(sid, ()):
                    s._kick()
                consumed += n
            else:
                agent.messages.append(new_cached(Cached, (offset, now, None, None)))
            touched.add(p)
        assert self.metrics is not None
        self.metrics.consumed.inc(consumed)
        for p in touched:
            self.housekeep(agents[p], now)

    def progress(self, partition: int) -> None:
        agent = self.agents.get(partition)
        if agent is not None and agent.paused:
            self.housekeep(agent, time.monotonic())

    def housekeep(self, agent: Agent, now: float) -> None:
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
                agent.pressure_cursors = sum(1 for s in self.subscribers.get(oldest.sid, ()) if s.behind(last))
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
            for agent in list(self.agents.values()):
                self.housekeep(agent, now)
            if self._idle_timeout is not None:
                self._retire_idle(now)

    def _wake_partition(self, parts: set[int]) -> None:
        for subs in self.subscribers.values():
            for s in subs:
                if s.partition in parts:
                    s._kick()
