"""A listener pool as a Kafka share group (KIP-932): every listener of the pool may receive from every
partition, and each notification goes to one of them, however many listeners there are and however few
partitions. The broker locks what it hands to a listener; acknowledging finishes it, requeueing releases it
for any listener, and a listener that dies without acknowledging has its notifications handed out again
once their locks expire. A notification redelivered `share.delivery.count.limit` times (5) is dropped by
the broker, so a poison notification cannot stop a pool.

Delivery is as for consumer-group pools: at-most-once accepts a notification when it arrives (before
dispatch), at-least-once after the endpoint returns, and releases it on REQUEUE or an exception.

A share group starts a partition at the log end, and Kafka does so a few seconds after the first member
joins: a notification sent right after `start()` would be missed. So a new pool (one whose group has no
`share.auto.offset.reset` config yet) sets it to the last `SHARE_POOL_BACKLOG_S` seconds (or to
`replay_from`) before joining; once set, the group keeps where it is.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

from confluent_kafka import AcknowledgeType, KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from logbroker import _kafka
from logbroker.notify.consumer import AT_LEAST_ONCE, AT_MOST_ONCE, Incoming, collect, ensure_topics
from logbroker.notify.notifier import decode
from logbroker.notify.transport import KafkaOptions, NotifyError, Transport

LOG = logging.getLogger(__name__)

SHARE_POOL_BACKLOG_S = 60
OFFSET_RESET = "share.auto.offset.reset"


class ShareNotificationConsumer:
    """The `NotificationConsumer` interface over a share consumer (explicit acknowledgements)."""

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
        if not group:
            raise ValueError("a share-group pool needs a pool name")
        self.transport = transport
        self.topics = topics
        self.group = group
        self.options = options
        self.delivery = delivery
        self.replay_from_ms = replay_from_ms
        self._settings = transport.kafka_settings(options)
        # max.poll.records bounds what one listener takes at a time (the rest stays for the others).
        self._conf: dict[str, Any] = {"group.id": group, "share.acknowledgement.mode": "explicit",
                                      "max.poll.records": options.max_poll_records}  # fmt: skip
        self._consumer: Any = None
        self._pending: deque[Incoming] = deque()
        self._held: dict[tuple[str, int, int], Any] = {}  # delivered, not yet acknowledged
        self._lock = threading.RLock()
        self._stopped = False

    @property
    def assignment(self) -> set[tuple[str, int]]:
        """A share pool has no partitions of its own: every member reads from all of them."""
        return set()

    def start(self, timeout: float | None = None) -> None:
        timeout = timeout if timeout is not None else max(10.0, self.options.connect_timeout)
        ensure_topics(self.transport, self.topics, timeout=timeout)
        self._set_start(timeout)
        self._consumer = _kafka.share_consumer(self._settings, refused=NotifyError, **self._conf)
        self._consumer.subscribe(self.topics)

    def _set_start(self, timeout: float) -> None:
        """Give a new pool its starting point (see the module docstring); an existing one keeps its own."""
        admin = _kafka.admin(self._settings, refused=NotifyError)
        resource = ConfigResource(ResourceType.GROUP, self.group)
        try:
            current = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout)
            entry = current.get(OFFSET_RESET)
            if entry is not None and not entry.is_default:
                return
            back_ms = SHARE_POOL_BACKLOG_S * 1000
            if self.replay_from_ms is not None:
                back_ms = max(int(time.time() * 1000) - self.replay_from_ms, 0)
            value = f"by_duration:PT{back_ms / 1000:.3f}S"
            change = ConfigResource(ResourceType.GROUP, self.group, incremental_configs=[
                ConfigEntry(OFFSET_RESET, value, incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
            admin.incremental_alter_configs([change], request_timeout=timeout)[change].result(timeout)
            LOG.info("share pool %s starts at the notifications of the last %.0f s", self.group, back_ms / 1000)
        except KafkaException as exc:
            raise NotifyError(f"share pool {self.group}: cannot set where it starts: {exc}") from None

    def stop(self) -> None:
        self._stopped = True

    def close(self) -> None:
        with self._lock:
            if self._consumer is None:
                return
            try:
                for m in self._held.values():  # undispatched: back to the pool for another listener
                    self._consumer.acknowledge(m, AcknowledgeType.RELEASE)
                self._held.clear()
                self._consumer.close()
            except (KafkaException, RuntimeError) as exc:
                LOG.debug("share consumer close: %s", exc)
            self._consumer = None

    def _fill(self, timeout: float) -> None:
        msgs = self._consumer.poll(timeout) or []
        for m in msgs:
            if m.error() is not None:
                LOG.warning("share consumer error: %s", m.error())
                continue
            try:
                ctxt, message = decode(m.value() or b"")
            except ValueError as exc:
                LOG.warning("rejecting undecodable record %s[%d]@%d: %s", m.topic(), m.partition(), m.offset(), exc)
                self._consumer.acknowledge(m, AcknowledgeType.REJECT)
                continue
            if self.delivery == AT_MOST_ONCE:
                self._consumer.acknowledge(m, AcknowledgeType.ACCEPT)  # before dispatch: oslo's rule
            else:
                self._held[(m.topic(), m.partition(), m.offset())] = m
            self._pending.append(Incoming(ctxt, message, m.topic(), m.partition(), m.offset()))
        if self.delivery == AT_MOST_ONCE and msgs:
            self._consumer.commit_async()

    @staticmethod
    def _take(m: Incoming) -> Incoming:
        return m  # decoded on arrival: an undecodable record is rejected before anything is accepted

    def fetch(
        self, batch_size: int = 1, batch_timeout: float | None = None, timeout: float | None = None
    ) -> list[Incoming]:
        """As `NotificationConsumer.fetch`. A new poll is made only once everything handed out before was
        acknowledged or requeued (explicit acknowledgement requires it)."""
        with self._lock:
            if self._consumer is None:
                return []
            return collect(self, batch_size, batch_timeout, timeout, poll_with_some=self.delivery != AT_LEAST_ONCE)

    def _settle(self, items: list[Incoming], kind: Any) -> None:
        if self.delivery != AT_LEAST_ONCE or not items:
            return
        with self._lock:
            if self._consumer is None:
                return
            for m in items:
                held = self._held.pop((m.topic, m.partition, m.offset), None)
                if held is not None:
                    self._consumer.acknowledge(held, kind)
            try:
                self._consumer.commit_async()
            except KafkaException as exc:
                LOG.warning("acknowledgement commit failed: %s", exc)

    def ack(self, done: list[Incoming]) -> None:
        """Accept (at-least-once; at-most-once accepted on arrival)."""
        self._settle(done, AcknowledgeType.ACCEPT)

    def requeue(self, undone: list[Incoming]) -> None:
        """Release for redelivery to any listener of the pool (at-least-once)."""
        if self.delivery != AT_LEAST_ONCE and undone:
            LOG.warning("requeue ignored: at-most-once delivery accepted before dispatch (as oslo's driver)")
        self._settle(undone, AcknowledgeType.RELEASE)
