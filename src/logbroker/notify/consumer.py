"""The receiving side's Kafka part: a consumer group per listener pool, with oslo's commit rule
(commit before dispatch) or at-least-once (commit after the endpoint returns, rewind on requeue).

Shared by `NotificationListener` and the oslo.messaging driver, so both deliver the same way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, Message, TopicPartition

from logbroker import _kafka
from logbroker.notify.notifier import decode
from logbroker.notify.transport import KafkaOptions, NotifyError, Transport, notify_error

LOG = logging.getLogger(__name__)

AT_MOST_ONCE = "at-most-once"
AT_LEAST_ONCE = "at-least-once"


@dataclass(slots=True)
class Incoming:
    """One decoded notification and where it came from (for commits and rewinds)."""

    ctxt: dict[str, Any]
    message: dict[str, Any]
    topic: str
    partition: int
    offset: int


@dataclass(slots=True)
class _Ahead:
    """Records fetched before they are needed, with the offsets their commit (in flight) names."""

    offsets: dict[tuple[str, int], int]
    records: list[Message]
    confirmed: bool = False


def _log_end(consumer: Consumer, tp: TopicPartition, timeout: float = 10.0) -> int:
    """The partition's log end, retried while the error is transient (a leader moving, or a topic a peer
    just created); OFFSET_END if it never settles."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return int(consumer.get_watermark_offsets(tp, max(0.5, deadline - time.monotonic()), cached=False)[1])
        except KafkaException as exc:
            if not _kafka.classify(exc).transient or time.monotonic() >= deadline:
                LOG.warning("log end of %s-%d unknown (%s): starting at the end", tp.topic, tp.partition, exc)
                return OFFSET_END
            time.sleep(0.1)


def ensure_topics(transport: Transport, topics: Iterable[str], partitions: int = -1, timeout: float = 10.0) -> None:
    """Create missing topics so a listener can subscribe before the first send (brokers with auto-creation
    off included) and wait until they are led. A refused creation (no CREATE permission) is only logged:
    someone else may create the topic, and the group's assignment picks it up then."""
    try:
        _kafka.ensure_topics(transport.kafka_settings(), topics, partitions=partitions, strict=False, timeout=timeout)
    except _kafka.KafkaLayerError as exc:
        raise notify_error(exc) from None


def collect(
    source: Any, batch_size: int, batch_timeout: float | None, timeout: float | None, poll_with_some: bool = True
) -> list[Incoming]:
    """A batch for `fetch`, from `source._pending` (each record through `source._take`), refilled by
    `source._fill(seconds)`: returns when the batch is full, `batch_timeout` after its first notification,
    or after `timeout` (default kafka_consumer_timeout) with nothing. `poll_with_some=False`: no poll once
    the batch has a notification (a share consumer must settle what it handed out before polling again)."""
    out: list[Incoming] = []
    options = source.options
    deadline: float | None = None
    batch_deadline: float | None = None
    take = source._take
    while True:
        pending = source._pending  # re-read: a rebalance or requeue replaces it
        while pending and len(out) < batch_size:
            m = take(pending.popleft())
            if m is not None:
                out.append(m)
        if len(out) >= batch_size or source._stopped or (out and not batch_timeout):
            break
        if out and not poll_with_some:
            break
        now = time.monotonic()
        if deadline is None:
            deadline = now + (options.kafka_consumer_timeout if timeout is None else timeout)
        if out and batch_deadline is None:
            batch_deadline = now + (batch_timeout or 0.0)
        left = (batch_deadline if batch_deadline is not None else deadline) - now
        if left <= 0:
            break
        source._fill(min(left, options.kafka_consumer_timeout))
    return out


class NotificationConsumer:
    """Subscribes a consumer group to Kafka topics and hands out decoded notifications."""

    def __init__(
        self,
        transport: Transport,
        topics: list[str],
        group: str | None,
        options: KafkaOptions,
        delivery: str = AT_MOST_ONCE,
        replay_from_ms: int | None = None,
    ) -> None:
        if delivery not in (AT_MOST_ONCE, AT_LEAST_ONCE):
            raise ValueError(f"delivery must be {AT_MOST_ONCE!r} or {AT_LEAST_ONCE!r}, not {delivery!r}")
        self.transport = transport
        self.topics = topics
        self.options = options
        self.delivery = delivery
        self.replay_from_ms = replay_from_ms
        self._settings = transport.kafka_settings(options)
        conf = transport.consumer_overrides(group, options)
        if delivery == AT_LEAST_ONCE:
            conf["enable.auto.commit"] = False
            conf["enable.auto.offset.store"] = False
        # oslo's rule: what is fetched is committed before it is dispatched. The next fetch is taken while
        # the current one is dispatched and committed asynchronously, so the broker's round trip overlaps
        # dispatch instead of stalling it.
        self._commit_first = delivery == AT_MOST_ONCE and not options.enable_auto_commit
        if self._commit_first:
            conf["on_commit"] = self._on_commit
        self._conf = conf
        self._ahead: deque[_Ahead] = deque()  # oldest first
        self._prefetch_at = options.max_poll_records // 2
        self._prefetched = False  # since the last fill
        self._consumer: Consumer | None = None
        # Records are decoded when handed out, not when fetched: a fetch's worth of decoded notifications
        # waiting for dispatch outlived the young garbage collections and made the old ones walk them.
        self._pending: deque[Message] = deque()
        self._replayed: set[tuple[str, int]] = set()
        self._assigned: set[tuple[str, int]] = set()
        self._assigned_once = threading.Event()
        self._lock = threading.RLock()
        self._stopped = False

    # -- lifecycle

    def start(self, timeout: float | None = None) -> None:
        """Subscribe and wait (bounded) until partitions are assigned: oslo's `latest` reset would
        otherwise lose what is sent before the group settles."""
        timeout = timeout if timeout is not None else max(10.0, self.options.connect_timeout)
        ensure_topics(self.transport, self.topics, timeout=timeout)
        self._consumer = _kafka.consumer(self._settings, refused=NotifyError, **self._conf)
        self._consumer.subscribe(self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke)
        deadline = time.monotonic() + timeout
        while not self._assigned_once.is_set():
            if time.monotonic() > deadline:
                self.close()
                raise NotifyError(
                    f"no partitions of {self.topics} assigned within {timeout}s from {self._settings.bootstrap_servers}"
                )
            self._fill(0.1)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # An exception escaping a rebalance callback resurfaces from consume() (as a bare KafkaError
        # that is not even an Exception); never let one out: fall back to the client's own resolution
        # (committed offset, else auto.offset.reset) for this assignment.
        try:
            self._resolve_and_assign(consumer, partitions)
        except Exception as exc:
            LOG.warning("resolving start offsets of %s failed (%s); using committed/auto.offset.reset", partitions, exc)
            try:
                consumer.assign(partitions)
            except Exception:
                LOG.exception("assigning %s failed; the next rebalance retries", partitions)
                return
            self._assigned.update((tp.topic, tp.partition) for tp in partitions)
            self._assigned_once.set()

    def _resolve_and_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Resolve start offsets here rather than leave "latest" to a lazy reset: then a send made
        after start() returns is never skipped. Order: first-time replay, committed, log end."""
        committed = {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(partitions, 10.0)}
        replay: dict[tuple[str, int], int] = {}
        fresh_start: list[TopicPartition] = []
        if self.replay_from_ms is not None:
            fresh = [tp for tp in partitions if (tp.topic, tp.partition) not in self._replayed]
            if fresh:
                query = [TopicPartition(tp.topic, tp.partition, self.replay_from_ms) for tp in fresh]
                replay = {(tp.topic, tp.partition): tp.offset for tp in consumer.offsets_for_times(query, 10.0)}
        for tp in partitions:
            key = (tp.topic, tp.partition)
            if key in replay:
                self._replayed.add(key)
                tp.offset = replay[key] if replay[key] >= 0 else OFFSET_END
            elif committed.get(key, -1) >= 0:
                tp.offset = committed[key]
            else:
                tp.offset = _log_end(consumer, tp)
                if tp.offset >= 0:
                    fresh_start.append(TopicPartition(tp.topic, tp.partition, tp.offset))
        consumer.assign(partitions)
        if fresh_start:
            # Remember where the pool started, so a rebalance before the first message is consumed
            # resumes here instead of skipping to a newer log end.
            try:
                consumer.commit(offsets=fresh_start, asynchronous=False)
            except KafkaException as exc:
                LOG.warning("could not commit start offsets: %s", exc)
        self._assigned.update((tp.topic, tp.partition) for tp in partitions)
        self._assigned_once.set()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self._assigned -= gone
        self._pending = deque(m for m in self._pending if (m.topic(), m.partition()) not in gone)
        for ahead in self._ahead:
            ahead.records = [m for m in ahead.records if (m.topic(), m.partition()) not in gone]

    @property
    def assignment(self) -> set[tuple[str, int]]:
        return set(self._assigned)

    def stop(self) -> None:
        self._stopped = True

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                try:
                    self._consumer.close()
                except (KafkaException, RuntimeError) as exc:
                    LOG.debug("consumer close: %s", exc)
                self._consumer = None
            self._ahead.clear()

    # -- fetching

    def _fill(self, timeout: float, limit: int | None = None) -> None:
        assert self._consumer is not None
        self._prefetched = False
        if self._ahead:
            self._take_ahead()
            return
        # consume(n, t) waits for all n or the whole timeout (oslo's driver pays up to
        # kafka_consumer_timeout of latency per poll that way): wait for one, then take what is queued.
        msgs = self._consumer.consume(1, timeout)
        if not msgs:
            return
        more = (limit or self.options.max_poll_records) - 1
        if more > 0:
            msgs += self._consumer.consume(more, 0)
        if self._commit_first:
            self._commit_sync(None)
        self._pending.extend(self._records(msgs))

    @staticmethod
    def _records(msgs: list[Message]) -> list[Message]:
        out = []
        for m in msgs:
            err = m.error()
            if err is None:
                out.append(m)
            elif err.code() != KafkaError._PARTITION_EOF:
                LOG.warning("consumer error: %s", err)
        return out

    def _commit_sync(self, offsets: dict[tuple[str, int], int] | None) -> None:
        """Commit `offsets` (None: the fetched positions) and wait; a failure is logged, as oslo's driver does."""
        assert self._consumer is not None
        try:
            if offsets is None:
                self._consumer.commit(asynchronous=False)
            else:
                tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
                self._consumer.commit(offsets=tps, asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                LOG.warning("commit failed: %s", exc)

    def _fetch_ahead(self) -> None:
        """Take what the client has already fetched (no waiting) and start its commit."""
        assert self._consumer is not None
        records = self._records(self._consumer.consume(self.options.max_poll_records, 0))
        if not records:
            return
        offsets = {(m.topic(), m.partition()): m.offset() + 1 for m in records}  # in order: the last is the highest
        try:
            tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
            self._consumer.commit(offsets=tps, asynchronous=True)
        except KafkaException as exc:
            LOG.debug("asynchronous commit refused (%s); committed synchronously before dispatch", exc)
        self._ahead.append(_Ahead(offsets, records))

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition] | None) -> None:
        # Served inside consume() on the fetching thread. Other commits (start offsets) match nothing.
        got = {(tp.topic, tp.partition): tp.offset for tp in partitions or ()}
        for ahead in self._ahead:
            if not ahead.confirmed and ahead.offsets == got:
                ahead.confirmed = err is None and all(tp.error is None for tp in partitions or ())
                return

    def _take_ahead(self) -> None:
        """Hand out the oldest fetch taken ahead once its commit is confirmed. The consume that serves the
        confirmation also takes (and starts committing) what arrived since. Not yet confirmed (or failed):
        commit synchronously the newest offsets taken, never behind a later asynchronous commit."""
        self._fetch_ahead()
        ahead = self._ahead[0]
        if not ahead.confirmed:
            newest: dict[tuple[str, int], int] = {}
            for later in self._ahead:
                newest.update(later.offsets)
            self._commit_sync(newest)
            for later in self._ahead:
                later.confirmed = True
        self._ahead.popleft()
        self._pending.extend(ahead.records)

    def _take(self, m: Message) -> Incoming | None:
        """The notification in a fetched record; None (logged) if it does not decode."""
        try:
            ctxt, message = decode(m.value() or b"")
        except ValueError as exc:
            LOG.warning("dropping undecodable record %s[%d]@%d: %s", m.topic(), m.partition(), m.offset(), exc)
            if self.delivery == AT_LEAST_ONCE and self._consumer is not None:
                self._consumer.store_offsets(m)
            return None
        return Incoming(ctxt, message, m.topic(), m.partition(), m.offset())

    def fetch(
        self, batch_size: int = 1, batch_timeout: float | None = None, timeout: float | None = None
    ) -> list[Incoming]:
        """Up to `batch_size` notifications: returns when the batch is full, `batch_timeout` after the
        first one arrived, or after `timeout` (default kafka_consumer_timeout) with nothing."""
        with self._lock:
            if self._consumer is None:
                return []
            out: list[Incoming] = []
            if batch_size == 1:  # a listener without batches: no clock reads while records are waiting
                while self._pending and not out:
                    m = self._take(self._pending.popleft())
                    if m is not None:
                        out.append(m)
            if not out:
                out = collect(self, batch_size, batch_timeout, timeout)
            if (self._commit_first and not self._prefetched and not self._ahead and not self._stopped
                    and len(self._pending) <= self._prefetch_at):  # fmt: skip
                self._prefetched = True
                try:
                    self._fetch_ahead()
                except KafkaException as exc:  # the next fill meets it again; `out` is handed out first
                    LOG.warning("fetching ahead failed: %s", exc)
            return out

    # -- acknowledgements (at-least-once)

    def ack(self, done: list[Incoming]) -> None:
        """Commit after processing; no-op in at-most-once mode (already committed)."""
        if self.delivery != AT_LEAST_ONCE or not done:
            return
        with self._lock:
            if self._consumer is None:
                return
            last: dict[tuple[str, int], int] = {}
            for m in done:
                key = (m.topic, m.partition)
                last[key] = max(last.get(key, -1), m.offset)
            tps = [TopicPartition(t, p, o + 1) for (t, p), o in last.items() if (t, p) in self._assigned]
            if tps:
                try:
                    self._consumer.commit(offsets=tps, asynchronous=False)
                except KafkaException as exc:
                    LOG.warning("commit failed: %s", exc)

    def requeue(self, undone: list[Incoming]) -> None:
        """Rewind each partition to its first undone message; later fetched ones are dropped and
        come again from the broker, in order."""
        if self.delivery != AT_LEAST_ONCE or not undone:
            if undone:
                LOG.warning("requeue ignored: at-most-once delivery committed before dispatch (as oslo's driver)")
            return
        with self._lock:
            if self._consumer is None:
                return
            first: dict[tuple[str, int], int] = {}
            for m in undone:
                key = (m.topic, m.partition)
                first[key] = min(first.get(key, m.offset), m.offset)
            self._pending = deque(m for m in self._pending if (m.topic(), m.partition()) not in first)
            for (t, p), off in first.items():
                if (t, p) in self._assigned:
                    try:
                        self._consumer.seek(TopicPartition(t, p, off))
                    except KafkaException as exc:
                        LOG.warning("seek %s[%d] to %d failed: %s", t, p, off, exc)
