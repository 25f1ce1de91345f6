"""Client, Producer and Consumer with Milvus mqwrapper semantics, over confluent-kafka.

The layer reaches brokers only over the wire, so the embedded broker and a Kafka cluster behave the
same. Consumers use assign() with group.id = subscription, as Milvus does: no group rebalance (fast
on every broker), while the group still holds committed offsets for ack().
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Self, overload

from confluent_kafka import OFFSET_BEGINNING as CK_BEGINNING
from confluent_kafka import OFFSET_INVALID, KafkaError, KafkaException, TopicPartition

from logbroker import _kafka
from logbroker._kafka import ErrorMap, KafkaLayerError, Kind, ensure_topics, librdkafka_config
from logbroker.embedded import EmbeddedLease, acquire_embedded
from logbroker.mq.config import MQConfig, load_config, validate_config
from logbroker.mq.errors import (
    MessageTooLarge,
    MQClosedError,
    MQConfigError,
    MQError,
    SeekError,
    TopicNotEmpty,
    TopicNotFound,
)
from logbroker.mq.ids import OFFSET_BEGINNING, MessageID, message_id_from_bytes, message_id_from_string

log = logging.getLogger("logbroker.mq")

_SECRET_WORDS = ("password", "secret", "sasl.oauthbearer", "ssl.key")


class InitialPosition(IntEnum):
    """Where a subscription without committed offsets starts (Milvus' values)."""

    LATEST = 0
    EARLIEST = 1
    UNKNOWN = 2  # no position until seek()


class Message:
    """One consumed message; properties and ID are built lazily so iteration stays cheap."""

    __slots__ = ("_m",)

    def __init__(self, raw: Any) -> None:
        self._m = raw

    @property
    def topic(self) -> str:
        return self._m.topic()  # type: ignore[no-any-return]

    @property
    def payload(self) -> bytes:
        return self._m.value() or b""  # type: ignore[no-any-return]

    @property
    def properties(self) -> dict[str, str]:
        return {k: (v or b"").decode() for k, v in (self._m.headers() or ())}

    @property
    def id(self) -> MessageID:
        return MessageID(self._m.topic(), self._m.partition(), self._m.offset())

    @property
    def key(self) -> bytes | None:
        return self._m.key()  # type: ignore[no-any-return]

    @property
    def timestamp_ms(self) -> int:
        return self._m.timestamp()[1]  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"Message({self.id}, {len(self.payload)} bytes)"


def _masked(key: str, value: object) -> object:
    return "***" if any(w in key.lower() for w in _SECRET_WORDS) else value


def _apply_overrides(base: dict[str, Any], extra: Mapping[str, Any], what: str,
                     connection: Mapping[str, Any]) -> dict[str, Any]:  # fmt: skip
    """Passthrough settings win, with a warning when they replace one of our defaults or a connection setting
    (values of secrets masked)."""
    out = dict(base)
    for k, v in extra.items():
        was = out.get(k, connection.get(k))
        if was is not None and was != v:
            log.warning("mq %s setting %s=%s overrides the default %s", what, k, _masked(k, v), _masked(k, was))
        out[k] = v
    return out


_errors = ErrorMap(MQError, {
    Kind.MESSAGE_TOO_LARGE: lambda text: MessageTooLarge(f"message too large for the broker: {text}"),
    Kind.UNKNOWN_TOPIC: TopicNotFound,  # also a topic ensure_topic could not create or see led in time
})  # fmt: skip


def _kafka_error(err: KafkaError | KafkaLayerError | None) -> MQError:
    return _errors(err)  # type: ignore[return-value]


def _refused(what: str) -> Callable[[str], Exception]:
    """A setting librdkafka refuses (bad SSL file, unknown key) is an MQConfigError naming the client."""
    return lambda message: MQConfigError(f"mq.kafka ({what}): {message}")


class Client:
    """Entry point: `with Client.connect() as c:` — embedded broker by default, any Kafka cluster by config."""

    def __init__(self, config: MQConfig | Mapping[str, Any] | None = None) -> None:
        self.config = validate_config(config if config is not None else MQConfig())
        self._embedded: Any = None
        self._lease: EmbeddedLease | None = None
        self._closed = False
        self._children: list[Producer | Consumer] = []
        self._lock = threading.Lock()
        self._known_topics: set[str] = set()
        if self.config.type == "embedded":
            emb = self.config.embedded
            if emb.bootstrap:
                self.bootstrap = emb.bootstrap
            else:  # shared with any other user of the data dir in this process (another Client, notify)
                self._lease = acquire_embedded(emb.data_dir, emb.listen, emb.settings)
                self._embedded = self._lease.broker
                self.bootstrap = self._lease.bootstrap
        else:
            assert self.config.kafka is not None
            self.bootstrap = self.config.kafka.bootstrap_servers
        self.settings = self.config.kafka_settings(self.bootstrap)
        try:
            self._admin: Any = _kafka.admin(self.settings, refused=_refused("admin client"))
        except MQConfigError:
            self.close()
            raise

    @classmethod
    def connect(cls, path: str | None = None, **overrides: Any) -> Client:
        """Build from a YAML file, LOGBROKER_MQ_* environment and keyword overrides."""
        return cls(load_config(path, **overrides))

    # -- configuration

    def _producer_conf(self, compression: bool | str) -> dict[str, Any]:
        codec = "zstd" if compression is True else (compression or "none")
        base = {"acks": "all", "linger.ms": 2, "compression.type": codec,
                "message.max.bytes": 10 * 1024 * 1024, "enable.idempotence": False}  # fmt: skip
        extra = self.config.kafka.producer if self.config.kafka and self.config.type == "kafka" else {}
        return _apply_overrides(base, extra, "producer", librdkafka_config(self.settings, "producer"))

    def _consumer_conf(self, subscription: str, buffer_size: int) -> dict[str, Any]:
        mode = self.config.ack_commit
        base = {"group.id": subscription, "enable.auto.commit": mode == "batch",
                "auto.commit.interval.ms": self.config.commit_interval_ms, "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest", "enable.partition.eof": False, "fetch.queue.backoff.ms": 1,
                "queued.min.messages": max(1, buffer_size), "allow.auto.create.topics": False}  # fmt: skip
        extra = self.config.kafka.consumer if self.config.kafka and self.config.type == "kafka" else {}
        return _apply_overrides(base, extra, "consumer", librdkafka_config(self.settings, "consumer"))

    # -- topics

    def _check_open(self) -> None:
        if self._closed:
            raise MQClosedError("client is closed")

    def partitions(self, topic: str) -> list[int] | None:
        """Partition ids of an existing topic, None if the topic does not exist (never auto-creates)."""
        try:
            md = self._admin.list_topics(timeout=self.config.request_timeout_s)
        except KafkaException as exc:
            raise _kafka_error(exc) from None
        t = md.topics.get(topic)
        if t is None or (t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            return None
        return sorted(t.partitions)

    def ensure_topic(self, topic: str, create: bool | None = None) -> list[int]:
        """Create the topic on first use when allowed (TopicNotFound otherwise); returns its partitions once
        every one has a leader, so a producer or consumer made right after never meets a half-created topic."""
        self._check_open()
        allowed = self.config.auto_create_topics if create is None else create
        try:
            return ensure_topics(self.settings, [topic], partitions=self.config.num_partitions, create=allowed,
                                 timeout=self.config.request_timeout_s, admin=self._admin,
                                 missing_hint="auto_create_topics is off")[topic]  # fmt: skip
        except KafkaLayerError as exc:
            raise _kafka_error(exc) from None

    # -- Milvus Client API

    def create_producer(self, topic: str, compression: bool | str = False) -> Producer:
        parts = self.ensure_topic(topic)
        p = Producer(self, topic, self._producer_conf(compression), parts)
        with self._lock:
            self._children.append(p)
        return p

    def subscribe(
        self,
        topic: str,
        subscription: str,
        initial_position: InitialPosition = InitialPosition.LATEST,
        buffer_size: int = 1024,
    ) -> Consumer:
        parts = self.ensure_topic(topic)
        c = Consumer(self, topic, subscription, InitialPosition(initial_position), parts,
                     self._consumer_conf(subscription, buffer_size))  # fmt: skip
        with self._lock:
            self._children.append(c)
        return c

    @staticmethod
    def earliest_message_id() -> MessageID:
        return MessageID("", 0, OFFSET_BEGINNING)

    message_id_from_bytes = staticmethod(message_id_from_bytes)
    message_id_from_string = staticmethod(message_id_from_string)

    def close(self) -> None:
        """Close producers (flushing) and consumers, then stop an embedded broker this client started."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            children, self._children = self._children, []
        for ch in children:
            try:
                ch.close()
            except MQError as exc:
                log.warning("closing %r: %s", ch, exc)
        self._admin = None  # librdkafka handles must go before the broker, or they log reconnect failures
        if self._lease is not None:
            self._lease.release()  # stops the broker unless another user of its data dir still holds it
            self._lease = None

    def _forget(self, child: Producer | Consumer) -> None:
        """A closed producer or consumer leaves the client's list: an application that opens and closes many
        keeps none of them alive."""
        with self._lock:
            try:
                self._children.remove(child)
            except ValueError:
                pass  # the client's own close() took the list

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PyDelivery:
    """The pending acknowledgement of one sent message, in Python: the handle where `_delivery.c` is not built.

    A slotted object that is its own delivery callback, made without an ``__init__`` (each producer has its own
    subclass that names it) and holding only what the answer says: concurrent.futures.Future costs ~15 us per
    message (a Condition each). Done once ``_error`` is set (None: acknowledged). The compiled handle has the
    same interface and one property this one cannot have: the garbage collector does not track it (every
    Python class's instances are tracked, and full collections walk every handle an application keeps).
    """

    __slots__ = ("_error", "_offset", "_partition")
    _producer: Producer  # a class attribute of each producer's subclass

    def __call__(self, err: KafkaError | None, msg: Any) -> None:  # librdkafka's on_delivery
        if hasattr(self, "_error"):
            return
        if err is None:
            self._partition = msg.partition()
            self._offset = msg.offset()
        self._error = err
        if self._producer._waiting:
            self._producer._settle(self)

    def done(self) -> bool:
        return hasattr(self, "_error")

    def add_done_callback(self, fn: Callable[[Delivery], None]) -> None:
        """Call fn(delivery) once answered, on the producer's poll thread (started on first use)."""
        self._producer._add_done_callback(self, fn)

    def result(self, timeout: float | None = None) -> MessageID:
        """The MessageID once the broker acknowledged; raises the delivery error (MessageTooLarge, ...)."""
        return self._producer._result(self, timeout)


def _compiled_delivery() -> type | None:
    try:
        from logbroker.mq._delivery import Delivery as compiled
    except ImportError:  # no C compiler where it was installed: the Python handle, same behaviour
        return None
    return compiled  # type: ignore[no-any-return]


CompiledDelivery = _compiled_delivery()
if TYPE_CHECKING:
    Delivery = PyDelivery
else:  # what send_async returns: the compiled handle (`mq/_delivery.c`) where it was built
    Delivery = CompiledDelivery or PyDelivery


class MessageIDs(Sequence[MessageID]):
    """The IDs of a batch, built on access: making 100k MessageIDs up front costs as much as sending them."""

    __slots__ = ("_offsets", "_partition", "_partitions", "_topic")

    def __init__(self, topic: str, partition: int, offsets: list[int], partitions: list[int] | None) -> None:
        self._topic = topic
        self._partition = partition
        self._offsets = offsets
        self._partitions = partitions

    def __len__(self) -> int:
        return len(self._offsets)

    def _one(self, i: int) -> MessageID:
        part = self._partition if self._partitions is None else self._partitions[i]
        return MessageID(self._topic, part, self._offsets[i])

    @overload
    def __getitem__(self, i: int) -> MessageID: ...
    @overload
    def __getitem__(self, i: slice) -> list[MessageID]: ...
    def __getitem__(self, i: int | slice) -> MessageID | list[MessageID]:
        if isinstance(i, slice):
            return [self._one(j) for j in range(len(self))[i]]
        return self._one(i if i >= 0 else len(self) + i)


class BatchDelivery:
    """The acknowledgements of a send_batch(): one callback for the whole batch, so a batch costs
    librdkafka's own per-message work and little more. With one known partition only offsets are kept."""

    __slots__ = ("_errors", "_n", "_offsets", "_partition", "_partitions", "_producer", "callback")

    def __init__(self, producer: Producer, n: int, partition: int) -> None:
        self._producer = producer
        self._n = n
        self._partition = partition
        self._offsets: list[int] = []
        self._partitions: list[int] | None = None if partition >= 0 else []
        self._errors: list[KafkaError] = []
        self.callback = self._single if partition >= 0 else self._multi

    def _single(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            self._offsets.append(msg.offset())
        else:
            self._errors.append(err)

    def _multi(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            self._offsets.append(msg.offset())
            self._partitions.append(msg.partition())  # type: ignore[union-attr]
        else:
            self._errors.append(err)

    def __len__(self) -> int:
        return self._n

    def done(self) -> bool:
        return len(self._offsets) + len(self._errors) >= self._n

    def result(self, timeout: float | None = None) -> MessageIDs:
        """IDs in acknowledgement order (send order within a partition); raises if any message failed."""
        if not self.done():
            self._producer._wait(self, timeout)
        if self._errors:
            first = _kafka_error(self._errors[0])
            raise type(first)(f"{len(self._errors)} of {self._n} messages failed; first: {first}")
        return MessageIDs(self._producer.topic, self._partition, self._offsets, self._partitions)


class Producer:
    """Sends to one topic. Delivery reports are served by whoever waits (like raw confluent-kafka), or by
    a background thread once async callbacks are in use."""

    def __init__(self, client: Client, topic: str, conf: dict[str, Any], partitions: list[int]) -> None:
        self.topic = topic
        self._client = client
        self._partitions = partitions
        self._p = _kafka.producer(client.settings, refused=_refused("producer"), **conf)
        self._new_delivery: Callable[[], Delivery] = (
            functools.partial(CompiledDelivery, self) if CompiledDelivery is not None
            else type("Delivery", (PyDelivery,), {"__slots__": (), "_producer": self})
        )  # fmt: skip
        self._waiting: dict[Delivery, list[Callable[[Delivery], None]]] = {}  # add_done_callback's, by handle
        self._closed = False
        self._sent = 0
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self._lock = threading.Lock()

    def _start_poller(self) -> None:
        if self._poller is None:
            with self._lock:
                if self._poller is None and not self._closed:
                    self._poller = threading.Thread(target=self._poll, name=f"mq-producer-{self.topic}", daemon=True)
                    self._poller.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._p.poll(0.05)

    def _wait(self, d: Delivery | BatchDelivery, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not d.done():
            if self._closed and self._p is None:
                raise MQClosedError(f"producer for {self.topic!r} closed before the acknowledgement")
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"no acknowledgement from {self.topic!r} within {timeout}s")
            self._p.poll(0.02)

    def _settle(self, d: Delivery) -> None:
        """The handle was answered while add_done_callback()s wait on some handle: run its own."""
        for cb in self._waiting.pop(d, ()):
            cb(d)

    def _add_done_callback(self, d: Delivery, fn: Callable[[Delivery], None]) -> None:
        if d.done():
            fn(d)
            return
        self._waiting.setdefault(d, []).append(fn)
        if d.done() and (late := self._waiting.pop(d, None)):  # answered meanwhile
            for cb in late:
                cb(d)
        self._start_poller()

    def _result(self, d: Delivery, timeout: float | None) -> MessageID:
        if not d.done():
            self._wait(d, timeout)
        if d._error is not None:
            raise _kafka_error(d._error)
        return MessageID(self.topic, d._partition, d._offset)

    def send_async(
        self,
        payload: bytes,
        properties: Mapping[str, str] | None = None,
        *,
        key: bytes | None = None,
        partition: int | None = None,
    ) -> Delivery:
        """Queue one message; the Delivery resolves to its MessageID once the broker acknowledged it."""
        if self._closed:
            raise MQClosedError(f"producer for {self.topic!r} is closed")
        d = self._new_delivery()
        part = -1 if partition is None else partition  # -1: the partitioner's choice
        try:
            if properties:
                headers = [(k, v.encode()) for k, v in properties.items()]
                _kafka.produce(self._p, self.topic, value=payload, key=key, partition=part, headers=headers,
                               on_delivery=d)  # fmt: skip
            else:
                try:  # the common case straight to librdkafka, positionally: a wrapper and keywords cost ~0.4 us
                    self._p.produce(self.topic, payload, key, part, d)
                except BufferError:  # the local queue is full: the blocking path
                    _kafka.produce(self._p, self.topic, value=payload, key=key, partition=part, on_delivery=d)
        except KafkaException as exc:
            raise _kafka_error(exc.args[0]) from None
        self._sent += 1
        if not self._sent & 1023:
            self._p.poll(0)
        return d

    def send_batch(
        self,
        payloads: Iterable[bytes],
        properties: Mapping[str, str] | None = None,
        *,
        partition: int | None = None,
    ) -> BatchDelivery:
        """Queue many messages (same properties, one partition or the partitioner's choice) without waiting.

        The cheap path for bulk sends: no per-message handle. Wait with `.result()` for the IDs.
        """
        if self._closed:
            raise MQClosedError(f"producer for {self.topic!r} is closed")
        items = payloads if isinstance(payloads, list) else list(payloads)
        if partition is None and len(self._partitions) == 1:
            partition = self._partitions[0]
        part = -1 if partition is None else partition
        batch = BatchDelivery(self, len(items), part)
        cb = batch.callback
        headers = [(k, v.encode()) for k, v in properties.items()] if properties else None
        produce, poll, topic = self._p.produce, self._p.poll, self.topic
        for i, payload in enumerate(items):
            try:
                try:
                    produce(topic, payload, None, part, headers=headers, on_delivery=cb)
                except BufferError:  # local queue full: the blocking path (the fast one stays inline)
                    _kafka.produce(self._p, topic, value=payload, partition=part, headers=headers, on_delivery=cb)
            except KafkaException as exc:
                batch._n = i  # the rest were never queued
                raise _kafka_error(exc.args[0]) from None
            if not i & 1023:
                poll(0)
        return batch

    def send(self, payload: bytes, properties: Mapping[str, str] | None = None, **kw: Any) -> MessageID:
        """Send and block until the broker acknowledges (Milvus' Send)."""
        return self.send_async(payload, properties, **kw).result()

    async def asend(self, payload: bytes, properties: Mapping[str, str] | None = None, **kw: Any) -> MessageID:
        loop = asyncio.get_running_loop()
        afut: asyncio.Future[MessageID] = loop.create_future()

        def settle(d: Delivery) -> None:
            if not afut.done():
                try:
                    afut.set_result(d.result())
                except MQError as exc:
                    afut.set_exception(exc)

        self.send_async(payload, properties, **kw).add_done_callback(lambda d: loop.call_soon_threadsafe(settle, d))
        return await afut

    def flush(self, timeout: float = 10.0) -> int:
        """Wait for queued messages; returns how many are still undelivered."""
        return self._p.flush(timeout)  # type: ignore[no-any-return]

    def close(self, timeout: float = 10.0) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        left = self._p.flush(timeout)
        self._stop.set()
        if self._poller is not None:
            self._poller.join()
        self._p = None  # type: ignore[assignment]
        # Callbacks of messages never answered will not run; dropping them also ends the only path from this
        # producer to a handle (the compiled handle is invisible to the collector, so no cycle may run through it).
        self._waiting.clear()
        self._client._forget(self)
        if left:
            raise MQError(f"producer for {self.topic!r} closed with {left} undelivered messages")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Consumer:
    """Reads every partition of one topic from committed offsets, else from the initial position."""

    def __init__(
        self,
        client: Client,
        topic: str,
        subscription: str,
        initial_position: InitialPosition,
        partitions: list[int],
        conf: dict[str, Any],
    ) -> None:
        self.topic = topic
        self._sub = subscription
        self._client = client
        self._mode = client.config.ack_commit
        self._timeout = client.config.request_timeout_s
        self._partitions = partitions
        self._c = _kafka.consumer(client.settings, refused=_refused("consumer"), **conf)
        self._buf: deque[Any] = deque()
        self._batch = max(1, min(conf.get("queued.min.messages", 500), 500))
        self._conf = conf
        self._started = False
        self._closed = False
        self._sought: set[int] = set()
        self._lock = threading.Lock()
        self._assigned: dict[int, int] = {}
        if initial_position != InitialPosition.UNKNOWN:
            self._assign_initial(initial_position)

    @property
    def subscription(self) -> str:
        return self._sub

    def _assign_initial(self, position: InitialPosition) -> None:
        tps = [TopicPartition(self.topic, p) for p in self._partitions]
        committed = self._c.committed(tps, timeout=self._timeout)
        for tp in committed:
            if tp.offset >= 0:
                off = tp.offset
            elif position == InitialPosition.EARLIEST:
                off = CK_BEGINNING
            else:  # resolved now, so messages sent right after subscribe are seen
                off = self._c.get_watermark_offsets(TopicPartition(self.topic, tp.partition),
                                                    timeout=self._timeout, cached=False)[1]  # fmt: skip
            self._assigned[tp.partition] = off
        self._c.assign([TopicPartition(self.topic, p, o) for p, o in self._assigned.items()])

    def _check_open(self) -> None:
        if self._closed:
            raise MQClosedError(f"consumer {self._sub!r} on {self.topic!r} is closed")

    def seek(self, message_id: MessageID, inclusive: bool = True) -> None:
        """Position one partition before consumption starts; exclusive skips the sought message."""
        self._check_open()
        if self._started:
            raise SeekError("seek after consumption started")
        if message_id.topic and message_id.topic != self.topic:
            raise SeekError(f"ID {message_id} belongs to topic {message_id.topic!r}, not {self.topic!r}")
        if message_id.partition not in self._partitions:
            raise SeekError(f"topic {self.topic!r} has no partition {message_id.partition}")
        if message_id.partition in self._sought:
            raise SeekError(f"partition {message_id.partition} of {self.topic!r} was already sought")
        off = message_id.offset
        if off == OFFSET_BEGINNING:
            off = CK_BEGINNING if inclusive else 1
        elif not inclusive:
            off += 1
        self._sought.add(message_id.partition)
        self._assigned[message_id.partition] = off
        self._c.assign([TopicPartition(self.topic, p, o) for p, o in self._assigned.items()])

    def receive(self, timeout: float | None = None) -> Message | None:
        """Next message, or None after `timeout` seconds (None: wait for ever)."""
        self._check_open()
        if self._buf:
            return Message(self._buf.popleft())
        if not self._assigned:
            raise MQError("consumer has no position: subscribe with LATEST/EARLIEST or seek() first")
        self._started = True
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            # Poll in short slices under the lock, so close() from another thread (an async iterator's
            # executor, a shutdown handler) waits at most one slice and never races librdkafka's close.
            left = 0.5 if deadline is None else min(0.5, max(0.0, deadline - time.monotonic()))
            with self._lock:
                self._check_open()
                if self._buf:
                    return Message(self._buf.popleft())
                raw = self._c.poll(left)
                if raw is not None:
                    err = raw.error()
                    if err is not None:
                        raise _kafka_error(err)
                    for m in self._c.consume(self._batch, 0):  # what is already fetched, without waiting
                        if m.error() is None:
                            self._buf.append(m)
                        else:
                            log.warning("consumer %s: %s", self._sub, m.error().str())
                    return Message(raw)
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def __iter__(self) -> Iterator[Message]:
        """Messages until close() (from any thread) ends the iteration."""
        while not self._closed:
            try:
                m = self.receive(0.5)
            except MQClosedError:
                return
            if m is not None:
                yield m

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[Message]:
        loop = asyncio.get_running_loop()
        while not self._closed:
            try:
                m = self.receive(0) if self._buf else await loop.run_in_executor(None, self.receive, 0.2)
            except MQClosedError:
                return
            if m is not None:
                yield m

    def ack(self, msg: Message | MessageID) -> None:
        """Record consumption: commit now (message), on the next auto-commit (batch) or not at all (off)."""
        self._check_open()
        mid = msg.id if isinstance(msg, Message) else msg
        if self._mode == "off":
            return
        tp = [TopicPartition(self.topic, mid.partition, mid.offset + 1)]
        try:
            if self._mode == "message":
                self._c.commit(offsets=tp, asynchronous=False)
            else:
                self._c.store_offsets(offsets=tp)
        except KafkaException as exc:
            raise _kafka_error(exc.args[0]) from None

    def latest_message_id(self, partition: int = 0) -> MessageID:
        """ID of the last message (Milvus: high watermark - 1, and offset 0 for an empty topic).

        On a topic written by transactional producers the offset before the end may be a COMMIT or
        ABORT marker or an aborted record, which no receive() ever returns: a caller waiting for that
        ID would wait for ever. The last message that is readable is returned instead (its offset
        found by reading the tail); high - 1 still when there is none.
        """
        self._check_open()
        low, high = self._c.get_watermark_offsets(TopicPartition(self.topic, partition),
                                                  timeout=self._timeout, cached=False)  # fmt: skip
        last = self._last_message(partition, max(low, 0), high) if high > max(low, 0) else None
        return MessageID(self.topic, partition, last if last is not None else max(high - 1, 0))

    def _last_message(self, partition: int, low: int, high: int) -> int | None:
        """Offset of the last readable message in [low, high), or None (only markers and aborted records).

        Read by a throw-away consumer of the same settings (this one's position and the subscription's
        commits are untouched): a window before `high`, widened until a message or `low` is met. The
        cheap case, a plain topic, is one fetch whose last record is at high - 1.
        """
        conf = {**self._conf, "enable.auto.commit": False, "enable.auto.offset.store": False,
                "enable.partition.eof": True, "queued.min.messages": 1000}  # fmt: skip
        probe = _kafka.consumer(self._client.settings, refused=_refused("consumer"), **conf)
        deadline = time.monotonic() + self._timeout
        try:
            window = 16
            while True:
                start = max(low, high - window)
                probe.assign([TopicPartition(self.topic, partition, start)])
                last = None
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise MQError(f"reading the end of {self.topic!r} partition {partition} timed out")
                    m = probe.poll(min(left, 1.0))
                    if m is None:
                        continue
                    err = m.error()
                    if err is not None and err.code() == KafkaError._PARTITION_EOF:
                        break
                    if err is not None:
                        raise _kafka_error(err)
                    if m.offset() < high:
                        last = m.offset()
                    if m.offset() >= high - 1:
                        break
                if last is not None or start == low:
                    return last
                window *= 16
        finally:
            probe.close()

    def check_topic_valid(self) -> None:
        """Raise TopicNotFound if the topic is gone, TopicNotEmpty if any partition holds messages."""
        self._check_open()
        if self._client.partitions(self.topic) is None:
            raise TopicNotFound(f"topic {self.topic!r} does not exist")
        for p in self._partitions:
            low, high = self._c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=self._timeout,
                                                      cached=False)  # fmt: skip
            # Offsets held only by transaction markers and aborted records are no messages.
            if high > max(low, 0) and self._last_message(p, max(low, 0), high) is not None:
                raise TopicNotEmpty(f"topic {self.topic!r} partition {p} holds offsets {low}..{high - 1}")

    def committed(self) -> dict[int, int]:
        """Committed offset (next to read) per partition; partitions without a commit are left out."""
        self._check_open()
        tps = self._c.committed([TopicPartition(self.topic, p) for p in self._partitions], timeout=self._timeout)
        return {tp.partition: tp.offset for tp in tps if tp.offset != OFFSET_INVALID and tp.offset >= 0}

    def close(self) -> None:
        """Commit what was acked (batch mode) and leave."""
        if self._closed:
            return
        with self._lock:
            self._closed = True
            self._buf.clear()
            self._c.close()
            self._c = None  # type: ignore[assignment]
        self._client._forget(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
