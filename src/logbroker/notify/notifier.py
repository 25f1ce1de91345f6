"""The sending side: oslo-style notifications as JSON records on `<topic>.<priority>[.<vhost>]`."""

from __future__ import annotations

import datetime as _dt
import json
import json.scanner
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from logbroker import _kafka
from logbroker.notify.transport import KafkaOptions, NotifyError, Transport, get_transport

PRIORITIES = ("audit", "debug", "info", "warn", "error", "critical", "sample")


def _utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def format_timestamp(when: _dt.datetime) -> str:
    """The envelope's `timestamp`: UTC, as oslo writes it; a naive datetime is taken to be UTC."""
    if when.tzinfo is not None and when.tzinfo is not _dt.UTC:
        when = when.astimezone(_dt.UTC)
    if when.year >= 1000:  # isoformat is cheaper than strftime, but pads a year to 4 digits
        return when.isoformat(" ", "microseconds")[:26]
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")


def _message_id() -> str:
    """`str(uuid.uuid4())` at half the cost (the same 122 random bits, version and variant)."""
    h = os.urandom(16).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}"


_ENCODER = json.JSONEncoder(separators=(",", ":"))  # json.dumps with arguments builds one per call


def encode(ctxt: Mapping[str, Any] | None, message: Mapping[str, Any]) -> bytes:
    """The wire form: the message dict plus `_context`. Serialising first means a bad payload fails
    at the call site, before anything is queued."""
    body = dict(message)
    body["_context"] = dict(ctxt or {})
    try:
        return _ENCODER.encode(body).encode()
    except (TypeError, ValueError) as exc:
        raise TypeError(f"notification is not JSON-serialisable: {exc}") from exc


_scan = json.scanner.make_scanner(json.JSONDecoder())


def decode(raw: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """(context, message); also reads oslo's 2.0 envelope, so oslo's own Kafka driver can be a peer.

    The scanner on the text is a third cheaper than `json.loads(raw)` (no encoding sniffing, no whitespace
    matches); anything else, errors included, goes through `json.loads`, so results and errors are its own."""
    try:
        text = raw.decode()
        msg, end = _scan(text, 0)
        if end != len(text):
            msg = json.loads(raw)
    except (ValueError, StopIteration):
        msg = json.loads(raw)
    if isinstance(msg, dict) and "oslo.message" in msg:
        msg = json.loads(msg["oslo.message"])
    if not isinstance(msg, dict):
        raise ValueError("notification is not a JSON object")
    ctxt = msg.pop("_context", {}) or {}
    return ctxt, msg


class _Sender:
    """One producer shared by callers; sends are confirmed by the broker or raise.

    oslo's driver drops a message on KafkaException and never honours `retry`; here a failed
    attempt is retried `retry` times (None: one attempt, librdkafka still retries transient errors
    inside it, bounded by `send_timeout`) and then raises `NotifyError`.
    """

    def __init__(self, transport: Transport, options: KafkaOptions, confirm: bool = True) -> None:
        self.transport = transport
        self.options = options
        self.confirm = confirm
        self._producer: Producer | None = None
        self._lock = threading.Lock()
        self._failed: list[KafkaError] = []
        self._report = self._on_delivery  # one bound method for every send, not one allocated per send
        self._unpolled = 0

    def _ensure(self) -> Producer:
        if self._producer is None:
            with self._lock:
                if self._producer is None:
                    conf = self.transport.producer_overrides(self.options)
                    if not self.confirm:
                        # Pipelined sends only need to hear about failures: a Python callback per
                        # acknowledged message would cost a third of the send rate.
                        conf["delivery.report.only.error"] = True
                    settings = self.transport.kafka_settings(self.options)
                    self._producer = _kafka.producer(settings, refused=NotifyError, **conf)
        return self._producer

    def _on_delivery(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            self._failed.append(err)

    def send(self, topic: str, value: bytes, retry: int | None) -> None:
        confirm = self.confirm
        attempts = 1 if retry is None or retry < 0 else retry + 1
        last: Exception | None = None
        for _ in range(attempts):
            try:
                self._send_once(topic, value, confirm)
                return
            except (KafkaException, NotifyError, BufferError) as exc:
                last = exc
        raise NotifyError(f"notification to {topic!r} not delivered after {attempts} attempt(s): {last}") from last

    def _send_once(self, topic: str, value: bytes, confirm: bool) -> None:
        producer = self._ensure()
        if not confirm:
            self.raise_failures()
            try:  # straight to librdkafka; the wrapper (which waits while the queue is full) only when it is
                producer.produce(topic, value, on_delivery=self._report)
            except BufferError:
                _kafka.produce(producer, topic, wait=self.options.send_timeout, value=value, on_delivery=self._report)
            self._unpolled += 1
            if self._unpolled >= 64:  # failures are reported by poll: often enough, not on every send
                self._unpolled = 0
                producer.poll(0)
            return
        done = threading.Event()
        result: list[KafkaError | None] = []

        def on_delivery(err: KafkaError | None, _msg: Any) -> None:
            result.append(err)
            done.set()

        producer.produce(topic, value, on_delivery=on_delivery)
        deadline = time.monotonic() + self.options.send_timeout + 1.0
        while not done.is_set():
            if time.monotonic() > deadline:
                raise NotifyError(f"no delivery report for {topic!r} within {self.options.send_timeout}s")
            producer.poll(0.05)
        if result[0] is not None:
            raise NotifyError(str(result[0]))

    def raise_failures(self) -> None:
        if self._failed:
            errs, self._failed = self._failed, []
            raise NotifyError(f"{len(errs)} notification(s) not delivered; first error: {errs[0]}")

    def flush(self, timeout: float | None = None) -> None:
        if self._producer is not None:
            left = self._producer.flush(self.options.send_timeout + 1.0 if timeout is None else timeout)
            if left:
                raise NotifyError(f"{left} notification(s) still unsent after flush")
        self.raise_failures()

    def close(self) -> None:
        """Flush, then drop the producer even if that failed (purging what is left), so no client
        keeps reconnecting to a dead broker in the background."""
        try:
            self.flush()
        finally:
            if self._producer is not None:
                self._producer.purge()
                self._producer.flush(0)
            self._producer = None


class Notifier:
    """`Notifier(transport, "compute.host1", ["notifications"]).info(ctxt, "compute.start", payload)`.

    `confirm=True` (default) waits for the broker's acknowledgement, so errors surface at the call
    site; `confirm=False` pipelines sends (the batching options then pay off) and reports failed
    deliveries on the next call, `flush()` or `close()`.

    `clock` (default: the wall clock) supplies each envelope's `timestamp`; generators and replays
    use it to stamp notifications with simulated or original event times.
    """

    def __init__(
        self,
        transport: str | Transport,
        publisher_id: str | None = None,
        topics: Sequence[str] = ("notifications",),
        driver_options: KafkaOptions | dict[str, Any] | None = None,
        retry: int | None = None,
        confirm: bool = True,
        clock: Callable[[], _dt.datetime] | None = None,
    ) -> None:
        self.transport = get_transport(transport, driver_options)
        self.clock = clock or _utcnow
        self.publisher_id = publisher_id
        self.topics = list(topics)
        self._names: dict[str, list[str]] = {}
        self.retry = retry
        self.confirm = confirm
        self._sender = _Sender(self.transport, self.transport.options, confirm)

    def prepare(self, publisher_id: str | None = None, retry: int | None = None) -> Notifier:
        """A notifier sharing this one's producer with another publisher id or retry."""
        clone = object.__new__(Notifier)
        clone.__dict__.update(self.__dict__)
        if publisher_id is not None:
            clone.publisher_id = publisher_id
        if retry is not None:
            clone.retry = retry
        return clone

    def _notify(self, ctxt: Mapping[str, Any] | None, event_type: str, payload: Any, priority: str) -> None:
        message = {
            "message_id": _message_id(),
            "publisher_id": self.publisher_id,
            "event_type": event_type,
            "priority": priority.upper(),
            "payload": payload,
            "timestamp": format_timestamp(self.clock()),
        }
        value = encode(ctxt, message)
        names = self._names.get(priority)
        if names is None:  # the topics of a priority, named once (`prepare`'s clones share them)
            names = self._names[priority] = [self.transport.topic(t, priority) for t in self.topics]
        for name in names:
            self._sender.send(name, value, self.retry)

    def audit(self, ctxt: Mapping[str, Any] | None, event_type: str, payload: Any) -> None:
        self._notify(ctxt, event_type, payload, "audit")

    def debug(self, ctxt: Mapping[str, Any] | None, event_type: str, payload: Any) -> None:
        self._notify(ctxt, event_type, payload, "debug")

    def info(self, ctxt: Mapping[str, Any] | None, event_type: str, payload: Any) -> None:
        self._notify(ctxt, event_type, payload, "info")

    def warn(self, ctxt: Mapping[str, Any] | None, event_type: str, payload: Any) -> None:
        self._notify(ctxt, event_type, payload, "warn")

    warning = warn

    def error(self, ctxt: Mapping[str, Any] | None, event_type: str, payload: Any) -> None:
        self._notify(ctxt, event_type, payload, "error")

    def critical(self, ctxt: Mapping[str, Any] | None, event_type: str, payload: Any) -> None:
        self._notify(ctxt, event_type, payload, "critical")

    def sample(self, ctxt: Mapping[str, Any] | None, event_type: str, payload: Any) -> None:
        self._notify(ctxt, event_type, payload, "sample")

    def flush(self, timeout: float | None = None) -> None:
        self._sender.flush(timeout)

    def close(self) -> None:
        self._sender.close()

    def __enter__(self) -> Notifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
