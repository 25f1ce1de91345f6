"""oslo.messaging driver (scheme `logbroker`): oslo's Notifier and notification listeners on
Kafka or the embedded broker, through `logbroker.notify`.

Notifications only. RPC raises NotImplementedError, as oslo's Kafka driver does, so a hybrid
deployment keeps rabbit or amqp for `transport_url` and sets `[oslo_messaging_notifications]
transport_url = logbroker://host:9092/vhost`.

Differences from oslo's Kafka driver, on purpose: topics carry the vhost on both sides
(`<topic>.<priority>[.<vhost>]`); a failed send is retried per `retry` and then raises instead of
being dropped; `[logbroker] delivery = at-least-once` commits after dispatch and supports requeue.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from oslo_config import cfg
from oslo_messaging._drivers import base
from oslo_messaging._drivers.kafka_driver import kafka_options

from logbroker.notify.consumer import AT_LEAST_ONCE, AT_MOST_ONCE, Incoming, NotificationConsumer
from logbroker.notify.notifier import _Sender, encode
from logbroker.notify.transport import KafkaOptions, Transport

_LOGBROKER_OPTS = [
    cfg.StrOpt(
        "delivery",
        default=AT_MOST_ONCE,
        choices=[AT_MOST_ONCE, AT_LEAST_ONCE],
        help="at-most-once: commit before dispatch (oslo's Kafka driver); at-least-once: commit after, "
        "REQUEUE redelivers.",
    ),
    cfg.FloatOpt("send_timeout", default=10.0, help="Seconds one send attempt may take before it fails."),
    cfg.StrOpt("embedded_path", help="Data directory of an in-process broker; used when the URL has no host."),
]

LOG = logging.getLogger(__name__)
_RPC = "logbroker's oslo.messaging driver supports notifications only; use rabbit or amqp for RPC"


def _options(conf: Any) -> KafkaOptions:
    k = conf.oslo_messaging_kafka
    return KafkaOptions(
        kafka_max_fetch_bytes=k.kafka_max_fetch_bytes,
        kafka_consumer_timeout=k.kafka_consumer_timeout,
        consumer_group=k.consumer_group,
        enable_auto_commit=k.enable_auto_commit,
        max_poll_records=k.max_poll_records,
        producer_batch_timeout=k.producer_batch_timeout,
        producer_batch_size=k.producer_batch_size,
        compression_codec=k.compression_codec,
        security_protocol=k.security_protocol,
        sasl_mechanism=k.sasl_mechanism,
        ssl_cafile=k.ssl_cafile or "",
        ssl_client_cert_file=k.ssl_client_cert_file or "",
        ssl_client_key_file=k.ssl_client_key_file or "",
        ssl_client_key_password=k.ssl_client_key_password or "",
        send_timeout=conf.logbroker.send_timeout,
    )


class _Incoming(base.IncomingMessage):
    def __init__(self, listener: _PollListener, record: Incoming) -> None:
        super().__init__(record.ctxt, record.message, record.message.get("message_id"))
        self._listener = listener
        self._record = record

    def acknowledge(self) -> None:
        self._listener.consumer.ack([self._record])

    def requeue(self) -> None:
        self._listener.consumer.requeue([self._record])


class _PollListener(base.PollStyleListener):
    def __init__(self, consumer: NotificationConsumer) -> None:
        super().__init__()
        self.consumer = consumer

    def poll(self, timeout: float | None = None, batch_size: int = 1, batch_timeout: float | None = None) -> list[Any]:
        records = self.consumer.fetch(batch_size, batch_timeout, timeout)
        return [_Incoming(self, r) for r in records]

    def stop(self) -> None:
        self.consumer.stop()

    def cleanup(self) -> None:
        self.consumer.close()


class LogbrokerDriver(base.BaseDriver):
    """oslo.messaging `BaseDriver` for notifications over Kafka's protocol."""

    def __init__(
        self, conf: Any, url: Any, default_exchange: str | None = None, allowed_remote_exmods: Any = None
    ) -> None:
        conf = kafka_options.register_opts(conf, url)  # the [oslo_messaging_kafka] options, URL query overrides
        conf.register_opts(_LOGBROKER_OPTS, group="logbroker")
        super().__init__(conf, url, default_exchange, allowed_remote_exmods)
        options = _options(conf)
        hosts = tuple((h.hostname, h.port or 9092) for h in url.hosts if h.hostname)
        first = url.hosts[0] if url.hosts else None
        if first is not None and any((h.username, h.password) != (first.username, first.password)
                                     for h in url.hosts[1:] if h.username is not None):  # fmt: skip
            LOG.warning("transport URL has different credentials per host; using those of the first host")
        embedded = conf.logbroker.embedded_path
        if not hosts and not embedded:
            raise ValueError("logbroker transport URL has no host (and [logbroker] embedded_path is unset)")
        self.transport = Transport(
            hosts=hosts,
            username=first.username if first else None,
            password=first.password if first else None,
            virtual_host=url.virtual_host or None,
            embedded_path=Path(embedded) if embedded and not hosts else None,
            options=options,
        )
        self.delivery = conf.logbroker.delivery
        self._sender = _Sender(self.transport, options)
        self._listeners: list[NotificationConsumer] = []

    def send(self, target: Any, ctxt: Any, message: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(_RPC)

    def listen(self, target: Any, batch_size: int, batch_timeout: float | None) -> Any:
        raise NotImplementedError(_RPC)

    def send_notification(self, target: Any, ctxt: Any, message: Any, version: Any, retry: int | None = None) -> None:
        ctx = ctxt if isinstance(ctxt, dict) else ctxt.to_dict()
        self._sender.send(self.transport.topic(target.topic), encode(ctx, message), retry)

    def listen_for_notifications(
        self, targets_and_priorities: Any, pool: str | None, batch_size: int, batch_timeout: float | None
    ) -> Any:
        topics = list(dict.fromkeys(self.transport.topic(t.topic, p) for t, p in targets_and_priorities))
        consumer = NotificationConsumer(self.transport, topics, pool, self.transport.options, self.delivery)
        consumer.start()
        self._listeners.append(consumer)
        return base.PollStyleListenerAdapter(_PollListener(consumer), batch_size, batch_timeout)

    def cleanup(self) -> None:
        self._sender.close()
        for c in self._listeners:
            c.close()
        self._listeners = []
